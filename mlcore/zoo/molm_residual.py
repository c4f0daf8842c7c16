"""The ``molm-residual`` recipe: MOLM's markers (no bias shift) and extractor trained together on the embed path.

``watermark-embed`` adds the key-routed decoder's residual to a photo at a fixed PSNR and reads it
by a vote over tiles. This recipe starts from molm-tiny's adapters *without* their bias shift (the
paper's markers; the shift is forgeable) and molm-tiny's extractor, and trains both on
residual-marked photo patches under real attacks with differentiable stand-ins
(:func:`mlcore.watermark.residual_train.train_jointly`)::

    python -m mlcore.zoo train molm-residual [--variant V] [--cpu-minutes M] [--workdir DIR] [--out DIR]
    python -m mlcore.zoo.molm_residual train      (the same)

The variants (:data:`VARIANTS`):

- ``bootstrap`` (the default): the extractor keeps molm-tiny's linear read-out (a matched filter,
  which finds a faint pattern in tens of steps and so gives the markers a gradient from the start),
  the attacks and the forged patches ramp in (forgery penalised from 40 % of the steps on);
- ``content-only``: the extractor's CNN alone (the read-out can only read what is the same in every
  image, which is what averaging forges) and the forgery penalised from the start. At this budget
  it never left chance (0.49-0.50 held-out tile bits after 600 steps);
- ``forgery-vote``: continues a ``bootstrap`` state (``--init-state DIR/state.pt``) with the forged
  tiles' *vote* for the key penalised (:func:`~mlcore.watermark.residual_train.forged_vote_loss`);
- ``random-offset``: every photo marked at a secret random phase of the tile grid, read at any phase
  (:mod:`mlcore.watermark.embed`, "A secret phase per image"): the extractor's CNN alone (a template
  read-out needs the mark at a fixed place) trained on tiles cut at random phases to the mark's
  tiling, the forged patches averaging marks at independent phases. Its extractor's config records
  the option, so the portal reads it at any phase and ``watermark-embed`` draws a fresh offset per
  image; ``--seed`` picks the training seed. The mark starts at 24 dB (a stronger signal to find
  without a template) and anneals to 38 dB over half the steps;
- ``random-offset-search``: the ``bootstrap`` training (tiles read on the mark's own grid, so the
  template read-out works), the marks laid at a secret phase and the reader searching for it
  (:func:`mlcore.watermark.embed.search_phase`);
- ``random-offset-curriculum``: the same as ``random-offset``, but molm-tiny's template read-out
  kept and the share of tiles read at a random phase ramped from 0 to 1 over 60 % of the steps (a
  template finds the mark on its own grid in tens of steps; the CNN must then carry it to every
  phase).

Stages, each resumable from ``--workdir`` (default ``var/zoo/molm-residual``):

1. ``pool``: the training patches (56-px crops of the training photos) and held-out patches (of the
   held-out photos), their tiles' latents and clean decodes, cached in ``pool.pt``;
2. ``train``: the joint training, saving ``state.pt`` (markers, extractor, optimizer, step, curve)
   every ``checkpoint_every`` steps; each step's randomness derives from (seed, step);
3. ``export``: molm-tiny's generator with these markers and this extractor, ``card.json``,
   ``residual_train_log.jsonl``, ``RECIPE.md`` and ``manifest.json`` into ``--out`` (default
   ``var/zoo/molm-residual/markers``): a ``watermark-markers`` folder any watermark job loads.

``--wall-minutes`` (or ``--cpu-minutes``, this process's CPU time) is a budget for the command; when
it passes, the state is saved and the command exits with status 3 (run it again to continue).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from mlcore.watermark.residual_train import ResidualTrainConfig
from mlcore.zoo.molm_embed import (
    EXIT_OUT_OF_TIME,
    OutOfTime,
    _logger,
    _save_atomic,
    cached_readback,
    write_export,
)

NAME = "molm-residual"
COMMAND = "python -m mlcore.zoo train molm-residual"
ROOT = Path(__file__).resolve().parents[2]
BASE = Path(__file__).resolve().parent / "checkpoints" / "molm"


@dataclass(frozen=True, kw_only=True)
class ResidualRecipe:
    name: str = NAME
    train_patches: int = 2048
    train_seed: int = 21
    held_patches: int = 64
    held_seed: int = 22
    training: ResidualTrainConfig = field(default_factory=ResidualTrainConfig)
    readback_photos: int = 4  # during training (every ``readback_every`` steps)
    readback_seed: int = 5
    export_photos: int = 12  # at export
    readback_psnr: float = 38.0
    template_readout: bool = True  # keep molm-tiny's linear read-out (see the variants above)
    # None: the fixed grid; "random" / "random-search": marks at a secret phase (embed.OFFSET_KEY).
    embed_grid_offset: str | None = None

    @property
    def grid_offset(self) -> str | None:
        """The extractor's ``embed.OFFSET_KEY``: "random" whenever the training reads at random phases."""
        return self.embed_grid_offset or ("random" if self.training.random_offset else None)

    def describe(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "base": "molm-tiny (mlcore/zoo/checkpoints/molm): its adapters without the bias shift, "
            "its extractor CNN without the linear read-out",
        }


