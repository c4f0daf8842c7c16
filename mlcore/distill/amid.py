"""AMiD: the α-mixture assistant distribution for distillation (Shin et al., ICLR 2026, arXiv 2510.15982).

Between teacher p and student q sits an assistant r, the normalised power mean with exponent
s = (1 − α)/2 (§3, Eq. 4):

    r ∝ [λ·p^s + (1 − λ)·q^s]^(1/s)      for α ≠ 1,
    r ∝ p^λ · q^(1 − λ)                  for α = 1 (the s → 0 limit),

so α = −1 is the arithmetic mixture (skew KL of DistiLLM, GKD's JSD), α = 1 the geometric one
(TAID) and α = 3 the harmonic one. Unlike the reference code, α > 1 is the power mean too, not a
silent fallback to the geometric mixture. Everything is computed in log space:
log r̃ = (1/s)·logsumexp(log λ + s·log p, log(1 − λ) + s·log q), then log r = log_softmax(log r̃).
Log-probabilities are clamped to :data:`LOG_FLOOR` first, so exact zeros never produce inf − inf.
The floor can be switched off (``LossConfig(log_floor=None)``) only to measure what it protects
against: the distillation benchmark's stability study counts the steps that then turn non-finite.

The loss is a divergence D between r and p or q, in one of four argument orders (default D(p‖r)):
forward KL or the α-β divergence (Cichocki et al.; ABKD's (a, b) = (0.2, 0.7)):

    D_AB(P‖Q) = −1/(ab) · Σ_y [P^a Q^b − a/(a+b)·P^(a+b) − b/(a+b)·Q^(a+b)].

Both vanish exactly when their arguments agree, and r = p ⇔ q = p for 0 ≤ λ < 1, r = q ⇔ q = p for
0 < λ ≤ 1: the optimum stays q = p for every α. The baselines are members of the same family
(:data:`PRESETS`): KD = KL(p‖r) with λ = 0 (r = q), RKL = KL(r‖p) with λ = 0, skew KL =
KL(p‖r) with α = −1, λ = 0.1, TAID-like = KL(r‖q) with α = 1, λ ramped 0.4 → 1 and q detached in r,
ABKD = D_AB(p‖r) with λ = 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

#: Log-probabilities are clamped here: exp(−1e4) is 0 in every float type, yet s·LOG_FLOOR stays finite
#: in fp32 and bf16 for |s| ≤ 1e30, so a zero probability never turns into inf − inf or 0·inf.
LOG_FLOOR = -1e4
#: Within this distance of α = 1 the exact geometric formula is used: 1/s would amplify rounding.
GEOMETRIC_EPS = 1e-4

Divergence = Literal["kl", "ab"]
Order = Literal["p||r", "r||p", "q||r", "r||q"]
ORDERS: tuple[Order, ...] = ("p||r", "r||p", "q||r", "r||q")


def _floored(log_x: torch.Tensor, floor: float | None) -> torch.Tensor:
    """``log_x`` clamped to ``floor`` (unchanged when ``floor`` is None: the study-only unprotected loss)."""
    return log_x if floor is None else log_x.clamp(min=floor)


def log_assistant(
    log_p: torch.Tensor, log_q: torch.Tensor, alpha: float, lam: float, *, floor: float | None = LOG_FLOOR
) -> torch.Tensor:
    """log r over the last dimension: the normalised α-mixture of p (weight λ) and q (§3, Eq. 4)."""
    import torch

    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"λ must lie in [0, 1], got {lam}")
    log_p = _floored(log_p, floor)
    log_q = _floored(log_q, floor)
    # The endpoints are exact for every α (log 0 = −inf would otherwise enter the logsumexp).
    if lam == 1.0:
        return torch.log_softmax(log_p, dim=-1)
    if lam == 0.0:
        return torch.log_softmax(log_q, dim=-1)
    if abs(alpha - 1.0) < GEOMETRIC_EPS:
        unnormalised = lam * log_p + (1.0 - lam) * log_q
    else:
        s = (1.0 - alpha) / 2.0
        unnormalised = torch.logaddexp(math.log(lam) + s * log_p, math.log(1.0 - lam) + s * log_q) / s
    return torch.log_softmax(unnormalised, dim=-1)


def kl(log_a: torch.Tensor, log_b: torch.Tensor, *, floor: float | None = LOG_FLOOR) -> torch.Tensor:
    """KL(A‖B) = Σ_y A (log A − log B) over the last dimension, with 0·log 0 = 0 (given the floor)."""
    a = log_a.exp()
    return (a * (_floored(log_a, floor) - _floored(log_b, floor))).sum(-1)


def ab_divergence(
    log_a: torch.Tensor, log_b: torch.Tensor, a: float = 0.2, b: float = 0.7, *, floor: float | None = LOG_FLOOR
) -> torch.Tensor:
    """The α-β divergence D_AB(A‖B) over the last dimension (ABKD, Eq. 6; needs a, b, a + b ≠ 0)."""
    if a == 0 or b == 0 or a + b == 0:
        raise ValueError(f"the α-β divergence needs a, b and a + b non-zero, got a={a}, b={b}")
    log_a, log_b = _floored(log_a, floor), _floored(log_b, floor)
    cross = (a * log_a + b * log_b).exp()
    own = ((a + b) * log_a).exp() * (a / (a + b)) + ((a + b) * log_b).exp() * (b / (a + b))
    return -(cross - own).sum(-1) / (a * b)


@dataclass(frozen=True)
class LossConfig:
    """One distillation objective: D(·‖·) between the assistant r and p or q.

    ``lam_end`` ramps λ linearly from ``lam`` to ``lam_end`` over training (TAID); ``detach_q``
    stops the gradient through q inside r (TAID does, the AMiD reference code does not).
    ``log_floor`` is where log-probabilities are clamped (card §2, step 1); ``None`` switches the
    clamp off, for stability studies only: a teacher with exact zeros then makes the loss NaN.
    """

    divergence: Divergence = "ab"
    order: Order = "p||r"
    alpha: float = 0.5
    lam: float = 0.5
    lam_end: float | None = None
    detach_q: bool = False
    ab: tuple[float, float] = (0.2, 0.7)
    log_floor: float | None = LOG_FLOOR

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"unknown argument order {self.order!r}; choose one of {', '.join(ORDERS)}")
        if self.divergence not in ("kl", "ab"):
            raise ValueError(f"unknown divergence {self.divergence!r}; choose 'kl' or 'ab'")
        if self.detach_q and "q" not in self.order:
            raise ValueError(
                f"with q detached inside r, D({self.order.replace('||', '‖')}) does not depend on the student; "
                "use the order 'q||r' or 'r||q', or keep q attached"
            )
        for value in (self.lam, self.lam_end):
            if value is not None and not 0.0 <= value <= 1.0:
                raise ValueError(f"λ must lie in [0, 1], got {value}")

    def lam_at(self, progress: float) -> float:
        """λ at ``progress`` ∈ [0, 1] of training."""
        if self.lam_end is None:
            return self.lam
        return self.lam + (self.lam_end - self.lam) * min(max(progress, 0.0), 1.0)

    def describe(self) -> str:
        lam = f"{self.lam:g}" if self.lam_end is None else f"{self.lam:g}→{self.lam_end:g}"
        div = "KL" if self.divergence == "kl" else f"AB(a={self.ab[0]:g}, b={self.ab[1]:g})"
        detach = ", q detached in r" if self.detach_q else ""
        floor = ", no log floor" if self.log_floor is None else ""
        return f"{div}({self.order.replace('||', '‖')}), α={self.alpha:g}, λ={lam}{detach}{floor}"


#: The baselines of the card (§3) and AMiD's defaults, as members of one family.
PRESETS: dict[str, LossConfig] = {
    "fkl": LossConfig(divergence="kl", order="p||r", lam=0.0),
    "rkl": LossConfig(divergence="kl", order="r||p", lam=0.0),
    "skew-kl": LossConfig(divergence="kl", order="p||r", alpha=-1.0, lam=0.1),
    "taid": LossConfig(divergence="kl", order="r||q", alpha=1.0, lam=0.4, lam_end=1.0, detach_q=True),
    "abkd": LossConfig(divergence="ab", order="p||r", lam=0.0),
    "amid": LossConfig(divergence="ab", order="p||r", alpha=0.5, lam=0.5),
}


def amid_config(alpha: float, lam: float, **overrides: object) -> LossConfig:
    """AMiD with the card's defaults (D_AB(p‖r), q not detached) at (α, λ)."""
    return replace(PRESETS["amid"], alpha=alpha, lam=lam, **overrides)  # type: ignore[arg-type]


