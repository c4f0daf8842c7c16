import pytest
import torch

from mlcore.distill.amid import (
    PRESETS,
    LossConfig,
    ab_divergence,
    amid_config,
    distillation_loss,
    kl,
    log_assistant,
)


def _pair(seed: int = 0, vocab: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, vocab, generator=g).log_softmax(-1), (2 * torch.randn(4, vocab, generator=g)).log_softmax(-1)


def test_alpha_minus_one_is_the_arithmetic_mixture():
    log_p, log_q = _pair()
    r = log_assistant(log_p, log_q, alpha=-1.0, lam=0.3).exp()
    torch.testing.assert_close(r, 0.3 * log_p.exp() + 0.7 * log_q.exp())


def test_alpha_one_is_the_normalised_geometric_mixture():
    log_p, log_q = _pair()
    r = log_assistant(log_p, log_q, alpha=1.0, lam=0.3)
    torch.testing.assert_close(r, (0.3 * log_p + 0.7 * log_q).log_softmax(-1))


@pytest.mark.parametrize("side", [-1, 1])
def test_the_power_mean_approaches_the_geometric_mixture_from_both_sides_of_alpha_one(side):
    log_p, log_q = _pair()
    geometric = log_assistant(log_p, log_q, alpha=1.0, lam=0.6).exp()
    gaps = [
        (log_assistant(log_p, log_q, alpha=1.0 + side * d, lam=0.6).exp() - geometric).abs().max() for d in (0.1, 0.01)
    ]
    assert gaps[1] < gaps[0] / 5
    assert gaps[1] < 2e-3


def test_alpha_three_is_the_normalised_harmonic_mean():
    log_p, log_q = _pair()
    p, q = log_p.exp(), log_q.exp()
    harmonic = 1 / (0.25 / p + 0.75 / q)
    torch.testing.assert_close(
        log_assistant(log_p, log_q, alpha=3.0, lam=0.25).exp(), harmonic / harmonic.sum(-1, True)
    )


@pytest.mark.parametrize("alpha", [-1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
def test_lambda_one_gives_the_teacher_and_lambda_zero_the_student(alpha):
    log_p, log_q = _pair()
    torch.testing.assert_close(log_assistant(log_p, log_q, alpha, 1.0), log_p)
    torch.testing.assert_close(log_assistant(log_p, log_q, alpha, 0.0), log_q)


@pytest.mark.parametrize("alpha", [-1.0, 0.0, 0.5, 1.0, 3.0])
def test_the_assistant_is_a_distribution(alpha):
    log_p, log_q = _pair(1)
    r = log_assistant(log_p, log_q, alpha, 0.4).exp()
    torch.testing.assert_close(r.sum(-1), torch.ones(4))
    assert (r >= 0).all()


def test_a_higher_alpha_puts_less_mass_where_only_one_side_has_it():
    # p and q disagree on the mode; the arithmetic mixture covers both, the harmonic one neither.
    log_p = torch.tensor([[0.9, 0.05, 0.05]]).log()
    log_q = torch.tensor([[0.05, 0.9, 0.05]]).log()
    shared = [log_assistant(log_p, log_q, alpha, 0.5).exp()[0, 2].item() for alpha in (-1.0, 0.0, 1.0, 3.0)]
    assert shared == sorted(shared)


def test_the_divergences_vanish_only_for_equal_arguments():
    log_p, log_q = _pair()
    assert kl(log_p, log_p).abs().max() < 1e-6
    assert ab_divergence(log_p, log_p).abs().max() < 1e-6
    assert (kl(log_p, log_q) > 1e-3).all()
    assert (ab_divergence(log_p, log_q) > 1e-3).all()


def test_the_alpha_beta_divergence_refuses_a_zero_parameter():
    log_p, _ = _pair()
    with pytest.raises(ValueError, match="non-zero"):
        ab_divergence(log_p, log_p, a=0.0, b=0.7)


CONFIGS = [
    *PRESETS.values(),
    *(amid_config(a, lam) for a in (-0.5, 0.0, 0.5, 2.0) for lam in (0.1, 0.9)),
    amid_config(0.5, 0.5, divergence="kl"),
    *(amid_config(0.0, 0.5, order=order) for order in ("r||p", "q||r", "r||q")),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
def test_the_loss_is_zero_with_zero_gradient_when_the_student_equals_the_teacher(config):
    teacher = torch.randn(3, 5, 40)
    student = teacher.clone().requires_grad_(True)
    loss = distillation_loss(student, teacher, config, progress=0.5)
    loss.backward()
    assert abs(loss.item()) < 1e-5
    assert student.grad.abs().max() < 1e-5


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
def test_the_loss_is_positive_and_pulls_the_student_towards_the_teacher(config):
    g = torch.Generator().manual_seed(3)
    teacher = torch.randn(2, 4, 30, generator=g) * 3
    student = torch.randn(2, 4, 30, generator=g).requires_grad_(True)
    loss = distillation_loss(student, teacher, config, progress=0.5)
    loss.backward()
    assert loss.item() > 0
    with torch.no_grad():
        stepped = student - 0.05 * student.grad
    assert (
        kl(teacher.log_softmax(-1), stepped.log_softmax(-1)).mean()
        < kl(teacher.log_softmax(-1), student.log_softmax(-1)).mean()
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.describe())
def test_exact_zeros_in_the_teacher_give_finite_losses_and_gradients(config, dtype):
    g = torch.Generator().manual_seed(4)
    teacher = torch.randn(2, 6, 64, generator=g) * 8
    teacher[..., 10:] = float("-inf")  # the teacher gives most of the vocabulary probability exactly 0
    student = (torch.randn(2, 6, 64, generator=g) * 8).to(dtype).requires_grad_(True)
    loss = distillation_loss(student, teacher.to(dtype), config, progress=0.3)
    loss.backward()
    assert torch.isfinite(loss)
    assert torch.isfinite(student.grad).all()


def test_bf16_autocast_keeps_the_loss_finite_with_a_peaked_teacher():
    teacher = torch.full((4, 100), -30.0)
    teacher[:, 0] = 30.0
    head = torch.nn.Linear(16, 100)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = head(torch.randn(4, 16))
        loss = distillation_loss(logits, teacher.to(logits.dtype), PRESETS["amid"])
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(head.weight.grad).all()


def test_taid_ramps_lambda_and_detaches_the_student_inside_the_assistant():
    taid = PRESETS["taid"]
    assert (taid.lam_at(0.0), taid.lam_at(0.5), taid.lam_at(1.0)) == (0.4, 0.7, 1.0)
    teacher, student = torch.randn(2, 20), torch.randn(2, 20, requires_grad=True)
    # Detaching q in r changes the gradient (only the second argument of KL(r‖q) then carries it).
    grads = []
    for detach in (True, False):
        student.grad = None
        distillation_loss(
            student, teacher, LossConfig(divergence="kl", order="r||q", alpha=1.0, lam=0.5, detach_q=detach)
        ).backward()
        grads.append(student.grad.clone())
    assert not torch.allclose(grads[0], grads[1])


def test_a_lambda_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        LossConfig(lam=1.5)


def test_detaching_q_where_it_is_the_only_path_to_the_student_is_refused():
    with pytest.raises(ValueError, match="does not depend on the student"):
        amid_config(0.5, 0.5, detach_q=True)
    assert amid_config(0.5, 0.5, detach_q=True, order="r||q").detach_q
