"""The stability measures of the distillation study fire on constructed unstable runs, and stay quiet on stable ones."""

from dataclasses import replace

import pytest
import torch

from mlcore.distill.amid import PRESETS, distillation_loss
from mlcore.distill.pipeline import (
    TeacherLogits,
    TrainConfig,
    build_student,
    distill,
    gradient_spikes,
    student_config,
)


def _student(teacher):
    return build_student(student_config(teacher.config, hidden=16, layers=1, intermediate=32, heads=2), seed=0)


def test_a_gradient_norm_ten_times_the_median_is_a_spike_and_steady_norms_are_not():
    steady = [1.0, 1.2, 0.9, 1.1, 1.0, 0.8]
    assert gradient_spikes(steady) == 0
    assert gradient_spikes([*steady, 15.0, 1.0]) == 1
    assert gradient_spikes([*steady, 9.0, 1.0]) == 0  # below 10× the median
    assert gradient_spikes([*steady, 9.0, 1.0], factor=5.0) == 1
    # A skipped step's NaN norm is counted elsewhere (non-finite steps), not as a spike.
    assert gradient_spikes([*steady, float("nan"), 30.0]) == 1
    assert gradient_spikes([]) == 0


def test_a_spike_factor_of_one_or_less_is_refused():
    with pytest.raises(ValueError, match="above 1"):
        gradient_spikes([1.0, 2.0], factor=1.0)


def test_a_few_extremely_peaked_teacher_windows_make_reverse_kl_spike(teacher, windows):
    train, heldout = windows
    config = TrainConfig(steps=12, batch_size=1, lr=1e-3, eval_every=0)
    steady = distill(teacher, _student(teacher), train, heldout, PRESETS["rkl"], config)
    assert gradient_spikes([v for _, v in steady.grad_norm]) == 0
    # Two of twelve windows come from a teacher 200× sharper: RKL's gradient scales with log p there.
    peaked = TeacherLogits(teacher, train)
    peaked.cache[[3, 8]] *= 200.0
    unstable = distill(teacher, _student(teacher), train, heldout, PRESETS["rkl"], config, targets=peaked)
    assert gradient_spikes([v for _, v in unstable.grad_norm]) == 2


def test_without_the_log_floor_a_teacher_with_exact_zeros_makes_every_kl_step_non_finite(teacher, windows):
    train, heldout = windows
    zeros = TeacherLogits(teacher, train)
    zeros.cache[..., 32:] = float("-inf")  # the teacher gives half the vocabulary probability exactly 0
    config = TrainConfig(steps=4, batch_size=4, eval_every=0)
    floored = distill(teacher, _student(teacher), train, heldout, PRESETS["fkl"], config, targets=zeros)
    unfloored = distill(
        teacher, _student(teacher), train, heldout, replace(PRESETS["fkl"], log_floor=None), config, targets=zeros
    )
    assert floored.nonfinite_loss_steps == 0
    assert unfloored.nonfinite_loss_steps == 4


def test_the_floor_changes_nothing_while_every_log_probability_lies_above_it():
    g = torch.Generator().manual_seed(2)
    teacher, student = torch.randn(3, 5, 40, generator=g) * 4, torch.randn(3, 5, 40, generator=g)
    for name in ("fkl", "rkl", "skew-kl", "taid", "abkd", "amid"):
        floored = distillation_loss(student, teacher, PRESETS[name], progress=0.3)
        unfloored = distillation_loss(student, teacher, replace(PRESETS[name], log_floor=None), progress=0.3)
        assert torch.equal(floored, unfloored), name


def test_a_loss_without_the_floor_says_so():
    assert replace(PRESETS["amid"], log_floor=None).describe().endswith("no log floor")
    assert "floor" not in PRESETS["amid"].describe()


def test_fp16_runs_the_student_under_fp16_autocast_and_excludes_bf16(teacher, windows):
    train, heldout = windows
    assert TrainConfig(eval_every=0, fp16=True).autocast_dtype == torch.float16
    assert TrainConfig(eval_every=0).autocast_dtype is None
    with pytest.raises(ValueError, match="bf16 or fp16"):
        TrainConfig(eval_every=0, fp16=True, bf16=True)
    config = TrainConfig(steps=3, batch_size=4, eval_every=0)
    fp32 = distill(teacher, _student(teacher), train, heldout, PRESETS["fkl"], config)
    fp16 = distill(teacher, _student(teacher), train, heldout, PRESETS["fkl"], replace(config, fp16=True))
    first32, first16 = fp32.loss[0][1], fp16.loss[0][1]
    assert first16 != first32 and first16 == pytest.approx(first32, rel=1e-2)  # rounded, not broken
