"""``make bench-compress``: MoNE's three-dimension robustness study on the zoo's MoE models.

Grid: methods × pruning ratio × calibration source × calibration sample count × architecture ×
seed. A seed draws which calibration sequences are used (and the random baseline's subset), so
the spread over seeds is the sensitivity to the calibration sample. For every configuration the
compressed model is scored on held-out text from every built-in source (mean perplexity, reported
as the increase over the unpruned model in percent) and on the cloze suite (accuracy drop in
points). Calibration runs once per (architecture, source, samples, seed) and serves every method.

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


@dataclass(frozen=True)
class Tier:
    models: tuple[str, ...]
    ratios: tuple[float, ...]
    sources: tuple[str, ...]
    samples: tuple[int, ...]
    seeds: tuple[int, ...]
    eval_windows: int
    cloze_items: int


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


def calibration_windows(tokenizer: Any, source: str, samples: int, seed: int, length: int = 128) -> Any:
    """``samples`` windows drawn (seeded) from the non-overlapping windows of ``source``'s calibration split."""
    import torch

    from mlcore.data.textset import source_splits
    from mlcore.eval.perplexity import heldout_windows

    pool = heldout_windows(tokenizer, source_splits((source,), "calibration")[source], length=length, max_windows=4096)
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
    from mlcore.compress.methods import NEEDS_LAYER_INPUTS, compressed_copy, make_plan
    from mlcore.compress.naee import CALIBRATION_ROWS, MAX_SUBSETS
    from mlcore.compress.plan import experts_to_keep
    from mlcore.hf import adapt

    model, tokenizer, heldout, base = state["model"], state["tokenizer"], state["heldout"], state["base"]
    adapter = adapt(model)
    num_experts, top_k = adapter.layers[0].num_experts, adapter.layers[0].top_k
    rows, todo = [], []
    for ratio in tier.ratios:
        for method in METHOD_ORDER:
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
        if method in NEEDS_LAYER_INPUTS and math.comb(num_experts, keep) > MAX_SUBSETS:
            row["skipped"] = f"C({num_experts}, {keep}) subsets is too many to enumerate"
        else:
            started = time.perf_counter()
            plan = make_plan(method, adapter, calibration, keep, scope="layer", seed=seed)
            compressed, _ = compressed_copy(model, plan)
            result = heldout.evaluate(compressed, tokenizer)
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
    unpruned model there) and cross-domain Δppl % (geometric mean over the other sources)."""
    out = []
    for r in rows:
        if "skipped" in r or r["model"] not in bases:
            continue
        base = bases[r["model"]]["perplexity"]
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


def prepare_folder(folder: Path, spec: Tier) -> dict[str, Any]:
    """Load a checkpoint folder, its tokenizer and held-out set, and score the unpruned model once."""
    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.hf import load_model
    from mlcore.zoo.tokenizer import load_hf_tokenizer

    model, tokenizer = load_model(folder), load_hf_tokenizer(folder)
    heldout = prepare_heldout(
        tokenizer, TEXT_SOURCES, length=128, windows=spec.eval_windows, cloze_items=spec.cloze_items
    )
    return {"model": model, "tokenizer": tokenizer, "heldout": heldout, "base": heldout.evaluate(model, tokenizer)}


def run(tier: str, results: Path) -> None:
    from mlcore.catalog import materialize
    from mlcore.zoo.registry import MODELS

    spec = TIERS[tier]
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
    models = [m for m in spec.models if not only or m in only]
    for model_name, source, samples, seed in group_order(spec, models):
        if model_name not in states:
            states[model_name] = prepare_folder(materialize(items[model_name]), spec)
            bases[model_name] = states[model_name]["base"]
        compute = time.perf_counter() - started < budget
        group = run_group(model_name, source, samples, seed, spec, cache, states[model_name], compute=compute)
        complete = complete and len(group) == len(spec.ratios) * len(METHOD_ORDER)
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

    summary = summarise(rows, spec.ratios)
    body = _markdown(tier, spec, summary, bases, elapsed, sum(r.get("seconds", 0.0) for r in rows))
    domain_lines, verdicts = domain_sections(rows, bases, spec.ratios)
    traffic_lines, traffic = traffic_report(results)
    body += "\n".join(domain_lines) + "\n" + ("\n" + "\n".join(traffic_lines) + "\n" if traffic_lines else "")
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
    for model, source, samples, seed in group_order(spec, list(spec.models)):
        for ratio in spec.ratios:
            for method in METHOD_ORDER:
                found = CACHE.get(_key(model, source, samples, seed, method, ratio, spec))
                complete = complete and found is not None
                if found is not None:
                    rows.append(found)
    _write("full", spec, rows, bases, 0.0, complete, results)
