"""The ``molm-embed`` recipe: molm-tiny's extractor fine-tuned to read residual-marked photos.

``watermark-embed`` adds only the marked decoder's *difference* to a photo, at a strength chosen
for fidelity; the zoo's extractor was trained on whole marked decodes and reads those residual
marks near chance. This recipe keeps molm-tiny's markers, VAE and latent model frozen and
fine-tunes the extractor on exactly what the embed path writes
(:func:`mlcore.watermark.embed_train.finetune_extractor`)::

    python -m mlcore.zoo train molm-embed [--threads N] [--wall-minutes M] [--workdir DIR] [--out DIR]

Stages, each resumable from ``--workdir`` (default ``var/zoo/molm-embed``):

1. ``pool``: the residual of every training and held-out tile under its own random key, cached
   chunk by chunk in ``pool-train/`` and ``pool-held/`` (three VAE passes per tile: the costly part,
   never computed twice);
2. ``train``: the fine-tune, saving ``state.pt`` (extractor, optimizer, step, held-out curve) every
   ``checkpoint_every`` steps; each step's randomness derives from (seed, step), so a resumed run
   takes the same batches as an uninterrupted one;
3. ``export``: molm-tiny's checkpoint with this extractor (fp16), ``card.json`` (the fine-tune and
   its figures), ``embed_train_log.jsonl``, ``RECIPE.md`` and ``manifest.json`` (sha256 of every
   file) into ``--out`` (default ``mlcore/zoo/checkpoints/molm-embed``), a ``watermark-markers``
   folder any watermark job loads. Its figures include whole-photo readback: held-out photos marked
   at 38 dB as ``watermark-embed`` marks them, read by the portal's path before and after the
   fine-tune, clean, after JPEG-75 and after a 0.5 resize.

``--wall-minutes`` is a budget for the command; when it passes, the state is saved and the command
exits with status 3 (run it again to continue).

The other recipe, ``python -m mlcore.zoo train molm-residual`` (:mod:`mlcore.zoo.molm_residual`), trains
the markers without the bias shift *and* the extractor together on residual-marked photos.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlcore.watermark.embed_train import EmbedTrainConfig

NAME = "molm-embed"
COMMAND = f"python -m mlcore.zoo train {NAME}"
ROOT = Path(__file__).resolve().parents[2]
BASE = Path(__file__).resolve().parent / "checkpoints" / "molm"
CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / NAME
EXIT_OUT_OF_TIME = 3


@dataclass(frozen=True, kw_only=True)
class EmbedRecipe:
    name: str = NAME
    train_tiles: int = 4096
    train_seed: int = 11
    held_tiles: int = 512
    held_seed: int = 12
    tile: int = 32
    training: EmbedTrainConfig = field(default_factory=lambda: EmbedTrainConfig(steps=800))
    checkpoint_every: int = 50
    readback_photos: int = 12
    readback_seed: int = 5
    readback_psnr: float = 38.0

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "base": "molm-tiny (mlcore/zoo/checkpoints/molm)"}


RECIPE = EmbedRecipe()


def _logger(path: Path, started: float) -> Any:
    path.parent.mkdir(parents=True, exist_ok=True)

    def log(row: dict[str, Any]) -> None:
        row = {**row, "wall_seconds": round(time.perf_counter() - started, 1)}
        print(json.dumps(row), flush=True)
        with path.open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    return log


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _save_atomic(obj: Any, path: Path) -> None:
    import torch

    partial = path.with_suffix(".tmp")
    torch.save(obj, partial)
    partial.replace(path)


class OutOfTime(Exception):
    pass


def train(
    workdir: Path,
    target: Path,
    *,
    recipe: EmbedRecipe = RECIPE,
    base: Path = BASE,
    threads: int = 1,
    device: str = "cpu",
    deadline: float | None = None,
    started: float | None = None,
) -> Path:
    """Run (or resume) the recipe in ``workdir`` and export the markers folder to ``target``."""
    import torch

    from mlcore.data.images import image_crops
    from mlcore.watermark.embed_train import finetune_extractor, residual_pool
    from mlcore.watermark.generator import from_uint8
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo.molm import verify

    started = time.perf_counter() if started is None else started
    torch.set_num_threads(threads)
    verify(base)
    log = _logger(workdir / "train_log.jsonl", started)
    bundle = load_bundle(base, device=device)
    config = recipe.training
    photos = from_uint8(image_crops(recipe.train_tiles, recipe.tile, seed=recipe.train_seed, split="train"))
    held = from_uint8(image_crops(recipe.held_tiles, recipe.tile, seed=recipe.held_seed, split="test"))
    log({"stage": "tiles", "train": len(photos), "held_out": len(held)})
    pool = residual_pool(bundle, photos, seed=config.seed, cache=workdir / "pool-train", log=log)
    test = residual_pool(bundle, held, seed=config.seed + 1, cache=workdir / "pool-held", log=log)
    if deadline is not None and time.perf_counter() > deadline:
        raise OutOfTime("the residual pool is cached")

    state_path = workdir / "state.pt"
    start, optimizer_state, history = 0, None, []
    if state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        bundle.extractor.load_state_dict(state["extractor"])
        start, optimizer_state, history = state["step"], state["optimizer"], state["history"]
        log({"stage": "resume", "step": start})

    def checkpoint(step: int, optimizer: torch.optim.Optimizer, rows: list[dict[str, Any]]) -> None:
        extractor = {k: v.detach().cpu() for k, v in bundle.extractor.state_dict().items()}
        _save_atomic(
            {"extractor": extractor, "optimizer": optimizer.state_dict(), "step": step, "history": rows}, state_path
        )

    if start < config.steps:
        # The budget check inside the loop uses time.monotonic(); convert the perf_counter deadline.
        loop_deadline = None if deadline is None else time.monotonic() + (deadline - time.perf_counter())
        history = finetune_extractor(
            bundle,
            config,
            pool=pool,
            test=test,
            log=log,
            deadline=loop_deadline,
            start_step=start,
            optimizer_state=optimizer_state,
            history=history,
            on_checkpoint=checkpoint,
            checkpoint_every=recipe.checkpoint_every,
        )
        done = torch.load(state_path, weights_only=False)["step"]
        if done < config.steps:
            raise OutOfTime(f"stopped at step {done} of {config.steps}")
    return export(bundle, recipe, workdir, target, base=base, history=history, log=log)


def export(
    bundle: Any,
    recipe: EmbedRecipe,
    workdir: Path,
    target: Path,
    *,
    base: Path,
    history: list[dict[str, Any]],
    log: Any,
) -> Path:
    """The base markers folder with the fine-tuned extractor, card, log, RECIPE.md and manifest."""
    import torch

    from mlcore.watermark.embed_train import held_out_photos, photo_readback
    from mlcore.watermark.pipeline import load_bundle

    def measure() -> dict[str, Any]:
        images = held_out_photos(recipe.readback_photos, seed=recipe.readback_seed)
        return photo_readback(
            bundle,
            {"shipped": load_bundle(base).extractor, "fine-tuned": bundle.extractor},
            images,
            seed=recipe.readback_seed,
            target_psnr=recipe.readback_psnr,
        )

    readback = cached_readback(workdir, measure, log)

    def save_extractor(folder: Path) -> None:
        bundle.extractor.to("cpu").to(torch.float16).save_pretrained(folder)
        bundle.extractor.to(torch.float32)

    def with_training(card: dict[str, Any]) -> dict[str, Any]:
        card["embed_training"] = {
            "recipe": recipe.describe(),
            "command": COMMAND,
            "held_out_tiles": history[-1] if history else None,
            "photo_readback": readback,
        }
        return card

    curve = "\n".join(
        "| {step} | {loss:.3f} | {tile_bit_accuracy:.3f} | {tile_bit_accuracy_jpeg75:.3f} |".format(**row)
        for row in history
    )
    reads = "\n".join(
        f"| {name} | " + " | ".join(f"{by[a]:.3f}" for a in ("none", "jpeg-75", "resize-0.5")) + " |"
        for name, by in readback["bit_accuracy"].items()
    )
    recipe_md = (
        f"# {NAME}\n\nmolm-tiny's markers, VAE and latent model unchanged; the extractor fine-tuned on "
        "residual-marked photo tiles (what `watermark-embed` writes), with JPEG, rescale and noise "
        f"distortions and a share of whole marked decodes.\n\nReproduce with:\n\n    {COMMAND}\n\n"
        "## Held-out tiles (strength 0.4, one key per tile)\n\n"
        "| step | loss (last batch) | bit accuracy | after JPEG-75 |\n"
        f"|---|---|---|---|\n{curve}\n\n"
        f"## Whole held-out photos marked at {readback['target_psnr']:.0f} dB "
        f"(n = {readback['n']}, written PSNR {readback['psnr']} dB), bit accuracy\n\n"
        f"| extractor | clean | JPEG-75 | resize 0.5 |\n|---|---|---|---|\n{reads}\n\n"
        f"```json\n{json.dumps(recipe.describe(), indent=1)}\n```\n"
    )
    return write_export(
        base,
        target,
        models={"extractor": save_extractor},
        card=with_training,
        train_log=(workdir / "train_log.jsonl", "embed_train_log.jsonl"),
        recipe_md=recipe_md,
        name=NAME,
        command=COMMAND,
        log=log,
    )


def write_export(
    base: Path,
    target: Path,
    *,
    models: dict[str, Callable[[Path], None]],
    card: Callable[[dict[str, Any]], dict[str, Any]],
    train_log: tuple[Path, str],
    recipe_md: str,
    name: str,
    command: str,
    log: Any,
) -> Path:
    """A recipe's export into ``target`` (replaced): the ``base`` markers folder with each of ``models``'
    sub-folders written by its saver, ``card.json`` passed through ``card``, the training log copied
    under its name, ``RECIPE.md`` and a fresh ``manifest.json``."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("manifest.json", *models))
    from mlcore.uploads import forget_source_paths

    for part, save in models.items():
        save(target / part)
    forget_source_paths(target)  # diffusers records where each model was loaded from: a path of this machine
    card_path = target / "card.json"
    card_path.write_text(json.dumps(card(json.loads(card_path.read_text())), indent=1))
    shutil.copy2(train_log[0], target / train_log[1])
    (target / "RECIPE.md").write_text(recipe_md)
    return write_manifest(target, name, command, log)


