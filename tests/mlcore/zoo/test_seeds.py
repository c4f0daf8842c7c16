import json

import torch

from mlcore.zoo.lm import CHECKPOINTS, SEED_CHECKPOINTS, build_model, checkpoint_folder
from mlcore.zoo.recipes import get_recipe
from tests.mlcore.zoo.test_recipes import TINY


def _weights(recipe) -> dict[str, torch.Tensor]:
    return build_model(recipe).state_dict()


def test_the_same_training_seed_builds_the_same_weights_and_another_seed_different_ones():
    first, again, other = _weights(TINY), _weights(TINY.with_seed(0)), _weights(TINY.with_seed(1))
    for name, tensor in first.items():
        torch.testing.assert_close(tensor, again[name], rtol=0, atol=0, msg=name)
    changed = [name for name, tensor in first.items() if not torch.equal(tensor, other[name])]
    assert any("experts" in name for name in changed) and any("gate" in name for name in changed)


def test_another_seed_changes_nothing_else_in_the_recipe():
    recipe = get_recipe("moe-lm-tiny")
    seeded = recipe.with_seed(2)
    assert seeded.seed == 2
    assert {**seeded.describe(), "seed": recipe.seed} == recipe.describe()


def test_the_committed_seed_keeps_its_folders_and_other_seeds_get_their_own():
    recipe = get_recipe("moe-lm-tiny")
    assert recipe.with_seed(recipe.seed).run_name == "moe-lm-tiny"
    assert checkpoint_folder(recipe) == CHECKPOINTS / "moe-lm-tiny"
    # A separate run name keeps a seed's resumable state (var/zoo/RUN) from resuming another seed's.
    assert recipe.with_seed(1).run_name == "moe-lm-tiny-s1" != recipe.with_seed(2).run_name
    assert checkpoint_folder(recipe.with_seed(1)) == SEED_CHECKPOINTS / "moe-lm-tiny-s1"


def test_the_committed_checkpoints_were_trained_under_the_default_seed():
    for name in ("moe-lm-tiny", "moe-lm-olmoe"):
        manifest = json.loads((CHECKPOINTS / name / "manifest.json").read_text())
        assert manifest["recipe"] == get_recipe(name).describe()
        assert "--seed" not in manifest["command"]
