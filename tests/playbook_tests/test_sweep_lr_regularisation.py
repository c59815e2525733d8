"""sweep-lr switches off a built-in workload's own regularisation (the playbook sweeps without it)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.orchestrate_tests.conftest import run_tuner, toy_study


def test_a_builtins_dropout_is_off_in_the_sweep_and_the_output_says_so(tmp_path: Path) -> None:
    path = toy_study(tmp_path)
    document = yaml.safe_load(path.read_text())
    document["workload"] = {"name": "digits-mlp", "options": {"hidden_sizes": [16], "dropout": 0.3}}
    document["training"].pop("max_train_steps")
    document["rounds"]["round1"] = {"trials": 2, "length_fraction": 0.5}
    document["sweep_lr"] = {"grid": [0.01, 0.1, 1.0], "max_steps": 10, "fit_threshold": 0.99}
    path.write_text(yaml.safe_dump(document, sort_keys=False))

    done = run_tuner("sweep-lr", str(path), "--output-dir", str(tmp_path / "runs"), "--no-progress")
    assert done.returncode == 0, done.stderr
    assert "workload.dropout = 0.0 (the study has 0.3)" in done.stderr
    configs = sorted((tmp_path / "runs" / "toy" / "sweep-lr").glob("trial-*/config.yaml"))
    assert len(configs) == 3
    for config in configs:
        assert yaml.safe_load(config.read_text())["workload"]["options"]["dropout"] == 0.0
