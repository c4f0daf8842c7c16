"""Procedures around :class:`~mlcore.video.dit.VideoDiT`: rectified-flow training, held-out loss, sampling.

- **Rectified flow** (Liu et al. 2023; SD3's formulation, Esser et al. 2024 eq. 1–3): x_t = (1 − t)·x₀ +
  t·ε, the network regresses v = ε − x₀; t is drawn logit-normal (SD3 §3.1, m = 0, s = 1).
- **Classifier-free guidance** (Ho & Salimans 2022): the condition is dropped (both labels set to
  the null class) with probability ``cond_drop``; at sampling v = v_∅ + w·(v_c − v_∅).
- **Sampling** with diffusers' ``FlowMatchEulerDiscreteScheduler`` (σ from 1 to 0, Euler steps on
  the predicted velocity).
- **Held-out loss** on a fixed grid of t with shared noise seeds, so two models are compared on the
  very same (x₀, ε, t) triples (the cards' most sensitive quality signal).

Every procedure runs the model where it lives (CPU or CUDA). Clips, labels and noise are always
drawn on the CPU from seeded generators and then moved, so a CUDA run sees the same data and the
same random stream as a CPU run, and a CPU run is bit-identical to one that never heard of devices.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from mlcore.data.video import bouncing_digits
from mlcore.video.attention import ATTENTION_MODES, AttentionMode
from mlcore.video.dit import AuxLosses, VideoDiT

#: The fixed noise levels of the held-out loss.
HELDOUT_T: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass(kw_only=True)
class TrainConfig:
    steps: int = 1000
    #: No default: the video-train job's spec, the zoo recipe and the benchmark each give their own.
    batch_size: int
    lr: float = 1e-3
    warmup: int = 50
    weight_decay: float = 0.0
    cond_drop: float = 0.1
    #: Weights of the auxiliary losses: MoGA group balance (already × α = 0.1 inside), DiT-MoE
    #: Switch balance, ProMoE routing contrastive loss (λ = 1 in the paper).
    group_balance_weight: float = 1.0
    expert_balance_weight: float = 0.01
    contrastive_weight: float = 1.0
    #: Attention pattern per step: one mode, or several cycled step by step (the zoo model trains
    #: on all three so that one checkpoint serves every pattern of the generate job).
    attention_modes: tuple[str, ...] = ()
    frames: int = 8
    size: int = 16
    static: bool = False
    grad_clip: float = 1.0
    seed: int = 0
    #: Decay of an exponential moving average of the weights (DiT samples from it; 0: none). The
    #: average lives in the :func:`make_ema` module that :func:`train` updates after every step.
    ema: float = 0.0
    #: Run the forward in bfloat16 autocast (CUDA only; elsewhere the flag is ignored, so one config
    #: serves both). Off by default: the zoo and the benchmark's numbers are float32.
    autocast_bf16: bool = False


@dataclass
class TrainState:
    step: int = 0
    losses: list[list[float]] = field(default_factory=list)  # [step, rf loss, aux loss]
    cpu_seconds: float = 0.0
    #: Wall-clock time of the steps (the budget that means something on a GPU, where the process's
    #: CPU time is mostly launch overhead and waiting).
    wall_seconds: float = 0.0


def rectified_flow_loss(
    model: VideoDiT,
    x0: Tensor,
    digits: Tensor,
    directions: Tensor,
    t: Tensor,
    noise: Tensor,
    *,
    attention: AttentionMode | None = None,
    aux: AuxLosses | None = None,
) -> Tensor:
    """Per-sample mean squared velocity error ‖v_θ(x_t, t, c) − (ε − x₀)‖² / D at x_t = (1 − t)x₀ + tε."""
    tt = t.view(-1, *([1] * (x0.dim() - 1)))
    x_t = (1 - tt) * x0 + tt * noise
    v = model(x_t, t, digits, directions, attention=attention, aux=aux)
    return (v - (noise - x0)).square().flatten(1).mean(1)


def training_batch(config: TrainConfig, step: int) -> tuple[Tensor, Tensor, Tensor]:
    data = bouncing_digits(
        config.batch_size,
        frames=config.frames,
        size=config.size,
        split="train",
        seed=config.seed * 1_000_003 + step,
        static=config.static,
    )
    return torch.from_numpy(data.clips).unsqueeze(1), torch.from_numpy(data.digits), torch.from_numpy(data.directions)


def aux_total(aux: AuxLosses, config: TrainConfig, device: torch.device | str = "cpu") -> Tensor:
    total = torch.zeros((), device=device)
    for name, weight in (
        ("group_balance", config.group_balance_weight),
        ("expert_balance", config.expert_balance_weight),
        ("contrastive", config.contrastive_weight),
    ):
        value = getattr(aux, name)
        if value is not None and weight:
            total = total + weight * value
    return total


def train(
    model: VideoDiT,
    config: TrainConfig,
    *,
    state: TrainState | None = None,
    optimiser: torch.optim.Optimizer | None = None,
    on_step: Callable[[TrainState], None] | None = None,
    should_stop: Callable[[TrainState], bool] | None = None,
    ema: AveragedModel | None = None,
) -> TrainState:
    """Train ``model`` in place from ``state.step`` to ``config.steps`` on fresh procedural clips.

    ``on_step`` runs after every step (checkpointing, metrics, cancellation: raise to stop);
    ``should_stop`` ends training early (e.g. a CPU-time budget) with the state intact; ``ema``
    (:func:`make_ema`) is updated after every optimiser step.

    The model may live on any device: each batch and its noise are drawn on the CPU exactly as
    without one and moved there, so a CUDA run consumes the same random stream (its numbers still
    differ in the last bits: other kernels, and other attention paths for the sparse patterns).
    """
    device = model.device
    # bf16 autocast only when asked and only on CUDA; nullcontext keeps the CPU path free of any
    # autocast machinery, so CPU runs stay bit-identical.
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
        if config.autocast_bf16 and device.type == "cuda"
        else contextlib.nullcontext
    )
    state = state or TrainState()
    optimiser = optimiser or make_optimiser(model, config)
    modes = config.attention_modes or (model.config.attention,)
    for mode in modes:
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")
    model.train()
    while state.step < config.steps:
        if should_stop is not None and should_stop(state):
            break
        started, wall_started = time.process_time(), time.perf_counter()
        step = state.step
        for group in optimiser.param_groups:
            group["lr"] = config.lr * min(1.0, (step + 1) / max(1, config.warmup))
        x0, digits, directions = (part.to(device) for part in training_batch(config, step))
        # Drawn on the CPU in this order whatever the device (the generator stays on the CPU).
        gen = torch.Generator().manual_seed(config.seed * 7_919 + step)
        drop = (torch.rand(len(x0), generator=gen) < config.cond_drop).to(device)
        digits = torch.where(drop, model.null_digit, digits)
        directions = torch.where(drop, model.null_direction, directions)
        t = torch.sigmoid(torch.randn(len(x0), generator=gen)).to(device)  # logit-normal(0, 1)
        noise = torch.randn(x0.shape, generator=gen).to(device)
        aux = AuxLosses()
        mode = modes[step % len(modes)]
        with autocast():
            rf = rectified_flow_loss(model, x0, digits, directions, t, noise, attention=mode, aux=aux).mean()  # type: ignore[arg-type]
            extra = aux_total(aux, config, device)
        loss = rf + extra
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimiser.step()
        if ema is not None:
            ema.update_parameters(model)
        state.step += 1
        # float() waits for the device, so the wall time below is the step's real time.
        state.losses.append([step, float(rf.detach()), float(extra.detach())])
        state.cpu_seconds += time.process_time() - started
        state.wall_seconds += time.perf_counter() - wall_started
        if on_step is not None:
            on_step(state)
    return state


def make_ema(model: VideoDiT, config: TrainConfig) -> AveragedModel | None:
    """The moving average of ``model``'s weights with decay ``config.ema`` (None when 0)."""
    if not config.ema:
        return None
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(config.ema), use_buffers=True)


