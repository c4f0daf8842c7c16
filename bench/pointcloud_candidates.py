"""Segmenter candidates: the zoo's Point-MoE recipe with another training choice, for the studies
that compare them with the zoo (:mod:`bench.pointcloud_attributes`, :mod:`bench.heldout_scenes`).

``python -m bench.pointcloud_candidates NAME [--augment PRESET] [--height scan]
[--steps N] [--scenes N] [--surveys SHARE] [--seed S] [--[no-]presence-stats]`` trains the ``pointmoe-synmix``
recipe with those changes into ``var/pointcloud-candidates/NAME`` (resumable from its ``state.pt``; never
the zoo), evaluates
it on every dataset's validation scans as the zoo recipe does and saves a segmenter folder; name it
in ``$MOELAB_BENCH_SEGMENTERS`` (``name=var/pointcloud-candidates/NAME``) for the studies.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "var" / "pointcloud-candidates"


def train_candidate(name: str, *, changes: dict[str, Any], seed: int = 0) -> Path:
    """Train the zoo recipe with ``changes`` to its training config; returns the segmenter folder."""
    import torch

    from mlcore.pointcloud.pipeline import TrainConfig, save_segmenter, train
    from mlcore.pointcloud.ptv3 import PTv3, PTv3Config, parameter_counts
    from mlcore.zoo.pointcloud import RECIPES, validate

    torch.set_num_threads(1)
    recipe = RECIPES["pointmoe-synmix"]
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in recipe.train.items()}
    cfg = TrainConfig(**{**args, **changes, "seed": seed})
    torch.manual_seed(cfg.seed)
    model = PTv3(PTv3Config(**recipe.model))
    work = CANDIDATES / name / "work"
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    def on_step(step: int, result: Any) -> None:
        if step % 50 == 0 or step + 1 == cfg.steps:
            print(json.dumps({"step": step, "loss": round(result.loss[-1][1], 4)}), flush=True)

    result = train(model, cfg, on_step=on_step, state_path=work / "state.pt")
    metrics = validate(model)
    metrics.update(parameters=parameter_counts(model), train_seconds=round(result.seconds, 1))
    print(json.dumps({"miou": metrics["miou"], "seconds": round(time.perf_counter() - started, 1)}), flush=True)
    described = {**recipe.describe(), "train": {**cfg.to_dict(), "datasets": list(cfg.datasets)}}
    folder = CANDIDATES / name / "segmenter"
    flags = {"augment" if k == "attribute_augment" else k.replace("_", "-"): v for k, v in changes.items()}
    command = f"python -m bench.pointcloud_candidates {name} " + " ".join(
        f"--{k}" if v is True else f"--no-{k}" if v is False else f"--{k} {v}" for k, v in flags.items()
    )
    command += f" --seed {seed}"
    save_segmenter(model, folder, card={"recipe": described, "metrics": metrics, "command": command})
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pointcloud_candidates", description=__doc__)
    parser.add_argument("name")
    parser.add_argument("--augment", dest="attribute_augment", default=None)
    parser.add_argument("--height", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--scenes", type=int, default=None)
    parser.add_argument("--surveys", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--presence-stats",
        dest="presence_stats",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep BatchNorm statistics per attribute presence (mlcore/pointcloud/presence.py), or not",
    )
    args = parser.parse_args(argv)
    changes = {k: v for k, v in vars(args).items() if k not in ("name", "seed") and v is not None}
    print(train_candidate(args.name, changes=changes, seed=args.seed))


if __name__ == "__main__":
    main()
