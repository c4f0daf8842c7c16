"""``python -m bench.video extend | long | report | run`` (see ``__main__.py``): the longer study, the
long-context study (§2d) alone, the report from the cache only, or what ``python -m bench video --tier TIER``
does."""

from __future__ import annotations

import argparse

from bench.common import DEVICE_ENV
from bench.video.cache import CACHE
from bench.video.study import extended_promoe, extended_quality, long_context_study, run
from bench.video.tiers import EXTENDED_SEEDS, TIERS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.video", description="the longer study, cached")
    parser.add_argument(
        "command",
        choices=("extend", "long", "report", "run"),
        help="extend: train the longer study's missing runs; long: train the missing runs of the tier's 1,024-token "
        "quality study (§2d) and nothing else; report: rewrite video.md / video.json from the cache only; run: what "
        "`python -m bench video --tier TIER` does (train what is missing, then report)",
    )
    parser.add_argument("--part", choices=("both", "quality", "promoe"), default="both")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(EXTENDED_SEEDS))
    parser.add_argument("--tier", choices=tuple(TIERS), default="quick", help="the tier of long, run and report")
    parser.add_argument(
        "--device",
        default=None,
        help=f"device of the quality and ProMoE training runs (extend, run); default ${DEVICE_ENV}, else cpu",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    import torch

    args = build_parser().parse_args(argv)
    torch.set_num_threads(1)
    results = CACHE.parents[1] / "results"
    if args.command == "report":
        run(args.tier, results, train_missing=False)
        return 0
    if args.command == "run":
        run(args.tier, results, device=args.device)
        return 0
    if args.command == "long":
        long_context_study(TIERS[args.tier], compute=True, device=args.device)
        return 0
    if args.part in ("both", "quality"):
        extended_quality(TIERS["quick"], compute=True, seeds=tuple(args.seeds), device=args.device)
    if args.part in ("both", "promoe"):
        extended_promoe(TIERS["quick"], compute=True, seeds=tuple(args.seeds), device=args.device)
    return 0
