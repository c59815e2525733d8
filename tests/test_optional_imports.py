"""The libraries of ``examples/`` are optional extras (``hf``, ``metrics``, ``timm``): tuner's own
modules import none of them, so a user without them runs every command, and one with them pays
their import time (seconds each) only in a workload that uses them.

Checked in a fresh interpreter: in the test process, another test's import would already be in
``sys.modules``. ``make install`` puts transformers and torchmetrics in the dev venv, so an import
of them would happen here, not be skipped for want of the library.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import tuner

OPTIONAL = ("transformers", "timm", "torchmetrics", "torchvision", "tokenizers")

_PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m.split(".")[0] for m in sys.modules)))
"""


def _imported_by(*modules: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules], capture_output=True, text=True, check=False, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def test_the_cli_and_the_engine_import_no_optional_library() -> None:
    loaded = _imported_by("tuner", "tuner.train", "tuner.cli.app", "tuner.workloads")
    assert "typer" in loaded  # the probe sees what the CLI imports
    assert not loaded & set(OPTIONAL)


def test_no_module_of_tuner_imports_an_optional_library() -> None:
    modules = [
        info.name
        for info in pkgutil.walk_packages(tuner.__path__, "tuner.")
        if info.name != "tuner.__main__"  # it runs the CLI
    ]
    assert len(modules) > 100
    loaded = _imported_by(*modules)
    assert {"torch", "optuna"} <= loaded  # what the engine does import, seen
    assert not loaded & set(OPTIONAL)
