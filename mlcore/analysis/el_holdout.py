"""Scoring EL laws on held-out runs (the efficiency-leverage card, §3): fit every law variant on the
runs that remain after holding a group out, predict ln EL for the held-out group, and score the
prediction.

Two ways to hold out:

- by compute **budget** (leave-one-budget-out, the card's score): can the law extrapolate in C? Also checks whether
  the law picks the held-out budget's best granularity for each activation ratio;
- by **configuration** (A, G) across every budget (leave-one-configuration-out): can the law
  predict an MoE shape it was never fitted on?
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from mlcore.analysis.el import VARIANTS, fit_law, log_leverage
from mlcore.analysis.runs import Leverage


@dataclass(frozen=True)
class HoldoutScore:
    variant: str
    rmse_log_el: float  # over every held-out run
    mean_abs_pct_error: float  # |EL_pred / EL − 1|, mean over runs
    best_g_hits: int  # held-out (budget, A) groups whose best G the law picks (budget hold-out only)
    best_g_groups: int
    held_out_groups: int = 0  # groups that were scored (a variant skips a group it has too few runs to fit without)


def arrays(leverages: list[Leverage], *, count_shared: bool = False) -> tuple[np.ndarray, ...]:
    A = np.array([x.run.activation(count_shared=count_shared) for x in leverages])
    G = np.array([x.run.granularity for x in leverages])
    C = np.array([x.run.flops for x in leverages])
    EL = np.array([x.el for x in leverages])
    return A, G, C, EL


def _labels(leverages: list[Leverage], by: str, count_shared: bool) -> np.ndarray:
    if by == "budget":
        return np.array([x.budget for x in leverages])
    return np.array([f"A={x.run.activation(count_shared=count_shared):.6g} G={x.run.granularity:g}" for x in leverages])


def holdout_scores(
    leverages: list[Leverage],
    *,
    by: Literal["budget", "configuration"] = "budget",
    count_shared: bool = False,
    fit_options: dict[str, Any] | None = None,
) -> list[HoldoutScore]:
    """Leave-one-group-out scores of every law variant, groups being budgets or (A, G) configurations."""
    A, G, C, EL = arrays(leverages, count_shared=count_shared)
    labels = _labels(leverages, by, count_shared)
    groups = sorted(set(labels.tolist()))
    if len(groups) < 2:
        raise ValueError(f"holding out by {by} needs runs at two or more {by}s")
    scores = []
    for variant in VARIANTS:
        errors: list[float] = []
        pct: list[float] = []
        hits = scored_g = scored = 0
        for held in groups:
            test = labels == held
            train = ~test
            try:
                fit = fit_law(
                    A[train], G[train], C[train], EL[train], variant=variant, resamples=0, **(fit_options or {})
                )
            except ValueError:
                continue  # too few runs for this variant without the held-out group
            scored += 1
            predicted = log_leverage(A[test], G[test], C[test], fit.constants)
            errors += list(predicted - np.log(EL[test]))
            pct += list(np.abs(np.exp(predicted) / EL[test] - 1))
            if by != "budget":
                continue
            for a in np.unique(A[test]):
                group = test & (a == A)
                if len(np.unique(G[group])) < 2:
                    continue
                scored_g += 1
                observed = G[group][np.argmax(EL[group])]
                pred = log_leverage(A[group], G[group], C[group], fit.constants)
                hits += int(G[group][np.argmax(pred)] == observed)
        if errors:
            rmse = float(np.sqrt(np.mean(np.square(errors))))
            scores.append(HoldoutScore(variant, rmse, float(np.mean(pct)), hits, scored_g, scored))
    return scores
