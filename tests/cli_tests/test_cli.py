"""The `tuner` command line: help, lazy imports, `init` templates, `validate` summaries, usage
errors (a Ctrl-C at a command's edges: ``test_ctrl_c_exits.py``)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests._processes import PATIENCE_S
from tests.spec_tests._support import REPO, invoke, plain, single_error
from tuner.spec import CategoricalParam, load_study
from tuner.spec._templates import template_names

TEMPLATES = template_names()
TEMPLATE_DIR = REPO / "tuner" / "spec" / "templates"
STUDIES = sorted((REPO / "studies").glob("*.yaml"))


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_commands(flag: str) -> None:
    result = invoke(flag)
    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    for command in ("init", "validate", "train"):
        assert f" {command} " in text, text
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["init", "validate", "train"])
def test_command_help(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in plain(result.stdout)


def test_init_help_names_the_templates() -> None:
    text = " ".join(plain(invoke("init", "--help").stdout).split())
    assert f"Templates: {', '.join(TEMPLATES)}." in text


def _heavy_modules_after(*args: str) -> str:
    code = (
        f"import sys; sys.argv = ['tuner', *{list(args)!r}]\n"
        "from tuner.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'optuna')))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TUNER_DEBUG": ""},
        timeout=PATIENCE_S,  # a python start-up and imports, on a machine maybe at load 20
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "args",
    [
        ("--help",),
        ("validate", "studies/digits-mlp.yaml", "--no-build"),
        ("validate", "studies/char-lm.yaml", "--set", "optimizer.lr=0.01", "--no-build"),
        ("validate", "studies/no-such-study.yaml"),
    ],
    ids=" ".join,
)
def test_fast_commands_do_not_import_torch_or_optuna(args: tuple[str, ...]) -> None:
    assert _heavy_modules_after(*args) == "[]"


@pytest.mark.parametrize("template", TEMPLATES)
def test_init_writes_a_valid_study_named_after_the_file(template: str) -> None:
    result = invoke("init", template, f"my-{template}.yaml")
    assert result.exit_code == 0, result.output
    assert f"wrote my-{template}.yaml (template {template}, study name 'my-{template}')" in plain(
        result.stdout
    )
    text = Path(f"my-{template}.yaml").read_text(encoding="utf-8")
    template_lines = (TEMPLATE_DIR / f"{template}.yaml").read_text(encoding="utf-8").splitlines()
    differing = [(a, b) for a, b in zip(text.splitlines(), template_lines, strict=True) if a != b]
    assert differing == [(f"name: my-{template}", f"name: {template}")]

    result = invoke("validate", f"my-{template}.yaml")
    assert result.exit_code == 0, result.output
    assert plain(result.stdout).startswith(f"my-{template}.yaml: valid\n  study        my-{template}")
    assert load_study(f"my-{template}.yaml").spec.name == f"my-{template}"


@pytest.mark.parametrize(
    ("file_name", "study_name"),
    [
        ("sub/dir/exp1.yaml", "exp1"),
        ("my study.yaml", "my-study"),
        ("café.yaml", "caf-"),
        (".hidden.yaml", "hidden"),
        ("___.yaml", "digits-mlp"),
        ("v1.2.yaml", "v1.2"),
    ],
)
def test_init_derives_a_safe_study_name(file_name: str, study_name: str) -> None:
    result = invoke("init", "digits-mlp", file_name)
    assert result.exit_code == 0, result.output
    assert load_study(file_name).spec.name == study_name
    assert invoke("validate", file_name).exit_code == 0


@pytest.mark.parametrize("stem", ["2024", "1e3", "true", "yes", "null", "0x1f"])
def test_init_name_that_yaml_reads_as_a_scalar_still_validates(stem: str) -> None:
    assert invoke("init", "digits-mlp", f"{stem}.yaml").exit_code == 0
    result = invoke("validate", f"{stem}.yaml")
    assert result.exit_code == 0, result.output
    assert load_study(f"{stem}.yaml").spec.name == stem


def test_init_long_file_name_still_validates() -> None:
    file_name = "a" * 70 + ".yaml"
    assert invoke("init", "digits-mlp", file_name).exit_code == 0
    result = invoke("validate", file_name)
    assert result.exit_code == 0, result.output


def test_init_refuses_to_overwrite() -> None:
    Path("taken.yaml").write_text("mine\n")
    assert single_error(invoke("init", "digits-mlp", "taken.yaml")) == (
        "taken.yaml already exists (use --force to overwrite)"
    )
    assert Path("taken.yaml").read_text() == "mine\n"


def test_init_force_overwrites() -> None:
    Path("taken.yaml").write_text("mine\n")
    result = invoke("init", "digits-cnn", "taken.yaml", "--force")
    assert result.exit_code == 0, result.output
    assert load_study("taken.yaml").spec.workload.name == "digits-cnn"
    assert not [p.name for p in Path.cwd().iterdir() if p.name.endswith(".tmp")]


def test_init_force_onto_a_folder_is_a_usage_error() -> None:
    Path("folder.yaml").mkdir()
    message = single_error(invoke("init", "digits-mlp", "folder.yaml", "--force"))
    assert message.startswith("folder.yaml")


def test_init_file_permissions_follow_the_umask() -> None:
    old = os.umask(0o022)
    try:
        assert invoke("init", "digits-mlp", "perm.yaml").exit_code == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(Path("perm.yaml").stat().st_mode) == 0o644


def test_init_next_hint_is_shell_quoted() -> None:
    result = invoke("init", "digits-mlp", "my study.yaml")
    assert "next: tuner validate 'my study.yaml'" in plain(result.stdout)


@pytest.mark.parametrize("template", ["nope", "digits", "DIGITS-MLP", ""])
def test_init_unknown_template(template: str) -> None:
    message = single_error(invoke("init", template, "new.yaml"))
    assert message == f"unknown template {template!r}; choose one of: {', '.join(TEMPLATES)}"
    assert not Path("new.yaml").exists()


def test_templates_and_example_studies_are_the_same_set() -> None:
    assert TEMPLATES == ["char-lm", "digits-cnn", "digits-mlp", "imbalanced", "regression"]
    assert [p.stem for p in STUDIES] == TEMPLATES


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_example_study_is_identical_to_its_template(study: Path) -> None:
    assert study.read_bytes() == (TEMPLATE_DIR / study.name).read_bytes()


@pytest.mark.parametrize("template", TEMPLATES)
def test_init_without_rename_reproduces_the_example(template: str) -> None:
    assert invoke("init", template, f"{template}.yaml").exit_code == 0
    assert Path(f"{template}.yaml").read_bytes() == (REPO / "studies" / f"{template}.yaml").read_bytes()


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_validate_summary(study: Path) -> None:
    spec = load_study(study).spec
    result = invoke("validate", str(study))
    assert result.exit_code == 0, result.output
    assert plain(result.stderr) == ""
    lines = plain(result.stdout).splitlines()
    assert lines[0] == f"{study}: valid"
    assert f"  objective    {spec.objective.direction} {spec.objective.metric}" in lines
    assert f"max_train_steps {spec.training.max_train_steps} (from the study file)," in lines[4]
    assert lines[7] == f"  search space {len(spec.search_space)} parameter(s):"
    for offset, (key, param) in enumerate(spec.search_space.items()):
        assert lines[8 + offset].startswith(f"    {key}: ")
        assert lines[8 + offset].endswith(f", {param.role}")
        if isinstance(param, CategoricalParam):
            assert f"one of {param.choices}" in lines[8 + offset]


def test_validate_summary_with_overrides_and_defaults() -> None:
    Path("s.yaml").write_text("name: s\nworkload: {name: digits-mlp}\n")
    result = invoke("validate", "s.yaml", "--set", "optimizer.lr=0.05", "--set", "batch_size=16")
    assert result.exit_code == 0, result.output
    text = plain(result.stdout)
    assert "  objective    minimize val/error_rate\n" in text
    assert "batch 16, eval batch 64, max_train_steps not set," in text
    assert "  optimizer    adamw, lr 0.05, weight_decay 0\n" in text
    assert "  search space (empty)\n" in text


def test_validate_without_argument_is_a_usage_error() -> None:
    result = invoke("validate")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_unknown_command_is_a_usage_error() -> None:
    result = invoke("frobnicate")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


COMMANDS = ("init", "validate", "train", "run-round", "worker")


def _help_at_80_columns(*args: str) -> str:
    result = invoke(*args, "--help", env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    return plain(result.stdout)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_at_80_columns_names_values_and_keeps_descriptions_readable(command: str) -> None:
    text = _help_at_80_columns(command)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "<bool>" not in text and "list[str]" not in text and "{" not in text, text
    assert "Usage: tuner " in text and "[OPTIONS] " in text
    if command != "init":
        assert f"Usage: tuner {command} [OPTIONS] STUDY\n" in text, text
        assert "--set KEY=VALUE" in text, text
    # each option's description starts on its own line and is not squeezed into a narrow column
    described = [line for line in text.splitlines() if line.startswith("  --")]
    assert described and all(len(line.strip()) > 22 for line in described), text


def test_run_round_help_at_80_columns() -> None:
    text = _help_at_80_columns("run-round")
    assert "  --trial-timeout SECONDS     Seconds before a trial is killed (reason:\n" in text, text
    assert "  --progress / --no-progress  Live view on a terminal.  [default: progress]\n" in text
    assert "  --trials N                  Round 1's trial budget (default:\n" in text


def test_init_usage_names_its_arguments() -> None:
    assert "Usage: tuner init [OPTIONS] TEMPLATE PATH\n" in _help_at_80_columns("init")


def test_root_help_gives_each_command_one_whole_line() -> None:
    text = _help_at_80_columns()
    for command in COMMANDS:
        (line,) = [line for line in text.splitlines() if line.startswith(f"  {command} ")]
        assert not line.endswith("..."), line


def test_version() -> None:
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0, result.output
    assert plain(result.stdout) == f"tuner {version('tuner')}\n"
    assert version("tuner") == "0.1.0"


def test_a_missing_argument_is_named_as_in_the_usage_line() -> None:
    result = invoke("validate")
    assert single_error(result) == "Missing argument 'STUDY'. (tuner validate -h for help)"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("tune", "study.yaml", "--budget", "9", "--max-searches", "abc"),
            "Invalid value for '--max-searches': ",
        ),
        (("run-round", "study.yaml", "--bogus"), "No such option: --bogus (tuner run-round -h for help)"),
        (("frobnicate",), "No such command 'frobnicate'. (tuner -h for help)"),
        (("--bogus", "list"), "No such option: --bogus (tuner -h for help)"),
    ],
    ids=["bad-value", "unknown-option", "unknown-command", "unknown-root-option"],
)
def test_a_mistyped_command_line_is_one_error_line_and_exit_2(args: tuple[str, ...], expected: str) -> None:
    """click's usage errors were four lines (usage, hint, blank, ``Error:`` last); every other bad
    input is one ``error:`` line, so these are too."""
    message = single_error(invoke(*args))
    assert message.startswith(expected), message
    assert message.endswith(" -h for help)"), message


def test_a_mistyped_command_line_through_the_installed_command_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tuner", "report", "--bogus"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: No such option: --bogus (tuner report -h for help)\n"
