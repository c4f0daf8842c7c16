from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from bench import BENCHMARKS, DJANGO_BENCHMARKS, ON_DEMAND

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("name", nargs="?")
    parser.add_argument("--tier", choices=("quick", "full"), default="quick")
    parser.add_argument("--list", action="store_true", help="print the benchmark names")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--report", action="store_true", help="rebuild the report from the committed cache; run nothing new"
    )
    args = parser.parse_args()
    if args.list or not args.name:
        print("\n".join(BENCHMARKS))
        return 0
    known = BENCHMARKS | DJANGO_BENCHMARKS | ON_DEMAND
    if args.name not in known:
        print(f"unknown benchmark {args.name!r}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.name in DJANGO_BENCHMARKS:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        django.setup()
    args.results.mkdir(parents=True, exist_ok=True)
    module = importlib.import_module(known[args.name])
    if args.report:
        if not hasattr(module, "report_from_cache"):
            print(f"{args.name} has no report-only path: run it (finished configurations are cached)", file=sys.stderr)
            return 2
        module.report_from_cache(args.results)
        return 0
    module.run(args.tier, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
