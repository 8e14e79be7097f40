"""Property-based fuzzing of the loader: whatever the document, the only failure is ConfigError."""

from __future__ import annotations

import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gym.config import ConfigError, GymConfig
from gym.config.loader import build_config, parse_toml
from tests.conftest import VALID

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=12,
)


def _known_paths() -> list[tuple[str, ...]]:
    """Every leaf key path of the schema, e.g. ('train', 'lora', 'r')."""
    from pydantic import BaseModel

    paths: list[tuple[str, ...]] = []

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            inner = [
                a
                for a in getattr(annotation, "__args__", ())
                if isinstance(a, type) and issubclass(a, BaseModel)
            ]
            target = (
                annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
            )
            target = target or (inner[0] if inner else None)
            if target is not None and name != "datasets":
                walk(target, (*prefix, name))
            else:
                paths.append((*prefix, name))

    walk(GymConfig, ())
    from gym.config.sections import DatasetConfig

    paths.extend(("datasets", 0, name) for name in DatasetConfig.model_fields)  # type: ignore[misc]
    return paths


KNOWN = _known_paths()


def _load_text(text: str) -> None:
    try:
        data, positions, source = parse_toml(text, "gym.toml")
        build_config(data, source=source, positions=positions, env={})
    except ConfigError as error:
        assert error.issues and all(issue.message for issue in error.issues)


@FUZZ
@given(st.dictionaries(keys, values, max_size=6))
def test_arbitrary_documents_only_raise_config_error(document: dict) -> None:
    try:
        text = tomlkit.dumps(document)
    except Exception:  # noqa: BLE001 - hypothesis made something TOML cannot hold (None, NaN keys...)
        return
    _load_text(text)


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_only_raises_config_error(text: str) -> None:
    _load_text(text)


@FUZZ
@given(st.sampled_from(KNOWN), values)
def test_arbitrary_value_in_known_key_only_raises_config_error(path: tuple, value: object) -> None:
    base = tomlkit.parse(VALID).unwrap()
    if value is None:
        return
    node = base
    for part in path[:-1]:
        node = node.setdefault(part, {}) if isinstance(part, str) else node[part]
    node[path[-1]] = value
    try:
        text = tomlkit.dumps(base)
    except Exception:  # noqa: BLE001
        return
    _load_text(text)


# -- gym.toml structure: lines duplicated, moved, dropped and hostile lines inserted ----------------
SECRET = "hf_" + "Fz8Qw3Lp0Xc7Vb2Nm5Kj9Hg4"
HOSTILE_LINES = [
    "[train]",
    "[train.lora]",
    "[compute]",
    "[[compute.accelerators]]",
    'accelerators = ["A100:1"]',
    "[[datasets]]",
    '[hub]\nrepo_id = "a/b"',
    f'token_env = "{SECRET}"',
    f'"{SECRET}" = 1',
    f'repo_id = "{SECRET}"',
    f'name = "{SECRET}"',
    "epochs = inf",
    "alpha = nan",
    "a.b.c.d.e.f = 1",
    "x = " + "[" * 400 + "]" * 400,
    'method = ":100: [bold]"',
    "seed = = 1",
    'path = "' + "p" * 5000 + '"',
    "learning_rate = 1e400",
]


@st.composite
def mutated_documents(draw: st.DrawFn) -> str:
    lines = VALID.splitlines()
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        kind = draw(st.sampled_from(["duplicate", "insert", "delete", "move"]))
        index = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
        if kind == "duplicate" and lines:
            lines.insert(draw(st.integers(0, len(lines))), lines[index])
        elif kind == "insert":
            lines.insert(index, draw(st.sampled_from(HOSTILE_LINES)))
        elif kind == "delete" and lines:
            lines.pop(index)
        elif kind == "move" and lines:
            lines.insert(draw(st.integers(0, len(lines))), lines.pop(index))
    return "\n".join(lines) + "\n"


@FUZZ
@given(mutated_documents())
def test_structure_mutations_locate_every_issue_and_echo_no_secret(text: str) -> None:
    try:
        data, positions, source = parse_toml(text, "gym.toml")
        build_config(data, source=source, positions=positions, env={})
    except ConfigError as error:
        assert error.issues
        for issue in error.issues:
            assert issue.line is not None and issue.column is not None, str(issue)
            assert str(issue).startswith(f"gym.toml:{issue.line}:{issue.column}: ")
        assert SECRET not in str(error) and SECRET.lower() not in str(error).lower()
        assert all(len(str(issue)) < 1200 for issue in error.issues)
