"""``make bench-mixture``: FastMix against uniform, RegMix-lite, DoReMi-lite and references (method card §4).

Tier A: six classification sources sharing one concept (label noise 0/10/30/50%, two covariate-shifted),
a clean target validation set, a small MLP proxy. Tier B: a character-level tiny transformer on five
Python standard-library sub-corpora (code, docstrings, comments, tests, licence), the target a known
fixed mix of their held-out text (:mod:`mlcore.datamix.stdlib_subcorpora`), so the distance from the
found w to that mix says whether the search moved the right way.

Every method returns a mixture; a fresh model is then trained on it with the same budget
(``final_steps``) and scored on the target. Search cost is counted in examples through a forward +
backward pass, so the cost ratio against RegMix-lite is the paper's headline quantity at toy scale.
FastMix runs at the reference's lr_z = 0.01 and at raised rates (the card warns that 0.01 barely moves
w). The quick tier runs Tier A and a cut-down Tier B (one seed, a couple of minutes); the full tier
(``make bench-mixture FULL=1``) both with 3 seeds (about half an hour on two busy cores). Each finished
(method, seed) is a row of ``bench/cache/mixture.jsonl``, so an interrupted run resumes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import write_results

ROOT = Path(__file__).resolve().parents[1]
CACHE = Store.named("mixture")
BITS = 1 / math.log(2)

TIER_A_METHODS = (
    "uniform", "fastmix lr_z=0.01", "fastmix lr_z=0.1", "fastmix lr_z=0.5", "regmix-lite", "doremi-lite", "grid"
)  # fmt: skip
TIER_B_METHODS = (
    "uniform", "target mix", "fastmix lr_z=0.01", "fastmix lr_z=0.1", "fastmix lr_z=0.1 full", "fastmix lr_z=0.3",
    "regmix-lite", "doremi-lite",
)  # fmt: skip
#: ``batch``: examples per step of the RegMix-lite proxies and the final runs; ``batch_per_source``: FastMix's
#: and DoReMi-lite's share per source. Tier B's windows cost ~40× Tier A's examples, hence its smaller batches.
TIERS: dict[str, dict[str, dict[str, Any]]] = {
    "quick": {
        "a": {
            "seeds": 3, "search_steps": 300, "final_steps": 300, "regmix_proxies": 24, "regmix_steps": 100,
            "batch": 64, "batch_per_source": 16, "methods": TIER_A_METHODS,
        },
        "b": {
            "seeds": 1, "search_steps": 100, "final_steps": 150, "regmix_proxies": 8, "regmix_steps": 100,
            "batch": 20, "batch_per_source": 4, "methods": ("uniform", "target mix", "fastmix lr_z=0.1", "regmix-lite"),
        },
    },
    "full": {
        "a": {
            "seeds": 3, "search_steps": 1000, "final_steps": 1000, "regmix_proxies": 48, "regmix_steps": 300,
            "batch": 64, "batch_per_source": 16, "methods": TIER_A_METHODS,
        },
        "b": {
            "seeds": 3, "search_steps": 300, "final_steps": 400, "regmix_proxies": 24, "regmix_steps": 300,
            "batch": 20, "batch_per_source": 4, "methods": TIER_B_METHODS,
        },
    },
}  # fmt: skip


def _search(method: str, problem: Any, spec: dict[str, Any], seed: int) -> tuple[Any, dict[str, Any]]:
    """The method's mixture, and what else it recorded (FastMix: its w trajectory)."""
    from mlcore.datamix import baselines
    from mlcore.datamix.fastmix import FastMixConfig, fastmix

    per_source = spec["batch_per_source"]
    if method == "uniform":
        return baselines.uniform(problem), {}
    if method == "target mix":  # Tier B's known answer, a reference for what the search should approach
        from mlcore.datamix.stdlib_subcorpora import SUBCORPORA, TARGET_MIX

        return baselines.Found([TARGET_MIX[name] for name in SUBCORPORA], 0), {}
    if method.startswith("fastmix"):
        config = FastMixConfig(
            steps=spec["search_steps"],
            batch_per_source=per_source,
            lr_z=float(method.split("=")[1].split()[0]),
            interval=10,
            full_gradients=method.endswith("full"),
        )
        result = fastmix(problem, config, seed=seed)
        return baselines.Found(result.final, result.cost_examples), {"trajectory": result.weights}
    if method == "regmix-lite":
        found = baselines.regmix_lite(
            problem, proxies=spec["regmix_proxies"], steps=spec["regmix_steps"], batch_size=spec["batch"], seed=seed
        )
        return found, {}
    if method == "doremi-lite":
        return baselines.doremi_lite(problem, steps=spec["search_steps"], batch_per_source=per_source, seed=seed), {}
    return baselines.grid_oracle(problem, steps=spec["final_steps"], seed=seed), {}


