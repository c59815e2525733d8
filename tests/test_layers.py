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
#: ``tuner/__main__.py`` only starts the CLI, and ``tuner/api.py`` is tuner from Python: both at the top.
TOP_MODULES = {"__main__": len(LAYERS), "api": len(LAYERS)}


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


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_targets(path: Path) -> set[str]:
    """Every dotted name an import in ``path`` may load: ``from a.b import c`` may load the module
    ``a.b`` and, if ``c`` is a submodule, ``a.b.c``."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return targets


def import_circles() -> list[list[str]]:
    """Groups of tuner modules that import one another, directly or through others (Tarjan's
    strongly connected components). A circle makes import order matter and hides which module a
    change belongs in, so none is allowed, not even inside one layer."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph = {
        name: sorted(t for t in _import_targets(path) if t in modules and t != name)
        for name, path in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while (member := stack.pop()) != node:
                group.append(member)
            circles.append(sorted([*group, node]))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [circle for circle in circles if len(circle) > 1]


def test_no_import_circles() -> None:
    assert import_circles() == []
