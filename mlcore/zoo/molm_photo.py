"""The ``molm-photo`` recipe: MOLM's markers and extractor for photos, each mark at a secret phase.

``watermark-embed`` adds the key-routed decoder's residual to a photo and the portal reads it with
a vote over tiles. This recipe starts from molm-tiny's adapters *without* their bias shift (the
paper's markers: the shift is a content-independent pattern that averaging forges) and molm-tiny's
extractor, and trains both over random keys on residual-marked photo patches exactly as the learned
baselines are trained (:func:`mlcore.watermark.learned_baselines.train_markers`: the same loss,
attacks and PSNR schedule as WOUAF-like), for longer. Its extractor's config asks for a **secret
phase** (``embed.OFFSET_KEY`` = "random-search"): every photo's mark is laid at a fresh random phase
of the tile grid, so the marks of different photos do not line up and their average forges nothing,
and the portal finds the phase by a template search before it reads (:mod:`mlcore.watermark.embed`,
"A secret phase per image")::

    python -m mlcore.zoo train molm-photo [--steps N] [--seed S] [--cpu-minutes M] [--threads N]
                                          [--workdir DIR] [--out DIR]

Stages, each resumable from ``--workdir`` (default ``var/zoo/molm-photo``):

1. ``pool``: training patches (56-px crops of the training photos) and held-out patches (of the
   held-out photos), their tiles' latents and clean decodes, cached in ``pool.pt``;
2. ``train``: the training, saving ``state.pt`` (markers, extractor, optimizer, step, curve) at
   every logged step, and the held-out patches' tile bits (clean, JPEG-75, 0.5 resize) every
   ``eval_every`` steps; each step's randomness derives from (seed, step), so a resumed run takes
   the same steps as one that never stopped;
3. ``export``: molm-tiny's generator with these markers and this extractor, ``card.json`` (the
   recipe, its curve and a whole-photo read-back through the portal's path), the training log,
   ``RECIPE.md`` and ``manifest.json`` into ``--out`` (default ``mlcore/zoo/checkpoints/molm-photo``):
   a ``watermark-markers`` folder every watermark job loads.

``--cpu-minutes`` (this process's CPU time) is a budget for the command; when it passes, the state
is saved and the command exits with status 3 (run it again to continue).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlcore.watermark.learned_baselines import BaselineTrainConfig
from mlcore.zoo.molm_embed import EXIT_OUT_OF_TIME, OutOfTime, cached_readback, write_export
from mlcore.zoo.molm_residual import (
    load_joint_state,
    no_shift_training,
    photo_readback_of,
    prepare,
    save_joint_state,
    trained_parts,
)

NAME = "molm-photo"
COMMAND = f"python -m mlcore.zoo train {NAME}"
ROOT = Path(__file__).resolve().parents[2]
BASE = Path(__file__).resolve().parent / "checkpoints" / "molm"
CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / NAME
#: The reader the export's extractor asks for: marks at a secret phase, found by the template search.
GRID_OFFSET = "random-search"


@dataclass(frozen=True, kw_only=True)
class PhotoRecipe:
    name: str = NAME
    train_patches: int = 1024
    train_seed: int = 21
    held_patches: int = 64
    held_seed: int = 22
    held_key_seed: int = 5
    # The learned baselines' training (bench/watermark_embed.py's WOUAF-like settings: a stronger mark
    # first, 28 → 38 dB over half the steps, the attacks ramping in alongside), ten times longer.
    training: BaselineTrainConfig = field(
        default_factory=lambda: BaselineTrainConfig(
            steps=4000, psnr_start=28.0, ramp_fraction=0.5, lr=3e-3, log_every=50
        )
    )
    eval_every: int = 500
    export_photos: int = 12
    readback_seed: int = 5
    readback_psnr: float = 38.0

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "grid_offset": GRID_OFFSET,
            "base": "molm-tiny (mlcore/zoo/checkpoints/molm): its adapters without the bias shift and its extractor",
        }


RECIPE = PhotoRecipe()


def held_out_bits(vae: Any, markers: Any, extractor: Any, held: Any, recipe: PhotoRecipe) -> dict[str, float]:
    """Tile bits of the held-out patches, each under its own seeded key, at the recipe's PSNR: clean,
    after JPEG-75 and after a 0.5 resize (the markers and extractor left as they were found)."""
    import torch

    from mlcore.watermark.learned_baselines import tile_accuracy
    from mlcore.watermark.residual_train import marked_fields

    keys = torch.randint(
        0, 2, (len(held), markers.num_bits), generator=torch.Generator().manual_seed(recipe.held_key_seed)
    ).float()
    modes = markers.training, extractor.training
    markers.eval()
    extractor.eval()
    try:
        return tile_accuracy(
            lambda i, k: marked_fields(vae, markers, held, i, k, extractor.image_size),
            extractor,
            held,
            keys,
            psnr=recipe.training.psnr,
        )
    finally:
        markers.train(modes[0])
        extractor.train(modes[1])


def train(
    workdir: Path,
    target: Path,
    *,
    recipe: PhotoRecipe = RECIPE,
    base: Path = BASE,
    threads: int = 1,
    cpu_deadline: float | None = None,
    started: float | None = None,
) -> Path:
    """Run (or resume) the recipe in ``workdir`` and export the markers folder to ``target``.

    ``cpu_deadline`` is a ``time.process_time()`` value: on a shared machine the wall clock says
    little about the work done."""
    import torch

    from mlcore.watermark.learned_baselines import Resume, train_markers

    log, bundle, markers, pool, held = prepare(
        workdir, recipe, base=base, threads=threads, started=started, template_readout=True, grid_offset=GRID_OFFSET
    )
    vae, extractor = bundle.generator.vae, bundle.extractor
    config = recipe.training

    state_path = workdir / "state.pt"
    resume = Resume()
    evals: list[dict[str, Any]] = []
    if state_path.is_file():
        state = load_joint_state(state_path, markers, extractor)
        resume = Resume(step=state["step"], optimizer_state=state["optimizer"], rows=tuple(state["rows"]))
        evals = state["evals"]
        log({"stage": "resume", "step": resume.step})
    else:
        torch.manual_seed(config.seed)
        log({"stage": "init", "markers": "molm-tiny without the shift", "extractor": "molm-tiny's"})

    def out_of_time() -> bool:
        # Asked at each checkpoint only: even a spent budget saves one logged interval of progress.
        return cpu_deadline is not None and time.process_time() > cpu_deadline

    def checkpoint(step: int, optimizer: torch.optim.Optimizer, rows: list[dict[str, Any]]) -> None:
        if step % recipe.eval_every == 0 or step == config.steps:
            row = {"stage": "held-out", "step": step, **held_out_bits(vae, markers, extractor, held, recipe)}
            evals.append(row)
            log(row)
        save_joint_state(state_path, markers, extractor, optimizer, step, rows=rows, evals=evals)

    if resume.step < config.steps:
        rows = train_markers(
            vae,
            markers,
            extractor,
            pool,
            config,
            log=lambda row: log({"stage": "train", **row}),
            resume=replace(resume, on_checkpoint=checkpoint, out_of_time=out_of_time),
        )
        if rows[-1]["step"] < config.steps:
            raise OutOfTime(f"stopped at step {rows[-1]['step']} of {config.steps}")
    markers.eval().requires_grad_(False)
    extractor.eval().requires_grad_(False)
    return export(bundle, recipe, workdir, target, base=base, evals=evals, log=log)


def export(
    bundle: Any,
    recipe: PhotoRecipe,
    workdir: Path,
    target: Path,
    *,
    base: Path,
    evals: list[dict[str, Any]],
    log: Any,
) -> Path:
    """molm-tiny's generator with the trained markers and extractor, card, log, RECIPE.md and manifest."""
    readback = cached_readback(workdir, photo_readback_of(bundle, recipe, "photo"), log)

    def with_training(card: dict[str, Any]) -> dict[str, Any]:
        card["training"] = no_shift_training(card, bundle, GRID_OFFSET)
        # ``embed_training``: the extractor was trained on residual-marked photos (watermark-embed reports it).
        card["embed_training"] = {
            "recipe": recipe.describe(),
            "command": COMMAND,
            "held_out_patches": evals,
            "photo_readback": readback,
        }
        return card

    return write_export(
        base,
        target,
        models=trained_parts(bundle),
        card=with_training,
        train_log=(workdir / "train_log.jsonl", "train_log.jsonl"),
        recipe_md=recipe_markdown(recipe, evals, readback),
        name=NAME,
        command=COMMAND,
        log=log,
    )


