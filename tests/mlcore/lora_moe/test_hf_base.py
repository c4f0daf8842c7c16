"""LoRA experts on a Hugging Face MoE LM base: the zoo's moe-lm-tiny (Qwen3-MoE, 4 layers)."""

import json

import pytest
import torch

from mlcore.hf import load_model
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.lora_moe.hf import HFLoRABase, encode_texts
from mlcore.lora_moe.mixture import MixtureConfig, attach_lora_mixture
from mlcore.zoo.committed import CHECKPOINTS

ZOO_LM = CHECKPOINTS / "moe-lm-tiny"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ZOO_LM)


def test_the_hf_base_pools_the_last_real_token_whatever_the_padding(tokenizer):
    base = HFLoRABase(load_model(ZOO_LM)).eval()
    tokens, mask = encode_texts(["to be or not", "to be or not to be, that is the question"], tokenizer, 128)
    assert mask[0].sum() < mask[1].sum()
    with torch.no_grad():
        alone = base.pooled(tokens[:1, : int(mask[0].sum())])
        padded = base.pooled(tokens, mask)[:1]
    torch.testing.assert_close(padded, alone, atol=1e-4, rtol=1e-4)


def test_lora_experts_attach_to_the_attention_projections_and_only_they_train():
    base = HFLoRABase(load_model(ZOO_LM))
    adapted = attach_lora_mixture(base, MixtureConfig(routing="ld-mole", experts=4, rank=2))
    # MoE experts are fused tensors, so up/down exist nowhere in this model: q, k, v, o of 4 layers.
    assert [name for name, _ in adapted] == [f"{i}.{p}" for i in range(4) for p in ("q", "k", "v", "o")]
    trainable = {name for name, p in base.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or ".router." in n or n.startswith("lambda_net") for n in trainable)


def _task(path, rows=64):
    words = ["calm", "storm", "sun", "rain", "snow", "wind", "fog", "clear"]
    lines = []
    for i in range(rows):
        # Distinct texts: rows split by a hash of their text, and a repeated text stays on one side.
        text = f"{words[i % 8]} and {words[(i * 3) % 8]} on day {i}"
        label = "wet" if words[i % 8] in ("storm", "rain", "snow", "fog") else "dry"
        group = "short" if i % 2 else "long"
        lines.append(json.dumps({"text": text, "label": label, "group": group}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(raw, files):
    kind, ctx = get_kind("lora-moe-finetune"), InMemoryContext()
    base = {"model": str(ZOO_LM), "steps": 6, "batch_size": 16, "experts": 4, "rank": 2, "seed": 0}
    params, inputs = prepare(kind, {**base, **raw}, files, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_the_job_fine_tunes_the_zoo_moe_lm_with_ld_mole_on_uploaded_text(tmp_path):
    outcome, ctx = _run({"routing": "ld-mole"}, {"task_file": [_task(tmp_path / "weather.jsonl")]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["zero_expert_rate"] == 0.0 and 0 <= scalars["accuracy"] <= 1
    assert {"accuracy_long", "accuracy_short"} <= set(scalars)
    assert "16 projections (0.q, 0.k" in ctx.lines[0]
    heatmap = ctx.charts["active_experts"]["data"]["values"]
    assert {row["projection"] for row in heatmap} == {f"{i}.{p}" for i in range(4) for p in "qkvo"}


def test_the_built_in_digit_task_runs_on_the_lm_as_prompts():
    outcome, ctx = _run({"routing": "top2", "levels": "2,3", "train_examples": 64, "eval_examples": 32}, {})
    assert outcome.status == "succeeded", outcome.traceback
    assert {"accuracy_d2", "accuracy_d3"} <= set(ctx.metrics.scalars)


def test_projections_the_lm_does_not_have_are_refused_before_training(tmp_path):
    outcome, ctx = _run({"projections": "up,down"}, {"task_file": [_task(tmp_path / "w.jsonl")]})
    assert outcome.status == "failed"
    assert outcome.error.startswith("Projections: the base has none of the projections up, down as linear layers")
    assert "loss" not in ctx.metrics.series and not ctx.artifacts


@pytest.mark.parametrize("routing", ["ld-mole", "top2"])
def test_a_bfloat16_checkpoint_stays_bfloat16_while_its_adapters_train_in_float32(tmp_path, routing):
    import shutil

    from transformers import AutoModelForCausalLM

    folder = tmp_path / "bf16"
    AutoModelForCausalLM.from_pretrained(ZOO_LM, dtype=torch.bfloat16).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(ZOO_LM / name, folder / name)
    outcome, ctx = _run({"model": str(folder), "routing": routing}, {"task_file": [_task(tmp_path / "w.jsonl")]})
    assert outcome.status == "succeeded", outcome.traceback
    assert 0 <= ctx.metrics.scalars["accuracy"] <= 1 and ctx.metrics.series["loss"]
    assert next(load_model(folder).parameters()).dtype == torch.bfloat16