RECIPE = ResidualRecipe(training=ResidualTrainConfig(steps=5000, eval_every=250, readback_every=500))
VARIANTS: dict[str, ResidualRecipe] = {
    "bootstrap": RECIPE,
    "content-only": replace(
        RECIPE,
        template_readout=False,
        training=ResidualTrainConfig(
            steps=3000, null_weight=0.5, forged_weight=0.5, forge_start=0.0, forge_ramp=0.3, attack_ramp=False
        ),
    ),
    # Continues a ``bootstrap`` run (``--init-state``): the forged tiles' vote penalised from the start.
    "forgery-vote": replace(
        RECIPE,
        training=ResidualTrainConfig(
            steps=1500,
            lr_markers=5e-4,
            lr_extractor=7.5e-4,
            warmup=0,
            psnr_start=38.0,
            attack_ramp=False,
            forged_patches=4,
            forge_vote=True,
            forged_weight=1.0,
            forge_start=0.0,
            forge_ramp=0.1,
            eval_every=250,
            readback_every=500,
        ),
    ),
    "random-offset": replace(
        RECIPE,
        template_readout=False,
        readback_photos=2,
        training=ResidualTrainConfig(
            steps=1000, random_offset=True, psnr_start=24.0, ramp_fraction=0.5, eval_every=100, readback_every=500
        ),
    ),
    # The bootstrap recipe's training (tiles on the mark's own grid); marks at a secret phase, found by search.
    "random-offset-search": replace(RECIPE, embed_grid_offset="random-search"),
    # The same, bootstrapped by molm-tiny's template read-out: tiles read on the mark's own grid at
    # first (where a template finds the mark in tens of steps), at a random phase ever more often.
    "random-offset-curriculum": replace(
        RECIPE,
        readback_photos=2,
        training=ResidualTrainConfig(
            steps=1000, random_offset=True, phase_ramp=0.6, eval_every=100, readback_every=500
        ),
    ),
}


def _pool(workdir: Path, recipe: ResidualRecipe, vae: Any, tile: int, log: Any) -> tuple[Any, Any]:
    import torch

    from mlcore.data.images import image_crops
    from mlcore.watermark.generator import from_uint8
    from mlcore.watermark.residual_train import PatchPool, patch_pool, patch_side

    path = workdir / "pool.pt"
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        return PatchPool(**saved["train"]), PatchPool(**saved["held"])
    side = patch_side(tile)
    began = time.perf_counter()
    train = patch_pool(vae, from_uint8(image_crops(recipe.train_patches, side, seed=recipe.train_seed)), tile)
    held = patch_pool(
        vae, from_uint8(image_crops(recipe.held_patches, side, seed=recipe.held_seed, split="test")), tile
    )
    _save_atomic({"train": vars(train), "held": vars(held)}, path)
    log({"stage": "pool", "train": len(train), "held_out": len(held), "seconds": round(time.perf_counter() - began, 1)})
    return train, held


def _start(base: Path, *, template_readout: bool, grid_offset: str | None = None) -> tuple[Any, Any, Any]:
    """molm-tiny's bundle, its markers without the shift (attached instead), its extractor (read-out or not).

    ``grid_offset`` ("random" or "random-search") goes into the extractor's config: its marks are
    then laid at a secret random phase and read at any phase (:mod:`mlcore.watermark.embed`).
    """
    from mlcore.watermark.pipeline import Bundle, load_bundle
    from mlcore.watermark.residual_train import extractor_for_residuals

    zoo = load_bundle(base)
    zoo.markers.detach()
    markers = zoo.markers.without_shift()
    markers.attach(zoo.generator.vae)
    extractor = zoo.extractor if template_readout else extractor_for_residuals(zoo.extractor)
    if grid_offset is not None:
        from mlcore.watermark.embed import OFFSET_KEY

        # In the extractor's config (saved with it): the portal's reader and the embed path follow it.
        extractor.register_to_config(**{OFFSET_KEY: grid_offset})
    return Bundle(generator=zoo.generator, markers=markers, extractor=extractor, card=zoo.card), zoo, markers


