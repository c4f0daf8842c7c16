"""``pointcloud.md``'s tables and prose: mIoU by dataset, expert usage, throughput, non-finite
losses, and the sections on the card-scale tiers."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.pointcloud.tiers import SEEN, TIERS, ZERO_SHOT


def _mean_std(values: list[float]) -> str:
    if not values:
        return "—"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def summarise(runs: list[dict[str, Any]], configs: tuple[str, ...]) -> tuple[list[str], dict[str, Any]]:
    lines = [
        "| configuration | params (active) | "
        + " | ".join(SEEN)
        + " | seen mean | "
        + " | ".join(f"{z} (zero-shot)" for z in ZERO_SHOT)
        + " | zero-shot mean | seeds |",
        "|---" * (len(SEEN) + len(ZERO_SHOT) + 5) + "|",
    ]
    table: dict[str, Any] = {}
    for config in configs:
        rs = [r for r in runs if r["config"] == config]
        if not rs:
            lines.append(
                f"| {config} | not run | " + " | ".join("—" for _ in range(len(SEEN) + len(ZERO_SHOT) + 2)) + " | 0 |"
            )
            continue
        per = {n: [r["miou"][n] for r in rs] for n in (*SEEN, *ZERO_SHOT)}
        seen = [statistics.mean(r["miou"][n] for n in SEEN) for r in rs]
        zero = [statistics.mean(r["miou"][n] for n in ZERO_SHOT) for r in rs]
        p = rs[0]["parameters"]
        table[config] = {"per_dataset": per, "seen": seen, "zero_shot": zero, "parameters": p}
        lines.append(
            f"| {config} | {p['total'] / 1e3:.0f}k ({p['active'] / 1e3:.0f}k) | "
            + " | ".join(_mean_std(per[n]) for n in SEEN)
            + f" | **{_mean_std(seen)}** | "
            + " | ".join(_mean_std(per[n]) for n in ZERO_SHOT)
            + f" | **{_mean_std(zero)}** | {len(rs)} |"
        )
    return lines, table


def usage_lines(runs: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| configuration (seed) | layer | " + " | ".join((*SEEN, *ZERO_SHOT)) + " |",
        "|---" * (len(SEEN) + len(ZERO_SHOT) + 2) + "|",
    ]
    for r in runs:
        if not r["usage"]:
            continue
        layers = len(next(iter(r["usage"].values())))
        for li in sorted({0, layers - 1}):
            cells = []
            for n in (*SEEN, *ZERO_SHOT):
                share = r["usage"][n][li]
                cells.append(" / ".join(f"{s:.2f}" for s in share))
            lines.append(f"| {r['config']} (s{r['seed']}) | {li + 1} of {layers} | " + " | ".join(cells) + " |")
    return lines


def usage_chart_png(run: dict[str, Any], path: Path) -> bool:
    """The expert-usage-by-dataset chart of one run (first and last MoE layer) as a PNG, drawn from
    the ``pointcloud-train`` job's Vega-Lite chart; False when the run has no routing."""
    import vl_convert

    from mlcore.jobs.pointcloud_train import usage_chart

    if not run.get("usage"):
        return False
    layers = len(next(iter(run["usage"].values())))
    keep = sorted({0, layers - 1})
    usage = {name: [shares[i] for i in keep] for name, shares in run["usage"].items()}
    spec = usage_chart(usage, [i + 1 for i in keep])
    spec["title"] = (
        f"{run['config']} (seed {run['seed']}): top-1 expert per point, MoE layers {keep[0] + 1} and {layers}"
    )
    path.write_bytes(vl_convert.vegalite_to_png(vl_spec=spec, scale=2))
    return True