def make_optimiser(model: VideoDiT, config: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay, betas=(0.9, 0.99))


def save_state(
    path: Path,
    model: VideoDiT,
    optimiser: torch.optim.Optimizer,
    state: TrainState,
    config: TrainConfig,
    ema: AveragedModel | None = None,
) -> None:
    """A resumable training state, written atomically (a crash mid-write keeps the previous one)."""
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "model": model.state_dict(),
            "optimiser": optimiser.state_dict(),
            "ema": None if ema is None else ema.state_dict(),
            "state": asdict(state),
            "config": asdict(config),
        },
        tmp,
    )
    tmp.replace(path)


def load_state(
    path: Path,
    model: VideoDiT,
    optimiser: torch.optim.Optimizer,
    ema: AveragedModel | None = None,
    *,
    map_location: torch.device | str = "cpu",
) -> TrainState:
    """Resume from :func:`save_state` into a model (and its optimiser and average) on any device.

    Build the model, move it to its device, then make the optimiser and the average, then call
    this. The default ``map_location`` reads a state written on a GPU on a CPU-only machine;
    ``load_state_dict`` then copies the weights onto the model's device and the optimiser moves
    its moments next to their parameters, so one state.pt resumes across devices either way.
    """
    saved = torch.load(path, map_location=map_location, weights_only=False)
    model.load_state_dict(saved["model"])
    optimiser.load_state_dict(saved["optimiser"])
    if ema is not None:
        if saved.get("ema") is None:
            raise ValueError(f"{path} holds no moving average of the weights to resume")
        ema.load_state_dict(saved["ema"])
    return TrainState(**saved["state"])