def prepare(
    workdir: Path,
    recipe: Any,
    *,
    base: Path,
    threads: int,
    started: float | None,
    template_readout: bool,
    grid_offset: str | None,
) -> tuple[Any, Any, Any, Any, Any]:
    """What a joint-training recipe starts from: its log (in ``workdir``), molm-tiny's bundle with the
    markers to train (:func:`_start`) and the cached training and held-out patch pools (:func:`_pool`)."""
    import torch

    from mlcore.zoo.molm import verify

    torch.set_num_threads(threads)
    verify(base)
    workdir.mkdir(parents=True, exist_ok=True)
    log = _logger(workdir / "train_log.jsonl", time.perf_counter() if started is None else started)
    bundle, _, markers = _start(base, template_readout=template_readout, grid_offset=grid_offset)
    pool, held = _pool(workdir, recipe, bundle.generator.vae, bundle.extractor.image_size, log)
    return log, bundle, markers, pool, held


def save_joint_state(path: Path, markers: Any, extractor: Any, optimizer: Any, step: int, **more: Any) -> None:
    """A joint training's ``state.pt``: markers, extractor (on the CPU), optimizer, step and ``more``."""
    _save_atomic(
        {
            "markers": {k: v.detach().cpu() for k, v in markers.state_dict().items()},
            "extractor": {k: v.detach().cpu() for k, v in extractor.state_dict().items()},
            "optimizer": optimizer.state_dict(),
            "step": step,
            **more,
        },
        path,
    )


def load_joint_state(path: Path, markers: Any, extractor: Any) -> dict[str, Any]:
    """Load a :func:`save_joint_state` file's weights into ``markers`` and ``extractor``; the whole state."""
    import torch

    state = torch.load(path, weights_only=False)
    markers.load_state_dict(state["markers"])
    extractor.load_state_dict(state["extractor"])
    return state


def _match_energy(vae: Any, markers: Any, pool: Any, tile: int, psnr: float) -> float:
    """Scale every adapter's B so the natural residual is near the target energy (s ≈ 1 in the embed path)."""
    import torch

    from mlcore.watermark.residual_train import marked_fields, rms, target_rms

    g = torch.Generator().manual_seed(0)
    index = torch.arange(min(64, len(pool)))
    keys = markers.random_keys(len(index), g)
    total = 1.0
    with torch.no_grad():
        # The decoder is not linear in B (group norms follow the adapted convolutions): a few fixed-point steps.
        for _ in range(4):
            factor = target_rms(psnr) / rms(marked_fields(vae, markers, pool, index, keys, tile)).item()
            for up in markers.up:
                up.mul_(factor)
            total *= factor
    return total


