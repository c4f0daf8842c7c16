"""``make bench-pointcloud``: Point-MoE against dense PTv3-lite on the SynMix multi-sensor benchmark
(issue 7; Point-MoE, arXiv 2505.23926 v2, scaled down to CPU minutes).

Every configuration trains one PTv3-lite (channels 32-64-96, patch attention, grid pooling) jointly on
the seen datasets A–D (rooms through a depth camera and a panorama, streets through 64- and 32-beam
LiDARs, conflicting taxonomies) and is evaluated on held-out scans of A–D and of the zero-shot
datasets E (128-beam LiDAR, taller mount) and F (larger rooms, noisier camera):

- ``dense-active``: W_o → one gated MLP of width 2C — the same active compute as top-2 of 4 experts;
- ``dense-params``: W_o → one gated MLP of width 4C — the same total parameters as 4 experts;
- ``moe-proj``: Point-MoE, W_o → 4 gated-ReLU experts of width C, top-2, α = 0 (the paper's placement);
- ``moe-ffn``: Point-MoE on the FFN instead (W_o as in ``dense-active``), equal active compute;
- ``moe-proj-single`` / ``dense-active-single``: the same, trained with single-dataset batches;
- ``moe-proj-a1e-3`` / ``moe-proj-a1e-2``: Point-MoE with balance weight α = 10⁻³ (the released config)
  and 10⁻² (the card's α ablation);
- ``ppt-active``: the PPT-like oracle — ``dense-active`` whose block norms take per-dataset affine
  parameters chosen by dataset id (zero-shot E and F borrow C's and A's: same scene kind);
- ``moe-proj-bn`` / ``dense-active-bn``: BatchNorm instead of LayerNorm in the blocks (the card's
  norm ablation), whose running statistics overflow on outdoor scans.

Reported: per-dataset and zero-shot mIoU (mean ± std over seeds), expert usage by dataset (share of
points per top-1 expert, first and last MoE layer), inference points/s and peak memory (RSS of a fresh
process) at 100k and 1M points, and — full tier — a 10M-point scan finishing through chunking. Each
finished (configuration, seed) is cached as JSON under ``bench/cache/pointcloud/`` so an interrupted
full run resumes.

Tier ``paper`` is the card's own scale (C = 64, 10 blocks, ≤ 16k-point crops, 2,000 steps): about
3 hours a run on two CPU cores, so it runs on a GPU, several runs at once, within a wall-clock budget
that saves each unfinished run's state for the next call::

    python -m mlcore.bench.pointcloud --tier paper --device cuda --jobs 9 --wall-minutes 8

It is never trained by ``make bench-pointcloud``; ``--report`` lists the runs that are cached.
"""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlcore.bench.common import write_results

ROOT = Path(__file__).resolve().parents[2]
#: ``MOELAB_POINTCLOUD_CACHE`` moves it (``--jobs`` hands its own to the runs it starts).
CACHE = Path(os.environ.get("MOELAB_POINTCLOUD_CACHE") or ROOT / "bench" / "cache" / "pointcloud").resolve()
SEEN, ZERO_SHOT = ("A", "B", "C", "D"), ("E", "F")

MODELS: dict[str, dict[str, Any]] = {
    "dense-active": {"proj": "dense", "proj_ratio": 2.0},
    "dense-params": {"proj": "dense", "proj_ratio": 4.0},
    "moe-proj": {"proj": "moe", "proj_ratio": 1.0, "experts": 4, "top_k": 2},
    "moe-ffn": {"proj": "dense", "proj_ratio": 2.0, "ffn": "moe", "experts": 4, "top_k": 2},
}

#: configuration → (PTv3Config arguments, TrainConfig overrides)
CONFIGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    **{name: (model, {}) for name, model in MODELS.items()},
    "moe-proj-single": (MODELS["moe-proj"], {"mixed": False}),
    "dense-active-single": (MODELS["dense-active"], {"mixed": False}),
    "moe-proj-a1e-3": (MODELS["moe-proj"], {"balance": 1e-3}),
    "moe-proj-a1e-2": (MODELS["moe-proj"], {"balance": 1e-2}),
    "ppt-active": ({**MODELS["dense-active"], "domains": SEEN}, {}),
    "moe-proj-bn": ({**MODELS["moe-proj"], "block_norm": "batch"}, {}),
    "dense-active-bn": ({**MODELS["dense-active"], "block_norm": "batch"}, {}),
}


