import pytest

from mlcore.jobs import InMemoryContext, JobError
from mlcore.jobs.router_align import run, spec


def _params(**overrides):
    base = {"pretrain_steps": 10, "train_examples": 64, "test_examples": 32, "epochs": 1, "oracle_steps": 2}
    return spec.clean(base | {"seed": 0} | overrides)


def test_it_pretrains_aligns_and_reports_every_baseline():
    ctx = InMemoryContext()
    metrics = run(_params(), {}, ctx)
    for split in ("iid", "shifted"):
        for method in ("base", "ce_only", "roma", "c3po_lite", "oracle"):
            assert 0.0 <= metrics[f"{split}_accuracy_{method}"] <= 1.0
        assert f"{split}_gap_closed_roma" in metrics and f"{split}_knn_overlap_roma" in metrics
    assert metrics["iid_accuracy_oracle"] >= metrics["iid_accuracy_base"]
    assert {"accuracy", "gap_closed", "knn_overlap", "regulariser"} <= set(ctx.charts)
    assert {"base_model", "roma_model", "report.json"} <= set(ctx.artifacts)
    assert len(ctx.metrics.series["regulariser"]) >= 1


def test_its_sample_parameters_validate():
    assert spec.clean(dict(spec.sample))["pretrain_steps"] <= 200


def test_it_refuses_more_layers_than_the_model_has_and_a_broken_model(tmp_path):
    # The layer count is checked against the model at run time (an uploaded model may have more), before any work.
    ctx = InMemoryContext()
    with pytest.raises(JobError, match="Layers: the built-in MoE classifier has 4 MoE layers"):
        run(_params(layers=5), {}, ctx)
    assert not ctx.artifacts
    (tmp_path / "config.json").write_text('{"architecture": "lora-tiny-encoder"}')
    with pytest.raises(JobError, match="Model: could not load a moe-task-classifier"):
        run(_params(), {"model": tmp_path}, InMemoryContext())
