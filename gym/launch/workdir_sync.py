"""What SkyPilot's workdir sync leaves behind, checked before a launch: ignore rules and Git LFS pointers.

SkyPilot does not copy the whole workdir to the node. It excludes what
``sky.data.storage_utils.get_excluded_files`` lists (used for the upload to the API server and the rsync
to the node):

- when the workdir has a ``.skyignore``, only its patterns count (``.gitignore`` is then not read at
  all): a pattern starting with ``/`` is anchored at the workdir, any other matches at every depth;
- otherwise git's own rules: ``git ls-files --others --ignored --exclude-standard --directory``, i.e.
  untracked files that ``.gitignore``, ``.git/info/exclude`` or the global excludes ignore (a tracked
  file is synced even when a pattern matches it); outside a git repository nothing is excluded.

A dataset the node would not receive fails there, after the machine is paid for; here it is one
sentence at plan time. So is a Git LFS pointer file in place of the data: a checkout without LFS
(``actions/checkout`` fetches none unless ``lfs: true``) leaves 130-byte text files that every loader
then misreads.
"""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

SKYIGNORE = ".skyignore"
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
MAX_FILES_CHECKED = 2000  # a dataset folder is sampled this deep for LFS pointers


def skyignore_excluded(workdir: Path) -> set[str]:
    """Paths (relative, POSIX) the ``.skyignore`` of ``workdir`` excludes, expanded as SkyPilot does."""
    excluded: set[str] = set()
    for raw in (workdir / SKYIGNORE).read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern = "." + line if line.startswith("/") else "**/" + line
        for match in glob.glob(os.path.join(glob.escape(str(workdir)), pattern), recursive=True):
            excluded.add(Path(os.path.relpath(match, workdir)).as_posix())
    return excluded


def git_excluded(workdir: Path) -> set[str]:
    """Untracked paths git ignores under ``workdir`` (folders end in ``/``); empty outside a repository."""
    try:
        done = subprocess.run(
            ["git", "-c", "safe.directory=*", "-C", str(workdir), "ls-files", "-z", "--others", "--ignored",
             "--exclude-standard", "--directory"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):  # git missing: SkyPilot then skips .gitignore too
        return set()
    if done.returncode != 0:
        return set()
    items = [item for item in done.stdout.split("\0") if item]
    if "./" in items:  # the whole workdir is ignored: SkyPilot then ignores every git exclusion
        return set()
    return set(items)


def excluded_paths(workdir: Path) -> tuple[set[str], str]:
    """What the sync leaves out of ``workdir``, and which rules said so (for the sentence)."""
    if (workdir / SKYIGNORE).is_file():
        return skyignore_excluded(workdir), SKYIGNORE
    return git_excluded(workdir), ".gitignore"


def _files_under(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    count = 0
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            yield Path(root, name)
            count += 1
            if count >= MAX_FILES_CHECKED:
                return


def excluded_entry(relative: str, excluded: set[str]) -> str | None:
    """The excluded entry that covers ``relative`` (the path itself or a folder above it), if any."""
    for entry in excluded:
        bare = entry.rstrip("/")
        if relative == bare or relative.startswith(bare + "/"):
            return entry
    return None


def check_synced(key: str, path: Path, workdir: Path, excluded: set[str], rules: str) -> str | None:
    """One sentence when the dataset at ``path`` (or a file in it) would not reach the node; else None."""
    relative = path.relative_to(workdir).as_posix()
    entry = excluded_entry(relative, excluded)
    if entry is None and path.is_dir():
        for file in _files_under(path):
            entry = excluded_entry(file.relative_to(workdir).as_posix(), excluded)
            if entry is not None:
                break
    if entry is None:
        return None
    if rules == SKYIGNORE:
        fix = f"remove the pattern from {SKYIGNORE} (which SkyPilot reads instead of .gitignore)"
    else:
        fix = (
            "commit the data (git add -f), or add a .skyignore without that pattern (SkyPilot then reads it "
            "instead of .gitignore)"
        )
    return (
        f"{key}: {relative} is excluded by {rules} ({entry}), and SkyPilot does not sync what {rules} "
        f"excludes, so the cloud machine would not receive the dataset; {fix}"
    )


def lfs_pointer(path: Path) -> Path | None:
    """The first file at ``path`` (a file or a folder) that is a Git LFS pointer instead of data."""
    for file in _files_under(path):
        try:
            with file.open("rb") as handle:
                head = handle.read(len(LFS_POINTER))
        except OSError:
            continue
        if head == LFS_POINTER:
            return file
    return None


def lfs_sentence(key: str, shown: str) -> str:
    """The sentence for a dataset file that is an LFS pointer (``shown`` as the user names it)."""
    return (
        f"{key}: {shown} is a Git LFS pointer file, not the data (the checkout did not fetch LFS files); in "
        "the workflow set `lfs: true` on the actions/checkout step, or run `git lfs pull` here"
    )
