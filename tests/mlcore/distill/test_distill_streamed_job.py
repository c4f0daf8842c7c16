"""The distill job with a teacher that does not fit the worker: ``load=auto`` streams it, the
result is the whole-model run's, the log says what was read and stored, and logits too large to
store are refused before any weight is read."""

from pathlib import Path
from typing import Any

import pytest

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare

FAST = {"steps": 12, "train_windows": 24, "eval_windows": 8, "eval_every": 6, "seq_len": 32, "seed": 0, "lr": 5e-3}


def run(raw: dict[str, Any]) -> tuple[Any, InMemoryContext]:
    kind, ctx = get_kind("distill"), InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def between_whole_and_streamed() -> int:
    """Free memory that holds the zoo teacher layer by layer but not whole."""
    from mlcore.distill.streamed_teacher import plan_teacher_load
    from mlcore.hf.memory import USABLE_SHARE
    from mlcore.zoo.committed import CHECKPOINTS

    shape = {"device": "cpu", "windows": 32, "seq_len": 32, "batch_size": 8, "vocab": 2048}
    _, needs = plan_teacher_load(CHECKPOINTS / "moe-lm-tiny", "auto", available=1 << 40, **shape)
    return int((needs.layer_by_layer + needs.whole) / 2 / USABLE_SHARE)


def test_a_teacher_the_worker_cannot_hold_is_streamed_with_the_whole_runs_result(monkeypatch: Any) -> None:
    whole, whole_ctx = run({"load": "whole", "teacher_temperature": 0.5})
    assert whole.status == "succeeded", whole.traceback
    available = between_whole_and_streamed()
    monkeypatch.setattr("mlcore.hf.memory.available_bytes", lambda device="cpu": available)
    streamed, ctx = run({"load": "auto", "teacher_temperature": 0.5})
    assert streamed.status == "succeeded", streamed.traceback
    assert any(line.startswith("loading whole:") for line in whole_ctx.lines)
    assert any(line.startswith("loading layer-by-layer:") for line in ctx.lines)
    assert any("stores its float32 logits of 32 sequences" in line for line in ctx.lines)
    assert any("second layer-by-layer pass" in line for line in ctx.lines)
    expected, got = whole_ctx.metrics.scalars, ctx.metrics.scalars
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    assert [v for _, v in ctx.metrics.series["loss"]] == pytest.approx(
        [v for _, v in whole_ctx.metrics.series["loss"]], rel=1e-5
    )
    assert not list(Path(ctx.workdir).glob("moelab-teacher-*")), "the stored logits outlived the job"


def test_logits_too_large_to_store_are_refused_with_their_size_before_a_weight_is_read(monkeypatch: Any) -> None:
    monkeypatch.setattr("mlcore.distill.streamed_teacher.STORED_LOGITS_BYTES", 1 << 20)

    def no_weights(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a weight was read")

    monkeypatch.setattr("mlcore.hf.layer_by_layer", no_weights)
    outcome, ctx = run({"load": "layer-by-layer"})
    assert outcome.status == "failed"
    assert "32 sequences × 32 tokens × 2,048 vocabulary × 4 bytes = 8 MB, above the 1 MB a job may store" in (
        outcome.error
    )
    assert "use fewer training or held-out sequences or shorter ones (at most 4 sequences of 32 tokens fit)" in (
        outcome.error
    )
    assert not ctx.artifacts
