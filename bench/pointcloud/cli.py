"""``python -m bench.pointcloud``: single runs (``--only``), parallel runs within a wall-clock budget
(``--jobs``), throughputs, and the report from the cache (``--report``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.pointcloud.cache import ROOT, folder, store
from bench.pointcloud.measure import pregenerate_scans, run_config, throughput
from bench.pointcloud.study import run
from bench.pointcloud.tiers import TIERS, Tier

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
    pairs = [(c, s) for c, s in _pairs(spec, args.only) if f"{name}-{c}-s{s}" not in store()]
    cpus = os.cpu_count() or 1
    threads = args.threads or max(1, cpus // max(1, min(args.jobs, len(pairs) or 1)))
    scans = args.scan_cache or ROOT / "var" / "synmix-scans"
    print(f"[pointcloud] {len(pairs)} run(s) to train, {args.jobs} at a time, {threads} thread(s) each", flush=True)
    if pairs:
        took = pregenerate_scans(scans, spec, cpus)
        print(f"[pointcloud] scans ready in {scans} ({took:.0f} s)", flush=True)
    logs = folder() / "state" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    queue, running, outcome = list(pairs), {}, {}
    min_start, first_wave = min(MIN_START_SECONDS, budget / 4), True
    while queue or running:
        left = budget - (time.perf_counter() - start)
        while queue and len(running) < args.jobs and (first_wave or left > min_start):
            config, seed = queue.pop(0)
            cmd = [sys.executable, "-m", "bench.pointcloud", "--tier", args.tier, "--only", f"{config}:{seed}"]
            cmd += ["--device", args.device, "--threads", str(threads), "--scan-cache", str(scans)]
            cmd += ["--steps", str(args.steps)] if args.steps else []
            cmd += ["--wall-minutes", f"{max(left / 60, 1e-4):.4f}"] if left != float("inf") else []
            cmd += ["--tf32"] if args.tf32 else []
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            env["MOELAB_POINTCLOUD_CACHE"] = str(folder())
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
    """``python -m bench.pointcloud --tier full --only moe-proj:1 --only dense-active:2`` fills
    the cache for single (configuration, seed) pairs; ``--report`` rewrites the results from the cache
    alone (nothing is trained or measured).

    On a GPU: ``--tier paper --device cuda --jobs 9 --wall-minutes 8`` trains every uncached pair of
    the tier as parallel processes sharing the GPU (scans pre-generated once on all CPU cores); runs
    that reach the budget save their state and the same command resumes them. ``--steps N`` shortens
    the runs (cached under a name with the step count)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.pointcloud")
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
