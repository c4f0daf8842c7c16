"""What the video study measures: attention cost on the zoo DiT's activations (part 1) and the
training and evaluation of each quality and ProMoE run (parts 2 and 3)."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, NamedTuple

from bench.common import median_seconds
from bench.video.cache import CACHE
from bench.video.tiers import LONG_CONTEXT, SMALL

# ------------------------------------------------------------------------------------ 1. attention


def _zoo_model() -> tuple[Any, bool]:
    import torch

    from mlcore.video.dit import VideoDiT
    from mlcore.zoo.video import CHECKPOINTS

    folder = CHECKPOINTS / "video-dit-digits"
    if (folder / "manifest.json").is_file():
        return VideoDiT.from_pretrained(folder, torch_dtype=torch.float32).eval(), True
    torch.manual_seed(0)
    return VideoDiT(**SMALL, attention="moga").eval(), False


class FirstBlockInputs(NamedTuple):
    """What the zoo model's first attention block sees on one test clip (trained activations)."""

    trained: bool  #: False when the zoo checkpoint is missing and the router is random
    grid: tuple[int, int, int]  #: (frames, height, width) in tokens
    attn: Any  #: the block's attention module (its router, window and group count)
    hidden: Any  #: [1, N, dim] the normalised, modulated block input
    q: Any  #: [1, heads, N, head_dim]
    k: Any
    v: Any


def first_block_inputs(tokens: int) -> FirstBlockInputs:
    """Run a bouncing-digits clip of ``tokens`` tokens (16 frames, half noise at t = 0.5) through
    the zoo model's embedding up to its first block's q, k, v."""
    import torch

    from mlcore.data.video import bouncing_digits
    from mlcore.video.dit import grid_positions, modulate, sincos

    model, trained = _zoo_model()
    frames = 16
    side = round((tokens / frames) ** 0.5) * 4  # pixels: tokens = frames · (side/4)²
    data = bouncing_digits(1, frames=frames, size=side, split="test", seed=1)
    x0 = torch.from_numpy(data.clips).unsqueeze(1)
    x = 0.5 * x0 + 0.5 * torch.randn(x0.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        grid = model.token_grid(frames, side, side)
        h = model.embed(model.patchify(x)) + grid_positions(grid, model.config.dim, x.device)
        c = (
            model.time_mlp(sincos(torch.tensor([0.5]) * 1000.0, model.config.dim))
            + model.digit_embed(torch.from_numpy(data.digits))
            + model.direction_embed(torch.from_numpy(data.directions))
        )
        block = model.blocks[0]
        shift, scale = block.modulation(c).chunk(6, dim=-1)[:2]
        hn = modulate(block.norm1(h), shift, scale)
        attn = block.attn
        q, k, v = attn.qkv(hn).reshape(1, -1, 3, attn.heads, attn.dim // attn.heads).permute(2, 0, 3, 1, 4)
    return FirstBlockInputs(trained, tuple(grid), attn, hn, q, k, v)


def attention_case(tokens: int) -> dict[str, Any]:
    """One sequence length: activations of the zoo model's first block on a clip with ``tokens`` tokens."""
    import torch
    import torch.nn.functional as F

    from kernels.group_attention import group_attention_torch
    from mlcore.video.attention import in_group_mass

    trained, grid, attn, hn, q, k, v = first_block_inputs(tokens)
    with torch.no_grad():
        routing = attn.router(hn.reshape(-1, attn.dim))
        groups = routing.expert_ids[:, 0].reshape(1, -1)
        n = groups.shape[1]
        sizes = torch.bincount(groups[0], minlength=attn.num_groups).double()
        flop_fraction = float((sizes**2).sum() / n**2)
        # Long sequences take seconds per call on a shared CPU: fewer repeats there.
        repeats, warmup = (3, 1) if n <= 4096 else (1, 0)
        full_s = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v), repeats=repeats, warmup=warmup)
        moga_s = median_seconds(lambda: group_attention_torch(q, k, v, groups), repeats=repeats, warmup=warmup)
        # Mass recall on 256 query rows (the full softmax over all keys for every query is O(N²) memory).
        rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:256]
        mass = in_group_mass(q[:, :, rows], k, groups[:, rows], key_groups=groups)
        random_groups = torch.randint(0, attn.num_groups, (1, n), generator=torch.Generator().manual_seed(1))
        random_mass = in_group_mass(q[:, :, rows], k, random_groups[:, rows], key_groups=random_groups)
    return {
        "tokens": n,
        "grid": list(grid),
        "groups": attn.num_groups,
        "group_sizes": sizes.long().tolist(),
        "trained_router": trained,
        "full_ms": 1000 * full_s,
        "moga_ms": 1000 * moga_s,
        "time_ratio": moga_s / full_s,
        "flop_fraction": flop_fraction,
        "mass_recall": float(mass.mean()),
        "mass_recall_random_groups": float(random_mass.mean()),
    }