def train(
    workdir: Path,
    target: Path,
    *,
    recipe: ResidualRecipe = RECIPE,
    base: Path = BASE,
    threads: int = 1,
    deadline: float | None = None,
    cpu_deadline: float | None = None,
    started: float | None = None,
    init_state: Path | None = None,
) -> Path:
    """Run (or resume) the recipe in ``workdir`` and export the markers folder to ``target``.

    ``deadline`` is a ``time.perf_counter()`` value, ``cpu_deadline`` a ``time.process_time()`` one
    (this process's CPU seconds: on a shared machine the wall clock says little about the work done).
    """
    import torch

    from mlcore.watermark import embed
    from mlcore.watermark.embed_train import held_out_photos, photo_readback
    from mlcore.watermark.residual_train import train_jointly

    log, bundle, markers, pool, held = prepare(
        workdir,
        recipe,
        base=base,
        threads=threads,
        started=started,
        template_readout=recipe.template_readout,
        grid_offset=recipe.grid_offset,
    )
    vae, extractor, tile = bundle.generator.vae, bundle.extractor, bundle.extractor.image_size
    config = recipe.training

    state_path = workdir / "state.pt"
    start, optimizer_state, history = 0, None, []
    if state_path.is_file():
        state = load_joint_state(state_path, markers, extractor)
        start, optimizer_state, history = state["step"], state["optimizer"], state["history"]
        log({"stage": "resume", "step": start})
    elif init_state is not None:
        # A continuation: the weights of another run's state, a fresh optimizer and schedule.
        state = load_joint_state(init_state, markers, extractor)
        log({"stage": "init", "from_state": str(init_state), "its_step": state["step"]})
    else:
        factor = _match_energy(vae, markers, pool, tile, config.psnr)
        log({"stage": "init", "adapter_scale": round(factor, 4), "markers": "molm-tiny without the shift"})

    def out_of_time() -> bool:
        return (deadline is not None and time.perf_counter() > deadline) or (
            cpu_deadline is not None and time.process_time() > cpu_deadline
        )

    if out_of_time():
        raise OutOfTime("the patch pool is cached")

    def checkpoint(step: int, optimizer: torch.optim.Optimizer, rows: list[dict[str, Any]]) -> None:
        save_joint_state(state_path, markers, extractor, optimizer, step, history=rows)

    images = held_out_photos(recipe.readback_photos, seed=recipe.readback_seed) if recipe.readback_photos else []

    def readback() -> dict[str, Any]:
        embed.forget_tile_bias(extractor)  # the extractor's leaning changes with its weights
        was = extractor.training
        out = photo_readback(bundle, {"joint": extractor}, images, seed=recipe.readback_seed)
        extractor.train(was)
        embed.forget_tile_bias(extractor)
        return {"n": out["n"], "psnr": out["psnr"], **out["bit_accuracy"]["joint"]}

    if start < config.steps:
        history = train_jointly(
            vae,
            markers,
            extractor,
            pool,
            held,
            config,
            log=log,
            out_of_time=out_of_time,
            start_step=start,
            optimizer_state=optimizer_state,
            history=history,
            on_checkpoint=checkpoint,
            readback=readback if images else None,
        )
        done = torch.load(state_path, weights_only=False)["step"]
        if done < config.steps:
            raise OutOfTime(f"stopped at step {done} of {config.steps}")
    markers.eval().requires_grad_(False)
    extractor.eval().requires_grad_(False)
    return export(bundle, recipe, workdir, target, base=base, history=history, log=log)


def export(
    bundle: Any,
    recipe: ResidualRecipe,
    workdir: Path,
    target: Path,
    *,
    base: Path,
    history: list[dict[str, Any]],
    log: Any,
) -> Path:
    """molm-tiny's generator with the trained markers and extractor, card, log, RECIPE.md and manifest."""
    # One work folder can be exported with several readers (the fixed grid, a secret offset): each its own read-back.
    name = f"readback-{recipe.grid_offset}.json" if recipe.grid_offset else "readback.json"
    readback = cached_readback(workdir, photo_readback_of(bundle, recipe, "joint"), log, name=name)

    def with_training(card: dict[str, Any]) -> dict[str, Any]:
        card["training"] = no_shift_training(card, bundle, recipe.grid_offset or "fixed")
        card["residual_training"] = {
            "recipe": recipe.describe(),
            "command": COMMAND,
            "held_out_patches": history[-1] if history else None,
            "photo_readback": readback,
        }
        return card

    return write_export(
        base,
        target,
        models=trained_parts(bundle),
        card=with_training,
        train_log=(workdir / "train_log.jsonl", "residual_train_log.jsonl"),
        recipe_md=recipe_markdown(recipe, history, readback),
        name=NAME,
        command=COMMAND,
        log=log,
    )


def photo_readback_of(bundle: Any, recipe: Any, reader: str) -> Callable[[], dict[str, Any]]:
    """What an export records of whole photos: ``recipe.export_photos`` held-out photos marked at
    ``recipe.readback_psnr`` and read back by the bundle's extractor (named ``reader`` in the result)."""

    def measure() -> dict[str, Any]:
        from mlcore.watermark import embed
        from mlcore.watermark.embed_train import held_out_photos, photo_readback

        embed.forget_tile_bias(bundle.extractor)  # its leaning was last estimated on the training weights
        images = held_out_photos(recipe.export_photos, seed=recipe.readback_seed)
        return photo_readback(
            bundle, {reader: bundle.extractor}, images, seed=recipe.readback_seed, target_psnr=recipe.readback_psnr
        )

    return measure


def trained_parts(bundle: Any) -> dict[str, Callable[[Path], None]]:
    """The savers :func:`~mlcore.zoo.molm_embed.write_export` writes a bundle's trained parts with."""
    return {
        "markers": lambda folder: bundle.markers.to("cpu").save_pretrained(folder),
        "extractor": lambda folder: bundle.extractor.to("cpu").save_pretrained(folder),
    }


