"""``make bench-compress-seeds``: does the pruning study's conclusion survive retraining the zoo model?

The MoNE card (§4) asks to confirm the benchmark's conclusions on three *training* seeds once. The
study takes ``moe-lm-tiny`` trained by the same recipe under training seeds 0 (the committed
checkpoint), 1 and 2 (``python -m mlcore.zoo train moe-lm-tiny --seed N``, written to
``var/zoo-seeds/``) and prunes each with every method at ratios 0.25 and 0.5 from one calibration
(shakespeare, 64 sequences, calibration seed 0), scored on the full tier's held-out evaluation.
It reports per method the Δppl % under each training seed with mean ± sd, MoNE's rank per seed,
and whether the card's expected order (MoNE ≤ MoNE-zero ≤ every deletion method) holds.

Pruning and scoring are :mod:`bench.compress`'s own; the full tier caches each finished
configuration in ``bench/cache/compress-seeds.jsonl`` and resumes; ``MOELAB_BENCH_SEEDS=1,2`` restricts
the training seeds (one process per seed, sharing the cache). A training seed whose checkpoint
is missing is reported with the command that trains it, and the rest of the study still runs.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import full_tier_cache, write_results
from bench.compress import METHOD_ORDER, TIERS, Tier, mean_std, prepare_folder, run_group

CACHE = Store.named("compress-seeds")
RECIPE = "moe-lm-tiny"
TRAINING_SEEDS = (0, 1, 2)
#: Methods that delete the pruned experts (HC-SMoE merges them; MoNE and MoNE-zero substitute a constant).
DELETION = ("mone-delete", "random", "frequency", "rs", "ean", "reap", "naee")


def _tier(eval_windows: int, cloze_items: int) -> Tier:
    # One calibration setting: the full tier's base (first source, middle sample count, first seed).
    full = TIERS["full"]
    base_samples = full.samples[len(full.samples) // 2]
    return Tier((RECIPE,), full.ratios, full.sources[:1], (base_samples,), full.seeds[:1], eval_windows, cloze_items)


SEED_TIERS = {
    "quick": _tier(TIERS["quick"].eval_windows, TIERS["quick"].cloze_items),
    "full": _tier(TIERS["full"].eval_windows, TIERS["full"].cloze_items),
}


def seed_checkpoint(seed: int) -> tuple[str, Path | None]:
    """The run name and verified checkpoint of ``moe-lm-tiny`` under training seed ``seed``
    (no folder if that seed has not been trained)."""
    from mlcore.zoo.lm import checkpoint_folder, verify_manifest
    from mlcore.zoo.recipes import get_recipe

    recipe = get_recipe(RECIPE).with_seed(seed)
    folder = checkpoint_folder(recipe)
    if not (folder / "manifest.json").is_file():
        return recipe.run_name, None
    verify_manifest(folder)
    return recipe.run_name, folder


def summarise_seeds(rows: list[dict[str, Any]], ratios: tuple[float, ...]) -> dict[str, Any]:
    """Per ratio: each method's Δppl % by training seed with mean ± sd over seeds, MoNE's rank per
    seed, and per seed whether MoNE ≤ MoNE-zero ≤ the best deletion method."""
    summary: dict[str, Any] = {}
    for ratio in ratios:
        scored = [r for r in rows if r["ratio"] == ratio and "skipped" not in r]
        seeds = sorted({r["training_seed"] for r in scored})
        methods: dict[str, Any] = {}
        for method in METHOD_ORDER:
            by_seed = {r["training_seed"]: r["delta_ppl_pct"] for r in scored if r["method"] == method}
            if by_seed:
                methods[method] = {"by_seed": by_seed, "delta_ppl_pct": mean_std(list(by_seed.values()))}
        ranks, order = {}, {}
        for seed in seeds:
            delta = {m: e["by_seed"][seed] for m, e in methods.items() if seed in e["by_seed"]}
            ranked = sorted(delta, key=delta.get)
            if "mone" in delta:
                ranks[seed] = {"mone": ranked.index("mone") + 1, "of": len(ranked), "best": ranked[0]}
            deletion = [delta[m] for m in DELETION if m in delta]
            if {"mone", "mone-zero"} <= set(delta) and deletion:
                checks = {
                    "mone <= mone-zero": delta["mone"] <= delta["mone-zero"],
                    "mone-zero <= deletion": delta["mone-zero"] <= min(deletion),
                    "mone <= deletion": delta["mone"] <= min(deletion),
                }
                order[seed] = {**checks, "holds": checks["mone <= mone-zero"] and checks["mone-zero <= deletion"]}
        summary[f"{ratio:g}"] = {"seeds": seeds, "methods": methods, "mone_rank": ranks, "expected_order": order}
    return summary


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _markdown(tier_name: str, tier: Tier, summary: dict[str, Any], bases: dict[int, Any], missing: list[int]) -> str:
    lines = [
        "# Expert pruning across training seeds (MoNE and baselines)",
        "",
        f"Tier **{tier_name}**: `{RECIPE}` trained by the same recipe under training seeds "
        f"{', '.join(map(str, bases))} (seed 0 is the committed checkpoint); calibration {tier.sources[0]}, "
        f"{tier.samples[0]} sequences, calibration seed {tier.seeds[0]}; {tier.eval_windows} held-out windows of "
        f"128 tokens per source, {tier.cloze_items} cloze items per source.",
        "",
        "Unpruned models:",
        "",
        "| training seed | mean ppl | cloze acc |",
        "|---|---|---|",
        *(f"| {s} | {b['ppl_mean']:.2f} | {100 * b.get('acc', float('nan')):.1f}% |" for s, b in bases.items()),
    ]
    for ratio, entry in summary.items():
        seeds = entry["seeds"]
        lines += [
            "",
            f"## Pruning ratio {ratio}",
            "",
            "Δppl: increase of the mean held-out perplexity over the same seed's unpruned model (%); mean ± sd "
            "(population) across training seeds; sorted by the mean.",
            "",
            "| method | " + " | ".join(f"seed {s}" for s in seeds) + " | mean ± sd |",
            "|---|" + "---|" * len(seeds) + "---|",
        ]
        for method, e in sorted(entry["methods"].items(), key=lambda kv: kv[1]["delta_ppl_pct"][0]):
            cells = [f"{e['by_seed'][s]:.1f}" if s in e["by_seed"] else "–" for s in seeds]
            mean, sd = e["delta_ppl_pct"]
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {mean:.1f} ± {sd:.1f} |")
        lines += [
            "",
            "| training seed | MoNE rank | best method | MoNE ≤ MoNE-zero | MoNE-zero ≤ deletion | MoNE ≤ deletion "
            "| expected order holds |",
            "|---|---|---|---|---|---|---|",
        ]
        for seed in seeds:
            rank, order = entry["mone_rank"].get(seed), entry["expected_order"].get(seed)
            if rank is None or order is None:
                continue
            lines.append(
                f"| {seed} | {rank['mone']} of {rank['of']} | {rank['best']} | {_mark(order['mone <= mone-zero'])} | "
                f"{_mark(order['mone-zero <= deletion'])} | {_mark(order['mone <= deletion'])} | "
                f"{_mark(order['holds'])} |"
            )
        lines += ["", _verdict(entry)]
    lines += [
        "",
        "Deletion methods: " + ", ".join(DELETION) + ' ("≤ deletion" compares with the best of them).',
    ]
    if missing:
        commands = "; ".join(f"`python -m mlcore.zoo train {RECIPE} --seed {s} --threads 1`" for s in missing)
        lines += ["", f"**Incomplete**: no checkpoint for training seed(s) {missing}; train with {commands}."]
    return "\n".join(lines) + "\n"


def _verdict(entry: dict[str, Any]) -> str:
    """One sentence from the data: MoNE's ranks across training seeds and how often the expected order held."""
    ranks = entry["mone_rank"]
    if not ranks:
        return "MoNE was not run."
    held = sum(o["holds"] for o in entry["expected_order"].values())
    listed = ", ".join(f"{r['mone']}" for r in ranks.values())
    best = sorted({r["best"] for r in ranks.values()})
    seeds = "training seed" + ("s" if len(ranks) > 1 else "")
    return (
        f"MoNE ranks {listed} of {next(iter(ranks.values()))['of']} on {seeds} {', '.join(map(str, ranks))}; "
        f"best method: {', '.join(best)}; the expected order of the means holds on {held} of "
        f"{len(entry['expected_order'])} {seeds} (a per-seed ranking; the verdict is the interval table below)."
    )