def token_divergence(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, config: LossConfig, *, progress: float = 0.0
) -> torch.Tensor:
    """The per-token loss ``[...]`` for logits ``[..., V]``; the teacher never receives a gradient.

    Computed in the logits' dtype (so bf16 autocast is exercised, not hidden by an upcast).
    """
    log_p = teacher_logits.detach().log_softmax(-1)
    log_q = student_logits.log_softmax(-1)
    lam = config.lam_at(progress)
    floor = config.log_floor
    log_r = log_assistant(log_p, log_q.detach() if config.detach_q else log_q, config.alpha, lam, floor=floor)
    first, second = {"p||r": (log_p, log_r), "r||p": (log_r, log_p), "q||r": (log_q, log_r), "r||q": (log_r, log_q)}[
        config.order
    ]
    if config.divergence == "kl":
        return kl(first, second, floor=floor)
    return ab_divergence(first, second, *config.ab, floor=floor)


def distillation_loss(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    config: LossConfig,
    *,
    progress: float = 0.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The mean per-token loss over the positions where ``mask`` is true (all when ``None``)."""
    per_token = token_divergence(student_logits, teacher_logits, config, progress=progress)
    if mask is None:
        return per_token.mean()
    return (per_token * mask).sum() / mask.sum().clamp(min=1)
