"""The point-cloud study's configurations and tiers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: The datasets every configuration trains on, and the ones it never sees.
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
    # on two CPU cores). ``python -m bench.pointcloud --tier card --only moe-proj:0 ...``
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