@dataclass(frozen=True)
class Tier:
    configs: tuple[str, ...]
    seeds: int
    steps: int
    batch_size: int
    points: int
    scenes: int
    eval_scenes: int
    throughput: tuple[int, ...]
    huge: int = 0  #: points of the chunked scan (0: skipped)
    #: PTv3Config arguments of the tier's scale (channels, depths), under each configuration's own
    model: dict[str, Any] = field(default_factory=dict)


TIERS = {
    "quick": Tier(("dense-active", "moe-proj"), 1, 25, 2, 1024, 3, 1, (100_000,)),
    "full": Tier(
        (
            "dense-active",
            "dense-params",
            "moe-proj",
            "moe-ffn",
            "moe-proj-single",
            "dense-active-single",
            "moe-proj-a1e-3",
            "moe-proj-a1e-2",
            "ppt-active",
            "moe-proj-bn",
            "dense-active-bn",
        ),
        3,
        150,
        4,
        2048,
        16,
        4,
        (100_000, 1_000_000),
        10_000_000,
    ),
    # Toward the method card's scale (section 4): its ~150 training and 30 validation scenes per
    # dataset and 10x the full tier's steps, for Point-MoE, its dense twin and the PPT-like oracle; the
    # model and crops stay small (the card's C = 64, ~10 blocks and 8-16k-point crops take ~3 h a run
    # on two CPU cores). ``python -m mlcore.bench.pointcloud --tier card --only moe-proj:0 ...``
    "card": Tier(("dense-active", "moe-proj", "ppt-active"), 3, 1500, 4, 2048, 150, 30, ()),
    # The card's own scale (section 4): C = 64 (stages 64-128-192), 10 blocks (encoder 2-2-2, decoder
    # 2-2), crops of at most 16,384 points (SynMix scans grid-sample to 8-25k voxels, so crops hold
    # 8-16k), 2,000 steps (the low end of the card's 2-3k), its 150 training and 30 validation scenes.
    # A GPU tier: ``--device cuda --jobs 9 --wall-minutes 8`` (see main); never run by make.
    "paper": Tier(
        ("dense-active", "moe-proj", "ppt-active"),
        3,
        2000,
        4,
        16_384,
        150,
        30,
        (),
        model={"channels": (64, 128, 192), "depths": (2, 2, 2), "dec_depths": (2, 2)},
    ),
}
# The paper tier's model and configurations in seconds on a CPU: a dry run of the GPU call's command
# line (``--tier paper-smoke --device cpu --jobs 3``), not a result.
TIERS["paper-smoke"] = replace(TIERS["paper"], seeds=1, steps=2, batch_size=2, points=2048, scenes=1, eval_scenes=1)
#: Tiers that only ``--only`` / ``--jobs`` train: ``run`` reports their cached runs and trains none.
GPU_TIERS = ("paper", "paper-smoke")


#: Zoo recipes whose training run is exactly a full-tier configuration at seed 0 (same TrainConfig,
#: model, seed and 4 validation scans per dataset): their recorded evaluation is that run's result.
ZOO_RUNS = {"moe-proj": "pointmoe-synmix", "dense-active": "ptv3-synmix-dense"}


def _from_zoo(config: str, seed: int, tier: Tier) -> dict[str, Any] | None:
    from mlcore.pointcloud.zoo import CHECKPOINTS, EVAL_SCENES, RECIPES

    name = ZOO_RUNS.get(config)
    if name is None or seed != 0 or tier.eval_scenes != EVAL_SCENES:
        return None
    recipe = RECIPES[name]
    expected = {"steps": tier.steps, "batch_size": tier.batch_size, "points": tier.points, "scenes": tier.scenes}
    if any(recipe.train.get(k) != v for k, v in expected.items()) or recipe.model != {**MODELS[config]}:
        return None
    path = CHECKPOINTS / name / "config.json"
    if not path.is_file():
        return None
    card = json.loads(path.read_text())["card"]
    metrics = card["metrics"]
    return {
        "config": config,
        "seed": seed,
        "train": recipe.train,
        "model": recipe.model,
        "parameters": metrics["parameters"],
        "miou": metrics["miou"],
        "iou": metrics["iou"],
        "usage": metrics["usage"],
        "train_seconds": metrics["train_seconds"],
        "source": f"the zoo's {name} training run ({card['command']})",
    }