def cached_readback(
    workdir: Path, measure: Callable[[], dict[str, Any]], log: Any, *, name: str = "readback.json"
) -> dict[str, Any]:
    """The whole-photo read-back of an export, measured once per work folder and reader (``name``), so
    an export that is run again does not mark and read the photos again."""
    readback_file = workdir / name
    if readback_file.is_file():
        readback = json.loads(readback_file.read_text())
    else:
        readback = measure()
        readback_file.write_text(json.dumps(readback, indent=1))
    log({"stage": "readback", **readback})
    return readback


def write_manifest(target: Path, name: str, command: str, log: Any) -> Path:
    """``manifest.json``: the recipe's name, command and the sha256 of every file of the export."""
    files = {str(p.relative_to(target)): _sha256(p) for p in sorted(target.rglob("*")) if p.is_file()}
    (target / "manifest.json").write_text(json.dumps({"name": name, "command": command, "files": files}, indent=1))
    # Relative to the repository (or the folder's name): the log is committed with the checkpoint.
    shown = target.resolve().relative_to(ROOT) if target.resolve().is_relative_to(ROOT) else target.name
    log({"stage": "export", "target": str(shown)})
    return target


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("train", help=f"train {NAME} (resumes) and export its markers folder")
    cmd.add_argument("name", choices=[NAME])
    cmd.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    cmd.add_argument("--device", default="cpu", help="torch device (cpu, cuda, ...)")
    cmd.add_argument("--workdir", type=Path, default=ROOT / "var" / "zoo" / NAME)
    cmd.add_argument("--out", type=Path, default=CHECKPOINT)
    cmd.add_argument("--wall-minutes", type=float, default=None, help="budget; exit 3 with the state saved when spent")
    args = parser.parse_args(argv)
    deadline = None if args.wall_minutes is None else started + 60 * args.wall_minutes
    try:
        target = train(
            args.workdir, args.out, threads=args.threads, device=args.device, deadline=deadline, started=started
        )
    except OutOfTime as stop:
        print(f"{NAME}: out of time, {stop}; the same command continues from the saved state", file=sys.stderr)
        return EXIT_OUT_OF_TIME
    print(f"markers folder written to {target}")
    return 0
