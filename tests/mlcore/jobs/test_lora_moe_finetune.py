import pytest

from mlcore.jobs import InMemoryContext, JobError, ValidationError
from mlcore.jobs.lora_moe_finetune import run, spec
from mlcore.zoo.lora_base import CHECKPOINT


def _params(**overrides):
    return spec.clean(
        {"steps": 8, "batch_size": 16, "train_examples": 64, "eval_examples": 48, "experts": 4, "rank": 2, "seed": 0}
        | overrides
    )


def test_it_fine_tunes_the_zoo_base_with_ld_mole_and_reports_routing():
    ctx = InMemoryContext()
    metrics = run(_params(levels="2,4"), {"model": CHECKPOINT}, ctx)
    assert metrics["zero_expert_rate"] == 0.0
    assert {"accuracy", "accuracy_d2", "accuracy_d4", "mean_active_experts", "mean_lambda"} <= set(metrics)
    assert {"accuracy_by_level", "active_experts", "active_histogram", "loss"} <= set(ctx.charts)
    assert ctx.charts["active_experts"]["mark"] == "rect"
    assert "report.json" in ctx.artifacts and "zero-expert rate" in ctx.lines[-1]


@pytest.mark.parametrize("routing", ["hydra", "mola"])
def test_it_fine_tunes_with_the_mixture_of_lora_baselines_the_benchmark_compares(routing):
    ctx = InMemoryContext()
    metrics = run(_params(routing=routing, levels="2"), {"model": CHECKPOINT}, ctx)
    assert 0.0 <= metrics["accuracy"] <= 1.0
    # HydraLoRA mixes its heads densely; MoLA keeps exactly its top 2 experts per token.
    expected = 4.0 if routing == "hydra" else 2.0
    assert metrics["mean_active_experts"] == pytest.approx(expected)
    assert f"{routing} routing" in " ".join(ctx.lines)


def test_it_refuses_mola_with_one_expert():
    with pytest.raises(ValidationError, match="experts: MoLA routes each token to its top 2 experts"):
        _params(routing="mola", experts=1)


def test_its_sample_parameters_validate():
    params = spec.clean(dict(spec.sample))
    assert params["steps"] <= 200 and spec.guide.startswith("### How to read this")


def test_it_refuses_top2_with_one_expert_and_a_bound_at_the_expert_count():
    with pytest.raises(ValidationError, match="experts: Top-2 routing needs at least 2 experts"):
        _params(routing="top2", experts=1)
    with pytest.raises(ValidationError, match="sparsity_k: Must be below the number of experts"):
        _params(sparsity_k=4)


def test_it_rejects_a_folder_that_is_not_a_tiny_encoder(tmp_path):
    (tmp_path / "config.json").write_text('{"architecture": "qwen3_moe"}')
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(JobError, match=r"Model: config\.json does not describe a lora-tiny-encoder"):
        run(_params(), {"model": tmp_path}, InMemoryContext())
    with pytest.raises(JobError, match="Model: pick a base encoder"):
        run(_params(), {}, InMemoryContext())
