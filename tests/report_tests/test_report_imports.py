"""The report's modules import each other one way: the diagnostics, then ``build`` (which runs
them), then the renderers that take its result. A cycle (``build`` <-> ``json_output``) makes
either module's import order matter and hides which one owns the schema."""

from __future__ import annotations

from tests.test_layers import ROOT, _imported_modules


def _report_graph() -> dict[str, set[str]]:
    folder = ROOT / "report"
    modules = {f"tuner.report.{p.stem}": p for p in folder.glob("*.py") if p.name != "__init__.py"}
    return {
        name: {
            m for _, imported in _imported_modules(path) for m in (imported,) if m in modules and m != name
        }
        for name, path in modules.items()
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_report_modules_import_each_other_without_a_cycle() -> None:
    assert _cycle(_report_graph()) is None


def test_the_json_schema_lives_with_the_json_renderer() -> None:
    from tuner.report.json_output import SCHEMA

    assert SCHEMA == "tuner.report/1"
    assert "tuner.report.json_output" not in _report_graph()["tuner.report.build"]
