"""Finding a workload's entry point: statically (for `tuner validate`) and by importing it.

The static check reads the source with ``ast`` instead of importing it, so `tuner validate`
stays fast and never imports torch, yet still says "module 'x' has no function 'buld'".
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.errors import WorkloadError
from tuner.workloads._builtins import BUILTINS


@dataclass(frozen=True)
class EntryPoint:
    """``module`` is a dotted module name or, when ``file`` is set, the file's path."""

    text: str
    module: str | None
    file: Path | None
    function: str


def parse_entry_point(name: str, base_dir: Path) -> EntryPoint:
    builtin = BUILTINS.get(name)
    text = builtin.entry_point if builtin else name
    target, sep, function = text.rpartition(":")
    if not sep or not target or not function.isidentifier():
        known = ", ".join(sorted(BUILTINS))
        raise WorkloadError(
            f"unknown workload {name!r}: expected a built-in ({known}) or an entry point "
            "'package.module:function' or 'path/to/file.py:function'"
        )
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target)
        return EntryPoint(text, None, path if path.is_absolute() else base_dir / path, function)
    return EntryPoint(text, target, None, function)


def _defines(source: str, function: str) -> bool:
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == function:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == function for t in node.targets
        ):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (alias.asname or alias.name.split(".")[0]) == function for alias in node.names
        ):
            return True
    return False


def _file_hint(entry: EntryPoint) -> str:
    """A module name is looked up on ``sys.path``, which does not hold the study's folder."""
    file = (entry.module or "").replace(".", "/") + ".py"
    return f"for a file next to the study use {file}:{entry.function}, or add its folder to PYTHONPATH"


def check_entry_point(entry: EntryPoint) -> None:
    """Raise ``WorkloadError`` if the entry point's file/module or function cannot be found."""
    if entry.file is not None:
        if not entry.file.is_file():
            raise WorkloadError(f"entry point {entry.text!r}: no such file {entry.file}")
        source, where = entry.file.read_text(encoding="utf-8"), f"file {entry.file}"
    else:
        try:
            found = importlib.util.find_spec(entry.module or "")
        except ModuleNotFoundError as error:
            raise WorkloadError(
                f"entry point {entry.text!r}: no module named {error.name or entry.module!r}; "
                + _file_hint(entry)
            ) from None
        except (ImportError, ValueError) as error:
            raise WorkloadError(f"entry point {entry.text!r}: cannot find module: {error}") from None
        if found is None or found.origin is None:
            raise WorkloadError(
                f"entry point {entry.text!r}: no module named {entry.module!r}; " + _file_hint(entry)
            )
        if not found.origin.endswith(".py"):
            return  # a compiled module: only importing it can tell
        source, where = Path(found.origin).read_text(encoding="utf-8"), f"module {entry.module!r}"
    try:
        defined = _defines(source, entry.function)
    except SyntaxError as error:
        raise WorkloadError(f"entry point {entry.text!r}: {where} has a syntax error: {error}") from None
    if not defined:
        raise WorkloadError(f"entry point {entry.text!r}: {where} has no function {entry.function!r}")


def workload_code(name: str, base_dir: Path) -> str | None:
    """A digest of the workload's source file (the entry point's file, or its module's), which
    every trial records: a phase can then tell a failure of code that has since changed (a bug
    the user fixed) from one the next trial would hit too. None when no source file is found."""
    try:
        entry = parse_entry_point(name, base_dir)
        if entry.file is not None:
            source = entry.file
        else:
            found = importlib.util.find_spec(entry.module or "")
            if found is None or found.origin is None or not found.origin.endswith(".py"):
                return None
            source = Path(found.origin)
        return hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    except (OSError, ImportError, ValueError, WorkloadError):
        return None


def import_entry_point(entry: EntryPoint) -> Callable[..., Any]:
    """Import the module (or file) and return the function. Runs the user's module code."""
    check_entry_point(entry)
    if entry.file is not None:
        digest = hashlib.sha1(str(entry.file.resolve()).encode()).hexdigest()[:12]
        module_name = f"tuner_user_workload_{digest}"
        module = sys.modules.get(module_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(module_name, entry.file)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            folder = str(entry.file.resolve().parent)
            if folder not in sys.path:  # like running the file: its neighbours are importable
                sys.path.insert(0, folder)
            sys.modules[module_name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)  # a retry must see the real error again
                raise
    else:
        module = importlib.import_module(entry.module or "")
    function = getattr(module, entry.function, None)
    if not callable(function):
        raise WorkloadError(f"entry point {entry.text!r}: {entry.function!r} is not a function")
    return function


#: ``1``: a worker imports a user's workload module too (see ``preload_module``).
PRELOAD_ENV = "TUNER_PRELOAD_WORKLOAD"


def preload_module(name: str, base_dir: Path) -> bool:
    """Import a workload's module in a worker, before its trials fork from it: no trial imports it
    again (scikit-learn alone, which the digits built-ins import, costs about a CPU second, and a
    trial of a small model trains in less). Whether it was imported.

    Built-ins always: their modules only import and define. A user's module only when
    ``TUNER_PRELOAD_WORKLOAD=1``: its import then runs in the worker, and a module that touches
    CUDA (``torch.cuda.is_available()`` included), runs a torch operation or starts a thread at
    import would leave every trial forked after it broken. A module that fails to import is left
    to the trials, whose error names the user's line as it always does.
    """
    import os

    if name not in BUILTINS and os.environ.get(PRELOAD_ENV) != "1":
        return False
    try:
        import_entry_point(parse_entry_point(name, base_dir))
    except Exception:  # the trial imports it again and reports the error where it belongs
        return False
    return True
