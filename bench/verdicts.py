"""The rule every study's verdict follows: a claim is judged only by an experiment that could see it.

Each study declares the paper's claims in code (:class:`Claim`): the claimed effect in the study's
own metric, where that number comes from (the method card's section), the metric's ceiling here
and whether the setting is the scale the card asks for. :func:`judge` turns per-seed results of the
method and of its best baseline, paired by seed, into a :class:`Verdict`:

- the paired differences d_i (signed so that d > 0 means the method is better), their mean, their
  sample standard deviation s_d and the 95% paired t interval d̄ ± t₀.₉₇₅,ₙ₋₁·s_d/√n;
- the minimum detectable effect MDE = (t₀.₉₇₅,ₙ₋₁ + t₀.₈,ₙ₋₁)·s_d/√n (two-sided 5%, 80% power);
- the headroom: how far the best baseline sits from the ceiling (a method cannot beat a baseline
  already at the ceiling by the claimed effect).

The experiment is *powered* when it runs at the card's scale, the headroom is at least the claimed
effect and the MDE at most the claimed effect. Only then is the verdict "reproduced" (interval above
0), "not reproduced" (interval below 0) or "tie" (interval contains 0). Otherwise it is
"inconclusive at this scale", with what would settle it: the seeds the measured s_d needs, a setting
with room below the ceiling, or the card's scale, and the measured cost of the seeds.

One exception to the MDE condition: an interval wholly below 0 has measured the method losing, which
no claimed gain survives, so it reads "not reproduced" even where the seeds could not have detected
an effect of the claimed size (power protects a null; a reversal needs none). The scale and headroom
conditions still apply.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
TIE = "tie"
INCONCLUSIVE = "inconclusive at this scale"

#: Two-sided level of the interval and the power the MDE is sized for.
ALPHA = 0.05
POWER = 0.8
#: The fewest paired seeds a study without a measured spread should run.
MIN_SEEDS = 3
#: The most seeds :func:`seeds_needed` looks for before it says "more than this".
MAX_SEEDS = 1000


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    if df < 1:
        raise ValueError(f"Student's t needs at least 1 degree of freedom, got {df}")
    return float(t.ppf(p, df))


@dataclass(frozen=True)
class Paired:
    """Paired differences d_i = sign·(method_i − baseline_i): d > 0 means the method is better."""

    diffs: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.diffs) if self.diffs else math.nan

    @property
    def sd(self) -> float:
        """Sample standard deviation (n − 1), NaN below two pairs."""
        return statistics.stdev(self.diffs) if self.n > 1 else math.nan

    def interval(self, level: float = 1 - ALPHA) -> tuple[float, float]:
        """The paired t interval of the mean difference; (NaN, NaN) below two pairs."""
        if self.n < 2:
            return math.nan, math.nan
        half = t_quantile(1 - (1 - level) / 2, self.n - 1) * self.sd / math.sqrt(self.n)
        return self.mean - half, self.mean + half

    def mde(self) -> float:
        return mde(self.sd, self.n)


def paired(method: Sequence[float], baseline: Sequence[float], *, higher_is_better: bool) -> Paired:
    """Pair the method's and the baseline's per-seed values (same order: the same seed at each index)."""
    if len(method) != len(baseline):
        raise ValueError(f"paired values need the same seeds: {len(method)} method values, {len(baseline)} baseline")
    sign = 1.0 if higher_is_better else -1.0
    return Paired(tuple(sign * (float(m) - float(b)) for m, b in zip(method, baseline, strict=True)))


def mde(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect of a paired t test: (t_{1−α/2,n−1} + t_{power,n−1})·sd/√n."""
    if n < 2 or not math.isfinite(sd):
        return math.inf
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def seeds_needed(sd: float, effect: float, *, max_n: int = MAX_SEEDS) -> int | None:
    """The fewest paired seeds whose MDE is at most ``effect`` at this s_d (None beyond ``max_n``)."""
    if effect <= 0 or not math.isfinite(sd):
        return None
    if sd == 0:
        return 2
    for n in range(2, max_n + 1):
        if mde(sd, n) <= effect:
            return n
    return None