def sta_window_for(grid: list[int] | tuple[int, ...], tile: tuple[int, int, int]) -> tuple[int, int, int]:
    """An STA window (in tiles) near a quarter of the grid: half the tiles in time, ~70% per spatial axis."""
    import math

    counts = [g // math.gcd(t, g) for g, t in zip(grid, tile)]
    return (max(1, counts[0] // 2), max(1, round(0.7 * counts[1])), max(1, round(0.7 * counts[2])))


def attention_baselines_case(tokens: int) -> dict[str, Any]:
    """The card's baselines on the same activations as :func:`attention_case`, all at ≈ 25% of the
    scores (MoGA's real routing lands near 28%): random equal groups (M = 4), block top-k (16 blocks,
    top 4) and STA (tiles of 4³, window ≈ a quarter of the grid); plus MoGA's and local-only's
    *union* with the static branches, the pattern the model actually uses."""
    import math

    import torch
    import torch.nn.functional as F

    from kernels.group_attention import group_attention_torch
    from mlcore.video.attention import (
        block_topk_attention,
        block_topk_mask,
        mass_inside,
        random_group_ids,
        sliding_tile_attention,
        tile_layout,
        window_ids,
    )

    trained, grid, attn, hn, q, k, v = first_block_inputs(tokens)
    with torch.no_grad():
        n = q.shape[2]
        groups = attn.router(hn.reshape(-1, attn.dim)).expert_ids[:, 0].reshape(1, -1)
        random_ids = random_group_ids(n, attn.num_groups).reshape(1, -1)
        block_size, topk = n // 16, 4
        tile = (4, 4, 4)
        window = sta_window_for(grid, tile)
        layout = tile_layout(tuple(grid), tile, window)
        local_window = tuple(math.gcd(a, b) for a, b in zip(attn.window, grid))
        local_ids = window_ids(grid, local_window)  # type: ignore[arg-type]
        frame_ids = window_ids(grid, (1, grid[1], grid[2]))

        repeats, warmup = (3, 1) if n <= 4096 else (1, 0)
        timed = {
            "full": lambda: F.scaled_dot_product_attention(q, k, v),
            "random": lambda: group_attention_torch(q, k, v, random_ids),
            "blocktopk": lambda: block_topk_attention(q, k, v, block_size, topk, gather=True),
            "sta": lambda: sliding_tile_attention(q, k, v, grid, tile, window, gather=True),
        }
        ms = {name: 1000 * median_seconds(fn, repeats=repeats, warmup=warmup) for name, fn in timed.items()}

        rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:256]
        qr = q[:, :, rows]

        def same(ids: Any) -> Any:  # [B?, N] ids → [1, 1, R, N] mask rows
            ids = ids.reshape(-1)
            return (ids[rows][:, None] == ids[None, :])[None, None]

        local = same(local_ids) | same(frame_ids)
        masks = {
            "random": same(random_ids),
            "blocktopk": block_topk_mask(qr, k, block_size, topk),
            "sta": layout.mask(rows)[None, None],
            "local (window ∪ frame)": local,
            "MoGA + local (union)": local | same(groups),
            "random + local (union)": local | same(random_ids),
        }
        result = {
            name: {
                "mass_recall": float(mass_inside(qr, k, mask).mean()),
                "flop_fraction": float(mask.float().mean()),
            }
            for name, mask in masks.items()
        }
    for name in ("random", "blocktopk", "sta"):
        result[name].update({"ms": ms[name], "time_ratio": ms[name] / ms["full"]})
    return {
        "tokens": n,
        "grid": list(grid),
        "trained_router": trained,
        "full_ms": ms["full"],
        "block_size": block_size,
        "block_topk": topk,
        "sta_tile": list(tile),
        "sta_window_tiles": list(window),
        "patterns": result,
    }


# -------------------------------------------------------------------------------------- 2. quality


def _judge(static: bool, steps: int) -> Any:
    """The zoo judge for clips; a static judge trained here (and cached) for the one-frame study."""
    import torch

    from mlcore.video.classifier import ClipClassifier, train_classifier
    from mlcore.zoo.video import CHECKPOINTS, load_judge

    if not static and (CHECKPOINTS / "video-judge" / "manifest.json").is_file():
        return load_judge(), None
    folder = CACHE / f"judge-{'static' if static else 'clips'}-{steps}"
    if (folder / "config.json").is_file():
        info = json.loads((folder / "judgement.json").read_text())
        return ClipClassifier.from_pretrained(folder, torch_dtype=torch.float32).eval(), info
    frames = 1 if static else 8
    model, result = train_classifier(frames=frames, static=static, steps=steps, seed=0)
    model.save_pretrained(folder)
    info = vars(result)
    (folder / "judgement.json").write_text(json.dumps(info))
    return model.eval(), info


def evaluate(
    model: Any, judge: Any, *, frames: int, static: bool, clips: int, sample_steps: int, attention: str | None
) -> dict[str, Any]:
    import torch

    from mlcore.data.video import DIRECTIONS, NUM_DIGITS, bouncing_digits
    from mlcore.video.classifier import as_batch, clip_features
    from mlcore.video.classifier import judge as run_judge
    from mlcore.video.metrics import frechet_distance
    from mlcore.video.pipeline import generate_in_chunks, heldout_loss

    held = heldout_loss(model, clips=64, frames=frames, static=static, attention=attention)  # type: ignore[arg-type]
    digits = torch.arange(clips) % NUM_DIGITS
    directions = (torch.arange(clips) // NUM_DIGITS) % len(DIRECTIONS)
    on_cuda = model.device.type == "cuda"
    started = time.perf_counter()
    samples = generate_in_chunks(
        model, digits, directions, frames=frames, steps=sample_steps, guidance=3.0, attention=attention
    )
    if on_cuda:  # kernels run asynchronously: wait for the last one before reading the clock
        torch.cuda.synchronize(model.device)
    sample_seconds = time.perf_counter() - started
    # The judge stays where it was loaded (the CPU); it moves the samples over itself.
    verdict = run_judge(judge, samples, digits, directions)
    real = bouncing_digits(max(clips, 200), frames=frames, split="test", seed=3, static=static)
    fcd = frechet_distance(clip_features(judge, samples), clip_features(judge, as_batch(real.clips)))
    return {
        "heldout_rf_loss": held["mean"],
        "heldout_by_t": {k: v for k, v in held.items() if k != "mean"},
        "accuracy": verdict.accuracy,
        "digit_accuracy": verdict.digit_accuracy,
        "direction_accuracy": verdict.direction_accuracy,
        "fcd": fcd,
        "sample_seconds": sample_seconds,
    }


def _moga_group_flop_fraction(model: Any, frames: int, size: int = 16) -> float:
    """Σnᵢ²/N² of the trained router on held-out clips at t = 0.5, averaged over blocks."""
    import torch

    from mlcore.data.video import bouncing_digits

    data = bouncing_digits(16, frames=frames, size=size, split="test", seed=5)
    x0 = torch.from_numpy(data.clips).unsqueeze(1)
    x = 0.5 * x0 + 0.5 * torch.randn(x0.shape, generator=torch.Generator().manual_seed(5))
    device = model.device
    with torch.no_grad():
        model(
            x.to(device),
            torch.full((16,), 0.5, device=device),
            torch.from_numpy(data.digits).to(device),
            torch.from_numpy(data.directions).to(device),
        )
    stats = [layer.last_stats for layer in model.attention_layers() if layer.last_stats is not None]
    return statistics.fmean(s.flop_fraction() for s in stats)


def train_and_evaluate(
    settings: dict[str, Any],
    *,
    steps: int,
    seed: int,
    frames: int,
    static: bool,
    judge: Any,
    tier: dict[str, Any],
    device: str = "cpu",
) -> dict[str, Any]:
    """Train one configuration from scratch on ``device`` and evaluate it there (the judge grades
    on its own device). The weights start identical on every device (initialised on the CPU)."""
    import torch

    from mlcore.video.dit import VideoDiT, activated_ffn_parameters, parameter_count
    from mlcore.video.pipeline import TrainConfig, train

    model_args = {k: v for k, v in settings.items() if k != "contrastive_weight"}
    torch.manual_seed(seed)
    patch = (1, 2, 2) if static else (1, 4, 4)
    window = (1, 4, 4) if static else (4, 2, 2)
    model = VideoDiT(**{**SMALL, "patch_size": patch, "window": window, **model_args}).to(device)
    config = TrainConfig(
        steps=steps,
        batch_size=16,
        lr=1e-3,
        warmup=min(100, steps // 10),
        frames=frames,
        static=static,
        seed=seed,
        contrastive_weight=settings.get("contrastive_weight", 1.0),
    )
    state = train(model, config)
    result = evaluate(
        model,
        judge,
        frames=frames,
        static=static,
        clips=tier["eval_clips"],
        sample_steps=tier["sample_steps"],
        attention=None,
    )
    if settings.get("attention") == "moga":
        result["moga_group_flop_fraction"] = _moga_group_flop_fraction(model, frames)
    return {
        **result,
        "steps": steps,
        "seed": seed,
        "train_cpu_seconds": state.cpu_seconds,
        "final_rf_loss": statistics.fmean(r[1] for r in state.losses[-50:]),
        "parameters": parameter_count(model),
        "activated_ffn_parameters": activated_ffn_parameters(model),
        "train_wall_seconds": state.wall_seconds,
        "device": str(device),
    }


# ------------------------------------------------------------------------ 2d. quality at long context


def score_flop_fraction(mode: str, grid: tuple[int, int, int], layer: Any) -> float:
    """The share of full attention's N² scores a pattern computes on ``grid``, branches summed, from the
    layer's own pattern settings (MoGA's group term is measured on its routing and added by the caller)."""
    import math

    from mlcore.video.attention import _block_layout, random_group_ids, tile_layout

    n = grid[0] * grid[1] * grid[2]
    if mode == "full":
        return 1.0
    if mode == "blocktopk":  # the layer's blocks of N / block_count tokens, as its forward cuts them
        _, blocks, topk = _block_layout(n, max(1, n // layer.block_count), layer.block_topk)
        return topk / blocks
    if mode == "sta":
        return tile_layout(grid, layer.sta_tile, layer.sta_window).flop_fraction()
    window = [math.gcd(a, b) for a, b in zip(layer.window, grid)]
    local = (math.prod(window) + grid[1] * grid[2]) / n  # the window and per-frame branches
    if mode == "random":
        sizes = random_group_ids(n, layer.num_groups).bincount().double()
        return local + float((sizes**2).sum()) / n**2
    return local  # local; moga adds its measured Σnᵢ²/N²


def train_long_context(mode: str, *, steps: int, seed: int, heldout_clips: int, device: str = "cpu") -> dict[str, Any]:
    """One pattern trained from scratch on :data:`LONG_CONTEXT` clips (1,024 tokens) and scored by its
    held-out RF loss (no sampling: the zoo judge reads 8-frame 16² clips only)."""
    import torch

    from mlcore.video.dit import VideoDiT, parameter_count
    from mlcore.video.pipeline import TrainConfig, heldout_loss, train

    setup = LONG_CONTEXT
    frames, size = setup["frames"], setup["size"]
    torch.manual_seed(seed)
    # The sparse baselines' budgets at this grid, not the 128-token defaults.
    budgets = {k: setup[k] for k in ("block_count", "block_topk", "sta_tile", "sta_window")}
    model = VideoDiT(**setup["model"], patch_size=setup["patch_size"], attention=mode, **budgets).to(device)
    for layer in model.attention_layers():
        # The group twin (sort, one SDPA per group) instead of a dense block-diagonal mask at exactly
        # 1,024 tokens: the same attention, about 15% less CPU per MoGA step (measured).
        layer.moga_backend = "kernel"
    config = TrainConfig(
        steps=steps,
        batch_size=setup["batch_size"],
        lr=setup["lr"],
        warmup=min(100, steps // 10),
        frames=frames,
        size=size,
        seed=seed,
    )
    state = train(model, config)
    started = time.process_time()
    held = heldout_loss(model, clips=heldout_clips, frames=frames, size=size)
    grid = model.token_grid(frames, size, size)
    flops = score_flop_fraction(mode, grid, model.attention_layers()[0])
    result: dict[str, Any] = {}
    if mode == "moga":
        result["moga_group_flop_fraction"] = _moga_group_flop_fraction(model, frames, size)
        flops += result["moga_group_flop_fraction"]
    result["eval_cpu_seconds"] = time.process_time() - started
    return {
        **result,
        "mode": mode,
        "tokens": grid[0] * grid[1] * grid[2],
        "grid": list(grid),
        "heldout_rf_loss": held["mean"],
        "heldout_by_t": {k: v for k, v in held.items() if k != "mean"},
        "heldout_clips": heldout_clips,
        "score_flop_fraction": flops,
        "steps": steps,
        "seed": seed,
        "batch_size": setup["batch_size"],
        "train_cpu_seconds": state.cpu_seconds,
        "train_wall_seconds": state.wall_seconds,
        "final_rf_loss": statistics.fmean(r[1] for r in state.losses[-50:]),
        "parameters": parameter_count(model),
        "device": str(device),
    }