def recipe_markdown(recipe: PhotoRecipe, evals: list[dict[str, Any]], readback: dict[str, Any]) -> str:
    from mlcore.watermark.embed import OFFSET_KEY

    rows = "\n".join(
        f"| {r['step']} | {r['tile_none']:.3f} | {r['tile_jpeg75']:.3f} | {r['tile_resize05']:.3f} |" for r in evals
    )
    reads = readback["bit_accuracy"]["photo"]
    return (
        f"# {NAME}\n\nMOLM's key-routed LoRA markers *without* the bias shift and molm-tiny's extractor, trained "
        "together over random keys on residual-marked photo patches (what `watermark-embed` writes) exactly as the "
        "learned baselines are (`mlcore/watermark/learned_baselines.py`, `train_markers`), "
        f"{recipe.training.steps} steps, the mark annealed from {recipe.training.psnr_start:.0f} to "
        f"{recipe.training.psnr:.0f} dB. Every mark is laid at a secret phase of the tile grid and the portal finds "
        f'it by a template search (`"{OFFSET_KEY}": "{GRID_OFFSET}"` in `extractor/config.json`).\n\n'
        f"Reproduce with:\n\n    {COMMAND}\n\n"
        f"## Held-out patches ({recipe.held_patches} patches of the held-out photos, 4 tiles each, one key each, "
        f"mark at {recipe.training.psnr:.0f} dB, read on the mark's own grid)\n\n"
        "| step | tile bits clean | tile bits JPEG-75 | tile bits resize 0.5 |\n|---|---|---|---|\n"
        f"{rows}\n\n"
        f"## Whole held-out photos marked at {readback['target_psnr']:.0f} dB (n = {readback['n']}, written PSNR "
        f"{readback['psnr']} dB), bit accuracy through the portal's read (phase search included)\n\n"
        "| clean | JPEG-75 | resize 0.5 |\n|---|---|---|\n"
        f"| {reads['none']:.3f} | {reads['jpeg-75']:.3f} | {reads['resize-0.5']:.3f} |\n\n"
        f"```json\n{json.dumps(recipe.describe(), indent=1)}\n```\n"
    )


