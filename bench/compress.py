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
        f"{tier.cloze_items} cloze items per source (4 choices). This run {elapsed / 60:.1f} min; the "
        f"configurations took {compute / 60:.1f} min of pruning and evaluation in all (cached ones included).",
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
    """One sentence that says, from the data, whether MoNE degraded least and varied least."""
    if "mone" not in per_method:
        return "MoNE was not run."
    by_mean = sorted(per_method, key=lambda m: per_method[m]["delta_ppl_pct"][0])
    rank_mean = by_mean.index("mone") + 1
    verdict = f"MoNE ranks {rank_mean} of {len(by_mean)} by mean Δppl (best: {by_mean[0]})"
    if per_method["mone"]["configs"] < 2:
        verdict += "; its spread needs more than one configuration (the full tier)."
    else:
        by_std = sorted(per_method, key=lambda m: per_method[m]["delta_ppl_pct"][1])
        verdict += f" and {by_std.index('mone') + 1} of {len(by_std)} by its spread (steadiest: {by_std[0]})."
    return verdict + ("" if rank_mean == 1 else " The paper's expectation (MoNE degrades least) does not hold here.")


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
    summary = summarise(rows, spec.ratios)
    body = _markdown(tier, spec, summary, bases, elapsed, sum(r.get("seconds", 0.0) for r in rows))
    if not complete:
        body += (
            f"\n**Partial study**: {len(rows)} configurations finished (MOELAB_BENCH_BUDGET_S stopped new ones); "
            "run `make bench-compress FULL=1` again to resume from bench/cache/compress.jsonl. Until the grid is "
            "complete, the spreads and per-dimension means mix the other dimensions' settings.\n"
        )
    data = {"tier": tier, "complete": complete, "summary": summary, "bases": bases, "rows": rows}
    write_results(results, "compress", body, data)
    print(body)
