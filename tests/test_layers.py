"""Each layer imports only the layers below it: spec -> workloads -> train -> orchestrate ->
playbook -> report -> cli, with ``tuner/_*.py``, ``tuner/errors.py`` and ``tuner/output.py`` as
shared helpers at the bottom (importing no layer).

Read with ``ast`` (every import, including those inside functions and ``TYPE_CHECKING`` blocks),
so an import that runs up the layers is caught even if it is only executed on one code path.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tuner

LAYERS = ("spec", "workloads", "train", "orchestrate", "playbook", "report", "cli")
ROOT = Path(tuner.__file__).parent
#: ``tuner/__main__.py`` only starts the CLI: it sits at the top.
TOP_MODULES = {"__main__": len(LAYERS)}


def _rank(module: str) -> int | None:
    """The layer of ``tuner.<module>...``; -1 for the shared bottom helpers; None for non-tuner."""
    parts = module.split(".")
    if parts[0] != "tuner":
        return None
    if len(parts) == 1:
        return -1  # `import tuner` (the version string)
    if parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    if parts[1] in TOP_MODULES:
        return TOP_MODULES[parts[1]]
    return -1


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    package = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.append((node.lineno, module))
    return found


def layer_violations() -> list[str]:
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        own = _rank("tuner." + ".".join(path.relative_to(ROOT).with_suffix("").parts))
        assert own is not None
        for line, module in _imported_modules(path):
            theirs = _rank(module)
            if theirs is None:
                continue
            if own == -1 and theirs != -1:
                violations.append(f"{path.relative_to(ROOT.parent)}:{line}: shared helper imports {module}")
            elif theirs > own:
                violations.append(f"{path.relative_to(ROOT.parent)}:{line}: imports {module}, a layer above")
    return violations


def test_no_module_imports_a_layer_above_it() -> None:
    assert layer_violations() == []


def test_the_layer_walk_knows_every_package() -> None:
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(LAYERS), f"a package outside the layer order: {packages - set(LAYERS)}"
    assert _rank("tuner.train.rng") == LAYERS.index("train") > _rank("tuner.workloads._build")
    assert _rank("tuner.errors") == _rank("tuner._atomic") == _rank("tuner.output") == -1