@torch.no_grad()
def heldout_loss(
    model: VideoDiT,
    *,
    clips: int = 64,
    frames: int = 8,
    size: int = 16,
    static: bool = False,
    attention: AttentionMode | None = None,
    seed: int = 12345,
    batch: int = 32,
) -> dict[str, float]:
    """Mean RF loss on held-out glyphs at each t in :data:`HELDOUT_T`, with shared noise; plus the mean.

    Clips and noise are drawn on the CPU and moved batch by batch to the model's device.
    """
    model.eval()
    device = model.device
    data = bouncing_digits(clips, frames=frames, size=size, split="test", seed=seed, static=static)
    x0 = torch.from_numpy(data.clips).unsqueeze(1)
    digits, directions = torch.from_numpy(data.digits), torch.from_numpy(data.directions)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(seed))
    result: dict[str, float] = {}
    for t_value in HELDOUT_T:
        losses = []
        for s in range(0, clips, batch):
            t = torch.full((len(x0[s : s + batch]),), t_value, device=device)
            losses.append(
                rectified_flow_loss(
                    model,
                    x0[s : s + batch].to(device),
                    digits[s : s + batch].to(device),
                    directions[s : s + batch].to(device),
                    t,
                    noise[s : s + batch].to(device),
                    attention=attention,
                )
            )
        result[f"t={t_value:g}"] = float(torch.cat(losses).mean())
    result["mean"] = float(np.mean([result[f"t={t:g}"] for t in HELDOUT_T]))
    model.train()
    return result


@torch.no_grad()
def generate(
    model: VideoDiT,
    digits: Tensor,
    directions: Tensor,
    *,
    frames: int = 8,
    size: int = 16,
    steps: int = 20,
    guidance: float = 2.0,
    seed: int = 0,
    attention: AttentionMode | None = None,
    on_step: Callable[[int, int], None] | None = None,
) -> Tensor:
    """Sample clips [B, 1, F, H, W] in [−1, 1] for the requested labels with CFG and Euler flow matching.

    The clips come back on the model's device; the starting noise is drawn on the CPU, so a seed
    gives the same start on every device. ``on_step(i, steps)`` runs before every sampling step;
    raising there (cancellation) stops the loop within one step.
    """
    from diffusers import FlowMatchEulerDiscreteScheduler

    model.eval()
    scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
    scheduler.set_timesteps(steps)
    channels = int(model.config.in_channels)
    x = torch.randn(len(digits), channels, frames, size, size, generator=torch.Generator().manual_seed(seed))
    x = x.to(model.device)
    digits, directions = digits.to(model.device), directions.to(model.device)
    null_digits = torch.full_like(digits, model.null_digit)
    null_directions = torch.full_like(directions, model.null_direction)
    for i, timestep in enumerate(scheduler.timesteps):
        if on_step is not None:
            on_step(i, steps)
        t = torch.full((len(x),), float(timestep) / 1000.0, device=x.device)
        if guidance == 1.0:
            v = model(x, t, digits, directions, attention=attention)
        else:
            both = model(
                torch.cat([x, x]),
                torch.cat([t, t]),
                torch.cat([digits, null_digits]),
                torch.cat([directions, null_directions]),
                attention=attention,
            )
            v_cond, v_null = both.chunk(2)
            v = v_null + guidance * (v_cond - v_null)
        x = scheduler.step(v, timestep, x).prev_sample
    return x.clamp(-1, 1)


def generate_in_chunks(
    model: VideoDiT, digits: Tensor, directions: Tensor, *, chunk: int = 40, seed: int = 0, **options: Any
) -> Tensor:
    """:func:`generate` for many labels, ``chunk`` clips at a time (the memory of one batch), the
    chunk starting at label ``s`` seeded ``seed + s``, so a run is the same whatever else it samples."""
    return torch.cat(
        [
            generate(model, digits[s : s + chunk], directions[s : s + chunk], seed=seed + s, **options)
            for s in range(0, len(digits), chunk)
        ]
    )


def describe(config: TrainConfig) -> dict[str, Any]:
    return asdict(config)