@dataclass(frozen=True)
class Claim:
    """One claim of a paper as a study tests it.

    ``effect``: the claimed improvement of the method over its best baseline, in the study's metric
    and units (> 0). ``source``: where it comes from (the method card's section; where the card gives
    a direction but no size, the text says so and which smallest effect of interest was taken).
    ``ceiling``: the best value the metric can reach in this setting (accuracy 1, a label-noise
    ceiling, the unpruned model, 0 for a divergence), None when there is none. ``off_scale``: what
    differs from the scale the card asks for, None when the study runs at it.
    """

    statement: str
    metric: str
    effect: float
    source: str
    higher_is_better: bool = True
    ceiling: float | None = None
    off_scale: str | None = None

    def __post_init__(self) -> None:
        if not self.effect > 0:
            raise ValueError(f"a claim's effect is a positive size in its metric, got {self.effect}")


@dataclass(frozen=True)
class Verdict:
    claim: Claim
    method: str
    baseline: str
    pairs: Paired
    headroom: float | None
    verdict: str
    reasons: tuple[str, ...] = field(default=())
    settle: str = ""

    @property
    def powered(self) -> bool:
        return self.verdict != INCONCLUSIVE

    @property
    def interval(self) -> tuple[float, float]:
        return self.pairs.interval()

    @property
    def mde(self) -> float:
        return self.pairs.mde()


def _headroom(claim: Claim, baseline: Sequence[float]) -> float | None:
    if claim.ceiling is None or not baseline:
        return None
    best = statistics.fmean(baseline)
    return claim.ceiling - best if claim.higher_is_better else best - claim.ceiling


def judge(
    claim: Claim,
    method: tuple[str, Sequence[float]],
    baseline: tuple[str, Sequence[float]],
    *,
    seconds_per_run: float | None = None,
    runs_per_seed: int = 2,
) -> Verdict:
    """The verdict on ``claim`` from per-seed values of the method and its best baseline.

    ``seconds_per_run`` (measured: the cache's timings) and ``runs_per_seed`` (runs one more paired
    seed costs: the method and the baseline, usually) price the seeds an underpowered claim needs.
    """
    (method_name, method_values), (baseline_name, baseline_values) = method, baseline
    pairs = paired(method_values, baseline_values, higher_is_better=claim.higher_is_better)
    headroom = _headroom(claim, baseline_values)
    reasons: list[str] = []
    settle: list[str] = []
    if claim.off_scale:
        reasons.append(f"not the card's scale or setting ({claim.off_scale})")
        settle.append("the card's scale")
    if headroom is not None and headroom < claim.effect:
        reasons.append(
            f"headroom {_fmt(headroom)} < claimed effect {_fmt(claim.effect)}: "
            "the best baseline is too near the ceiling"
        )
        settle.append(f"a setting whose best baseline sits ≥ {_fmt(claim.effect)} below the ceiling")
    if pairs.n < 2:
        reasons.append(f"{pairs.n} paired seed(s): no spread, no interval")
        settle.append(
            f"{MIN_SEEDS} paired seeds at least (more where the spread is wide)"
            + _cost(MIN_SEEDS - pairs.n, seconds_per_run, runs_per_seed)
        )
    elif pairs.mde() > claim.effect and pairs.interval()[1] >= 0:
        # Power guards a null, not a reversal: an interval wholly below zero has already seen the
        # method lose, which no claimed gain survives, whatever effect the seeds could detect.
        reasons.append(f"MDE {_fmt(pairs.mde())} > claimed effect {_fmt(claim.effect)} at {pairs.n} seeds")
        needed = seeds_needed(pairs.sd, claim.effect)
        if needed is None:
            settle.append(f"more than {MAX_SEEDS} paired seeds at the measured s_d {_fmt(pairs.sd)}")
        else:
            extra = needed - pairs.n
            settle.append(f"{needed} paired seeds ({extra} more)" + _cost(extra, seconds_per_run, runs_per_seed))
    if reasons:
        verdict = INCONCLUSIVE
    else:
        low, high = pairs.interval()
        verdict = REPRODUCED if low > 0 else NOT_REPRODUCED if high < 0 else TIE
    return Verdict(claim, method_name, baseline_name, pairs, headroom, verdict, tuple(reasons), "; ".join(settle))


