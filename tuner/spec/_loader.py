"""Study file -> validated ``StudySpec``, or one located error line.

Loading order: read file -> safe YAML with positions -> ``--set`` overrides -> pydantic ->
cross-field checks (``_checks.py``). Every failure is a ``SpecError`` naming file:line:column,
the field path, what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from tuner.errors import SpecError, UsageError
from tuner.spec._messages import message_for
from tuner.spec._models import StudySpec
from tuner.spec._paths import Path_, did_you_mean, format_path, get_path, has_path, key_to_path, set_path
from tuner.spec._yaml import Positions, load_yaml_with_positions, parse_scalar


@dataclass
class LoadedStudy:
    """A validated study plus what is needed to point at any of its fields."""

    spec: StudySpec
    path: Path
    document: dict[str, Any]
    positions: Positions
    overrides: dict[Path_, str] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        """Relative paths inside a study file resolve against the file's folder."""
        return self.path.parent

    def error(self, path: Path_, message: str, *, at_key: bool = False) -> SpecError:
        """A ``SpecError`` located at ``path`` (or at the ``--set`` that put it there)."""
        return _located(str(self.path), self.positions, self.overrides, path, message, at_key=at_key)

    def validation_error(
        self, error: ValidationError, model: type[BaseModel], data: Any, prefix: Path_
    ) -> SpecError:
        """A pydantic error from validating ``data`` (found at ``prefix``) as one located line."""
        return _first_error(error, data, model, prefix, str(self.path), self.positions, self.overrides)

    def with_values(self, values: Mapping[str, Any]) -> StudySpec:
        """The spec with dotted keys (search-space params) set; raises a located SpecError."""
        document = self.document
        for key, value in values.items():
            document = set_path(document, key_to_path(key), value, defaults=self.spec.model_dump())
        return _validate(document, str(self.path), self.positions, self.overrides)


def _located(
    source: str,
    positions: Positions,
    overrides: Mapping[Path_, str],
    path: Path_,
    message: str,
    *,
    at_key: bool = False,
) -> SpecError:
    for override_path, text in overrides.items():
        if path[: len(override_path)] == override_path or override_path[: len(path)] == path != ():
            return SpecError(message, path=f"--set {text}", field=format_path(path))
    where = positions.of(path, key=at_key)
    line, column = where if where else (None, None)
    return SpecError(message, path=source, line=line, column=column, field=format_path(path) or None)


def _error_path(document: Any, loc: tuple[Any, ...], missing: bool = False) -> Path_:
    """Pydantic's ``loc`` has union tags and validator names in it; keep the real data path."""
    path: list[str | int] = []
    node = document
    for index, part in enumerate(loc):
        if (isinstance(node, dict) and part in node) or (
            isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        ):
            node = node[part]
            path.append(part)
        elif missing and index == len(loc) - 1 and isinstance(part, str) and isinstance(node, dict):
            path.append(part)  # a missing field: name it, point at its parent
    return tuple(path)


def _first_error(
    error: ValidationError,
    data: Any,
    model: type[BaseModel],
    prefix: Path_,
    source: str,
    positions: Positions,
    overrides: Mapping[Path_, str],
) -> SpecError:
    """The first problem in reading order, as one located line."""
    located = []
    for detail in error.errors(include_url=False):
        path = (*prefix, *_error_path(data, tuple(detail["loc"]), detail["type"] == "missing"))
        message = message_for(detail, model, path[len(prefix) :])
        at_key = detail["type"] == "extra_forbidden"
        located.append(_located(source, positions, overrides, path, message, at_key=at_key))
    located.sort(key=lambda e: (e.line is None, e.line or 0, e.column or 0))
    return located[0]


def _validate(
    document: dict[str, Any], source: str, positions: Positions, overrides: Mapping[Path_, str]
) -> StudySpec:
    try:
        return StudySpec.model_validate(document)
    except ValidationError as error:
        raise _first_error(error, document, StudySpec, (), source, positions, overrides) from None


def _parse_override(text: str) -> tuple[Path_, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--set {text}: expected key=value, e.g. --set optimizer.lr=0.01")
    try:
        value = parse_scalar(raw)
    except SpecError as error:
        raise UsageError(f"--set {_shorten(text)}: {error.detail}") from None
    return key_to_path(key.strip()), value


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: A study file is a few kilobytes; anything this big is a mistake (or hostile) and is refused
#: before it is read, so that neither memory nor the YAML parser's time depends on it.
MAX_STUDY_FILE_BYTES = 1024 * 1024


def read_study_text(path: Path) -> str:
    """The file's text, refused in one line if missing, a folder, too big, unreadable or not UTF-8."""
    if path.is_dir():
        raise UsageError(f"{path}: is a folder, expected a study file (.yaml)")
    try:
        # Read at most one byte past the limit: /dev/zero or a FIFO has no meaningful size.
        with path.open("rb") as file:
            data = file.read(MAX_STUDY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such study file") from None
    except OSError as error:
        raise UsageError(f"{path}: cannot read: {error.strerror or error}") from None
    if len(data) > MAX_STUDY_FILE_BYTES:
        raise UsageError(
            f"{path}: larger than {MAX_STUDY_FILE_BYTES // 1024} KiB; a study file is a few kilobytes "
            "(is this the right file?)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise SpecError(
            f"not a UTF-8 text file (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "study files are YAML text",
            path=str(path),
            line=line,
        ) from None


def _adds_a_round(target: Path_) -> bool:
    """``rounds.round3.top_k``: a field of a round the file does not have (``--set`` may add the
    next round; a gap in the numbering is refused where the rounds are validated)."""
    from tuner.spec._models import ROUND_KEY, RoundSpec

    return (
        len(target) == 3
        and target[0] == "rounds"
        and isinstance(target[1], str)
        and ROUND_KEY.match(target[1]) is not None
        and target[2] in RoundSpec.model_fields
    )


def load_study(path: str | Path, overrides: Iterable[str] = ()) -> LoadedStudy:
    """Load and validate a study file (schema and training-side checks).

    Workload-side checks (entry point exists, its options) are ``tuner.workloads.check_study``.
    """
    path = Path(path)
    source = str(path)
    document, positions = load_yaml_with_positions(read_study_text(path), source)
    if document is None:
        raise SpecError(
            "the file is empty; expected a study mapping with at least name and workload",
            path=source,
            line=1,
            column=1,
        )
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a {type(document).__name__}"
        raise SpecError(
            f"expected a mapping of study fields at the top level, got {kind}", path=source, line=1, column=1
        )
    override_texts: dict[Path_, str] = {}
    defaults = _validate(document, source, positions, {}).model_dump()
    for text in overrides:
        target, value = _parse_override(text)
        if target[0] != "workload" and not has_path(defaults, target) and not _adds_a_round(target):
            hint = did_you_mean(text.partition("=")[0].strip(), defaults)
            raise UsageError(f"--set {text}: {format_path(target)} is not a field of this study{hint}")
        document = set_path(document, target, value, defaults=defaults)
        override_texts[target] = text
    spec = _validate(document, source, positions, override_texts)
    loaded = LoadedStudy(spec, path, document, positions, override_texts)
    from tuner.spec._checks import check_rounds, check_schedule, check_search_space

    check_search_space(loaded)
    check_schedule(loaded)
    check_rounds(loaded)
    return loaded


__all__ = ["LoadedStudy", "get_path", "load_study"]
