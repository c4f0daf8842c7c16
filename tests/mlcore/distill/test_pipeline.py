import pytest
import torch

from mlcore.distill.amid import PRESETS
from mlcore.distill.pipeline import (
    TeacherLogits,
    TrainConfig,
    build_student,
    distill,
    evaluate,
    sample_quality,
    student_config,
)


def _student(teacher, seed=0):
    return build_student(student_config(teacher.config, hidden=16, layers=1, intermediate=32, heads=2), seed=seed)


def test_the_cached_teacher_logits_equal_a_fresh_forward_pass(teacher, windows):
    train, _ = windows
    targets = TeacherLogits(teacher, train, batch_size=5)
    assert targets.cache is not None
    index = torch.tensor([7, 2])
    torch.testing.assert_close(targets(index), teacher(input_ids=train[index]).logits)


def test_a_student_evaluated_against_itself_has_zero_kl_and_full_agreement(teacher, windows):
    _, heldout = windows
    student = _student(teacher)
    metrics = evaluate(student, student, heldout)
    assert metrics["forward_kl"] < 1e-6 and metrics["reverse_kl"] < 1e-6
    assert metrics["top1_agreement"] == 1.0
    assert metrics["student_nll"] == pytest.approx(metrics["teacher_nll"])


def test_distillation_lowers_the_held_out_kl_and_is_reproducible(teacher, windows):
    train, heldout = windows
    before = evaluate(teacher, _student(teacher), heldout)["forward_kl"]
    config = TrainConfig(steps=25, batch_size=4, lr=1e-2, eval_every=0, seed=3)
    first = distill(teacher, _student(teacher), train, heldout, PRESETS["fkl"], config)
    second = distill(teacher, _student(teacher), train, heldout, PRESETS["fkl"], config)
    assert first.metrics["forward_kl"] < 0.9 * before
    assert first.loss == second.loss


def test_a_step_with_a_non_finite_loss_is_skipped_and_counted(teacher, windows):
    train, heldout = windows
    student = _student(teacher)
    start = [p.detach().clone() for p in student.parameters()]
    poisoned = TeacherLogits(teacher, train)
    poisoned.cache[:] = float("nan")
    result = distill(
        teacher, student, train, heldout, PRESETS["amid"], TrainConfig(steps=3, eval_every=0), targets=poisoned
    )
    assert result.nonfinite_loss_steps == 3 and result.metrics["nonfinite_loss_steps"] == 3
    assert all(torch.equal(a, b) for a, b in zip(start, student.parameters(), strict=True))


def test_logits_of_other_windows_are_refused(teacher, windows):
    train, heldout = windows
    with pytest.raises(ValueError, match="other windows"):
        distill(
            teacher,
            _student(teacher),
            train,
            heldout,
            PRESETS["fkl"],
            TrainConfig(steps=1, eval_every=0),
            targets=TeacherLogits(teacher, heldout),
        )


def test_student_samples_are_scored_by_the_teacher(teacher, windows):
    _, heldout = windows
    quality = sample_quality(teacher, _student(teacher), heldout[:, :4], new_tokens=8, seed=0)
    # A random student samples near-uniformly: the teacher's NLL is close to log V = 4.16 and bigrams rarely repeat.
    assert 3.0 < quality["sample_teacher_nll"] < 6.0
    assert quality["distinct_2"] > 0.8


def test_the_student_width_must_split_into_its_heads(teacher):
    with pytest.raises(ValueError, match="divisible"):
        student_config(teacher.config, hidden=30, layers=1, intermediate=32, heads=4)


def test_a_sharpened_teacher_is_more_peaked_and_keeps_its_argmax(teacher, windows):
    from mlcore.distill.pipeline import SharpenedTeacher

    ids = windows[1]
    plain = teacher(input_ids=ids).logits.softmax(-1)
    peaked = SharpenedTeacher(teacher, 0.25)(input_ids=ids).logits.softmax(-1)
    assert torch.equal(plain.argmax(-1), peaked.argmax(-1))
    assert (peaked.max(-1).values > plain.max(-1).values).all()
    with pytest.raises(ValueError, match="positive"):
        SharpenedTeacher(teacher, 0.0)
