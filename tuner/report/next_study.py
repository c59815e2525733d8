"""``tuner report STUDY --write-next PATH``: the next study file, the report's suggestions applied.

A copy of the user's study file with each suggestion (a range moved at a boundary,
``max_train_steps`` from the best-step verdict, a categorical value that never won dropped)
applied in place, a ``# tuner report:`` comment above each change with its reason and numbers,
and everything else as the user wrote it (``yaml_edit``). The copy gets a new name: a changed
file cannot continue the old study's phases (workers refuse a changed file), and the new name
gives it its own phases and output folder.

Never overwrites the user's file: the destination must be a new path or a file this command
wrote (its first line says so). The text is written to a temp file next to the destination,
checked as ``tuner validate`` checks it, and only then renamed into place.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import stat
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import TunerError, UsageError
from tuner.report.findings import Suggestion, fmt
from tuner.report.yaml_edit import NotEditable, Path_, YamlText, same_value

if TYPE_CHECKING:
    from tuner.report.build import StudyReport
    from tuner.spec import StudySpec

MARK = "# written by tuner report --write-next from "
MAX_TRAIN_STEPS: Path_ = ("training", "max_train_steps")
NEAR_MAX_TRAIN_STEPS = ("eval_batch_size", "batch_size")  # where a new max_train_steps line goes
COMMENT_WIDTH = 100
MAX_DIFF_LINES = 60
LABEL = "next study   "


@dataclass
class NextStudy:
    """What ``--write-next`` did: the file written (or why none), its changes and the diff."""

    study_file: Path
    destination: Path
    written: bool = False
    old_name: str = ""
    name: str = ""
    changes: list[str] = field(default_factory=list)  # one per applied suggestion
    skipped: list[str] = field(default_factory=list)
    diff: list[str] = field(default_factory=list)
    nothing: str = ""  # why nothing was written

    def lines(self) -> list[str]:
        """What the command prints: the file written, a short diff, and the command to run next."""
        skipped = [f"{LABEL}skipped {text}" for text in self.skipped]
        if not self.written:
            return [f"{LABEL}nothing to change: {self.nothing}; no file written", *skipped]
        count = f"{len(self.changes)} change{'s' if len(self.changes) != 1 else ''} from the report"
        lines = [f"{LABEL}wrote {self.destination} ({count}; name {self.old_name} -> {self.name})"]
        lines += self.diff
        lines += skipped
        command = f"tuner run-round {shlex.quote(str(self.destination))} --round 1"
        lines.append(f"{LABEL}{self.destination} passes tuner validate; next: {command}")
        return lines


def write_next_study(
    study_file: Path,
    report: StudyReport,
    destination: Path,
    *,
    suggestions: Sequence[Suggestion] | None = None,
) -> NextStudy:
    """Write ``destination``: ``study_file`` with ``report``'s suggestions applied (see module
    doc), or only ``suggestions`` of them (``tuner tune``'s ``--no-apply-ranges/length``).

    Raises ``UsageError`` when ``destination`` is the study file or a file this command did not
    write; writes nothing when the report suggests nothing.
    """
    from tuner.spec import load_study
    from tuner.spec._loader import read_study_text

    check_destination(study_file, destination)
    result = NextStudy(study_file, destination)
    suggestions = report.suggestions if suggestions is None else suggestions
    if not suggestions:
        result.nothing = (
            f"the report suggests no change to {study_file} (no range at an edge to move, no "
            "best-step verdict on max_train_steps, no categorical value to drop)"
        )
        return result
    original = read_study_text(study_file)
    loaded = load_study(study_file)
    _check_source(study_file, loaded)
    spec = loaded.spec
    source_text = original.split("\n", 1)[1] if original.startswith(MARK) else original
    editor = YamlText(source_text, str(destination))
    comments: dict[tuple[Path_, str], list[str]] = {}  # (anchor, reason) -> what changed there

    def note(path: Path_, what: str, reason: str) -> None:
        comments.setdefault((editor.anchor(path), reason), []).append(what)

    stored_steps = _stored_max_train_steps(report)
    for suggestion in suggestions:
        applied = _apply(editor, suggestion, stored_steps if spec.training.max_train_steps is None else None)
        if isinstance(applied, str):
            note(suggestion.path, applied, suggestion.reason)
            result.changes.append(f"{suggestion.key}: {applied}")
        else:
            result.skipped.append(f"{suggestion.key}: {applied.args[0]}")
    if not result.changes:
        result.nothing = f"none of the report's suggestions could be applied to {study_file}"
        return result
    # the name the phases ran under: the file's, or a --set name= (tune --search-seed's) over it
    result.old_name = report.study or spec.name
    result.name = next_name(result.old_name, generated=original.startswith(MARK))
    try:
        _carry_over(editor, spec, result.old_name, result.name, stored_steps, study_file, destination, note)
        for (anchor, reason), changes in comments.items():
            text = f"tuner report: {', '.join(changes)}: {reason}"
            wrapped = textwrap.wrap(text, COMMENT_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
            editor.comment(anchor, wrapped)
    except NotEditable as error:
        raise TunerError(f"--write-next: cannot write the next study: {error}; nothing written") from None
    mark = f"{MARK}{_relative(study_file, destination.parent)}{editor.newline}"
    text = mark + editor.text
    _write_validated(text, destination, study_file)
    result.written = True
    result.diff = short_diff(original, text, str(study_file), str(destination))
    return result


def _carry_over(
    editor: YamlText,
    spec: StudySpec,
    old_name: str,
    name: str,
    stored_steps: int | None,
    study_file: Path,
    destination: Path,
    note: Callable[[Path_, str, str], None],
) -> None:
    """What makes the copy a study of its own: its new name, sweep-lr's ``max_train_steps`` when
    the file left it out (stored under the old name), relative paths that still reach their files."""
    if not editor.get(MAX_TRAIN_STEPS)[0] and stored_steps is not None:
        editor.set(MAX_TRAIN_STEPS, stored_steps, after=NEAR_MAX_TRAIN_STEPS)
        reason = (
            f"the phases of {old_name} trained with sweep-lr's value, stored under the name "
            f"{old_name}, which the new name does not read"
        )
        note(MAX_TRAIN_STEPS, f"max_train_steps {stored_steps} written out", reason)
    editor.set(("name",), name)
    reason = (
        f"a changed file cannot continue the phases of {old_name} (tuner refuses a changed study "
        "file); the new name gives it its own phases and output folder"
    )
    note(("name",), f"name {old_name} -> {name}", reason)
    for path, old, new in moved_paths(spec, study_file, destination):
        editor.set(path, new)
        what = ".".join(map(str, path))
        note(path, f"{what} {old} -> {new}", "relative paths resolve against this file's folder")


def check_destination(study_file: Path, destination: Path) -> None:
    """Refuse (one line, exit 2) to write over the study file or over a file someone else wrote."""
    stem = next_name(study_file.stem, generated=written_by_us(study_file))
    suggestion = study_file.with_name(f"{stem}{study_file.suffix or '.yaml'}")
    if destination.is_dir():
        raise UsageError(
            f"--write-next {destination}: is a folder; give the file to write, e.g. {suggestion}"
        )
    if destination.resolve() == study_file.resolve() or (
        destination.exists() and os.path.samefile(destination, study_file)
    ):
        raise UsageError(
            f"--write-next {destination}: is the study file itself, which tuner never overwrites; "
            f"give another path, e.g. {suggestion}"
        )
    if destination.exists() and not written_by_us(destination):
        raise UsageError(
            f"--write-next {destination}: exists and was not written by tuner report --write-next; "
            "refusing to overwrite it (give another path, or delete it first)"
        )


def written_by_us(path: Path) -> bool:
    """The file's first line is the mark ``--write-next`` puts there (so re-running may rewrite it)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(len(MARK.encode()))
    except OSError:
        return False
    return head == MARK.encode()


def next_name(name: str, generated: bool = False) -> str:
    """``toy`` -> ``toy-2``; a study ``--write-next`` wrote (``generated``): ``toy-2`` -> ``toy-3``
    (a user's own ``cifar-10`` becomes ``cifar-10-2``, not ``cifar-11``); within the 64
    characters a name may have."""
    numbered = re.fullmatch(r"(.+)-(\d+)", name) if generated else None
    base, number = (numbered.group(1), int(numbered.group(2)) + 1) if numbered else (name, 2)
    suffix = f"-{number}"
    return base[: 64 - len(suffix)] + suffix


def moved_paths(spec: StudySpec, study_file: Path, destination: Path) -> list[tuple[Path_, str, str]]:
    """``(path, old, new)`` for each relative path in the study (a ``path/file.py:function``
    workload, char-lm's ``text_file``) rewritten to point at the same file from ``destination``'s
    folder; none when both files share a folder."""
    from tuner.workloads import BUILTINS

    here, there = study_file.resolve().parent, destination.resolve().parent
    if here == there:
        return []
    moved: list[tuple[Path_, str, str]] = []
    workload = spec.workload.name
    target, sep, function = workload.rpartition(":")
    is_file = target.endswith(".py") or "/" in target or "\\" in target
    if workload not in BUILTINS and sep and is_file and not Path(target).is_absolute():
        moved.append((("workload", "name"), workload, f"{_relative(here / target, there)}:{function}"))
    text_file = spec.workload.options.get("text_file")
    if (
        workload == "char-lm"
        and isinstance(text_file, str)
        and not Path(text_file).expanduser().is_absolute()
    ):
        moved.append((("workload", "options", "text_file"), text_file, _relative(here / text_file, there)))
    return moved


def short_diff(old: str, new: str, old_name: str, new_name: str) -> list[str]:
    """The unified diff with one line of context, cut at ``MAX_DIFF_LINES``."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, n=1, lineterm="")
    )
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... {more} more diff lines (diff {old_name} {new_name})"]
    return lines


def _apply(editor: YamlText, suggestion: Suggestion, stored_steps: int | None) -> str | NotEditable:
    """Apply one suggestion; what changed (for its comment), or why it was not applied."""
    path = tuple(suggestion.path)
    found, current = editor.get(path)
    if not found and path == MAX_TRAIN_STEPS and stored_steps is not None:
        found, current = True, stored_steps  # the file leaves it to sweep-lr: the phases used this
    if not found:
        return NotEditable("not in the study file (was it edited after the phase ran?)")
    if suggestion.drop is not None and isinstance(current, list):
        # each drop of one list judged the whole list: after the first, only the value must be left
        if not any(same_value(choice, suggestion.drop) for choice in current):
            return NotEditable(f"{_shown(suggestion.drop)} is no longer among its choices")
    elif not same_value(current, suggestion.old):
        return NotEditable(
            f"the file has {_shown(current)} where the report judged {_shown(suggestion.old)} "
            "(was it edited after the phase ran?)"
        )
    try:
        if suggestion.drop is not None:
            carried = editor.drop(path, suggestion.drop)
            kept = f" (its comment: {'; '.join(carried)})" if carried else ""
            return f"dropped {_shown(suggestion.drop)} from {path[-1]}{kept}"
        if suggestion.new is None:
            return NotEditable("removing a key is not something --write-next does")
        editor.set(path, suggestion.new, after=NEAR_MAX_TRAIN_STEPS if path == MAX_TRAIN_STEPS else ())
    except NotEditable as error:
        return error
    return f"{path[-1]} {_shown(suggestion.old)} -> {_shown(suggestion.new)}"


def _shown(value: Any) -> str:
    return fmt(value) if isinstance(value, int | float) else repr(value)


def _stored_max_train_steps(report: StudyReport) -> int | None:
    """sweep-lr's ``max_train_steps`` the phases trained with (the file left it out), if any."""
    for phase in report.phases:
        plan = phase.data.plan
        if plan is not None and plan.max_train_steps_source == "tuner sweep-lr" and plan.max_train_steps:
            return plan.max_train_steps
    return next(
        (p.data.recommended_max_train_steps for p in report.phases if p.data.recommended_max_train_steps),
        None,
    )


def _relative(target: Path, folder: Path) -> str:
    return Path(os.path.relpath(target.resolve(), folder.resolve())).as_posix()


def _check_source(study_file: Path, loaded: Any) -> None:
    """The user's file must pass ``tuner validate``: else the copy cannot either, for no fault of
    the suggestions."""
    from tuner.playbook.phases import check_schedule_fits
    from tuner.workloads import check_study

    try:
        check_study(loaded)
        check_schedule_fits(loaded)
    except TunerError as error:
        raise UsageError(f"{error} (fix {study_file} first: the next study is a copy of it)") from None


def _write_validated(text: str, destination: Path, study_file: Path) -> None:
    """Write ``text`` to a temp file next to ``destination`` (where its relative paths resolve),
    check it as ``tuner validate`` does, then rename it into place; nothing is left on failure."""
    from tuner._atomic import _fsync_folder
    from tuner.playbook.phases import check_schedule_fits
    from tuner.spec import load_study
    from tuner.workloads import check_study

    folder = destination.parent
    folder.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=folder, prefix=f".{destination.name}.", suffix=".tmp")
    temp = Path(name)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, stat.S_IMODE(study_file.stat().st_mode))  # the user's file's permissions
        try:
            loaded = load_study(temp)
            check_study(loaded)
            check_schedule_fits(loaded)
        except TunerError as error:
            detail = str(error).replace(str(temp), str(destination))
            raise TunerError(
                f"the next study would not pass tuner validate, so nothing was written: {detail} "
                "(the suggested changes conflict with the rest of the file: apply them by hand)"
            ) from None
        os.replace(temp, destination)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(folder)
