"""Scoring EL laws on held-out compute budgets (the efficiency-leverage card, §3): fit every law
variant on all budgets but one, predict ln EL on the held-out budget, and check whether the law
picks the held-out budget's best granularity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mlcore.analysis.el import VARIANTS, fit_law, log_leverage
from mlcore.analysis.runs import Leverage


@dataclass(frozen=True)
class HoldoutScore:
    variant: str
    rmse_log_el: float  # over every held-out run
    mean_abs_pct_error: float  # |EL_pred / EL − 1|, mean over runs
    best_g_hits: int  # held-out (budget, A) groups whose best G the law picks
    best_g_groups: int


def arrays(leverages: list[Leverage], *, count_shared: bool = False) -> tuple[np.ndarray, ...]:
    A = np.array([x.run.activation(count_shared=count_shared) for x in leverages])
    G = np.array([x.run.granularity for x in leverages])
    C = np.array([x.run.flops for x in leverages])
    EL = np.array([x.el for x in leverages])
    return A, G, C, EL


def leave_one_budget_out(
    leverages: list[Leverage], *, count_shared: bool = False, fit_options: dict[str, Any] | None = None
) -> list[HoldoutScore]:
    budgets = sorted({x.budget for x in leverages})
    if len(budgets) < 2:
        raise ValueError("leave-one-budget-out needs runs at two or more compute budgets")
    A, G, C, EL = arrays(leverages, count_shared=count_shared)
    labels = np.array([x.budget for x in leverages])
    scores = []
    for variant in VARIANTS:
        errors, pct, hits, groups = [], [], 0, 0
        for held in budgets:
            test = labels == held
            train = ~test
            try:
                fit = fit_law(
                    A[train], G[train], C[train], EL[train], variant=variant, resamples=0, **(fit_options or {})
                )
            except ValueError:
                continue  # too few runs for this variant without the held-out budget
            predicted = log_leverage(A[test], G[test], C[test], fit.constants)
            errors += list(predicted - np.log(EL[test]))
            pct += list(np.abs(np.exp(predicted) / EL[test] - 1))
            for a in np.unique(A[test]):
                group = test & (a == A)
                if len(np.unique(G[group])) < 2:
                    continue
                groups += 1
                observed = G[group][np.argmax(EL[group])]
                pred = log_leverage(A[group], G[group], C[group], fit.constants)
                hits += int(G[group][np.argmax(pred)] == observed)
        if errors:
            scores.append(
                HoldoutScore(variant, float(np.sqrt(np.mean(np.square(errors)))), float(np.mean(pct)), hits, groups)
            )
    return scores