@functools.cache
def _scan_version() -> str:
    """A digest of the scan generator's source: pre-generated scans are reused only by the code that
    made them."""
    folder = ROOT / "mlcore" / "pointcloud"
    digest = hashlib.sha256()
    for name in ("datasets.py", "scenes.py", "sensors.py", "labels.py"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()[:12]


def load_scan(folder: Path, name: str, index: int, split: str) -> Any:
    """SynMix scan ``index`` of ``name``'s ``split``, read from ``folder`` (a :func:`make_scan` saved
    as .npz, the same arrays) or made and saved there first."""
    import numpy as np

    from mlcore.pointcloud.datasets import make_scan
    from mlcore.pointcloud.sensors import Scan

    path = folder / _scan_version() / f"{name}-{split}-{index}.npz"
    if path.is_file():
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
        return Scan(arrays["xyz"], arrays.get("rgb"), arrays.get("intensity"), arrays["labels"])
    scan = make_scan(name, index, split)
    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {"xyz": scan.xyz, "labels": scan.labels, "rgb": scan.rgb, "intensity": scan.intensity}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        np.savez(f, **{k: v for k, v in arrays.items() if v is not None})
    tmp.replace(path)  # atomic: parallel writers of the same scan leave one whole file
    return scan


def _save_scan(folder: Path, name: str, index: int, split: str) -> None:
    load_scan(folder, name, index, split)


def pregenerate_scans(folder: Path, tier: Tier, processes: int) -> float:
    """Ray-cast every training and validation scan of ``tier`` into ``folder`` on ``processes`` CPU
    processes (once, before parallel runs that would each make all of them); returns the seconds."""
    start = time.perf_counter()
    items = [(folder, n, i, "train") for n in SEEN for i in range(tier.scenes)]
    items += [(folder, n, i, "val") for n in (*SEEN, *ZERO_SHOT) for i in range(tier.eval_scenes)]
    version = _scan_version()
    items = [it for it in items if not (folder / version / f"{it[1]}-{it[3]}-{it[2]}.npz").is_file()]
    if items:  # a resuming call finds them all on disk
        with multiprocessing.get_context("spawn").Pool(min(processes, len(items))) as pool:
            pool.starmap(_save_scan, items, chunksize=4)
    return time.perf_counter() - start


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else "cpu"


def run_config(
    config: str,
    seed: int,
    tier: Tier,
    tier_name: str,
    *,
    device: str = "cpu",
    deadline: float | None = None,
    scan_cache: Path | None = None,
) -> dict[str, Any] | None:
    """Train and evaluate one (configuration, seed); cached. With ``MOELAB_BENCH_CACHED_ONLY=1``
    a configuration that is not cached yet is skipped (None) instead of trained.

    ``device``: where the model trains and is evaluated (crops are drawn on the CPU, the model is
    initialised there, so a seed starts from the same weights and data on any device).
    ``deadline`` (a :func:`time.perf_counter` value): training that reaches it saves its state under
    ``state/`` and returns None; the next call resumes it. Evaluation runs after training, outside it.
    ``scan_cache``: a folder of pre-generated scans (:func:`pregenerate_scans`)."""
    import torch

    from mlcore.pointcloud.datasets import make_scan
    from mlcore.pointcloud.pipeline import ScanPool, TrainConfig, evaluate, train
    from mlcore.pointcloud.ptv3 import PTv3, PTv3Config, parameter_counts

    path = CACHE / f"{tier_name}-{config}-s{seed}.json"
    if path.is_file():
        return json.loads(path.read_text())
    if tier_name == "full" and (zoo := _from_zoo(config, seed, tier)) is not None:
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(zoo, indent=1))
        return zoo
    if os.environ.get("MOELAB_BENCH_CACHED_ONLY") == "1":
        return None
    model_args, overrides = CONFIGS[config]
    cfg = TrainConfig(
        datasets=SEEN,
        steps=tier.steps,
        batch_size=tier.batch_size,
        points=tier.points,
        scenes=tier.scenes,
        seed=seed,
        **overrides,
    )
    model_args = {**model_args, **tier.model}
    load = make_scan if scan_cache is None else functools.partial(load_scan, scan_cache)
    torch.manual_seed(seed)
    model = PTv3(PTv3Config(**model_args))
    # A killed run resumes from its last checkpoint (every 25 steps) instead of starting over.
    state = CACHE / "state" / f"{tier_name}-{config}-s{seed}.pt"
    tag = f"[pointcloud] {tier_name} {config} s{seed}"
    every = max(1, min(100, cfg.steps // 10))
    clock: dict[str, float] = {}

    def progress(step: int, result: Any) -> None:
        # Steps per second since this call's first step ended (the first one compiles and warms up).
        clock.setdefault("step", step)
        clock.setdefault("t", time.perf_counter())
        if (step + 1) % every == 0 or step + 1 == cfg.steps:
            done, seconds = step - clock["step"], time.perf_counter() - clock["t"]
            rate = f" ({done / seconds:.2f} steps/s)" if done else ""
            print(f"{tag} step {step + 1}/{cfg.steps} loss {result.loss[-1][1]:.3f}{rate}", flush=True)

    pool = ScanPool(cfg.datasets, cfg.scenes, load=load)
    result = train(
        model,
        cfg,
        pool=pool,
        on_step=progress,
        device=device,
        state_path=state,
        checkpoint_every=25,
        deadline=deadline,
    )
    if result.steps < cfg.steps:
        print(f"{tag} stopped by the wall-clock budget at step {result.steps}/{cfg.steps}; state saved", flush=True)
        return None
    scans = {n: [load(n, i, "val") for i in range(tier.eval_scenes)] for n in (*SEEN, *ZERO_SHOT)}
    ev = evaluate(model, scans, device=device)
    out = {
        "config": config,
        "seed": seed,
        "train": cfg.to_dict(),
        "model": model_args,
        "parameters": parameter_counts(model),
        "miou": ev["miou"],
        "iou": ev["iou"],
        "usage": ev["usage"],
        "nonfinite": ev["nonfinite"],
        "train_seconds": round(result.seconds, 1),
        "final_loss": result.loss[-1][1],
        "device": _device_name(device),
    }
    if torch.device(device).type == "cuda":
        out["tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    state.unlink(missing_ok=True)
    seen, zero = (statistics.mean(ev["miou"][n] for n in names) for names in (SEEN, ZERO_SHOT))
    print(f"{tag} cached: mIoU seen {seen:.3f}, zero-shot {zero:.3f}; trained {result.seconds:.0f} s", flush=True)
    return out


def _tiled_scan(points: int) -> Any:
    """A street of ``points`` points: validation scans of dataset C laid side by side along x, 100 m
    apart (four scans, generated once and repeated)."""
    import numpy as np

    from mlcore.pointcloud.datasets import make_scan

    scans = [make_scan("C", i, "val") for i in range(4)]
    parts, total, i = [], 0, 0
    while total < points:
        scan = scans[i % 4]
        take = min(len(scan.xyz), points - total)
        xyz = scan.xyz[:take].copy()
        xyz[:, 0] += 100.0 * i
        parts.append((xyz, scan.intensity[:take]))
        total += take
        i += 1
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def _throughput_model() -> tuple[Any, str]:
    """The zoo's trained Point-MoE (the job's model: trained routing) when it is installed, else an
    untrained one of the same shape."""
    import torch

    from mlcore.pointcloud.pipeline import load_segmenter
    from mlcore.pointcloud.ptv3 import PTv3, PTv3Config
    from mlcore.pointcloud.zoo import CHECKPOINTS

    folder = CHECKPOINTS / "pointmoe-synmix"
    if (folder / "model.safetensors").is_file():
        return load_segmenter(folder)[0], "zoo:pointmoe-synmix"
    torch.manual_seed(0)
    return PTv3(PTv3Config(**MODELS["moe-proj"])).eval(), "untrained moe-proj"


def _reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux: VmHWM), so the next reading is the segmentation's own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss(field: str) -> int:
    """VmRSS / VmHWM in bytes (ru_maxrss where /proc is missing)."""
    import resource

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _throughput_child(points: int, chunk: int, compare: bool, queue: Any, repeats: int = 3) -> None:
    import torch

    from mlcore.pointcloud.ptv3 import reference_inference
    from mlcore.pointcloud.segment import segment_cloud

    torch.set_num_threads(1)
    xyz, intensity = _tiled_scan(points)
    model, source = _throughput_model()
    # Library start-up (oneDNN kernel generation, MKL buffers) happens once per worker process.
    segment_cloud(model, xyz[:5000], None, intensity[:5000], grid=0.1)
    reset = _reset_peak_rss()
    before = _rss("VmRSS")
    result = segment_cloud(model, xyz, None, intensity, grid=0.1, chunk_points=chunk)
    peak = _rss("VmHWM")
    wall, cpu = result.seconds["total"], result.seconds["cpu"]
    out: dict[str, Any] = {
        "points": points,
        "voxels": result.voxels,
        "chunks": result.chunks,
        "model": source,
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "points_per_second": round(points / wall),
        "points_per_cpu_second": round(points / cpu),
        "peak_rss_bytes": peak,
        "rss_before_bytes": before,
        "peak_is_this_run": reset,
        "input_bytes": int(xyz.nbytes + intensity.nbytes),
        "labelled_every_point": bool(len(result.labels) == points),
        "nonfinite_voxels": result.nonfinite,
    }
    if compare:
        # The readable training path on the same cloud, in the same process, alternating with the
        # fused one: the speed-up is a ratio of CPU seconds, so other processes' load on the shared
        # machine mostly cancels; the minimum over repeats is the least disturbed run of each.
        fused_cpu, reference_cpu = [cpu], []
        for _ in range(repeats):
            with reference_inference():
                ref = segment_cloud(model, xyz, None, intensity, grid=0.1, chunk_points=chunk)
            reference_cpu.append(ref.seconds["cpu"])
            fused_cpu.append(segment_cloud(model, xyz, None, intensity, grid=0.1, chunk_points=chunk).seconds["cpu"])
        out["fused_cpu_seconds"] = [round(c, 3) for c in fused_cpu]
        out["reference_cpu_seconds"] = [round(c, 3) for c in reference_cpu]
        out["speedup"] = round(min(reference_cpu) / min(fused_cpu), 3)
        out["points_per_cpu_second_best"] = round(points / min(fused_cpu))
        out["same_labels"] = float((ref.labels == result.labels).mean())
    queue.put(out)


def throughput(points: int, chunk: int = 150_000, *, compare: bool = True) -> dict[str, Any] | None:
    """Inference on a fresh process (so its peak RSS is this run's), one thread, cached."""
    path = CACHE / f"throughput-v2-{points}-c{chunk}.json"
    if path.is_file():
        return json.loads(path.read_text())
    if os.environ.get("MOELAB_BENCH_CACHED_ONLY") == "1":
        return None
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_throughput_child, args=(points, chunk, compare, queue))
    proc.start()
    out = queue.get()
    proc.join()
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return out


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


def _runs(tier: str) -> list[dict[str, Any]]:
    spec = TIERS[tier]
    runs = []
    for seed in range(spec.seeds):
        for config in spec.configs:
            print(f"[pointcloud] {tier} {config} seed {seed}", flush=True)
            if (done := run_config(config, seed, spec, tier)) is not None:
                runs.append(done)
    return runs


def _cached_runs(tier: str) -> list[dict[str, Any]]:
    """The finished runs of ``tier`` in the cache; nothing is trained (the GPU tiers' runs come from
    ``--only`` / ``--jobs`` on a machine with a GPU)."""
    spec = TIERS[tier]
    paths = (CACHE / f"{tier}-{config}-s{seed}.json" for seed in range(spec.seeds) for config in spec.configs)
    return [json.loads(path.read_text()) for path in paths if path.is_file()]


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
        "(`python -m mlcore.bench.pointcloud --tier paper --device cuda --jobs 9 --wall-minutes 8`), several at "
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
        "(`python -m mlcore.bench.pointcloud --tier card --only CONFIG:SEED`)",
        "",
        *lines,
        "",
    ], table


