"""``make bench-compress``: MoNE's three-dimension robustness study on the zoo's MoE models.

Grid: methods × pruning ratio × calibration source × calibration sample count × architecture ×
seed. A seed draws which calibration sequences are used (and the random baseline's subset), so
the spread over seeds is the sensitivity to the calibration sample. For every configuration the
compressed model is scored on held-out text from every built-in source (mean perplexity, reported
as the increase over the unpruned model in percent) and on the cloze suite (accuracy drop in
points). Calibration runs once per (architecture, source, samples, seed) and serves every method.

A second grid (:data:`MIXED_TIERS`) calibrates on :data:`MIXED`, equal shares of the three sources'
calibration splits (the analogue of the paper's general-corpus calibration for models trained on all
three), and adds the global-allocation variants (:data:`GLOBAL_METHODS`: one model-wide threshold on the
method's own score, as RS always uses). Under it every test source is in-domain; its verdicts pair the
calibration seeds and follow :mod:`bench.verdicts`, and the report sets them beside the one-source
verdicts. The one-domain, three-training-seed setting the card asks for is :mod:`bench.compress_reference`.

The full tier writes one row per finished configuration to ``bench/cache/compress.jsonl`` and skips
those on the next run, so an interrupted study resumes.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import full_tier_cache, write_results

CACHE = Store.named("compress")
METHOD_ORDER = ("mone", "mone-zero", "mone-delete", "random", "frequency", "rs", "ean", "reap", "naee", "hc-smoe")
#: A method name ending in this plans with ``scope="global"``: one model-wide threshold on the method's own
#: score (at least top-k experts in every layer), so layers where the score is high keep more experts.
GLOBAL = "-global"
#: MoNE with global allocation and the per-layer methods it is compared with under the same allocation
#: (RS is model-wide by definition, so it needs no variant of its own).
GLOBAL_METHODS = ("mone-global", "mone-delete-global", "frequency-global", "ean-global", "reap-global")
#: The calibration source that draws equal shares from every built-in source (the analogue of the paper's
#: general-corpus calibration for a model trained on all three).
MIXED = "mixed"


@dataclass(frozen=True)
class Tier:
    models: tuple[str, ...]
    ratios: tuple[float, ...]
    sources: tuple[str, ...]
    samples: tuple[int, ...]
    seeds: tuple[int, ...]
    eval_windows: int
    cloze_items: int
    methods: tuple[str, ...] = METHOD_ORDER


TIERS = {
    "quick": Tier(("moe-lm-tiny",), (0.25, 0.5), ("shakespeare",), (64,), (0,), 64, 50),
    "full": Tier(
        ("moe-lm-tiny", "moe-lm-olmoe"),
        (0.25, 0.5),
        ("shakespeare", "stdlib-source"),
        (16, 64, 256),
        (0, 1, 2),
        128,
        60,
    ),
}


#: The mixed study's methods, cut to what the comparison needs on a shared 2-core machine (one prune-and-score
#: took 8 s on a quiet core, 25–40 s under the load the study ran in): MoNE at both allocations and every
#: deletion rival at both (frequency, EAN, REAP, MoNE's own ranking; RS is model-wide). Left out: NAEE (its
#: enumeration costs ~9 times another method), HC-SMoE (a merging method outside the card's baselines, last in
#: every one-source row), random (the floor) and MoNE-zero (behind MoNE in every one-source row).
MIXED_METHODS = ("mone", "mone-delete", "frequency", "rs", "ean", "reap", *GLOBAL_METHODS)
#: The mixed study: those methods at both allocations, calibrated on equal shares of the three sources. 64
#: sequences only: the documentation corpus's calibration split holds 76 windows of 128 tokens (zoo tokenizer),
#: so equal shares stop at 3 × 76 = 228 and the card's 256 cannot be drawn.
MIXED_TIERS = {
    "quick": Tier(
        ("moe-lm-tiny",),
        (0.25, 0.5),
        (MIXED,),
        (64,),
        (0,),
        64,
        50,
        ("mone", "mone-global", "mone-delete-global", "frequency", "frequency-global", "rs", "reap", "reap-global"),
    ),
    "full": Tier(
        ("moe-lm-tiny", "moe-lm-olmoe"),
        (0.25, 0.5),
        (MIXED,),
        (64,),
        (0, 1, 2),
        128,
        60,
        MIXED_METHODS,
    ),
}


def method_scope(method: str) -> tuple[str, str]:
    """``"mone-global"`` → (``"mone"``, ``"global"``); every other name plans per layer (RS, model-wide by
    definition, whatever the scope)."""
    if method.endswith(GLOBAL):
        return method.removesuffix(GLOBAL), "global"
    return method, "layer"


def plan_of(method: str, adapter: Any, calibration: Any, keep: int, *, seed: int = 0) -> Any:
    """The compression plan of a benchmark method name: ``make_plan`` at the name's allocation
    (:func:`method_scope`), keeping ``keep`` experts per layer on average."""
    from mlcore.compress.methods import make_plan

    base, scope = method_scope(method)
    return make_plan(base, adapter, calibration, keep, scope=scope, seed=seed)


def mixed_shares(samples: int, sources: tuple[str, ...]) -> dict[str, int]:
    """Equal shares of ``samples`` over ``sources``; a remainder goes one each to the first sources (64 over
    three: 22, 21, 21)."""
    base, extra = divmod(samples, len(sources))
    return {source: base + (i < extra) for i, source in enumerate(sources)}


def draw_mixed(pools: dict[str, Any], samples: int, seed: int) -> tuple[Any, dict[str, int]]:
    """``samples`` windows in equal shares from every pool (seeded, each source by its own stream), shuffled
    together; returns the windows and how many came from each source."""
    import torch

    shares = mixed_shares(samples, tuple(pools))
    parts = []
    for index, (source, pool) in enumerate(pools.items()):
        if len(pool) < shares[source]:
            raise ValueError(f"{source}'s calibration split holds {len(pool)} windows, not the {shares[source]} asked")
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed * 1000 + index))
        parts.append(pool[order[: shares[source]]])
    windows = torch.cat(parts)
    return windows[torch.randperm(len(windows), generator=torch.Generator().manual_seed(seed))], shares


def calibration_windows(tokenizer: Any, source: str, samples: int, seed: int, length: int = 128) -> Any:
    """``samples`` windows drawn (seeded) from the non-overlapping windows of ``source``'s calibration split;
    for :data:`MIXED`, equal shares of every built-in source's calibration split (:func:`draw_mixed`)."""
    import torch

    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.data.textset import source_splits
    from mlcore.eval.perplexity import heldout_windows

    sources = TEXT_SOURCES if source == MIXED else (source,)
    splits = source_splits(sources, "calibration")
    pools = {s: heldout_windows(tokenizer, splits[s], length=length, max_windows=4096) for s in sources}
    if source == MIXED:
        return draw_mixed(pools, samples, seed)[0]
    pool = pools[source]
    if len(pool) < samples:
        raise ValueError(f"{source}'s calibration split holds {len(pool)} windows of {length} tokens, not {samples}")
    order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))
    return pool[order[:samples]]


