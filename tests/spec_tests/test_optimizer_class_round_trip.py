"""A study whose optimizer is a class (``RMSprop``) comes back from its own saved document: the
run folder's ``config.yaml`` (which ``load_model`` and a resume read) and the plan a round stores
(which every worker reads) are the study dumped, and the short names' fields (``momentum``,
``beta1``...) must not come back as if the user had set them for the class, which is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tuner.spec import StudySpec, load_study

STUDY = """
name: rms
workload: {name: digits-mlp}
training:
  max_train_steps: 10
  optimizer: {name: RMSprop, lr: 0.01, options: {alpha: 0.9, centered: true}}
"""


@pytest.mark.parametrize("name", ["RMSprop", "torch.optim.NAdam", "torch.optim:Adagrad"])
def test_a_class_optimizer_survives_the_study_dumped_and_read_again(name: str) -> None:
    spec = StudySpec.model_validate(yaml.safe_load(STUDY.replace("RMSprop", name)))
    again = StudySpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec
    assert StudySpec.model_validate_json(spec.model_dump_json()) == spec


def test_a_class_optimizers_config_file_loads(tmp_path: Path) -> None:
    spec = StudySpec.model_validate(yaml.safe_load(STUDY))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(spec.model_dump_for_files()))
    assert load_study(config).spec.training.optimizer.options == {"alpha": 0.9, "centered": True}


def test_a_short_name_keeps_its_fields_in_the_dump_and_a_class_still_refuses_them() -> None:
    adam = StudySpec.model_validate(yaml.safe_load(STUDY.replace("RMSprop", "adam")))
    assert adam.model_dump(mode="json")["training"]["optimizer"]["beta2"] == 0.999
    with pytest.raises(ValueError, match="momentum applies to momentum and nesterov only"):
        StudySpec.model_validate(yaml.safe_load(STUDY.replace("lr: 0.01", "lr: 0.01, momentum: 0.5")))