def run(tier: str, results: Path) -> None:
    spec = TIERS[tier]
    start = time.perf_counter()
    runs = _cached_runs(tier) if tier in GPU_TIERS else _runs(tier)
    # The full study includes the card-scale runs (cached; ``--report`` lists the finished ones).
    card = _runs("card") if tier == "full" else []
    card_md, card_table = card_lines(card) if card else ([], {})
    # ... and the runs at the card's own scale, trained on a GPU: only ever read from the cache here.
    at_scale = _cached_runs("paper") if tier == "full" else []
    paper_md, paper_table = paper_lines(at_scale) if at_scale else ([], {})
    paper = next((r for r in runs if r["config"] == "moe-proj" and r["seed"] == 0), None)
    chart = []
    if paper is not None and usage_chart_png(paper, results / "pointcloud-usage.png"):
        chart = ["![Expert usage by dataset, moe-proj seed 0](pointcloud-usage.png)", ""]
    speed = [s for n in spec.throughput if (s := throughput(n)) is not None]
    huge = throughput(spec.huge, chunk=150_000, compare=False) if spec.huge else None
    lines, table = summarise(runs, spec.configs)
    md = [
        "# Point-MoE on SynMix (issue 7)",
        "",
        f"Tier **{tier}**: {spec.seeds} seed(s); each model trained {spec.steps} steps of {spec.batch_size} crops × "
        f"{spec.points} points on SynMix A–D ({spec.scenes} training scans per dataset), evaluated on "
        f"{spec.eval_scenes} validation scan(s) per dataset. mIoU over each dataset's own classes, "
        "predictions carried back to every input point. E and F are never trained on.",
        "",
        *lines,
        "",
        "Configurations: `dense-active` = W_o as one gated MLP of width 2C (= active compute of top-2 of 4 experts of "
        "width C); `dense-params` = width 4C (= total parameters of 4 experts); `moe-proj` = Point-MoE on W_o "
        "(4 experts, top-2, α = 0); `moe-ffn` = Point-MoE on the FFN; `-single` = single-dataset batches instead of "
        "mixed ones; `moe-proj-a1e-3` / `-a1e-2` = balance weight α = 10⁻³ (the released config) / 10⁻²; "
        "`ppt-active` = the PPT-like oracle: `dense-active` with per-dataset block-norm parameters chosen by the "
        "dataset id (E and F, never seen, use C's and A's: the first seen dataset of their scene kind); `-bn` = "
        "BatchNorm instead of LayerNorm in the blocks (the card's norm choice; trained before the switch, see the "
        "non-finite section). Every model has LayerNorm blocks unless it says `-bn`.",
        "",
        "## Expert usage by dataset",
        "",
        "Share of points whose top-1 expert is expert 0 / 1 / 2 / 3, first and last MoE layer. The router never "
        "sees the dataset: different rows for indoor (A, B, F) and outdoor (C, D, E) mean experts split by sensor.",
        "",
        *usage_lines([r for r in runs if r["seed"] == 0]),
        "",
        *chart,
        *card_md,
        *paper_md,
        *throughput_lines(speed + ([huge] if huge else [])),
        *nonfinite_lines(runs),
    ]
    data = {
        "tier": asdict(spec),
        "runs": runs,
        "table": table,
        "card": {"tier": asdict(TIERS["card"]), "runs": card, "table": card_table},
        "paper": {"tier": asdict(TIERS["paper"]), "runs": at_scale, "table": paper_table},
        "throughput": speed,
        "huge": huge,
        "seconds": round(time.perf_counter() - start, 1),
    }
    write_results(results, "pointcloud", "\n".join(md), data)