def build_molm_photo(target: Path) -> None:
    """Zoo builder: the verified committed checkpoint, copied."""
    from mlcore.zoo.molm import copy_markers_folder

    copy_markers_folder(NAME, CHECKPOINT, COMMAND, target)


#: The seed of ``molm-photo-tiles``' projections (``embed.TILE_KEYS``); public, as the zoo's weights are.
TILE_KEY_SEED = 20261206
#: ``molm-photo-parity``'s per-tile keys (``embed.TILE_KEYS`` as a scheme, :class:`~mlcore.watermark.embed.
#: TileKeys`): folded projections, so a forger's pasted mean no longer steers the reader's flips. The period was
#: chosen on other crops than the benchmarks' (docs/watermarking.md, "Folded projections").
PARITY_TILE_KEYS = {"seed": 20261207, "period": 0.5}


def build_molm_photo_tiles(target: Path) -> None:
    """Zoo builder of ``molm-photo-tiles``: this checkpoint's markers and extractor, unchanged, marking on
    the fixed grid with per-tile keys from the content (:mod:`mlcore.watermark.embed`, "Per-tile keys")
    instead of at a secret phase. Only the extractor's config and the card differ from ``molm-photo``."""
    _build_tile_keyed(target, TILE_KEY_SEED, "per-tile keys from the content")


def build_molm_photo_parity(target: Path) -> None:
    """Zoo builder of ``molm-photo-parity``: ``molm-photo-tiles`` with the flips of :data:`PARITY_TILE_KEYS`
    (:mod:`mlcore.watermark.embed`, "Folded projections")."""
    _build_tile_keyed(target, PARITY_TILE_KEYS, "per-tile keys from the content, folded")


def _build_tile_keyed(target: Path, scheme: int | dict[str, Any], what: str) -> None:
    from mlcore.watermark.embed import OFFSET_KEY, TILE_KEYS, TileKeys

    TileKeys.from_config(scheme)  # a scheme the reader refuses is never written
    build_molm_photo(target)
    config_file = target / "extractor" / "config.json"
    config = {k: v for k, v in json.loads(config_file.read_text()).items() if k != OFFSET_KEY}
    config_file.write_text(json.dumps({**config, TILE_KEYS: scheme}, indent=2) + "\n")
    card_file = target / "card.json"
    card = json.loads(card_file.read_text())
    card["marking"] = f"{what} ({TILE_KEYS} = {json.dumps(scheme)}), fixed grid"
    card_file.write_text(json.dumps(card, indent=1))


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo.molm_photo")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("train", help=f"train {NAME} (resumes) and export its markers folder")
    cmd.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    cmd.add_argument("--workdir", type=Path, default=None, help=f"default var/zoo/{NAME} (-sSEED for other seeds)")
    cmd.add_argument("--out", type=Path, default=None, help=f"markers folder (default {CHECKPOINT.name} in the zoo)")
    cmd.add_argument("--steps", type=int, default=None, help=f"training steps (default {RECIPE.training.steps})")
    cmd.add_argument("--seed", type=int, default=None, help="training seed (default 0, the zoo checkpoint's)")
    cmd.add_argument("--cpu-minutes", type=float, default=None, help="budget; exit 3 with the state saved when spent")
    args = parser.parse_args(argv)
    recipe = RECIPE
    if args.steps is not None:
        recipe = replace(recipe, training=replace(recipe.training, steps=args.steps))
    if args.seed is not None:
        recipe = replace(recipe, training=replace(recipe.training, seed=args.seed))
    seed = recipe.training.seed
    # Another seed never overwrites (or resumes) the zoo checkpoint's run.
    suffix = "" if seed == RECIPE.training.seed else f"-s{seed}"
    workdir = args.workdir or ROOT / "var" / "zoo" / f"{NAME}{suffix}"
    out = args.out or (CHECKPOINT if not suffix else workdir / "markers")
    cpu_deadline = None if args.cpu_minutes is None else time.process_time() + 60 * args.cpu_minutes
    try:
        target = train(workdir, out, recipe=recipe, threads=args.threads, cpu_deadline=cpu_deadline, started=started)
    except OutOfTime as stop:
        print(f"{NAME}: out of time, {stop}; the same command continues from the saved state", file=sys.stderr)
        return EXIT_OUT_OF_TIME
    print(f"markers folder written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