def _key(model: str, source: str, samples: int, seed: int, method: str, ratio: float, tier: Tier) -> str:
    # The evaluation size is part of the key: rows scored on different held-out sets never mix.
    return f"{model}_{source}_{samples}_{seed}_{method}_{ratio:g}_ev{tier.eval_windows}-{tier.cloze_items}"


def group_order(spec: Tier, models: list[str]) -> list[tuple[str, str, int, int]]:
    """(model, source, samples, seed) groups, one-factor-at-a-time variations of the base setting
    (first source, middle sample count, first seed) first, then the rest of the grid: a study cut
    short by its time budget still varies every dimension."""
    base_samples = spec.samples[len(spec.samples) // 2]

    def distance(group: tuple[str, str, int, int]) -> tuple[int, int]:
        _, source, samples, seed = group
        return ((source != spec.sources[0]) + (samples != base_samples) + (seed != spec.seeds[0]), seed)

    grid = [(m, so, sa, se) for m in models for so in spec.sources for sa in spec.samples for se in spec.seeds]
    return sorted(grid, key=distance)


def run_group(
    model_name: str,
    source: str,
    samples: int,
    seed: int,
    tier: Tier,
    cache: Store | None,
    state: dict[str, Any],
    *,
    compute: bool = True,
) -> list[dict[str, Any]]:
    """Every method × ratio for one calibration; cached rows are read back, missing ones computed
    (unless ``compute`` is off: the time budget is spent)."""
    from mlcore.compress.calibrate import calibrate
    from mlcore.compress.methods import NEEDS_LAYER_INPUTS, compressed_copy
    from mlcore.compress.naee import CALIBRATION_ROWS, MAX_SUBSETS
    from mlcore.compress.plan import experts_to_keep
    from mlcore.hf import adapt

    model, tokenizer, heldout, base = state["model"], state["tokenizer"], state["heldout"], state["base"]
    adapter = adapt(model)
    num_experts, top_k = adapter.layers[0].num_experts, adapter.layers[0].top_k
    rows, todo = [], []
    for ratio in tier.ratios:
        for method in tier.methods:
            key = _key(model_name, source, samples, seed, method, ratio, tier)
            found = cache.get(key) if cache is not None else None
            if found is not None:
                rows.append(found)
            else:
                todo.append((ratio, method, key))
    if not todo or not compute:
        return rows
    import math

    windows = calibration_windows(tokenizer, source, samples, seed)
    started = time.perf_counter()
    calibration = calibrate(adapter, windows, batch_size=32, keep_inputs=CALIBRATION_ROWS, seed=seed)
    calibration_seconds = time.perf_counter() - started
    for ratio, method, key in todo:
        keep = experts_to_keep(num_experts, top_k, ratio=ratio)
        row: dict[str, Any] = {"model": model_name, "source": source, "samples": samples, "seed": seed}
        row.update({"method": method, "ratio": ratio, "keep": keep, "calibration_seconds": calibration_seconds})
        base_method, scope = method_scope(method)
        row["scope"] = "global" if base_method == "rs" else scope
        if method in NEEDS_LAYER_INPUTS and math.comb(num_experts, keep) > MAX_SUBSETS:
            row["skipped"] = f"C({num_experts}, {keep}) subsets is too many to enumerate"
        else:
            started = time.perf_counter()
            plan = plan_of(method, adapter, calibration, keep, seed=seed)
            compressed, _ = compressed_copy(model, plan)
            result = heldout.evaluate(compressed, tokenizer)
            row["kept_per_layer"] = [len(plan.keep[layer]) for layer in sorted(plan.keep)]
            row["seconds"] = time.perf_counter() - started
            row["ppl_mean"] = result["ppl_mean"]
            row["perplexity"] = result["perplexity"]
            row["delta_ppl_pct"] = 100 * (result["ppl_mean"] / base["ppl_mean"] - 1)
            row["acc"] = result.get("acc")
            row["delta_acc_pts"] = 100 * (result["acc"] - base["acc"]) if "acc" in result else None
        print(json.dumps({k: v for k, v in row.items() if k != "perplexity"}), flush=True)
        if cache is not None:
            cache.put(key, row)
        rows.append(row)
    return rows


def mean_std(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    return statistics.fmean(values), statistics.pstdev(values) if len(values) > 1 else 0.0


def summarise(rows: list[dict[str, Any]], ratios: tuple[float, ...]) -> dict[str, Any]:
    """Per method and ratio: mean ± std of Δppl% and Δacc, and the spread of the mean across each dimension."""
    summary: dict[str, Any] = {}
    for ratio in ratios:
        per_method: dict[str, Any] = {}
        for method in METHOD_ORDER:
            mine = [r for r in rows if r["method"] == method and r["ratio"] == ratio and "skipped" not in r]
            if not mine:
                continue
            entry: dict[str, Any] = {"configs": len(mine)}
            entry["delta_ppl_pct"] = mean_std([r["delta_ppl_pct"] for r in mine])
            accs = [r["delta_acc_pts"] for r in mine if r.get("delta_acc_pts") is not None]
            entry["delta_acc_pts"] = mean_std(accs)
            for dimension in ("source", "samples", "model"):
                groups: dict[Any, list[float]] = {}
                for r in mine:
                    groups.setdefault(r[dimension], []).append(r["delta_ppl_pct"])
                means = {value: statistics.fmean(v) for value, v in groups.items()}
                entry[f"by_{dimension}"] = means
                entry[f"spread_{dimension}"] = max(means.values()) - min(means.values()) if len(means) > 1 else 0.0
            per_method[method] = entry
        summary[f"{ratio:g}"] = per_method
    return summary


def _markdown(
    tier_name: str, tier: Tier, summary: dict[str, Any], bases: dict[str, Any], elapsed: float, compute: float
) -> str:
    lines = [
        "# Expert pruning robustness (MoNE and baselines)",
        "",
        f"Tier **{tier_name}**: models {', '.join(bases)}; ratios {', '.join(f'{r:g}' for r in tier.ratios)}; "
        f"calibration sources {', '.join(tier.sources)}; samples {', '.join(map(str, tier.samples))}; "
        f"seeds {', '.join(map(str, tier.seeds))}; {tier.eval_windows} held-out windows of 128 tokens per source; "
        f"{tier.cloze_items} cloze items per source (4 choices). "
        + (f"This run {elapsed / 60:.1f} min; the " if elapsed else "Rebuilt from the cache (`--report`); the ")
        + f"configurations took {compute / 60:.1f} min of pruning and evaluation in all (cached ones included).",
        "",
        "Unpruned models:",
        "",
        "| model | mean ppl | "
        + " | ".join(f"ppl {s}" for s in next(iter(bases.values()))["perplexity"])
        + " | cloze acc |",
        "|---|---|" + "---|" * len(next(iter(bases.values()))["perplexity"]) + "---|",
    ]
    for name, base in bases.items():
        ppl = " | ".join(f"{v:.2f}" for v in base["perplexity"].values())
        lines.append(f"| {name} | {base['ppl_mean']:.2f} | {ppl} | {100 * base.get('acc', float('nan')):.1f}% |")
    for ratio, per_method in summary.items():
        lines += [
            "",
            f"## Pruning ratio {ratio}",
            "",
            "Δppl: increase of the mean held-out perplexity over the unpruned model (%, mean ± std over all "
            "configurations); Δacc: cloze accuracy change (points). Spreads: range of the mean Δppl across "
            "calibration sources / sample counts / models.",
            "",
            "| method | configs | Δppl % | Δacc pts | spread source | spread samples | spread model |",
            "|---|---|---|---|---|---|---|",
        ]
        for method, e in sorted(per_method.items(), key=lambda kv: kv[1]["delta_ppl_pct"][0]):
            lines.append(
                f"| {method} | {e['configs']} | {e['delta_ppl_pct'][0]:.2f} ± {e['delta_ppl_pct'][1]:.2f} | "
                f"{e['delta_acc_pts'][0]:+.2f} ± {e['delta_acc_pts'][1]:.2f} | {e['spread_source']:.2f} | "
                f"{e['spread_samples']:.2f} | {e['spread_model']:.2f} |"
            )
        lines += ["", _verdict(per_method), "", *_by_dimension(per_method)]
    return "\n".join(lines) + "\n"


def _by_dimension(per_method: dict[str, Any]) -> list[str]:
    """Mean Δppl % of each method for every value of every dimension (one column each)."""
    columns = [
        (d, v)
        for d in ("source", "samples", "model")
        for v in sorted({v for e in per_method.values() for v in e[f"by_{d}"]})
    ]
    lines = [
        "Mean Δppl % by calibration source, sample count and model:",
        "",
        "| method | " + " | ".join(f"{v}" for _, v in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for method, e in per_method.items():
        cells = [f"{e[f'by_{d}'][v]:.1f}" if v in e[f"by_{d}"] else "–" for d, v in columns]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def _verdict(per_method: dict[str, Any]) -> str:
    """Where MoNE ranks on the mixed metric (every source, most of them outside the calibration
    domain); the verdict on the paper's claim is computed from paired intervals in its own section."""
    if "mone" not in per_method:
        return "MoNE was not run."
    by_mean = sorted(per_method, key=lambda m: per_method[m]["delta_ppl_pct"][0])
    rank_mean = by_mean.index("mone") + 1
    verdict = f"On the mixed metric MoNE ranks {rank_mean} of {len(by_mean)} by mean Δppl (best: {by_mean[0]})"
    if per_method["mone"]["configs"] < 2:
        verdict += "; its spread needs more than one configuration (the full tier)."
    else:
        by_std = sorted(per_method, key=lambda m: per_method[m]["delta_ppl_pct"][1])
        verdict += f" and {by_std.index('mone') + 1} of {len(by_std)} by its spread (steadiest: {by_std[0]})."
    return verdict + " This ranking mixes in-domain and cross-domain sources: the verdict is in its own section."


#: Baselines MoNE is judged against (card §3); MoNE-zero and MoNE-delete are its own ablations.
BASELINES = ("random", "frequency", "rs", "ean", "reap", "naee", "hc-smoe")
#: The paper's headline gains in average zero-shot accuracy over the best baseline (card §1).
CLAIMED_ACC_PTS = {
    0.25: (2.72, "card §1: +2.72 at 25%, abstract"),
    0.5: (3.61, "card §1: +3.61 at 50%, earlier arXiv version"),
}
#: Card §4 states an order (MoNE ≤ MoNE-zero ≤ deletion), no size: the smallest effect of interest taken
#: here is 5 points of Δppl (5% of the unpruned perplexity), five times what the card calls noise.
CLAIMED_PPL_PTS = 5.0
OFF_SCALE = (
    "a three-domain zoo model, one training seed, 128 held-out windows per source; the card: a one-domain "
    "model, 3 training seeds, ≥ 512 held-out sequences"
)


def _geomean(values: list[float]) -> float:
    import math

    return math.exp(statistics.fmean(math.log(v) for v in values))


def domain_rows(rows: list[dict[str, Any]], bases: dict[str, Any]) -> list[dict[str, Any]]:
    """Each finished row with its in-domain Δppl % (the calibration source's own test split against the
    unpruned model there) and cross-domain Δppl % (geometric mean over the other sources). Under
    :data:`MIXED` calibration every source is in-domain (the geometric mean over all) and none is cross."""
    out = []
    for r in rows:
        if "skipped" in r or r["model"] not in bases:
            continue
        base = bases[r["model"]]["perplexity"]
        if r["source"] == MIXED:
            mixed = _geomean(list(r["perplexity"].values())) / _geomean(list(base.values()))
            out.append({**r, "in_domain_pct": 100 * (mixed - 1), "cross_domain_pct": None})
            continue
        others = [s for s in r["perplexity"] if s != r["source"]]
        out.append(
            {
                **r,
                "in_domain_pct": 100 * (r["perplexity"][r["source"]] / base[r["source"]] - 1),
                "cross_domain_pct": 100
                * (_geomean([r["perplexity"][s] for s in others]) / _geomean([base[s] for s in others]) - 1),
            }
        )
    return out


def _config(r: dict[str, Any]) -> tuple[str, int, int]:
    return r["source"], r["samples"], r["seed"]


def domain_table(drows: list[dict[str, Any]], ratio: float) -> list[str]:
    models = sorted({r["model"] for r in drows})
    lines = [
        "| method | " + " | ".join(f"{m} in-domain | {m} cross-domain" for m in models) + " |",
        "|---|" + "---|---|" * len(models),
    ]
    for method in METHOD_ORDER:
        cells = []
        for model in models:
            mine = [r for r in drows if r["method"] == method and r["model"] == model and r["ratio"] == ratio]
            for field in ("in_domain_pct", "cross_domain_pct"):
                if mine:
                    mean, sd = mean_std([r[field] for r in mine])
                    cells.append(f"{mean:.1f} ± {sd:.1f} ({len(mine)})")
                else:
                    cells.append("–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def claims(drows: list[dict[str, Any]], ratio: float, model: str) -> list[Any]:
    """The verdicts for one model and ratio: MoNE against its best baseline, paired over the
    calibration configurations (source × samples × seed), in-domain Δppl and cloze accuracy."""
    from bench.verdicts import Claim, judge

    mine = [r for r in drows if r["model"] == model and r["ratio"] == ratio]
    by = {(r["method"], _config(r)): r for r in mine}
    configs = sorted({_config(r) for r in mine if r["method"] == "mone"})
    verdicts = []
    effect, source = CLAIMED_ACC_PTS[ratio]
    specs = (
        (
            Claim(
                f"{model}, {ratio:.0%} pruned: MoNE degrades least in-domain",
                "in-domain Δppl %",
                CLAIMED_PPL_PTS,
                "card §4 gives an order, no size; 5 points taken as the smallest effect of interest",
                higher_is_better=False,
                ceiling=0.0,
                off_scale=OFF_SCALE,
            ),
            "in_domain_pct",
        ),
        (
            Claim(
                f"{model}, {ratio:.0%} pruned: MoNE keeps more zero-shot accuracy",
                "cloze Δacc points (all sources)",
                effect,
                source,
                higher_is_better=True,
                ceiling=0.0,
                off_scale=OFF_SCALE,
            ),
            "delta_acc_pts",
        ),
    )
    for claim, field in specs:
        candidates = [b for b in BASELINES if all((b, c) in by for c in configs)]
        if not configs or not candidates:
            continue
        sign = 1 if claim.higher_is_better else -1
        best = max(candidates, key=lambda b: sign * statistics.fmean(by[(b, c)][field] for c in configs))
        seconds = statistics.fmean(
            by[(m, c)].get("seconds", 0.0) + by[(m, c)].get("calibration_seconds", 0.0)
            for m in ("mone", best)
            for c in configs
        )
        verdicts.append(
            judge(
                claim,
                ("mone", [by[("mone", c)][field] for c in configs]),
                (best, [by[(best, c)][field] for c in configs]),
                seconds_per_run=seconds,
            )
        )
    return verdicts


def domain_sections(
    rows: list[dict[str, Any]], bases: dict[str, Any], ratios: tuple[float, ...]
) -> tuple[list[str], list[Any]]:
    """In-domain and cross-domain tables and the computed verdicts, per ratio."""
    from bench import verdicts as rule

    drows = domain_rows(rows, bases)
    lines = [
        "",
        "## In-domain and cross-domain rows",
        "",
        "The mixed metric above averages all three test sources, so two thirds of every number is outside the "
        "calibration domain. Here **in-domain** is the calibration source's own test split (test source = "
        "calibration source) and **cross-domain** the geometric mean over the other two sources, each as Δppl % "
        "over the unpruned model on the same windows; mean ± sd over configurations (count in brackets).",
    ]
    all_verdicts = []
    for ratio in ratios:
        lines += ["", f"### Pruning ratio {ratio:g}", "", *domain_table(drows, ratio)]
    lines += [""]
    for ratio in ratios:
        for model in sorted({r["model"] for r in drows}):
            all_verdicts += claims(drows, ratio, model)
    lines += rule.section("Verdicts on the paper's claims (computed from paired intervals)", all_verdicts)
    lines += [
        "",
        "Pairs: the calibration configurations (source × sample count × calibration seed) MoNE and its best "
        "baseline share; the best baseline is the one with the best mean in that metric among "
        + ", ".join(BASELINES)
        + ". Costs are the cache's measured prune-and-evaluate seconds; the card's setting also needs its "
        "one-domain model trained under 3 seeds (about 11 min each by the card's estimate).",
    ]
    return lines, all_verdicts


#: The per-layer methods MoNE (per layer) is judged against under mixed calibration: the card's baselines
#: and its own ranking with zero novices or the experts deleted (card §4 expects MoNE ≤ MoNE-zero ≤ every
#: deletion method).
MIXED_RIVALS = (*BASELINES, "mone-zero", "mone-delete")
#: MoNE's own ranking with zero novices or deleted experts: compared with, never a "baseline".
ABLATIONS = ("mone-zero", "mone-delete", "mone-delete-global")
#: The rivals of MoNE with global allocation: the same allocation rule on their own scores.
GLOBAL_RIVALS = ("rs", "frequency-global", "ean-global", "reap-global", "mone-delete-global")
MIXED_OFF_SCALE = (
    "a three-domain zoo model, one training seed (pairs are calibration seeds), at most 128 held-out windows "
    "per source; the card: a one-domain model, 3 training seeds, ≥ 512 held-out sequences"
)
MIXED_METRIC = "Δppl % over all three sources (all in-domain)"


def _mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    mean, sd = statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.1f} ± {sd:.1f}"


def _per_layer(rows: list[dict[str, Any]]) -> str:
    """The experts kept per layer, averaged over the rows (seeds): per-layer allocation keeps P everywhere."""
    kept = [r["kept_per_layer"] for r in rows if r.get("kept_per_layer")]
    if not kept:
        return "–"
    return "/".join(f"{statistics.fmean(k[i] for k in kept):.3g}" for i in range(len(kept[0])))


def mixed_table(
    mrows: list[dict[str, Any]], single: list[dict[str, Any]], bases: dict[str, Any], model: str, ratio: float
) -> list[str]:
    """One model and ratio under mixed calibration: the all-source (in-domain) Δppl, each test source's
    Δppl, the cloze change, the experts kept per layer, and the same metric under one-source calibration."""
    mine = [r for r in mrows if r["model"] == model and r["ratio"] == ratio and "skipped" not in r]
    if not mine:
        return []
    base = bases[model]["perplexity"]
    sources = list(base)
    samples = sorted({r["samples"] for r in mine})
    lines = [
        f"### {model}, {ratio:.0%} pruned, mixed calibration",
        "",
        "| method | allocation | seeds | Δppl % all sources (in-domain) | "
        + " | ".join(f"Δppl % {s}" for s in sources)
        + " | Δacc pts | experts kept per layer | one-source calibration, all sources (configs) |",
        "|---|---|---|---|" + "---|" * len(sources) + "---|---|---|",
    ]
    methods = [m for m in (*METHOD_ORDER, *GLOBAL_METHODS) if any(r["method"] == m for r in mine)]
    for method in sorted(methods, key=lambda m: statistics.fmean(r["delta_ppl_pct"] for r in mine if r["method"] == m)):
        rows = [r for r in mine if r["method"] == method]
        per_source = [_mean_sd([100 * (r["perplexity"][s] / base[s] - 1) for r in rows]) for s in sources]
        accs = [r["delta_acc_pts"] for r in rows if r.get("delta_acc_pts") is not None]
        one = [
            r["delta_ppl_pct"]
            for r in single
            if r["model"] == model and r["ratio"] == ratio and r["method"] == method
            if r["samples"] in samples and "skipped" not in r
        ]
        lines.append(
            f"| {method} | {rows[0].get('scope', method_scope(method)[1])} | {len(rows)} | "
            f"{_mean_sd([r['delta_ppl_pct'] for r in rows])} | "
            + " | ".join(per_source)
            + f" | {_mean_sd(accs)} | {_per_layer(rows)} | {_mean_sd(one)}{f' ({len(one)})' if one else ''} |"
        )
    return lines


def _pairs_judged(
    by: dict[tuple[str, Any], dict[str, Any]],
    configs: list[Any],
    method: str,
    rival: str,
    claim: Any,
    field: str,
) -> Any:
    from bench.verdicts import judge

    seconds = statistics.fmean(
        by[(m, c)].get("seconds", 0.0) + by[(m, c)].get("calibration_seconds", 0.0)
        for m in (method, rival)
        for c in configs
    )
    return judge(
        claim,
        (method, [by[(method, c)][field] for c in configs]),
        (rival, [by[(rival, c)][field] for c in configs]),
        seconds_per_run=seconds,
    )


def mixed_claims(mrows: list[dict[str, Any]], ratio: float, model: str) -> list[Any]:
    """MoNE (per layer) against every per-layer rival and MoNE-global against every global rival, paired
    over the calibration seeds (× sample counts) both ran, on the all-source Δppl; and each against its best
    baseline on the cloze accuracy."""
    from bench.verdicts import Claim

    mine = [r for r in mrows if r["model"] == model and r["ratio"] == ratio and "skipped" not in r]
    by = {(r["method"], (r["samples"], r["seed"])): r for r in mine}
    out = []
    for method, rivals, allocation in (("mone", MIXED_RIVALS, "per layer"), ("mone-global", GLOBAL_RIVALS, "global")):
        configs = sorted({c for m, c in by if m == method})
        present = [b for b in rivals if configs and all((b, c) in by for c in configs)]
        for rival in present:
            claim = Claim(
                f"{model}, {ratio:.0%} pruned, mixed calibration: MoNE ({allocation}) degrades less than {rival}",
                MIXED_METRIC,
                CLAIMED_PPL_PTS,
                "card §4 gives an order, no size; 5 points taken as the smallest effect of interest",
                higher_is_better=False,
                ceiling=0.0,
                off_scale=MIXED_OFF_SCALE,
            )
            out.append(_pairs_judged(by, configs, method, rival, claim, "delta_ppl_pct"))
        baselines = [b for b in present if b not in ABLATIONS]
        if baselines:
            effect, source = CLAIMED_ACC_PTS[ratio]
            best = max(baselines, key=lambda b: statistics.fmean(by[(b, c)]["delta_acc_pts"] for c in configs))
            claim = Claim(
                f"{model}, {ratio:.0%} pruned, mixed calibration: MoNE ({allocation}) keeps more zero-shot accuracy",
                "cloze Δacc points (all sources)",
                effect,
                source,
                higher_is_better=True,
                ceiling=0.0,
                off_scale=MIXED_OFF_SCALE,
            )
            out.append(_pairs_judged(by, configs, method, best, claim, "delta_acc_pts"))
    return out


def _best_vs(
    by: dict[tuple[str, Any], dict[str, Any]], configs: list[Any], method: str, rivals: tuple[str, ...], field: str
) -> Any:
    """``method`` judged against the rival with the lowest mean ``field`` (a Δppl), paired over ``configs``."""
    from bench.verdicts import Claim

    present = [b for b in rivals if configs and all((b, c) in by for c in configs)]
    if not present or not all((method, c) in by for c in configs):
        return None
    best = min(present, key=lambda b: statistics.fmean(by[(b, c)][field] for c in configs))
    claim = Claim("", field, CLAIMED_PPL_PTS, "card §4", higher_is_better=False, ceiling=0.0, off_scale="zoo")
    return _pairs_judged(by, configs, method, best, claim, field)


def verdict_changes(
    mrows: list[dict[str, Any]], single: list[dict[str, Any]], bases: dict[str, Any]
) -> tuple[list[str], list[dict[str, Any]]]:
    """How MoNE against its best baseline moves from one-source calibration (judged on every source, the
    report that called MoNE refuted, and in-domain only) to mixed calibration (every source in-domain) and to
    global allocation: the paired mean difference and its interval in each (d > 0: MoNE better)."""
    dsingle = domain_rows(single, bases)
    lines = [
        "| model | pruned | one-source calibration, all sources | one-source calibration, in-domain | "
        "mixed calibration, MoNE per layer | mixed calibration, MoNE global |",
        "|---|---|---|---|---|---|",
    ]
    data = []
    for model in sorted({r["model"] for r in mrows}):
        for ratio in sorted({r["ratio"] for r in mrows}):
            one = [r for r in dsingle if r["model"] == model and r["ratio"] == ratio]
            by_one = {(r["method"], _config(r)): r for r in one}
            one_configs = sorted({_config(r) for r in one if r["method"] == "mone"})
            mix = [r for r in mrows if r["model"] == model and r["ratio"] == ratio and "skipped" not in r]
            by_mix = {(r["method"], (r["samples"], r["seed"])): r for r in mix}
            mix_configs = sorted({c for m, c in by_mix if m == "mone"})
            glob_configs = sorted({c for m, c in by_mix if m == "mone-global"})
            cells = {
                "one-source, all sources": _best_vs(by_one, one_configs, "mone", BASELINES, "delta_ppl_pct"),
                "one-source, in-domain": _best_vs(by_one, one_configs, "mone", BASELINES, "in_domain_pct"),
                "mixed, per layer": _best_vs(by_mix, mix_configs, "mone", BASELINES, "delta_ppl_pct"),
                "mixed, global": _best_vs(by_mix, glob_configs, "mone-global", GLOBAL_RIVALS[:4], "delta_ppl_pct"),
            }
            texts = [_change_cell(v) for v in cells.values()]
            lines.append(f"| {model} | {ratio:.0%} | " + " | ".join(texts) + " |")
            data.append(
                {
                    "model": model,
                    "ratio": ratio,
                    **{
                        name: None
                        if v is None
                        else {"baseline": v.baseline, "pairs": v.pairs.n, "mean_diff": v.pairs.mean, "ci95": v.interval}
                        for name, v in cells.items()
                    },
                }
            )
    return lines, data


def change_readings(mrows: list[dict[str, Any]], single: list[dict[str, Any]]) -> list[str]:
    """Per model and ratio, from the rows: MoNE's all-source Δppl under one-source calibration (same sample
    count) and under mixed calibration at both allocations, the best rival of each allocation, and novices
    against deletion at MoNE's own ranking."""

    def mean(rows: list[dict[str, Any]], method: str) -> float | None:
        values = [r["delta_ppl_pct"] for r in rows if r["method"] == method and "skipped" not in r]
        return statistics.fmean(values) if values else None

    lines = []
    for model in sorted({r["model"] for r in mrows}):
        for ratio in sorted({r["ratio"] for r in mrows}):
            mix = [r for r in mrows if r["model"] == model and r["ratio"] == ratio]
            samples = {r["samples"] for r in mix}
            one = [r for r in single if r["model"] == model and r["ratio"] == ratio and r["samples"] in samples]
            values = {m: mean(mix, m) for m in {r["method"] for r in mix}}
            layer = {m: v for m, v in values.items() if v is not None and m in BASELINES}
            wide = {m: v for m, v in values.items() if v is not None and m in GLOBAL_RIVALS and m not in ABLATIONS}
            needed = (values.get("mone"), values.get("mone-global"), mean(one, "mone"))
            if any(v is None for v in needed) or not layer or not wide:
                continue
            best_layer, best_wide = min(layer, key=layer.get), min(wide, key=wide.get)
            deleted = {m: "–" if values.get(m) is None else f"{values[m]:.1f}" for m in ABLATIONS}

            lines.append(
                f"- {model}, {ratio:.0%} pruned: MoNE's all-source Δppl is {needed[2]:.1f} % under one-source "
                f"calibration ({'/'.join(map(str, sorted(samples)))} sequences), {needed[0]:.1f} % under mixed "
                f"calibration per layer and {needed[1]:.1f} % with global allocation. Best baseline against MoNE "
                f"per layer: {best_layer} {layer[best_layer]:.1f} %; best baseline at global allocation: "
                f"{best_wide} {wide[best_wide]:.1f} %. "
                f"Novices against deletion at MoNE's ranking: {needed[0]:.1f} vs {deleted['mone-delete']} per layer, "
                f"{needed[1]:.1f} vs {deleted['mone-delete-global']} global."
            )
    pairs = [
        (mean(mix, m), mean(mix, m + GLOBAL))
        for model in sorted({r["model"] for r in mrows})
        for ratio in sorted({r["ratio"] for r in mrows})
        if (mix := [r for r in mrows if r["model"] == model and r["ratio"] == ratio])
        for m in (method_scope(g)[0] for g in GLOBAL_METHODS)
    ]
    pairs = [(layer, wide) for layer, wide in pairs if layer is not None and wide is not None]
    if pairs:
        lower = sum(wide < layer for layer, wide in pairs)
        lines.append(
            f"- Allocation: the global variant has the lower mean all-source Δppl for {lower} of {len(pairs)} "
            "rankings (method × model × ratio) against the same ranking per layer."
        )
    return lines


def _change_cell(v: Any) -> str:
    import math

    if v is None:
        return "–"
    low, high = v.interval
    if not math.isfinite(low):
        return f"vs {v.baseline}: {v.pairs.mean:+.1f} (n = {v.pairs.n})"
    side = "MoNE better" if low > 0 else f"{v.baseline} better" if high < 0 else "interval holds 0"
    return f"vs {v.baseline}: {v.pairs.mean:+.1f} [{low:+.1f}, {high:+.1f}], n = {v.pairs.n} ({side})"


def mixed_sections(
    mrows: list[dict[str, Any]], single: list[dict[str, Any]], bases: dict[str, Any], spec: Tier
) -> tuple[list[str], list[Any], list[dict[str, Any]]]:
    """The mixed-calibration study: its tables, verdicts (paired over calibration seeds) and the comparison
    with the one-source verdicts."""
    from bench import verdicts as rule
    from mlcore.data.registry import TEXT_SOURCES

    mrows = [r for r in mrows if r["model"] in bases]
    if not mrows:
        return [], [], []
    shares = ", ".join(f"{n} {s}" for s, n in mixed_shares(spec.samples[0], TEXT_SOURCES).items())
    lines = [
        "## Mixed calibration (equal shares of the three sources) and MoNE with global allocation",
        "",
        f"Calibration: {', '.join(map(str, spec.samples))} windows of 128 tokens drawn in equal shares ({shares}) "
        f"from the three calibration splits, calibration seeds {', '.join(map(str, spec.seeds))} (a seed draws "
        "the windows and random's subset): the analogue of the paper's general-corpus calibration for models "
        "trained on all three sources. Every test source is then in-domain, so the in-domain metric is the "
        "Δppl % of the geometric mean over the three test sources (the tables' mixed metric). **Allocation**: "
        "*layer* keeps P experts in every layer; *global* ranks every expert of the model by the method's own "
        "score against one threshold (P × layers in all, at least top-k per layer), as RS always does. The "
        "equal-share draw stops at 3 × 76 windows (the documentation corpus's calibration split), so the card's "
        "256-sequence setting has no mixed counterpart. Last column: the same metric for the same method under "
        "one-source calibration (shakespeare or stdlib-source, same sample count, seeds 0–2) from the grid above.",
    ]
    ratios = sorted({r["ratio"] for r in mrows})
    models = sorted({r["model"] for r in mrows})
    for model in models:
        for ratio in ratios:
            lines += ["", *mixed_table(mrows, single, bases, model, ratio)]
    found = [v for model in models for ratio in ratios for v in mixed_claims(mrows, ratio, model)]
    lines += ["", *rule.section("Verdicts under mixed calibration (paired over calibration seeds)", found, level="###")]
    change_lines, changes = verdict_changes(mrows, single, bases)
    lines += [
        "",
        "### What mixed calibration and global allocation change",
        "",
        "MoNE against the best baseline of each setting by mean Δppl (paired mean difference in Δppl points, "
        "d > 0: MoNE degrades less, [95% paired t interval], n pairs). One-source columns pair over source × "
        "sample count × seed (the verdict table above); the mixed columns over calibration seeds. Every cell "
        "stays *inconclusive at this scale* under the rule (a three-domain model, one training seed); the "
        "reference-like setting (`compress-reference`) is the one that can decide.",
        "",
        *change_lines,
        "",
        *change_readings(mrows, single),
        "",
        "Why the intervals move while the labels stay: the one-source verdicts scored MoNE on every source after "
        "calibrating on one, and MoNE's novices are the experts that source uses least while the other sources keep "
        "routing to them (novice gate mass, next section), so a constant answered much of the other domains' "
        "traffic; the deletion baselines re-route those tokens to surviving experts instead. Mixed calibration puts "
        "every source's traffic into the statistics: MoNE's gap to the best baseline on all sources shrinks from the "
        "first column to the third, and the comparison becomes the in-domain one the card means. Global allocation "
        "changes which layers lose experts: per layer, every layer "
        "gives up the same count; model-wide, layers whose experts all score high keep more (experts kept per "
        "layer). Every label stays *inconclusive at this scale* because the zoo models are three-domain with one "
        "training seed; `compress-reference` is the setting that can decide.",
    ]
    return lines, found, changes


def prepare_folder(folder: Path, spec: Tier, sources: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Load a checkpoint folder, its tokenizer and held-out set (every built-in source unless ``sources``
    says which), and score the unpruned model once."""
    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.hf import load_model
    from mlcore.zoo.tokenizer import load_hf_tokenizer

    model, tokenizer = load_model(folder), load_hf_tokenizer(folder)
    heldout = prepare_heldout(
        tokenizer, sources or TEXT_SOURCES, length=128, windows=spec.eval_windows, cloze_items=spec.cloze_items
    )
    return {"model": model, "tokenizer": tokenizer, "heldout": heldout, "base": heldout.evaluate(model, tokenizer)}


def run(tier: str, results: Path) -> None:
    from mlcore.catalog import materialize
    from mlcore.zoo.registry import MODELS

    spec, mixed = TIERS[tier], MIXED_TIERS[tier]
    # One held-out set per model serves both grids, so their rows compare on the same windows.
    assert (spec.eval_windows, spec.cloze_items) == (mixed.eval_windows, mixed.cloze_items)
    cache = full_tier_cache(CACHE, tier)
    items = {item.name: item for item in MODELS}
    started = time.perf_counter()
    budget = float(os.environ.get("MOELAB_BENCH_BUDGET_S", "inf"))
    rows: list[dict[str, Any]] = []
    bases: dict[str, Any] = {}
    states: dict[str, dict[str, Any]] = {}
    complete = True
    # MOELAB_BENCH_MODELS=a,b restricts the models, to split a full study across processes sharing the cache.
    only = [m for m in os.environ.get("MOELAB_BENCH_MODELS", "").split(",") if m]
    for grid in (spec, mixed):
        models = [m for m in grid.models if not only or m in only]
        for model_name, source, samples, seed in group_order(grid, models):
            if model_name not in states:
                states[model_name] = prepare_folder(materialize(items[model_name]), spec)
                bases[model_name] = states[model_name]["base"]
            compute = time.perf_counter() - started < budget
            group = run_group(model_name, source, samples, seed, grid, cache, states[model_name], compute=compute)
            complete = complete and len(group) == len(grid.ratios) * len(grid.methods)
            rows += group
    elapsed = time.perf_counter() - started
    _write(tier, spec, rows, bases, elapsed, complete, results)


def _write(
    tier: str,
    spec: Tier,
    rows: list[dict[str, Any]],
    bases: dict[str, Any],
    elapsed: float,
    complete: bool,
    results: Path,
) -> None:
    from bench import verdicts as rule
    from bench.compress_traffic import report as traffic_report

    single = [r for r in rows if r["source"] != MIXED]
    mixed = [r for r in rows if r["source"] == MIXED]
    summary = summarise(single, spec.ratios)
    body = _markdown(tier, spec, summary, bases, elapsed, sum(r.get("seconds", 0.0) for r in rows))
    domain_lines, verdicts = domain_sections(single, bases, spec.ratios)
    mixed_lines, mixed_verdicts, changes = mixed_sections(mixed, single, bases, MIXED_TIERS[tier])
    traffic_lines, traffic = traffic_report(results)
    body += "\n".join(domain_lines) + "\n\n" + "\n".join(mixed_lines) + "\n"
    body += "\n" + "\n".join(traffic_lines) + "\n" if traffic_lines else ""
    if not complete:
        body += (
            f"\n**Partial study**: {len(rows)} configurations finished (MOELAB_BENCH_BUDGET_S stopped new ones); "
            "run `make bench-compress FULL=1` again to resume from bench/cache/compress.jsonl. Until the grid is "
            "complete, the spreads and per-dimension means mix the other dimensions' settings.\n"
        )
    data = {
        "tier": tier,
        "complete": complete,
        "summary": summary,
        "bases": bases,
        "rows": rows,
        "verdicts": rule.as_json(verdicts),
        "mixed_verdicts": rule.as_json(mixed_verdicts),
        "verdict_changes": changes,
        "novice_traffic": traffic,
    }
    write_results(results, "compress", body, data)
    print(body)


def report_from_cache(results: Path) -> None:
    """Rebuild ``compress.md`` from the cached full-tier rows and the unpruned models' scores the last
    full run recorded in ``compress.json``; nothing is pruned or evaluated."""
    spec = TIERS["full"]
    previous = json.loads((results / "compress.json").read_text())
    bases = previous["bases"]
    rows, complete = [], True
    for grid in (spec, MIXED_TIERS["full"]):
        for model, source, samples, seed in group_order(grid, list(grid.models)):
            for ratio in grid.ratios:
                for method in grid.methods:
                    found = CACHE.get(_key(model, source, samples, seed, method, ratio, grid))
                    complete = complete and found is not None
                    if found is not None:
                        rows.append(found)
    _write("full", spec, rows, bases, 0.0, complete, results)