#: A queued run is not started with less of the wall-clock budget left than this (seconds, or a
#: quarter of the budget if less): loading its scans and compiling its kernels would take most of it.
MIN_START_SECONDS = 45.0
#: Seconds of a run's wall-clock budget kept for evaluating it after training (the paper tier's 180
#: validation scans; seconds on a GPU, more when several runs share it).
EVAL_RESERVE_SECONDS = 45.0
#: Exit status of a run stopped by the wall-clock budget (its state saved): "try again" (EX_TEMPFAIL).
UNFINISHED = 75


def _pairs(spec: Tier, only: list[str]) -> list[tuple[str, int]]:
    """The (configuration, seed) pairs to train: those named, else every pair of the tier, seed by
    seed (so a budget that ends early leaves whole seeds of every configuration)."""
    if only:
        return [(c, int(s)) for c, _, s in (item.partition(":") for item in only)]
    return [(c, s) for s in range(spec.seeds) for c in spec.configs]


def _cache_name(tier: str, spec: Tier, steps: int | None) -> str:
    """The cache prefix: the tier's name, with the step count when ``--steps`` overrides it (so a
    shortened run never passes for one of the tier's own)."""
    return tier if steps is None or steps == spec.steps else f"{tier}-{steps}steps"


def run_parallel(args: Any, spec: Tier, name: str) -> int:
    """``--jobs N``: pre-generate the scans once (all CPU cores), then train each uncached
    (configuration, seed) in its own process, N at a time, each with a share of the CPU threads and
    the wall-clock budget left when it starts; logs under ``bench/cache/pointcloud/state/logs/``.
    The first N always start (each trains at least a step and saves it), so every call makes progress.
    Returns 1 if a run failed, else 0, also when some were stopped by the budget or not started (the
    summary says which; the same command resumes them)."""
    start = time.perf_counter()
    budget = args.wall_minutes * 60 if args.wall_minutes else float("inf")
    pairs = [(c, s) for c, s in _pairs(spec, args.only) if not (CACHE / f"{name}-{c}-s{s}.json").is_file()]
    cpus = os.cpu_count() or 1
    threads = args.threads or max(1, cpus // max(1, min(args.jobs, len(pairs) or 1)))
    scans = args.scan_cache or ROOT / "var" / "synmix-scans"
    print(f"[pointcloud] {len(pairs)} run(s) to train, {args.jobs} at a time, {threads} thread(s) each", flush=True)
    if pairs:
        took = pregenerate_scans(scans, spec, cpus)
        print(f"[pointcloud] scans ready in {scans} ({took:.0f} s)", flush=True)
    logs = CACHE / "state" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue, running, outcome = list(pairs), {}, {}
    min_start, first_wave = min(MIN_START_SECONDS, budget / 4), True
    while queue or running:
        left = budget - (time.perf_counter() - start)
        while queue and len(running) < args.jobs and (first_wave or left > min_start):
            config, seed = queue.pop(0)
            cmd = [sys.executable, "-m", "mlcore.bench.pointcloud", "--tier", args.tier, "--only", f"{config}:{seed}"]
            cmd += ["--device", args.device, "--threads", str(threads), "--scan-cache", str(scans)]
            cmd += ["--steps", str(args.steps)] if args.steps else []
            cmd += ["--wall-minutes", f"{max(left / 60, 1e-4):.4f}"] if left != float("inf") else []
            cmd += ["--tf32"] if args.tf32 else []
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            env["MOELAB_POINTCLOUD_CACHE"] = str(CACHE)
            log = (logs / f"{name}-{config}-s{seed}.log").open("a")
            running[config, seed] = (
                subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT),
                log,
            )
            print(f"[pointcloud] started {config}:{seed} ({left / 60:.1f} min of budget left)", flush=True)
        first_wave = False
        if not running:
            break
        time.sleep(1.0)
        for pair, (proc, log) in list(running.items()):
            if proc.poll() is None:
                continue
            log.close()
            del running[pair]
            outcome[pair] = {0: "finished", UNFINISHED: "stopped by the budget, state saved"}.get(
                proc.returncode, f"failed (exit {proc.returncode})"
            )
            tail = (logs / f"{name}-{pair[0]}-s{pair[1]}.log").read_text().strip().splitlines()[-3:]
            minutes = (time.perf_counter() - start) / 60
            print(
                f"[pointcloud] {pair[0]}:{pair[1]} {outcome[pair]} after {minutes:.1f} min; its log ends:", flush=True
            )
            print("\n".join(f"    {line}" for line in tail), flush=True)
    for config, seed in queue:
        outcome[config, seed] = "not started (budget)"
    rest = "; ".join(f"{c}:{s} {v}" for (c, s), v in outcome.items() if v != "finished")
    print(
        f"[pointcloud] {sum(v == 'finished' for v in outcome.values())} of {len(pairs)} finished in "
        f"{(time.perf_counter() - start) / 60:.1f} min" + (f"; {rest}" if rest else ""),
        flush=True,
    )
    return 1 if any(v.startswith("failed") for v in outcome.values()) else 0


