"""The root ``tuner`` command: wires one module per subcommand, nothing else.

Heavy imports (torch, optuna) happen inside the commands that need them, so ``tuner --help``
and ``tuner validate`` start in a fraction of a second.
"""

from __future__ import annotations

import typer

from tuner.cli import init_cmd, run_round_cmd, train_cmd, validate_cmd, worker_cmd

app = typer.Typer(
    name="tuner",
    help="Hyperparameter tuning for PyTorch, the Deep Learning Tuning Playbook's way.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.command("init")(init_cmd.init)
app.command("validate")(validate_cmd.validate)
app.command("train")(train_cmd.train)
app.command("run-round")(run_round_cmd.run_round)
app.command("worker")(worker_cmd.worker)


def main() -> None:
    app(prog_name="tuner")
