"""A Ctrl-C at the edges of a command: one that lands after the command chose its exit leaves
that exit standing, and one the command did not catch still ends it as an interrupt (130, or a
death by SIGINT), never as typer's silent 130 nor as tuner's internal error.

Each case runs as ``python -m`` of a small script (as the tests' and users' ``python -m tuner``
do): that start path is the one whose exit is checked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests._processes import PATIENCE_S
from tests.spec_tests._support import REPO


def _run_module(tmp_path: Path, name: str, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m NAME ARGS`` of ``source`` written to ``tmp_path/NAME.py``, with tuner importable:
    the start path of users' and the tests' ``python -m tuner``, whose exit is what is checked."""
    (tmp_path / f"{name}.py").write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", name, *args],
        capture_output=True, text=True, timeout=PATIENCE_S, cwd=tmp_path, env=env,
    )  # fmt: skip


@pytest.mark.parametrize(("ending", "code"), [("raise SystemExit(3)", 3), ("pass", -signal.SIGINT)])
def test_a_ctrl_c_on_the_way_out_keeps_the_exit_the_command_chose(
    tmp_path: Path, ending: str, code: int
) -> None:
    """A Ctrl-C that lands after the command chose its exit, before ``main`` ignores the next ones
    (CI: a completed ``tuner train`` then ended 1 with a KeyboardInterrupt traceback raised in
    ``signal.signal`` itself): the chosen exit stands. One that lands with no exit chosen (a Ctrl-C
    the command did not catch) is still a death by SIGINT."""
    done = _run_module(
        tmp_path,
        "late_ctrl_c",
        "import os, signal, time\n"
        "import tuner.cli.app as cli\n"
        "def command_ending_as_ctrl_c_lands(*args, **kwargs):\n"
        "    try:\n"
        f"        {ending}\n"
        "    finally:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        # the handler runs here: the main thread checks for it after each short sleep, even\n"
        "        # when the kernel handed the signal to another of the process's threads\n"
        "        for _ in range(1000): time.sleep(0.01)\n"
        "cli.app = command_ending_as_ctrl_c_lands\n"
        "cli.main()\n",
    )
    assert done.returncode == code, (done.returncode, done.stderr)
    assert ("Traceback" in done.stderr) == (code < 0), done.stderr


def test_a_ctrl_c_after_the_command_returned_is_not_typers_silent_130(tmp_path: Path) -> None:
    """typer turns a KeyboardInterrupt that reaches it (after the command returned: the context's
    close, ``sys.exit``) into exit 130 with nothing said; CI saw a completed ``tuner train`` end
    so. Under ``main`` a command's end ignores later Ctrl-Cs (``guarded``): the Ctrl-C here lands
    while click closes the command's context, after the command returned."""
    done = _run_module(
        tmp_path,
        "closing_ctrl_c",
        "import os, signal\n"
        "import typer\n"
        "from tuner.cli._errors import guarded\n"
        "from tuner.cli.app import app, main\n"
        "def ctrl_c():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    for _ in range(1000): pass  # the handler runs between bytecodes: here\n"
        "@app.command('ends')\n"
        "@guarded\n"
        "def ends(ctx: typer.Context) -> None:\n"
        "    ctx.call_on_close(ctrl_c)\n"
        "    print('done')\n"
        "main()\n",
        "ends",
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "done\n", "")


def test_a_ctrl_c_caught_inside_source_text_exec_still_exits_130(tmp_path: Path) -> None:
    """CPython marks a KeyboardInterrupt that left an ``exec`` of source text (as ``dataclasses``
    does while a lazy import runs) as unhandled and, unless cleared, ``python -m tuner`` exits by
    SIGINT (-2) after the command already said "interrupted" (seen in 2 of 8 Ctrl-Cs of ``tuner
    tune``). Run as ``python -m`` like the tests' and users' ``python -m tuner``: that start path
    is the one that checks the mark."""
    done = _run_module(
        tmp_path,
        "interrupted_cli",
        "from tuner.cli._errors import guarded\n"
        "from tuner.cli.app import app, main\n"
        "@app.command('interrupted-in-exec')\n"
        "@guarded\n"
        "def interrupted_in_exec() -> None:\n"
        "    exec('raise KeyboardInterrupt')\n"
        "main()\n",
        "interrupted-in-exec",
    )
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "interrupted; run the same command again to continue" in done.stderr