def seed_claims(rows: list[dict[str, Any]], bases: dict[int, Any], ratios: tuple[float, ...]) -> list[Any]:
    """MoNE against its best baseline, paired by training seed: in-domain Δppl (the calibration source's own
    test split) and the mixed metric of the tables above."""
    from bench.compress import BASELINES, CLAIMED_PPL_PTS, OFF_SCALE, domain_rows
    from bench.verdicts import Claim, judge

    keyed = [{**r, "model": str(r["training_seed"])} for r in rows]
    drows = domain_rows(keyed, {str(seed): base for seed, base in bases.items()})
    out = []
    for ratio in ratios:
        mine = [r for r in drows if r["ratio"] == ratio]
        by = {(r["method"], r["training_seed"]): r for r in mine}
        seeds = sorted({r["training_seed"] for r in mine if r["method"] == "mone"})
        for field, metric in (("in_domain_pct", "in-domain Δppl %"), ("delta_ppl_pct", "mixed Δppl % (all sources)")):
            candidates = [b for b in BASELINES if all((b, s) in by for s in seeds)]
            if not seeds or not candidates:
                continue
            best = min(candidates, key=lambda b: statistics.fmean(by[(b, s)][field] for s in seeds))
            claim = Claim(
                f"{ratio:.0%} pruned: MoNE degrades least ({metric.split(' Δ')[0]})",
                metric,
                CLAIMED_PPL_PTS,
                "card §4 gives an order, no size; 5 points taken as the smallest effect of interest",
                higher_is_better=False,
                ceiling=0.0,
                off_scale=OFF_SCALE.replace("one training seed, ", ""),
            )
            seconds = statistics.fmean(
                by[(m, s)].get("seconds", 0.0) + by[(m, s)].get("calibration_seconds", 0.0)
                for m in ("mone", best)
                for s in seeds
            )
            out.append(
                judge(
                    claim,
                    ("mone", [by[("mone", s)][field] for s in seeds]),
                    (best, [by[(best, s)][field] for s in seeds]),
                    seconds_per_run=seconds,
                )
            )
    return out