def throughput_lines(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "## Inference throughput (one CPU thread, `pointcloud-segment`'s path)",
        "",
        "| points | voxels | tiles | model | CPU s | points / CPU s (first; best) | wall s | fused vs reference path "
        "(CPU, best of 3) | same labels | peak RSS (before) | non-finite voxels |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "cpu_seconds" not in r:  # a measurement from before CPU time was recorded
            continue
        best = f"{r['points_per_cpu_second_best']:,}" if "points_per_cpu_second_best" in r else "—"
        ratio = f"×{r['speedup']:.2f}" if "speedup" in r else "—"
        same = f"{r['same_labels']:.4f}" if "same_labels" in r else "—"
        lines.append(
            f"| {r['points']:,} | {r['voxels']:,} | {r['chunks']} | {r['model']} | {r['cpu_seconds']} | "
            f"{r['points_per_cpu_second']:,}; {best} | {r['seconds']} | {ratio} | {same} | "
            f"{r['peak_rss_bytes'] / 2**30:.2f} GiB ({r['rss_before_bytes'] / 2**30:.2f}) | "
            f"{r['nonfinite_voxels'] / r['voxels']:.1%} |"
        )
    lines += [
        "",
        "Streets made of 64-beam LiDAR scans (SynMix C validation scans) laid side by side along x, grid 0.1 m, "
        "tiles of ≤ 150k voxels with 32 voxels of context. Each size runs in a fresh process after a 5k-point "
        "warm-up; *CPU s* is that process's CPU time for the first full-size call (other processes' load on the "
        "shared machine does not count), *best* the fastest of four calls, *wall s* the elapsed time under that "
        "load. *Fused vs reference*: the fused inference path against the readable training path on the same "
        "cloud in the same process. Peak RSS is the process's high-water mark during the call (reset before it), "
        "with the resident size before it (interpreter, model, the input) in brackets.",
        "",
    ]
    return lines


def nonfinite_lines(runs: list[dict[str, Any]]) -> list[str]:
    """Share of evaluation points whose logits were not finite, for the runs where some were."""
    recorded = [r for r in runs if r.get("nonfinite")]
    rows = [r for r in recorded if any(v > 0 for v in r["nonfinite"].values())]
    if not rows:
        return []
    names = (*SEEN, *ZERO_SHOT)
    clean = sorted({r["config"] for r in recorded} - {r["config"] for r in rows})
    lines = [
        "## Non-finite logits in evaluation",
        "",
        "Share of evaluation points whose logits overflowed to inf/NaN (their prediction is arbitrary, and it "
        f"counts in the mIoU above). {len(recorded) - len(rows)} of the {len(recorded)} runs that recorded it had "
        f"none ({', '.join(f'`{c}`' for c in clean) or 'no configuration'} never overflowed); the others are "
        "listed. The overflow comes from BatchNorm blocks in eval mode: tokens the running statistics "
        "under-normalise grow quadratically through each gated-MLP FFN (docs/point-moe.md); a LayerNorm bounds "
        "every token before each MLP. Where a row shows overflow, its outdoor mIoU (C, D, E) measures numerical "
        "failure as much as segmentation quality.",
        "",
        "| configuration (seed) | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} (s{r['seed']}) | " + " | ".join(f"{r['nonfinite'][n]:.1%}" for n in names) + " |"
        )
    return [*lines, ""]


def paper_lines(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The section on the ``paper`` tier: the card's model, crops, steps and scenes, on a GPU."""
    spec = TIERS["paper"]
    lines, table = summarise(runs, spec.configs)
    devices = sorted({r.get("device", "cpu") for r in runs})
    minutes = [r["train_seconds"] / 60 for r in runs]
    timing = (
        f" Training took {min(minutes):.1f}–{max(minutes):.1f} min a run on {', '.join(devices)}."
        if runs
        else " No run is cached yet."
    )
    m = spec.model
    return [
        "## At the method card's scale",
        "",
        f"Tier **paper** is the card's offline plan itself: C = {m['channels'][0]} (stages "
        f"{'-'.join(map(str, m['channels']))}), {sum(m['depths']) + sum(m['dec_depths'])} blocks (encoder "
        f"{'-'.join(map(str, m['depths']))}, decoder {'-'.join(map(str, m['dec_depths']))}), {spec.steps} steps of "
        f"{spec.batch_size} crops of at most {spec.points:,} points (SynMix scans grid-sample to 8–25k voxels, so "
        f"crops hold 8–16k), {spec.scenes} training and {spec.eval_scenes} validation scans per dataset, up to "
        f"{spec.seeds} seeds. One run takes about 3 hours on two CPU cores, so these ran on a GPU "
        "(`python -m bench.pointcloud --tier paper --device cuda --jobs 9 --wall-minutes 8`), several at "
        f"once.{timing}",
        "",
        *lines,
        "",
    ], table


def card_lines(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """The section on the ``card`` tier: the card's scene counts, 10× the steps, the small model."""
    spec = TIERS["card"]
    lines, table = summarise(runs, spec.configs)
    return [
        "## Longer runs on the method card's scenes",
        "",
        "The card's offline plan: ~150 training and 30 validation scenes per dataset, C = 64, ~10 blocks, "
        "8–16k-point crops, 2–3k steps. Tier **card** takes its scene counts and 10× the full tier's steps — "
        f"{spec.steps} steps of {spec.batch_size} crops × {spec.points} points, {spec.scenes} training and "
        f"{spec.eval_scenes} validation scans per dataset, up to {spec.seeds} seeds — but keeps the small model "
        "(C = 32, 6 blocks) and crops: one run at the card's full size takes about 3 hours on two CPU cores. A null "
        "result here is not yet one at the card's scale. "
        "(`python -m bench.pointcloud --tier card --only CONFIG:SEED`)",
        "",
        *lines,
        "",
    ], table


#: Point-MoE-L over PTv3-L in average mIoU (card §1, third-party summary, to check): +3.6 points indoor +
#: outdoor (67.2 → 70.8), +2.5 zero-shot (32.5 → 35.0); as mIoU fractions.
CLAIMED = {
    "seen": (0.036, "card §1: 67.2 → 70.8 mIoU, indoor + outdoor"),
    "zero_shot": (0.025, "card §1: 32.5 → 35.0 mIoU, zero-shot"),
}


def claims(runs: list[dict[str, Any]], tier: str, off_scale: str | None) -> list[Any]:
    """Point-MoE (``moe-proj``) against the dense model of equal active compute, paired by seed, on the seen
    and the zero-shot mean mIoU (ceiling 1)."""
    from bench.verdicts import Claim, judge

    by = {(r["config"], r["seed"]): r for r in runs}
    seeds = sorted({s for c, s in by if c == "moe-proj" and ("dense-active", s) in by})
    if not seeds:
        return []
    out = []
    for part, names in (("seen", SEEN), ("zero_shot", ZERO_SHOT)):
        effect, source = CLAIMED[part]

        def mean_miou(config: str, names: tuple[str, ...] = names) -> list[float]:
            return [statistics.mean(by[(config, s)]["miou"][n] for n in names) for s in seeds]

        claim = Claim(
            f"{tier} tier: Point-MoE beats dense at equal active compute ({part.replace('_', '-')} mean)",
            "mIoU",
            effect,
            source,
            ceiling=1.0,
            off_scale=off_scale,
        )
        seconds = [by[(c, s)].get("seconds") for c in ("moe-proj", "dense-active") for s in seeds]
        known = [x for x in seconds if x]
        out.append(
            judge(
                claim,
                ("moe-proj", mean_miou("moe-proj")),
                ("dense-active", mean_miou("dense-active")),
                seconds_per_run=statistics.mean(known) if known else None,
            )
        )
    return out
