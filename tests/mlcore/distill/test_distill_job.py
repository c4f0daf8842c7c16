import json

import pytest
import torch

from mlcore.jobs import InMemoryContext, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.jobs.spec import JobError

# The zoo teacher (a trained 6.8M-parameter Qwen3-MoE) makes "the student moved towards it" measurable.
FAST = {"steps": 30, "train_windows": 24, "eval_windows": 8, "eval_every": 10, "seq_len": 32, "seed": 0}


def run(raw, files=None, ctx=None):
    kind = get_kind("distill")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_distils_the_zoo_teacher_into_a_student_that_moves_towards_it():
    outcome, ctx = run({"loss": "amid", "alpha": 0.0, "lam": 0.5, "lr": 5e-3})
    assert outcome.status == "succeeded", outcome.traceback
    heldout = ctx.metrics.series["heldout_forward_kl"]
    assert [step for step, _ in heldout] == [10, 20, 30]
    assert heldout[-1][1] < heldout[0][1]
    scalars = ctx.metrics.scalars
    assert scalars["nonfinite_loss_steps"] == 0 and scalars["nonfinite_grad_steps"] == 0
    assert 0 <= scalars["top1_agreement"] <= 1 and 0 < scalars["distinct_2"] <= 1
    assert scalars["student_ppl"] > scalars["teacher_ppl"] > 1
    assert scalars["grad_norm_max"] >= scalars["grad_norm_mean"] > 0
    assert scalars["compression"] > 10
    assert len(ctx.metrics.series["loss"]) == 30
    for chart in ("loss", "grad_norm", "heldout_kl"):
        spec = ctx.charts[chart]
        assert spec["title"] and spec["encoding"]["x"]["title"] and spec["encoding"]["y"]["title"]
    report = json.loads(ctx.artifacts["report.json"].path.read_text())
    assert report["loss"]["alpha"] == 0.0 and report["loss"]["detach_q"] is False
    assert "AB(a=0.2, b=0.7)(p‖r)" in report["loss"]["description"]


def test_the_saved_student_reloads_with_the_teachers_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    outcome, ctx = run({"loss": "fkl", "steps": 3, "eval_every": 0})
    assert outcome.status == "succeeded", outcome.traceback
    folder = ctx.artifacts["student"].path
    student = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    ids = torch.tensor([tokenizer("def f(x): return x")["input_ids"]])
    assert student(input_ids=ids).logits.shape[-1] == student.config.vocab_size == 2048
    assert student.config.hidden_size == 32
    # The student is offered to the team library as a dense Hugging Face LM.
    (registered,) = ctx.registrations
    assert registered.kind == "hf-lm" and registered.path == folder and registered.card["loss"] == "fkl"


def test_taid_under_bf16_autocast_on_uploaded_text_with_a_peaked_teacher_stays_finite(tmp_path):
    from pydoc_data.topics import topics

    text = tmp_path / "notes.txt"
    text.write_text("\n\n".join(topics[name] for name in sorted(topics)[:40]))
    raw = {"loss": "taid", "bf16": True, "teacher_temperature": 0.25, "steps": 10, "eval_every": 0}
    outcome, ctx = run(raw, {"text_file": [text]})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("notes" in line and "bf16" in line and "logits / 0.25" in line for line in ctx.lines)
    assert ctx.metrics.scalars["nonfinite_loss_steps"] == 0
    assert torch.isfinite(torch.tensor(ctx.metrics.scalars["forward_kl"]))


def test_heads_that_do_not_divide_the_student_width_are_refused():
    with pytest.raises(ValidationError) as caught:
        run({"student_hidden": 30, "student_heads": 4})
    assert "student_heads" in str(caught.value.errors)


def test_detaching_the_student_from_a_loss_that_only_sees_it_through_r_is_refused():
    with pytest.raises(ValidationError) as caught:
        run({"loss": "amid", "detach_q": True, "order": "p||r"})
    assert "detach_q" in str(caught.value.errors)


def test_a_sequence_longer_than_the_teachers_context_is_refused():
    outcome, ctx = run({"seq_len": 256, "steps": 1})
    assert outcome.status == "failed" and "context" in outcome.error
    assert not ctx.artifacts


def test_a_cancelled_job_stops_between_steps():
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, _ = run({"steps": 5}, ctx=ctx)
    assert outcome.status == "cancelled"


def test_a_teacher_that_is_not_an_moe_model_is_refused():
    with pytest.raises(JobError, match="hf-moe-lm"):
        run({"model": "zoo:stdlib-docs"})
