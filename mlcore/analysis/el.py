"""Efficiency Leverage (Tian et al., "Towards Greater Leverage: Scaling Laws for Efficient
Mixture-of-Experts Language Models", arXiv 2507.17702, ICLR 2026; Ling 2.0 report §2.3.2).

EL = C_dense / C_MoE, the ratio of training compute a dense model and an MoE need for the same
loss. The unified law (paper Eq. 13):

    EL(A, G, C) = Â^(α + γ·(ln G)² + β·ln G),   α = a + d·ln C,

with Â a saturating transform of the activation input x (Clark et al. 2022):

    1/Â = 1/(x − 1 + (1/x_start − 1/x_max)⁻¹) + 1/x_max.

**Sign convention** (explicit, see ``ELConstants.input``): by default x is the *sparsity* 1/A ≥ 1,
so Â ≥ 1 with Â = 1 for a dense model (x_start = 1), and positive exponents make EL grow as A
falls and (d > 0) as compute grows. Feeding A itself (``input="activation"``) flips the sign of
every fitted exponent; the data decide, and ``tests/mlcore/analysis/test_el.py`` checks both.
The best granularity is ln G* = −β/(2γ), which exists only when γ < 0.

Fitting (paper §4): log EL is linear in (a, d, β, γ) for a fixed transform, so the robust fit
minimises the Huber loss of the log-EL residuals (BFGS, with restarts); confidence intervals
come from a basic bootstrap over runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

Variant = Literal["full", "no-granularity", "activation-only", "naive"]
VARIANTS: tuple[str, ...] = ("naive", "activation-only", "no-granularity", "full")
PARAMETERS: tuple[str, ...] = ("a", "d", "beta", "gamma")
#: Which parameters each law variant fits (the rest are 0).
_FITTED: dict[str, tuple[str, ...]] = {
    "activation-only": ("a",),
    "no-granularity": ("a", "d"),
    "full": PARAMETERS,
}


@dataclass(frozen=True)
class ELConstants:
    a: float
    d: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0
    x_start: float = 1.0
    x_max: float = 1024.0
    input: Literal["sparsity", "activation"] = "sparsity"
    #: Where the constants come from ("fitted on ...", "user-supplied"): shown with every prediction.
    source: str = ""

    @property
    def best_granularity(self) -> float | None:
        """G* = exp(−β/(2γ)), or ``None`` when γ ≥ 0 (no interior optimum)."""
        if self.gamma >= 0:
            return None
        return math.exp(-self.beta / (2 * self.gamma))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "best_granularity": self.best_granularity}


def transformed(x: np.ndarray | float, x_start: float, x_max: float) -> np.ndarray:
    """Â: the saturating transform of Clark et al. (2022), Â(1) = x_start, Â(∞) = x_max."""
    x = np.asarray(x, dtype=np.float64)
    offset = 1.0 / (1.0 / x_start - 1.0 / x_max)
    return 1.0 / (1.0 / (x - 1.0 + offset) + 1.0 / x_max)


def _log_a_hat(activation: np.ndarray, c: ELConstants) -> np.ndarray:
    activation = np.asarray(activation, dtype=np.float64)
    if np.any((activation <= 0) | (activation > 1)):
        raise ValueError("activation ratios must be in (0, 1]")
    x = 1.0 / activation if c.input == "sparsity" else activation
    return np.log(transformed(x, c.x_start, c.x_max))


def _design(activation: np.ndarray, granularity: np.ndarray, compute: np.ndarray, c: ELConstants) -> np.ndarray:
    """[N, 4]: ln Â · (1, ln C, ln G², ln G) — log EL is this times (a, d, γ, β)."""
    log_g = np.log(np.asarray(granularity, dtype=np.float64))
    log_c = np.log(np.asarray(compute, dtype=np.float64))
    base = _log_a_hat(activation, c)
    return base[:, None] * np.stack([np.ones_like(log_c), log_c, log_g**2, log_g], axis=1)


def log_leverage(activation: Any, granularity: Any, compute: Any, c: ELConstants) -> np.ndarray:
    """ln EL(A, G, C) (Eq. 13)."""
    activation = np.atleast_1d(np.asarray(activation, dtype=np.float64))
    shape = np.broadcast_shapes(activation.shape, np.shape(granularity), np.shape(compute))
    a_, g_, c_ = (
        np.broadcast_to(np.asarray(v, dtype=np.float64), shape).reshape(-1) for v in (activation, granularity, compute)
    )
    coefficients = np.array([c.a, c.d, c.gamma, c.beta])
    return (_design(a_, g_, c_, c) @ coefficients).reshape(shape)


def leverage(activation: Any, granularity: Any, compute: Any, c: ELConstants) -> np.ndarray:
    return np.exp(log_leverage(activation, granularity, compute, c))


def huber(residuals: np.ndarray, delta: float) -> np.ndarray:
    r = np.abs(residuals)
    return np.where(r <= delta, 0.5 * r**2, delta * (r - 0.5 * delta))


@dataclass
class Fit:
    variant: str
    constants: ELConstants
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    best_granularity_interval: tuple[float, float] | None = None
    loss: float = 0.0
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "constants": self.constants.to_json(),
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "best_granularity_interval": list(self.best_granularity_interval)
            if self.best_granularity_interval
            else None,
            "huber_loss": self.loss,
            "runs": self.runs,
        }


def _minimise(
    design: np.ndarray, target: np.ndarray, delta: float, restarts: int, seed: int
) -> tuple[np.ndarray, float]:
    from scipy.optimize import minimize

    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        r = design @ theta - target
        clipped = np.clip(r, -delta, delta)  # dHuber/dr
        return float(huber(r, delta).mean()), design.T @ clipped / len(r)

    rng = np.random.default_rng(seed)
    start = np.linalg.lstsq(design, target, rcond=None)[0]
    best: tuple[np.ndarray, float] | None = None
    for attempt in range(max(1, restarts)):
        x0 = start if attempt == 0 else start + rng.normal(scale=0.5, size=start.shape)
        result = minimize(objective, x0, jac=True, method="BFGS", options={"gtol": 1e-12, "maxiter": 2000})
        if best is None or result.fun < best[1]:
            best = (result.x, float(result.fun))
    assert best is not None
    return best


def fit_law(
    activation: Sequence[float],
    granularity: Sequence[float],
    compute: Sequence[float],
    leverage_observed: Sequence[float],
    *,
    variant: Variant = "full",
    delta: float = 0.05,
    x_start: float = 1.0,
    x_max: float = 1024.0,
    input: Literal["sparsity", "activation"] = "sparsity",
    restarts: int = 4,
    resamples: int = 200,
    seed: int = 0,
    source: str = "",
) -> Fit:
    """Fit one law variant to observed EL by Huber regression on ln EL, with bootstrap 95% CIs."""
    if variant == "naive":
        return Fit("naive", ELConstants(a=1.0, x_start=1.0, x_max=1e12, input="sparsity", source="EL = 1/A"))
    shape = ELConstants(a=0.0, x_start=x_start, x_max=x_max, input=input)
    A, G, C = (np.asarray(v, dtype=np.float64) for v in (activation, granularity, compute))
    target = np.log(np.asarray(leverage_observed, dtype=np.float64))
    if np.any(~np.isfinite(target)):
        raise ValueError("every observed efficiency leverage must be positive and finite")
    names = _FITTED[variant]
    columns = [("a", "d", "gamma", "beta").index(n) for n in names]
    design = _design(A, G, C, shape)[:, columns]
    if len(target) < len(names) + 1:
        raise ValueError(f"the {variant} law fits {len(names)} parameters: give at least {len(names) + 1} runs")
    theta, loss = _minimise(design, target, delta, restarts, seed)
    values = dict(zip(names, theta.tolist()))
    constants = ELConstants(**values, x_start=x_start, x_max=x_max, input=input, source=source)
    fit = Fit(variant, constants, loss=loss, runs=len(target))
    if resamples:
        rng = np.random.default_rng(seed)
        samples = []
        for _ in range(resamples):
            pick = rng.integers(0, len(target), len(target))
            samples.append(_minimise(design[pick], target[pick], delta, 1, seed)[0])
        draws = np.array(samples)
        for i, name in enumerate(names):
            low, high = np.quantile(draws[:, i], [0.025, 0.975])
            fit.intervals[name] = (float(2 * theta[i] - high), float(2 * theta[i] - low))
        if variant == "full":
            beta, gamma = draws[:, names.index("beta")], draws[:, names.index("gamma")]
            ok = gamma < 0
            if ok.mean() > 0.5 and constants.best_granularity is not None:
                g = np.exp(-beta[ok] / (2 * gamma[ok]))
                low, high = np.quantile(g, [0.025, 0.975])
                fit.best_granularity_interval = (float(low), float(high))
    return fit


# ------------------------------------------------------------------------------ dense reference law


@dataclass(frozen=True)
class DenseLaw:
    """L(C) = B·C^(−b), fitted on the best dense loss at each compute budget."""

    B: float
    b: float

    def loss(self, compute: Any) -> np.ndarray:
        return self.B * np.asarray(compute, dtype=np.float64) ** (-self.b)

    def compute_for(self, loss: Any) -> np.ndarray:
        """The dense compute that reaches ``loss`` (the inverse of :meth:`loss`)."""
        return (np.asarray(loss, dtype=np.float64) / self.B) ** (-1.0 / self.b)


def fit_dense_law(compute: Sequence[float], loss: Sequence[float]) -> DenseLaw:
    """Least squares in log–log space over the compute-optimal dense frontier."""
    c = np.asarray(compute, dtype=np.float64)
    l = np.asarray(loss, dtype=np.float64)
    frontier = {}
    for ci, li in zip(c, l):
        frontier[ci] = min(li, frontier.get(ci, np.inf))
    if len(frontier) < 2:
        raise ValueError("the dense law needs dense runs at two or more compute budgets")
    xs, ys = np.log(list(frontier)), np.log(list(frontier.values()))
    slope, intercept = np.polyfit(xs, ys, 1)
    if slope >= 0:
        raise ValueError("dense loss does not fall with compute across the budgets given; check the dense runs")
    return DenseLaw(B=float(np.exp(intercept)), b=float(-slope))


def dense_params_for(compute: float, tokens_per_param: float = 20.0) -> float:
    """Compute-optimal dense size for ``compute`` FLOPs under C = 6·N·D, D = 20·N (Hoffmann et al. 2022)."""
    return math.sqrt(compute / (6.0 * tokens_per_param))