def _cost(extra_seeds: int, seconds_per_run: float | None, runs_per_seed: int) -> str:
    if seconds_per_run is None or extra_seeds <= 0:
        return ""
    total = extra_seeds * runs_per_seed * seconds_per_run
    return (
        f", about {_duration(total)} of runs ({runs_per_seed} runs per seed at {seconds_per_run:.0f} s each, measured)"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _fmt(value: float | None) -> str:
    if value is None:
        return "–"
    if not math.isfinite(value):
        return "∞" if value > 0 else "NaN"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    if magnitude >= 1e-4:
        return f"{value:.4f}"
    return "0" if magnitude < 1e-12 else f"{value:.1e}"


def table(verdicts: Sequence[Verdict]) -> list[str]:
    """Markdown: one row per verdict with the paired interval, MDE and headroom beside it."""
    lines = [
        "| claim | method vs best baseline | metric | claimed effect (source) | pairs | mean diff [95% CI] | "
        "MDE | headroom | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        low, high = v.interval
        interval = (
            f"{_signed(v.pairs.mean)} [{_signed(low)}, {_signed(high)}]" if v.pairs.n > 1 else _signed(v.pairs.mean)
        )
        direction = "higher" if v.claim.higher_is_better else "lower"
        lines.append(
            f"| {v.claim.statement} | {v.method} vs {v.baseline} | {v.claim.metric} ({direction} is better) | "
            f"{_fmt(v.claim.effect)} ({v.claim.source}) | {v.pairs.n} | {interval} | {_fmt(v.mde)} | "
            f"{_fmt(v.headroom)} | **{v.verdict}** |"
        )
    return lines


def _direction(v: Verdict) -> str:
    """What the interval shows although it cannot decide the claim: a direction that excludes 0."""
    low, high = v.interval
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 <= high:
        return ""
    better = v.method if low > 0 else v.baseline
    return f" As measured, the interval excludes 0 in favour of {better}."


def _signed(value: float) -> str:
    return "NaN" if not math.isfinite(value) else ("+" if value >= 0 else "") + _fmt(value)


def notes(verdicts: Sequence[Verdict]) -> list[str]:
    """Markdown bullets: for each inconclusive verdict, why, and what would settle it at what cost."""
    lines = []
    for v in verdicts:
        if v.verdict == INCONCLUSIVE:
            lines.append(
                f"- {v.claim.statement} ({v.method} vs {v.baseline}): inconclusive because "
                + "; ".join(v.reasons)
                + (f". Would settle it: {v.settle}." if v.settle else ".")
                + _direction(v)
            )
        elif v.verdict == REPRODUCED and v.interval[1] < v.claim.effect:
            lines.append(
                f"- {v.claim.statement} ({v.method} vs {v.baseline}): the direction reproduces, with an effect below "
                f"the claimed {_fmt(v.claim.effect)} (interval upper end {_fmt(v.interval[1])})."
            )
    return lines


RULE = (
    "Verdicts follow `bench/verdicts.py`: paired differences over seeds (d > 0: the method is better), "
    "their 95% paired t interval, MDE = (t₀.₉₇₅,ₙ₋₁ + t₀.₈,ₙ₋₁)·s_d/√n, and headroom = the gap from the best "
    'baseline to the metric\'s ceiling. A claim is "reproduced" / "not reproduced" (interval above / below 0) '
    'or a "tie" (interval contains 0) only when the study runs at the card\'s scale with headroom and MDE '
    'within the claimed effect; otherwise it is "inconclusive at this scale".'
)


def section(title: str, verdicts: Sequence[Verdict], *, level: str = "##") -> list[str]:
    """A report section: the rule, the table and the notes."""
    return [f"{level} {title}", "", RULE, "", *table(verdicts), "", *notes(verdicts)]


def as_json(verdicts: Sequence[Verdict]) -> list[dict[str, object]]:
    out = []
    for v in verdicts:
        low, high = v.interval
        out.append(
            {
                "statement": v.claim.statement,
                "metric": v.claim.metric,
                "higher_is_better": v.claim.higher_is_better,
                "claimed_effect": v.claim.effect,
                "source": v.claim.source,
                "ceiling": v.claim.ceiling,
                "off_scale": v.claim.off_scale,
                "method": v.method,
                "baseline": v.baseline,
                "seeds": v.pairs.n,
                "diffs": list(v.pairs.diffs),
                "mean_diff": v.pairs.mean,
                "sd_diff": v.pairs.sd,
                "ci95": [low, high],
                "mde": v.mde,
                "headroom": v.headroom,
                "verdict": v.verdict,
                "reasons": list(v.reasons),
                "settle": v.settle,
            }
        )
    return out
