"""What the point-cloud study measures: one (configuration, seed) trained and evaluated (cached),
the pre-generated SynMix scans it trains on, and inference throughput and peak memory."""

from __future__ import annotations

import functools
import hashlib
import json
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench.pointcloud.cache import ROOT, folder, store
from bench.pointcloud.tiers import CONFIGS, MODELS, SEEN, ZERO_SHOT, ZOO_RUNS, Tier


def _from_zoo(config: str, seed: int, tier: Tier) -> dict[str, Any] | None:
    from mlcore.zoo.pointcloud import CHECKPOINTS, EVAL_SCENES, RECIPES

    name = ZOO_RUNS.get(config)
    if name is None or seed != 0 or tier.eval_scenes != EVAL_SCENES:
        return None
    recipe = RECIPES[name]
    expected = {"steps": tier.steps, "batch_size": tier.batch_size, "points": tier.points, "scenes": tier.scenes}
    # A recipe trained another way (scan heights, attribute augmentation) is not the tier's configuration.
    other = {k: v for k, v in recipe.train.items() if k not in (*expected, "datasets", "lr", "seed")}
    if any(recipe.train.get(k) != v for k, v in expected.items()) or recipe.model != {**MODELS[config]} or other:
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

    key = f"{tier_name}-{config}-s{seed}"
    if (found := store().get(key)) is not None:
        return found
    if tier_name == "full" and (zoo := _from_zoo(config, seed, tier)) is not None:
        return store().put(key, zoo)
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
    state = folder() / "state" / f"{tier_name}-{config}-s{seed}.pt"
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
    store().put(key, out)
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
    from mlcore.zoo.pointcloud import CHECKPOINTS

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
    key = f"throughput-v2-{points}-c{chunk}"
    if (found := store().get(key)) is not None:
        return found
    if os.environ.get("MOELAB_BENCH_CACHED_ONLY") == "1":
        return None
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_throughput_child, args=(points, chunk, compare, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return store().put(key, out)
