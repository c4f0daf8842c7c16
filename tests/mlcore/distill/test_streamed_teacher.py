"""A teacher larger than memory: logits stored from one layer-by-layer pass are the whole model's,
distillation from them gives the whole-model run's losses and metrics, samples are scored by a
second pass, and the plan streams when the whole teacher does not fit."""

from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.distill.amid import PRESETS
from mlcore.distill.pipeline import (
    SharpenedTeacher,
    TeacherLogits,
    TrainConfig,
    build_student,
    distill,
    evaluate,
    sample_quality,
    sample_student,
    student_config,
)
from mlcore.distill.streamed_teacher import (
    LogitsTooLarge,
    check_storable,
    plan_teacher_load,
    score_samples,
    store_teacher_logits,
)
from mlcore.hf import HFModelError, layer_by_layer, load_model

VOCAB = 64


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen3-MoE teacher saved as a Hugging Face checkpoint (float32 safetensors)."""
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config

    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", vocab_size=VOCAB, max_position_embeddings=32, eos_token_id=0, pad_token_id=0)
    path = tmp_path_factory.mktemp("teacher") / "qwen3-moe"
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def teacher(folder: Path) -> Any:
    return load_model(folder).requires_grad_(False)


@pytest.fixture(scope="module")
def windows() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    # 20 training windows: two pass batches of 16 and 4, as TeacherLogits batches them.
    return torch.randint(0, VOCAB, (20, 16), generator=g), torch.randint(0, VOCAB, (6, 16), generator=g)


def stored(folder: Path, windows: tuple[torch.Tensor, torch.Tensor], path: Path, **kwargs: Any) -> list[Any]:
    with layer_by_layer(folder) as model:
        return store_teacher_logits(model, list(windows), path, **kwargs)


def _student(teacher: Any) -> Any:
    return build_student(student_config(teacher.config, hidden=16, layers=1, intermediate=32, heads=2), seed=0)


def test_logits_stored_from_one_layer_by_layer_pass_equal_the_whole_teachers(folder, teacher, windows, tmp_path):
    train, heldout = windows
    train_logits, heldout_logits = stored(folder, windows, tmp_path / "logits.f32")
    assert train_logits.windows is train and heldout_logits.windows is heldout
    index = torch.tensor([19, 3, 7])
    whole = TeacherLogits(teacher, train)
    torch.testing.assert_close(train_logits(index), whole(index), rtol=0, atol=1e-5)
    with torch.no_grad():
        expected = teacher(input_ids=heldout).logits
    torch.testing.assert_close(heldout_logits(torch.arange(len(heldout))), expected, rtol=0, atol=1e-5)
    assert (tmp_path / "logits.f32").stat().st_size == (len(train) + len(heldout)) * 16 * VOCAB * 4


def test_a_sharpened_teacher_is_stored_divided_by_its_temperature(folder, teacher, windows, tmp_path):
    train, _ = windows
    (train_logits, _) = stored(folder, windows, tmp_path / "logits.f32", temperature=0.25)
    index = torch.arange(len(train))
    torch.testing.assert_close(
        train_logits(index), TeacherLogits(SharpenedTeacher(teacher, 0.25), train)(index), rtol=0, atol=4e-5
    )


def test_distilling_from_stored_logits_gives_the_whole_teachers_losses_and_metrics(folder, teacher, windows, tmp_path):
    train, heldout = windows
    train_logits, heldout_logits = stored(folder, windows, tmp_path / "logits.f32")
    config = TrainConfig(steps=12, batch_size=4, lr=1e-2, eval_every=5, seed=3)
    whole = distill(teacher, _student(teacher), train, heldout, PRESETS["amid"], config)
    streamed = distill(
        None,
        _student(teacher),
        train,
        heldout,
        PRESETS["amid"],
        config,
        targets=train_logits,
        heldout_targets=heldout_logits,
    )
    assert [s for s, _ in streamed.loss] == [s for s, _ in whole.loss]
    assert [v for _, v in streamed.loss] == pytest.approx([v for _, v in whole.loss], rel=1e-5, abs=1e-7)
    assert [s for s, _ in streamed.evals] == [s for s, _ in whole.evals] == [5, 10, 12]
    for key, value in whole.metrics.items():
        assert streamed.metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key


def test_held_out_metrics_from_stored_logits_include_the_teachers_nll(folder, teacher, windows, tmp_path):
    _, heldout_logits = stored(folder, windows, tmp_path / "logits.f32")
    student = _student(teacher)
    whole = evaluate(teacher, student, windows[1])
    streamed = evaluate(None, student, windows[1], targets=heldout_logits)
    assert streamed == pytest.approx(whole, rel=1e-6)
    assert streamed["teacher_nll"] > 0 and streamed["forward_kl"] > 0


def test_student_samples_scored_in_a_second_pass_match_the_whole_teachers_score(folder, teacher, windows):
    student = _student(teacher)
    prompts = windows[1][:, :4]
    whole = sample_quality(teacher, student, prompts, new_tokens=8, seed=0)
    ids = sample_student(student, prompts, new_tokens=8, seed=0)
    with layer_by_layer(folder) as model:
        nll = score_samples(model, ids, 4, batch_size=4)
    assert nll.shape == (len(prompts), 8)
    assert float(nll.mean()) == pytest.approx(whole["sample_teacher_nll"], rel=1e-6)


def test_distilling_without_a_teacher_needs_the_logits_of_both_sets(folder, windows, tmp_path):
    train, heldout = windows
    train_logits, _ = stored(folder, windows, tmp_path / "logits.f32")
    student = build_student(
        student_config(load_model(folder).config, hidden=16, layers=1, intermediate=32, heads=2), seed=0
    )
    with pytest.raises(ValueError, match="both the training and the held-out"):
        distill(None, student, train, heldout, PRESETS["fkl"], TrainConfig(steps=1, eval_every=0), targets=train_logits)
    with pytest.raises(ValueError, match="other windows"):
        distill(
            None,
            student,
            train,
            heldout,
            PRESETS["fkl"],
            TrainConfig(steps=1, eval_every=0),
            targets=train_logits,
            heldout_targets=train_logits,
        )


def test_stored_logits_beyond_the_cap_or_the_disk_are_refused_with_their_size_and_what_fits():
    size = check_storable(320, 64, 50_304, free=1 << 40)
    assert size == 320 * 64 * 50_304 * 4
    with pytest.raises(LogitsTooLarge, match=r"320 sequences × 64 tokens × 50,304 vocabulary × 4 bytes = 3\.8 GB, "):
        check_storable(320, 64, 50_304, free=1 << 40, cap=2 << 30)
    with pytest.raises(LogitsTooLarge, match=r"above the 2\.0 GB a job may store; .*at most 166 sequences of 64"):
        check_storable(320, 64, 50_304, free=1 << 40, cap=2 << 30)
    with pytest.raises(LogitsTooLarge, match=r"more than the 1\.0 GB free on the disk; .*at most 83 sequences"):
        check_storable(320, 64, 50_304, free=1 << 30)
    with pytest.raises(LogitsTooLarge, match="not one sequence of 64 tokens fits"):
        check_storable(320, 64, 50_304, free=1 << 20)


def test_the_plan_streams_the_teacher_when_the_worker_cannot_hold_it_whole():
    from mlcore.hf.memory import USABLE_SHARE
    from mlcore.zoo.committed import CHECKPOINTS

    # The zoo teacher (6.8M parameters): its layers, not the carried activations, dominate.
    folder = CHECKPOINTS / "moe-lm-tiny"
    shape = {"device": "cpu", "windows": 320, "seq_len": 64, "batch_size": 8, "vocab": 2048}
    mode, needs = plan_teacher_load(folder, "auto", available=1 << 40, **shape)
    assert mode == "whole" and needs.layer_by_layer < needs.whole
    between = int((needs.layer_by_layer + needs.whole) / 2 / USABLE_SHARE)
    assert plan_teacher_load(folder, "auto", available=between, **shape)[0] == "layer-by-layer"
    assert plan_teacher_load(folder, "layer-by-layer", available=1 << 40, **shape)[0] == "layer-by-layer"
    with pytest.raises(HFModelError, match=r"whole and this worker has .*; layer by layer it needs"):
        plan_teacher_load(folder, "whole", available=between, **shape)
    with pytest.raises(HFModelError, match="Even layer by layer"):
        plan_teacher_load(folder, "auto", available=1 << 10, **shape)


class _Killed(Exception):
    """Stands in for the worker being killed after a committed layer."""


def test_a_teacher_pass_killed_after_a_layer_resumes_there_with_the_same_logits(folder, windows, tmp_path):
    whole = stored(folder, windows, tmp_path / "whole.f32")

    def die(done: int, total: int) -> None:
        if done == 1:
            raise _Killed

    with pytest.raises(_Killed):
        stored(folder, windows, tmp_path / "resumed.f32", resume_dir=tmp_path / "resume", on_layer=die)
    layers: list[int] = []
    resumed = stored(
        folder,
        windows,
        tmp_path / "resumed.f32",
        resume_dir=tmp_path / "resume",
        on_layer=lambda done, total: layers.append(done),
        on_resume=lambda done, total: layers.append(-done),
    )
    assert layers[0] == -1 and 1 not in layers[1:], layers
    for a, b in zip(whole, resumed, strict=True):
        index = torch.arange(len(a.windows))
        assert torch.equal(a(index), b(index))