def _write(
    tier: str,
    spec: Tier,
    rows: list[dict[str, Any]],
    bases: dict[int, Any],
    missing: list[int],
    note: str,
    results: Path,
) -> None:
    from bench import verdicts as rule

    summary = summarise_seeds(rows, spec.ratios)
    body = _markdown(tier, spec, summary, bases, missing)
    found = seed_claims(rows, bases, spec.ratios)
    body += "\n" + "\n".join(rule.section("Verdicts (paired by training seed)", found)) + "\n"
    body += note
    complete = sorted(bases) == list(TRAINING_SEEDS)
    data = {"tier": tier, "complete": complete, "missing_seeds": missing, "summary": summary}
    data["verdicts"] = rule.as_json(found)
    write_results(results, "compress-seeds", body, {**data, "bases": bases, "rows": rows})
    print(body)


def report_from_cache(results: Path) -> None:
    """``python -m bench compress-seeds --report``: the report from the cached rows and the unpruned scores the
    last full run recorded in ``compress-seeds.json``; nothing is trained, pruned or evaluated."""
    from bench.compress import METHOD_ORDER, _key
    from mlcore.zoo.recipes import get_recipe

    spec = SEED_TIERS["full"]
    previous = json.loads((results / "compress-seeds.json").read_text())
    bases = {int(seed): base for seed, base in previous["bases"].items()}
    rows: list[dict[str, Any]] = []
    for seed in sorted(bases):
        name = get_recipe(RECIPE).with_seed(seed).run_name
        for ratio in spec.ratios:
            for method in METHOD_ORDER:
                key = _key(name, spec.sources[0], spec.samples[0], spec.seeds[0], method, ratio, spec)
                if (found := CACHE.get(key)) is not None:
                    rows.append({**found, "training_seed": seed})
    missing = [s for s in TRAINING_SEEDS if s not in bases]
    _write(
        "full",
        spec,
        rows,
        bases,
        missing,
        "\nRebuilt from the cache (`python -m bench compress-seeds --report`).\n",
        results,
    )


def run(tier: str, results: Path) -> None:
    spec = SEED_TIERS[tier]
    cache = full_tier_cache(CACHE, tier)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    bases: dict[int, Any] = {}
    missing: list[int] = []
    # MOELAB_BENCH_SEEDS=1,2 restricts the training seeds, to split the study across processes sharing the cache.
    only = [int(s) for s in os.environ.get("MOELAB_BENCH_SEEDS", "").split(",") if s]
    for seed in (s for s in TRAINING_SEEDS if not only or s in only):
        name, folder = seed_checkpoint(seed)
        if folder is None:
            missing.append(seed)
            continue
        state = prepare_folder(folder, spec)
        bases[seed] = state["base"]
        group = run_group(name, spec.sources[0], spec.samples[0], spec.seeds[0], spec, cache, state)
        rows += [{**row, "training_seed": seed} for row in group]
    note = ""
    if only:
        note += f"\n**Partial**: MOELAB_BENCH_SEEDS={','.join(map(str, only))} restricted the training seeds.\n"
    note += f"\nThis run {(time.perf_counter() - started) / 60:.1f} min.\n"
    _write(tier, spec, rows, bases, missing, note, results)
