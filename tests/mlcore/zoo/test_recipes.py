import dataclasses
import importlib
import json

import pytest
import torch

from mlcore.zoo.lm import export, per_layer_balance_loss, train, verify_manifest
from mlcore.zoo.recipes import RECIPES, LMRecipe, get_recipe

TINY = LMRecipe(
    name="test-lm",
    title="test",
    architecture="qwen3_moe",
    hidden_size=32,
    num_layers=2,
    num_heads=2,
    num_experts=4,
    top_k=2,
    expert_ffn=16,
    context=32,
    vocab_size=300,
    steps=4,
    batch_size=2,
    warmup=2,
    checkpoint_every=2,
    sources=("stdlib-docs",),
)


def test_the_zoo_lm_is_a_qwen3_moe_with_16_experts_top_2():
    config = get_recipe("moe-lm-tiny").hf_config()
    assert config.model_type == "qwen3_moe"
    assert (config.hidden_size, config.num_hidden_layers, config.num_experts) == (128, 4, 16)
    assert (config.num_experts_per_tok, config.moe_intermediate_size, config.max_position_embeddings) == (2, 256, 128)
    assert config.router_aux_loss_coef == 0.0  # replaced by the recipe's per-layer balance loss


def test_the_second_zoo_lm_is_a_different_family_and_width():
    config = get_recipe("moe-lm-olmoe").hf_config()
    assert config.model_type == "olmoe"
    assert (config.hidden_size, config.num_experts, config.num_experts_per_tok) == (96, 32, 4)
    assert set(RECIPES) >= {"moe-lm-tiny", "moe-lm-olmoe"}


def test_the_balance_loss_is_per_layer_and_sees_a_collapse_that_pooling_hides():
    # Layer 0 sends every token to experts {0, 1}, layer 1 to {2, 3}: pooled over layers usage is even.
    tokens = 8
    layer0 = torch.tensor([[5.0, 5.0, -5.0, -5.0]]).repeat(tokens, 1)
    layer1 = torch.tensor([[-5.0, -5.0, 5.0, 5.0]]).repeat(tokens, 1)
    balanced = torch.tensor([[5.0, 5.0, -5, -5], [-5, -5, 5.0, 5.0]]).repeat(tokens // 2, 1)
    collapsed = per_layer_balance_loss((layer0, layer1), top_k=2).item()
    even = per_layer_balance_loss((balanced, balanced), top_k=2).item()
    # E·Σ f·P: collapsed = 4·(0.5·0.5 + 0.5·0.5) ≈ 2, balanced ≈ 1.
    assert collapsed == pytest.approx(2.0, abs=1e-3)
    assert even == pytest.approx(1.0, abs=1e-3)


def test_training_resumes_to_the_same_weights(tmp_path):
    straight, _ = train(TINY, tmp_path / "straight", log=lambda _: None)
    train(TINY, tmp_path / "resumed", steps=2, log=lambda _: None)
    resumed, _ = train(TINY, tmp_path / "resumed", log=lambda _: None)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    log = [json.loads(line) for line in (tmp_path / "resumed" / "train_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log] == [2, 4]  # each run logs its last step


def test_the_exported_manifest_catches_a_changed_file(tmp_path):
    recipe = dataclasses.replace(TINY, steps=1)
    model, tokenizer = train(recipe, tmp_path / "work", log=lambda _: None)
    folder = export(model, tokenizer, recipe, tmp_path / "out", workdir=tmp_path / "work", command="cmd", metrics={})
    manifest = verify_manifest(folder)
    assert {"model.safetensors", "config.json", "tokenizer.json", "RECIPE.md"} <= set(manifest["files"])
    assert next(model.parameters()).dtype == torch.float32  # export does not leave the model in fp16
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    with pytest.raises(ValueError, match=r"config\.json does not match"):
        verify_manifest(folder)


def test_every_zoo_model_trains_through_the_one_zoo_command() -> None:
    from mlcore.zoo.__main__ import OTHER_RECIPES
    from mlcore.zoo.registry import MODELS

    for item in MODELS:
        assert item.name in RECIPES or item.name in OTHER_RECIPES, f"{item.name} has no recipe"
    for name, (module, _) in OTHER_RECIPES.items():
        assert callable(getattr(importlib.import_module(module), "main", None)), f"{name}: {module}.main"


@pytest.mark.parametrize(
    ("name", "flags"),
    [
        ("video-dit-digits", ("--device", "--cpu-minutes", "--wall-minutes", "--threads", "--workdir", "--out")),
        ("pointmoe-synmix", ("--threads", "--workdir", "--out")),
        ("lora-base-tiny", ("--threads", "--workdir", "--out")),
    ],
)
def test_the_one_zoo_command_takes_each_recipes_own_flags(name, flags, capsys) -> None:
    from mlcore.zoo.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        main(["train", name, "--help"])
    assert exit_.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: python -m mlcore.zoo train")
    assert all(flag in usage for flag in flags), usage
