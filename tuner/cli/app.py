"""The root ``tuner`` command: wires one module per subcommand, nothing else.

Heavy imports (torch, optuna) happen inside the commands that need them, so ``tuner --help``
and ``tuner validate`` start in a fraction of a second.

Help is click's plain formatting (``rich_markup_mode=None``), not typer's rich panels: at 80
columns the panels left option descriptions about 22 characters, while plain help keeps each
option on one or two lines. Every option names its value (``--set KEY=VALUE``, ``--trials N``);
flags show none.
"""

from __future__ import annotations

import signal
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup

from tuner.cli import (
    estimate_cmd,
    init_cmd,
    list_cmd,
    profile_cmd,
    report_cmd,
    run_round_cmd,
    smoke_cmd,
    storage_proxy_cmd,
    sweep_lr_cmd,
    train_cmd,
    tune_cmd,
    validate_cmd,
    worker_cmd,
)
from tuner.cli._usage_errors import parse_args_in_one_line


class TunerGroup(TyperGroup):
    """``tuner`` itself: an unknown command or a bad option before it is one ``error:`` line."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return parse_args_in_one_line(super().parse_args, ctx, args)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        return parse_args_in_one_line(super().resolve_command, ctx, args)


class TunerCommand(TyperCommand):
    """A command whose usage line and argument list say ``STUDY``, not typer's ``{path}``, and
    whose usage errors are one ``error:`` line (``_usage_errors``)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return parse_args_in_one_line(super().parse_args, ctx, args)

    @staticmethod
    def _argument_name(param: Any) -> str:
        return str(param.metavar or param.name.upper())

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                name = self._argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                arguments.append((self._argument_name(param), param.help or ""))
            elif (record := param.get_help_record(ctx)) is not None:
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("tuner")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown (not installed)"
        typer.echo(f"tuner {number}")
        raise typer.Exit()


app = typer.Typer(
    name="tuner",
    cls=TunerGroup,
    help="Hyperparameter tuning for PyTorch, the Deep Learning Tuning Playbook's way.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Hyperparameter tuning for PyTorch, the Deep Learning Tuning Playbook's way."""


# one line each in `tuner --help` (click would cut the docstrings' first sentences at ~45 characters)
app.command("init", cls=TunerCommand, short_help="Write a study file from a template.")(init_cmd.init)
app.command("validate", cls=TunerCommand, short_help="Check a study file and summarise it.")(
    validate_cmd.validate
)
app.command("train", cls=TunerCommand, short_help="Train once with the fixed hyperparameters.")(
    train_cmd.train
)
app.command("sweep-lr", cls=TunerCommand, short_help="Find max_train_steps with a constant-LR grid.")(
    sweep_lr_cmd.sweep_lr
)
app.command("run-round", cls=TunerCommand, short_help="Run a tuning round on every local device.")(
    run_round_cmd.run_round
)
app.command("tune", cls=TunerCommand, short_help="The whole procedure within one budget.")(tune_cmd.tune)
app.command("worker", cls=TunerCommand, short_help="Join a running phase from here.")(worker_cmd.worker)
app.command("smoke", cls=TunerCommand, short_help="Every phase on a tiny budget (for CI).")(smoke_cmd.smoke)
app.command("estimate", cls=TunerCommand, short_help="Estimate the search's cost and days.")(
    estimate_cmd.estimate
)
app.command("report", cls=TunerCommand, short_help="What the trials say, and what to change next.")(
    report_cmd.report
)
app.command("profile", cls=TunerCommand, short_help="Where a training step's time goes.")(profile_cmd.profile)
app.command("list", cls=TunerCommand, short_help="Every study: the experiment-tracking table.")(
    list_cmd.list_studies
)
app.command("storage-proxy", cls=TunerCommand, short_help="Serve a study database over gRPC.")(
    storage_proxy_cmd.storage_proxy
)


def main() -> None:
    from tuner.cli import _errors

    _errors.ENDS_WITH_THE_COMMAND = True  # a Ctrl-C after the command ended is ignored (``guarded``)
    try:
        try:
            app(prog_name="tuner")
        finally:
            # The command has ended and said how. A Ctrl-C now (the interpreter joining threads
            # and closing storages) has nothing left to stop, yet as a KeyboardInterrupt there it
            # would kill the process by SIGINT: exit -2 after the command reported its own exit code.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            _forget_a_caught_ctrl_c()
            _skip_the_collections_at_exit()
    except KeyboardInterrupt as late:
        # A Ctrl-C that landed after the command had chosen its exit (click's ``sys.exit``), just
        # before the line above ignored the next ones (CI: inside ``signal.signal`` itself; the
        # command had printed "completed", then exited 1 with a traceback): the exit stands.
        chosen = late.__context__
        if not isinstance(chosen, SystemExit):
            raise  # a Ctrl-C the command did not catch: as before
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _forget_a_caught_ctrl_c()
        raise chosen from None


def _skip_the_collections_at_exit() -> None:
    """Freeze every object still alive, so that the interpreter's exit does not collect them.

    Why: after the command, the interpreter ran the garbage collector over everything the
    command had imported, several times over as it cleared the modules: a third of a second of
    every ``run-round`` (0.33-0.39 s from the command's end to its exit; 0.12-0.13 s this way).
    What must be closed is closed first: the garbage of the command collected once (its files'
    finalizers run), and the database connections closed (``close_open_storages``: SQLite folds
    its log back into the file then). Objects alive now are only deallocated by reference
    counting as the modules go, which every correct program already allows for (Python never
    promises finalizers at exit).
    """
    import gc
    import sys

    storage = sys.modules.get("tuner.orchestrate.storage")  # never imported just to close nothing
    if storage is not None:
        storage.close_open_storages()
    gc.collect()
    gc.freeze()


def _forget_a_caught_ctrl_c() -> None:
    """Keep the exit code a command chose after it caught a Ctrl-C (130), not a death by SIGINT.

    CPython marks a KeyboardInterrupt that leaves any evaluation of source text (``exec`` of a
    string: ``dataclasses`` builds every ``__init__`` that way, so a Ctrl-C during a lazy import
    lands there) as unhandled, and at exit kills the process with SIGINT when that mark is set,
    even if the exception was caught further up (``guarded`` catches it and says "interrupted"):
    ``Python/pythonrun.c`` ``run_eval_code_obj``, checked by ``Py_RunMain``. Seen as exit -2 in 2
    of 8 Ctrl-Cs of ``tuner tune``. The next evaluation of source text clears the mark, so one
    empty one here does; a KeyboardInterrupt still propagating out of ``main`` is marked again
    by the interpreter after this, so a genuinely unhandled Ctrl-C keeps its meaning.
    """
    exec("None")
