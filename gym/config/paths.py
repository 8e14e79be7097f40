"""Checks on paths a gym.toml names: names a file system can hold, and output folders Gym may write to.

Gym writes and, on a rerun, removes what it wrote (incomplete checkpoints) under ``project.output_dir``.
A root, a system folder or the home folder itself is never that folder, whatever the flags: one typo
("/" for "./") would scatter checkpoints among the system's files. The web UI, whose gym.toml a browser
user edits, also keeps the output inside the gym.toml's folder unless ``project.allow_output_outside``.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath

NAME_MAX = 255  # bytes in one file or folder name on Linux, macOS and Windows file systems

# Folders that hold the system itself: never an output folder, nor anything inside them.
SYSTEM_FOLDERS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
                  "/run", "/sbin", "/sys", "/usr", "/System", "/Library", "/private/etc")  # fmt: skip
# Folders that are never the output folder themselves, though their subfolders may be (/var/tmp, /home/me).
NOT_ITSELF = ("/var", "/home", "/Users", "/opt", "/mnt", "/media", "/tmp", "/private", "/private/var")
WINDOWS_SYSTEM = ("windows", "program files", "program files (x86)", "programdata")


def cut(value: str, keep: int = 60) -> str:
    """``value`` cut to its first ``keep`` characters and "…", so a 50 MB value is not echoed."""
    return value if len(value) <= keep else value[:keep] + "…"


def name_too_long(path: str) -> str | None:
    """The sentence for a path with a part longer than a file system allows, or None."""
    for part in PurePosixPath(path.replace("\\", "/")).parts:
        size = len(part.encode("utf-8", "surrogatepass"))
        if size > NAME_MAX:
            return (
                f"the name {cut(part)!r} is {size:,} bytes long; file systems allow at most {NAME_MAX} "
                "bytes per file or folder name"
            )
    return None


def _is_under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def forbidden_output(value: str, resolved: Path, config_folder: Path | None = None) -> str | None:
    """Why ``project.output_dir`` (as written, and resolved) may never be written to, or None.

    ``config_folder`` (the gym.toml's) is refused too, and every folder above it: Gym writes gym.toml,
    README.md and the weights into the output folder, over the project's own files of those names.
    """
    windows = PureWindowsPath(value)
    if windows.drive and windows.parts[1:2] and windows.parts[1].lower() in WINDOWS_SYSTEM:
        return f"'{cut(value)}' is a system folder; write the run's files to a folder of your project"
    if windows.drive and len(windows.parts) <= 1:
        return f"'{cut(value)}' is the root of a drive; write the run's files to a folder of your project"
    text = resolved.as_posix()
    if resolved.parent == resolved:
        return f"'{cut(value)}' is the root of the file system; write the run's files to a folder of your project"
    try:
        home = Path.home().resolve().as_posix()
    except (RuntimeError, KeyError):  # no HOME and no password entry
        home = ""
    if text == home:
        return f"'{cut(value)}' is your home folder itself; name a folder inside it, e.g. '~/gym-runs/<name>'"
    if any(_is_under(text, folder) for folder in SYSTEM_FOLDERS) or text in NOT_ITSELF:
        return f"'{cut(value)}' is a system folder; write the run's files to a folder of your project"
    if config_folder is not None and config_folder.is_relative_to(resolved):
        return (
            f"'{cut(value)}' holds this gym.toml; Gym writes gym.toml, README.md and the weights into the "
            "output folder: name a subfolder, such as outputs/<name>"
        )
    return None
