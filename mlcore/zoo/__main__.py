"""``python -m mlcore.zoo list`` and ``python -m mlcore.zoo train NAME``: the zoo's recipes.

``train`` resumes from ``var/zoo/NAME/state.pt`` if an earlier run stopped, then evaluates on the
held-out split of every source and writes the commit-ready checkpoint to
``mlcore/zoo/checkpoints/NAME/``; ``--seed N`` trains the same recipe under another training seed in
``var/zoo/NAME-sN`` and writes to ``var/zoo-seeds/NAME-sN`` (robustness studies, never committed).
Language models are trained here; every other model's recipe is a module of this package
(``molm`` for watermarking,
``molm_embed`` for its extractor fine-tuned on residual-marked photos, ``molm_photo`` for the
markers ``watermark-embed`` marks photos with (``molm-photo-tiles`` and ``molm-photo-parity`` are built
from them), ``lora_base`` for the encoder LoRA experts adapt, ``pointcloud``,
``video``) with a ``main(argv)`` of its own, and ``train NAME`` hands the rest of the command line
to it, so one command trains every zoo model with that recipe's flags (``--device``,
``--cpu-minutes`` and ``--wall-minutes`` for video, ``--threads``, ``--workdir`` and ``--out`` for all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mlcore.zoo.lm import CHECKPOINTS, ROOT
from mlcore.zoo.recipes import RECIPES, get_recipe

#: Zoo models trained by a recipe module of their own: name → (module with ``main(argv)``, leading argv).
OTHER_RECIPES: dict[str, tuple[str, list[str]]] = {
    "molm-tiny": ("mlcore.zoo.molm", ["train"]),
    "molm-embed": ("mlcore.zoo.molm_embed", ["train", "molm-embed"]),
    "molm-residual": ("mlcore.zoo.molm_residual", ["train"]),
    "molm-photo": ("mlcore.zoo.molm_photo", ["train"]),
    # The same weights as molm-photo, marking with per-tile keys: its recipe is molm-photo's.
    "molm-photo-tiles": ("mlcore.zoo.molm_photo", ["train"]),
    "molm-photo-parity": ("mlcore.zoo.molm_photo", ["train"]),
    "lora-base-tiny": ("mlcore.zoo.lora_base", ["train", "lora-base-tiny"]),
    "pointmoe-synmix": ("mlcore.zoo.pointcloud", ["train", "pointmoe-synmix"]),
    "ptv3-synmix-dense": ("mlcore.zoo.pointcloud", ["train", "ptv3-synmix-dense"]),
    "video-dit-digits": ("mlcore.zoo.video", ["train", "video-dit-digits"]),
    "video-judge": ("mlcore.zoo.video", ["train", "video-judge"]),
}


def cmd_list(_: argparse.Namespace) -> int:
    from mlcore.zoo.registry import MODELS

    for name, recipe in RECIPES.items():
        ready = (CHECKPOINTS / name / "manifest.json").exists()
        print(f"{name}  {'[checkpoint]' if ready else '[not trained]'}  {recipe.title}")
    for item in MODELS:
        if item.name in OTHER_RECIPES:
            ready = bool(item.stamp) and (ROOT / item.stamp).exists()
            print(f"{item.name}  {'[checkpoint]' if ready else '[not trained]'}  {item.title}")
    listed = {item.name for item in MODELS} | set(RECIPES)
    for name in sorted(set(OTHER_RECIPES) - listed):
        # A recipe whose output is not (yet) a zoo item of its own, e.g. molm-embed's markers folder.
        ready = (CHECKPOINTS / name / "manifest.json").exists()
        print(f"{name}  {'[checkpoint]' if ready else '[not trained]'}  recipe only (not a zoo item)")
    return 0


def train_other(name: str, rest: list[str]) -> int:
    import importlib

    module, leading = OTHER_RECIPES[name]
    return int(importlib.import_module(module).main([*leading, *rest]) or 0)


def cmd_train(args: argparse.Namespace) -> int:
    import torch

    from mlcore.eval.cloze import ITEMS_PER_SOURCE
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.eval.perplexity import EVAL_WINDOWS, expert_counts, usage_entropy
    from mlcore.zoo.lm import checkpoint_folder, export, train

    torch.set_num_threads(args.threads)
    recipe = get_recipe(args.name)
    if args.seed is not None:
        recipe = recipe.with_seed(args.seed)
    workdir = args.workdir or ROOT / "var" / "zoo" / recipe.run_name
    model, tokenizer = train(recipe, workdir)
    heldout = prepare_heldout(
        tokenizer, recipe.sources, length=recipe.context, windows=EVAL_WINDOWS, cloze_items=ITEMS_PER_SOURCE
    )
    metrics = heldout.evaluate(model, tokenizer)
    counts = expert_counts(model, torch.cat(list(heldout.windows.values())))
    metrics["usage_entropy"] = [round(usage_entropy(layer), 4) for layer in counts]
    metrics["expert_counts"] = counts
    metrics["heldout_windows"] = {name: len(w) for name, w in heldout.windows.items()}
    print(json.dumps({k: v for k, v in metrics.items() if k != "expert_counts"}, indent=1))
    command = f"python -m mlcore.zoo train {recipe.name} --threads {args.threads}"
    if recipe.run_name != recipe.name:
        command += f" --seed {recipe.seed}"
    target = export(
        model,
        tokenizer,
        recipe,
        args.out or checkpoint_folder(recipe),
        workdir=workdir,
        command=command,
        metrics=metrics,
    )
    print(f"checkpoint written to {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) >= 2 and argv[0] == "train" and argv[1] in OTHER_RECIPES:
        return train_other(argv[1], argv[2:])
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the zoo's recipes and whether a checkpoint exists").set_defaults(func=cmd_list)
    train = sub.add_parser("train", help="train a recipe (resumes) and export its checkpoint")
    train.add_argument("name", choices=sorted([*RECIPES, *OTHER_RECIPES]))
    train.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    train.add_argument("--workdir", type=Path, default=None, help="resumable state (default var/zoo/NAME)")
    train.add_argument("--out", type=Path, default=None, help="checkpoint folder (default mlcore/zoo/checkpoints/NAME)")
    train.add_argument("--seed", type=int, default=None, help="training seed (default: the committed checkpoint's)")
    train.set_defaults(func=cmd_train)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