def _run(method: str, problem: Any, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    from mlcore.datamix.problem import train_on_mixture

    start = time.perf_counter()
    found, extra = _search(method, problem, spec, seed)
    seconds = time.perf_counter() - start
    _, scores = train_on_mixture(
        problem, found.weights, steps=spec["final_steps"], batch_size=spec["batch"], seed=seed + 100
    )
    return {
        "method": method,
        "seed": seed,
        "weights": dict(zip(problem.sources, found.weights, strict=True)),
        "cost_examples": found.cost_examples,
        "search_seconds": seconds,
        **scores,
        **extra,
    }


def run_method(method: str, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    """Tier A: one method on the classification sources."""
    from mlcore.datamix.sources import classification_problem

    return _run(method, classification_problem(seed=seed), spec, seed)


def run_stdlib_method(method: str, spec: dict[str, Any], seed: int) -> dict[str, Any]:
    """Tier B: one method on the standard-library sub-corpora; bits per character and distance to the target."""
    from mlcore.datamix.stdlib_subcorpora import distance_to, stdlib_problem

    row = _run(method, stdlib_problem(seed=seed), spec, seed)
    row["val_bpc"] = row["val_loss"] * BITS
    row["distance"] = distance_to(list(row["weights"].values()))
    if "trajectory" in row:
        row["distance_trajectory"] = [(step, distance_to(w)) for step, w in row.pop("trajectory")]
    return row


def _cached(key: str, compute: Callable[[], dict[str, Any]], *, run_missing: bool = True) -> dict[str, Any]:
    if key not in CACHE:
        if not run_missing:
            raise RuntimeError(f"{key} is not cached: run `python -m bench mixture --tier full` first")
        row = compute()
        CACHE.put(key, row)
        print(f"{key}: {row['val_loss']:.4f}", flush=True)
    return CACHE.get(key)


def _slug(method: str) -> str:
    return method.replace(" ", "-").replace("=", "")


def _summarise(rows: list[dict[str, Any]], methods: tuple[str, ...], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    summary = []
    for method in methods:
        members = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(members)}
        for key in keys:
            values = [m[key] for m in members]
            entry[key], entry[f"{key}_sd"] = statistics.fmean(values), statistics.pstdev(values)
        entry["weights"] = {k: statistics.fmean(m["weights"][k] for m in members) for k in members[0]["weights"]}
        entry["cost_examples"] = statistics.fmean(m["cost_examples"] for m in members)
        entry["search_seconds"] = statistics.fmean(m["search_seconds"] for m in members)
        summary.append(entry)
    return summary


def _add_paired(rows: list[dict[str, Any]], key: str, reference: str, name: str) -> None:
    """``row[name]`` = ``row[key]`` minus the ``reference`` method's on the same seed: the seeds' validation
    sets differ, so paired differences are far less noisy than differences of means."""
    base = {r["seed"]: r[key] for r in rows if r["method"] == reference}
    for row in rows:
        row[name] = row[key] - base[row["seed"]]


def _cheaper(cost: float, reference: float) -> str:
    return f"{reference / cost:.1f}" if cost else "–"


def _tier_a_markdown(tier: str, spec: dict[str, Any], summary: list[dict[str, Any]]) -> list[str]:
    regmix = next(s["cost_examples"] for s in summary if s["method"] == "regmix-lite")
    grid = next(s["cost_examples"] for s in summary if s["method"] == "grid")
    lines = [
        f"# Data mixtures: FastMix vs baselines ({tier} tier)",
        "",
        "## Tier A: classification sources",
        "",
        "Six classification sources sharing one concept (clean; label noise 10/30/50%; two covariate-shifted), a "
        f"clean target validation set, an MLP proxy. Each method's mixture trains a fresh model for "
        f"{spec['final_steps']} steps (batch {spec['batch']}); target validation loss and accuracy, mean ± sd over "
        f"{spec['seeds']} seeds. Search cost in examples through forward + backward (RegMix-lite: "
        f"{spec['regmix_proxies']} proxies × {spec['regmix_steps']} steps). The right answer: weight on noise-50 "
        "should fall well below uniform (1/6 ≈ 0.167).",
        "",
        "| method | val loss | val accuracy | w(clean) | w(noise-50) | w(shifted, sum) | search cost "
        "| × cheaper than RegMix-lite | × cheaper than grid |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        w, cost = s["weights"], s["cost_examples"]
        lines.append(
            f"| {s['method']} | {s['val_loss']:.4f} ± {s['val_loss_sd']:.4f} | {s['val_accuracy']:.3f} ± "
            f"{s['val_accuracy_sd']:.3f} | {w['clean']:.3f} | {w['noise-50']:.3f} | "
            f"{w['shift-a'] + w['shift-b']:.3f} | {cost:,.0f} | {_cheaper(cost, regmix)} | {_cheaper(cost, grid)} |"
        )
    return lines


def _tier_b_markdown(spec: dict[str, Any], summary: list[dict[str, Any]]) -> list[str]:
    from mlcore.datamix.stdlib_subcorpora import SUBCORPORA, TARGET_MIX

    regmix = next(s["cost_examples"] for s in summary if s["method"] == "regmix-lite")
    target = ", ".join(f"{name} {TARGET_MIX[name]:g}" for name in SUBCORPORA)
    lines = [
        "",
        "## Tier B: Python standard-library sub-corpora, character-level transformer",
        "",
        "Five sources cut from the installed CPython library (code without docstrings and comments; docstrings; "
        "comments; the regression tests; the licence text); the target validation set is a fixed mix of their "
        f"held-out blocks ({target}). Proxy: a 2-layer causal transformer, width 32, 32-character context. Each "
        f"method's mixture trains a fresh model for {spec['final_steps']} steps (batch {spec['batch']} windows); "
        f"target bits per character, mean ± sd over {spec['seeds']} seed(s) (each seed draws its own validation "
        "windows, so the Δ columns, paired by seed, are the sharper comparison). Distance: total variation "
        "½·Σ|w − target| (uniform is 0.4 away). Search cost in windows through forward + backward (FastMix: "
        f"{spec['search_steps']} steps, the validation gradient every 10; RegMix-lite: {spec['regmix_proxies']} "
        f"proxies × {spec['regmix_steps']} steps). `full` = hypergradient over all parameters, not only the head; "
        "`target mix` trains on the known answer (no search). FastMix's inner steps alone cost 1/"
        f"{spec['regmix_proxies']} of RegMix-lite's; its validation gradients make up the rest. No grid oracle here: "
        "a resolution-2 grid over 5 sources is 15 more training runs, and the known target mix is the better "
        "reference.",
        "",
        "| method | target bpc | Δ bpc vs uniform | Δ bpc vs RegMix-lite | "
        + " | ".join(f"w({name})" for name in SUBCORPORA)
        + " | distance to target | search cost | × cheaper than RegMix-lite | search s |",
        "|---|---|---|---|" + "---|" * len(SUBCORPORA) + "---|---|---|---|",
    ]
    for s in summary:
        weights = " | ".join(f"{s['weights'][name]:.3f}" for name in SUBCORPORA)
        cost = s["cost_examples"]
        lines.append(
            f"| {s['method']} | {s['val_bpc']:.4f} ± {s['val_bpc_sd']:.4f} | {s['vs_uniform']:+.4f} ± "
            f"{s['vs_uniform_sd']:.4f} | {s['vs_regmix']:+.4f} ± {s['vs_regmix_sd']:.4f} | {weights} | "
            f"{s['distance']:.3f} ± {s['distance_sd']:.3f} | {cost:,.0f} | {_cheaper(cost, regmix)} | "
            f"{s['search_seconds']:.0f} |"
        )
    return lines


#: Card §4 expects FastMix to approach the grid oracle (tier A) and RegMix-lite's bits per character
#: (tier B) and gives no size: 0.02 (val loss, resp. bpc) is the smallest effect of interest taken here.
MIXTURE_EFFECT = 0.02
#: The searched baselines (card §3) and the no-search one; the oracles (grid, target mix) set the ceiling.
SEARCHED = ("uniform", "regmix-lite", "doremi-lite")


def claims(rows: list[dict[str, Any]], metric: str, ceiling_method: str, tier_name: str) -> list[Any]:
    """Each FastMix setting against the best of uniform, RegMix-lite and DoReMi-lite, paired by seed; the
    ceiling is the oracle's mean (the grid in tier A, the known target mix in tier B)."""
    from bench.verdicts import Claim, judge

    by = {(r["method"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    methods = sorted({r["method"] for r in rows})

    def values(method: str) -> list[float]:
        return [by[(method, s)][metric] for s in seeds]

    baselines = [m for m in SEARCHED if all((m, s) in by for s in seeds)]
    if not baselines:
        return []
    best = min(baselines, key=lambda m: statistics.fmean(values(m)))
    ceiling = statistics.fmean(values(ceiling_method)) if all((ceiling_method, s) in by for s in seeds) else None
    out = []
    for method in methods:
        if not method.startswith("fastmix") or not all((method, s) in by for s in seeds):
            continue
        claim = Claim(
            f"{tier_name}: {method} beats the searched baselines",
            metric,
            MIXTURE_EFFECT,
            f"card §4 gives an order, no size; {MIXTURE_EFFECT} taken as the smallest effect of interest",
            higher_is_better=False,
            ceiling=ceiling,
        )
        seconds = statistics.fmean(by[(m, s)].get("search_seconds", 0.0) for m in (method, best) for s in seeds)
        out.append(judge(claim, (method, values(method)), (best, values(best)), seconds_per_run=seconds))
    return out


def report_from_cache(results: Path) -> None:
    """``python -m bench mixture --report``: ``mixture.md`` from the cached full-tier runs; nothing runs."""
    run("full", results, compute=False)


def run(tier: str, results: Path, *, compute: bool = True) -> None:
    import torch

    torch.set_num_threads(1)  # the machine's cores are shared with other engineers
    spec_a, spec_b = TIERS[tier]["a"], TIERS[tier]["b"]
    rows_a = [
        _cached(
            f"{tier}/{_slug(method)}-s{seed}", lambda m=method, s=seed: run_method(m, spec_a, s), run_missing=compute
        )
        for seed in range(spec_a["seeds"])
        for method in spec_a["methods"]
    ]
    rows_b = [
        _cached(
            f"{tier}/stdlib/{_slug(method)}-s{seed}",
            lambda m=method, s=seed: run_stdlib_method(m, spec_b, s),
            run_missing=compute,
        )
        for seed in range(spec_b["seeds"])
        for method in spec_b["methods"]
    ]
    summary_a = _summarise(rows_a, spec_a["methods"], ("val_loss", "val_accuracy"))
    _add_paired(rows_b, "val_bpc", "uniform", "vs_uniform")
    _add_paired(rows_b, "val_bpc", "regmix-lite", "vs_regmix")
    summary_b = _summarise(rows_b, spec_b["methods"], ("val_bpc", "vs_uniform", "vs_regmix", "distance"))
    from bench import verdicts as rule

    found = claims(rows_a, "val_loss", "grid", "tier A") + claims(rows_b, "val_bpc", "target mix", "tier B")
    markdown = "\n".join(
        _tier_a_markdown(tier, spec_a, summary_a)
        + _tier_b_markdown(spec_b, summary_b)
        + ["", *rule.section("Verdicts (computed from paired intervals)", found)]
        + [
            "",
            "Headroom: the best searched baseline's distance to the oracle (tier A: the grid's mixture; tier B: "
            "training on the known target mix). Costs are the measured search seconds of the two methods.",
        ]
    )
    data = {
        "tier": tier,
        "summary": summary_a,
        "runs": rows_a,
        "tier_b": {"spec": spec_b, "summary": summary_b, "runs": rows_b},
        "verdicts": rule.as_json(found),
    }
    write_results(results, "mixture", markdown, data)