def main(argv: list[str] | None = None) -> None:
    """``python -m mlcore.bench.pointcloud --tier full --only moe-proj:1 --only dense-active:2`` fills
    the cache for single (configuration, seed) pairs; ``--report`` rewrites the results from the cache
    alone (nothing is trained or measured).

    On a GPU: ``--tier paper --device cuda --jobs 9 --wall-minutes 8`` trains every uncached pair of
    the tier as parallel processes sharing the GPU (scans pre-generated once on all CPU cores); runs
    that reach the budget save their state and the same command resumes them. ``--steps N`` shortens
    the runs (cached under a name with the step count)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mlcore.bench.pointcloud")
    parser.add_argument("--tier", choices=tuple(TIERS), default="quick")
    parser.add_argument("--only", action="append", default=[], metavar="CONFIG:SEED", help="train one configuration")
    parser.add_argument("--throughput", action="append", type=int, default=[], metavar="POINTS")
    parser.add_argument("--report", action="store_true", help="write pointcloud.md from the cache only")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (cuda:N): where the runs train")
    parser.add_argument("--jobs", type=int, default=0, metavar="N", help="train the runs as N parallel processes")
    parser.add_argument(
        "--wall-minutes", type=float, default=0.0, help="wall-clock budget of the call; unfinished runs save and stop"
    )
    parser.add_argument("--steps", type=int, default=0, help="override the tier's steps (cached separately)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads per run (--jobs: CPUs / N)")
    parser.add_argument("--scan-cache", type=Path, default=None, help="folder of pre-generated SynMix scans")
    parser.add_argument("--tf32", action="store_true", help="TF32 matmuls on CUDA (faster, ~1e-3 relative error)")
    args = parser.parse_args(argv)
    spec = TIERS[args.tier]
    for item in args.only:
        config, _, seed = item.partition(":")
        if config not in spec.configs or not seed.isdigit():
            parser.error(f"--only wants CONFIG:SEED with CONFIG one of {', '.join(spec.configs)}, got {item!r}")
    if args.device != "cpu":
        import torch

        if torch.device(args.device).type != "cuda" or not torch.cuda.is_available():
            parser.error(f"--device {args.device}: only cpu and an available cuda device are supported")
    if args.steps:
        spec = replace(spec, steps=args.steps)
    name = _cache_name(args.tier, TIERS[args.tier], args.steps or None)
    if args.jobs:
        status = run_parallel(args, spec, name)
        if status:
            raise SystemExit(status)
        return
    if args.threads or args.tf32:
        import torch

        torch.set_num_threads(args.threads or torch.get_num_threads())
        if args.tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
    # Only what differs from run_config's defaults is passed.
    options: dict[str, Any] = {}
    if args.device != "cpu":
        options["device"] = args.device
    if args.scan_cache is not None:
        options["scan_cache"] = args.scan_cache
    if args.wall_minutes:
        # The budget covers the whole call: training stops early enough to leave evaluation its time.
        budget = args.wall_minutes * 60
        options["deadline"] = time.perf_counter() + budget - min(EVAL_RESERVE_SECONDS, budget / 2)
    unfinished = False
    for item in args.only:
        config, _, seed = item.partition(":")
        print(f"[pointcloud] {config} seed {seed}", flush=True)
        done = run_config(config, int(seed), spec, name, **options)
        unfinished |= done is None and "deadline" in options
    for points in args.throughput:
        print(json.dumps(throughput(points, compare=points <= 1_000_000)), flush=True)
    if args.report:
        os.environ["MOELAB_BENCH_CACHED_ONLY"] = "1"
        run(args.tier, ROOT / "bench" / "results")
    if unfinished:
        raise SystemExit(UNFINISHED)


if __name__ == "__main__":
    main()