def no_shift_training(card: dict[str, Any], bundle: Any, grid_offset: str) -> dict[str, Any]:
    """The card's ``training`` entry for markers trained without the bias shift, read as ``grid_offset`` says."""
    return {
        **card.get("training", {}),
        "shift_scale": 0.0,
        "linear_readout": bundle.extractor.readout is not None,
        "embed_grid_offset": grid_offset,
    }


def recipe_markdown(recipe: ResidualRecipe, history: list[dict[str, Any]], readback: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {r['step']} | {r['psnr_trained']:.1f} | {r['tile_none']:.3f} | {r['tile_jpeg75']:.3f} | "
        f"{r['tile_resize05']:.3f} | {r['patch_none']:.3f} | {r['forgery_vote_bits']:.3f} |"
        for r in history
    )
    reads = readback["bit_accuracy"]["joint"]
    return (
        f"# {NAME}\n\nMOLM's key-routed LoRA markers *without* the bias shift and the extractor, trained together "
        "on residual-marked photo patches (what `watermark-embed` writes), under real JPEG / rescale / blur / noise "
        "attacks with differentiable stand-ins, the mark fixed at "
        f"{recipe.training.psnr:.0f} dB, and a null loss on clean and averaging-forged patches "
        "(`mlcore/watermark/residual_train.py`).\n\n"
        f"Reproduce with:\n\n    {COMMAND}\n\n"
        f"## Held-out patches ({recipe.held_patches} patches of the held-out photos, 4 tiles each, one key each, "
        f"mark at {recipe.training.psnr:.0f} dB)\n\n"
        "| step | trained at (dB) | tile bits clean | tile bits JPEG-75 | tile bits resize 0.5 | 4-tile vote clean | "
        "forgery vote bits (½ = reads nothing) |\n|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n"
        f"## Whole held-out photos marked at {readback['target_psnr']:.0f} dB (n = {readback['n']}, written PSNR "
        f"{readback['psnr']} dB), bit accuracy through the portal's read\n\n"
        "| clean | JPEG-75 | resize 0.5 |\n|---|---|---|\n"
        f"| {reads['none']:.3f} | {reads['jpeg-75']:.3f} | {reads['resize-0.5']:.3f} |\n\n"
        f"```json\n{json.dumps(recipe.describe(), indent=1)}\n```\n"
    )


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m mlcore.zoo.molm_residual")
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("train", help=f"train {NAME} (resumes) and export its markers folder")
    cmd.add_argument("--variant", choices=sorted(VARIANTS), default="bootstrap")
    cmd.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    cmd.add_argument("--workdir", type=Path, default=ROOT / "var" / "zoo" / NAME)
    cmd.add_argument("--out", type=Path, default=None, help="markers folder (default WORKDIR/markers)")
    cmd.add_argument("--steps", type=int, default=None, help=f"training steps (default {RECIPE.training.steps})")
    cmd.add_argument("--wall-minutes", type=float, default=None, help="budget; exit 3 with the state saved when spent")
    cmd.add_argument("--cpu-minutes", type=float, default=None, help="the same, in this process's CPU time")
    cmd.add_argument("--init-state", type=Path, default=None, help="start from another run's state.pt (weights only)")
    cmd.add_argument("--seed", type=int, default=None, help="training seed (default 0)")
    args = parser.parse_args(argv)
    recipe = VARIANTS[args.variant]
    if args.steps is not None:
        recipe = replace(recipe, training=replace(recipe.training, steps=args.steps))
    if args.seed is not None:
        recipe = replace(recipe, training=replace(recipe.training, seed=args.seed))
    deadline = None if args.wall_minutes is None else started + 60 * args.wall_minutes
    cpu_deadline = None if args.cpu_minutes is None else time.process_time() + 60 * args.cpu_minutes
    out = args.out or args.workdir / "markers"
    try:
        target = train(
            args.workdir,
            out,
            recipe=recipe,
            threads=args.threads,
            deadline=deadline,
            cpu_deadline=cpu_deadline,
            started=started,
            init_state=args.init_state,
        )
    except OutOfTime as stop:
        print(f"{NAME}: out of time, {stop}; the same command continues from the saved state", file=sys.stderr)
        return EXIT_OUT_OF_TIME
    print(f"markers folder written to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
