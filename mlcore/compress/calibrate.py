"""One streaming calibration pass: per-expert statistics for every method, in bounded memory.

Calibration tokens X are fed in batches of windows; for every MoE layer and expert the adapter's
``capture_expert_outputs`` hands over E_i(x) and g_i(x) for x ∈ R_i, which go straight into
:class:`mlcore.moe.ExpertStatistics` (exact float64 moments: μ_i, σ²_i, φ_freq, mean ‖E_i(x)‖)
plus REAP's router-weighted norm Σ g_i(x)·‖E_i(x)‖₂. Only NAEE needs raw activations: a fixed
number of each layer's input rows, sampled uniformly, kept for its enumeration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from mlcore.hf.adapter import MoEAdapter
from mlcore.moe.stats import ExpertStatistics


@dataclass
class Calibration:
    #: Decoder-layer index of each MoE layer, in the order of the statistics' layer axis.
    layers: list[int]
    top_k: int
    statistics: ExpertStatistics
    #: [L, E] Σ_{x∈R_i} g_i(x)·‖E_i(x)‖₂ (REAP's numerator).
    gated_norm_sum: Tensor
    #: Decoder-layer index → [n, H] sampled inputs of that MoE block (NAEE only; empty otherwise).
    layer_inputs: dict[int, Tensor] = field(default_factory=dict)

    @property
    def num_experts(self) -> int:
        return self.statistics.num_experts

    @property
    def tokens(self) -> int:
        return int(self.statistics.tokens[0])


def calibrate(
    adapter: MoEAdapter,
    windows: Tensor,
    *,
    batch_size: int = 16,
    keep_inputs: int = 0,
    seed: int = 0,
    on_batch: Callable[[int, int], Any] | None = None,
    sequential: bool = False,
    on_layer: Callable[[int, int], Any] | None = None,
    spill_dir: Path | None = None,
    checkpoint_dir: Path | None = None,
    on_resume: Callable[[int, int], Any] | None = None,
) -> Calibration:
    """Run ``windows`` ([N, L] token ids) through the model and collect per-expert statistics.

    ``keep_inputs`` > 0 also keeps that many MoE-block input rows per layer (reservoir-free: the
    rows are drawn up front from a seeded permutation of all token positions).

    ``sequential``: every batch through decoder layer i before layer i + 1
    (:func:`mlcore.hf.sequential.run_sequentially`), for a model streamed with ``layer_by_layer``
    (each layer read once); progress then comes per layer (``on_layer``). The statistics are the
    same sums in another order. ``checkpoint_dir`` (sequential only) keeps the pass's progress
    there after every layer, so a call after a killed one continues from its first unfinished
    layer with the same statistics (:class:`mlcore.hf.sequential.PassCheckpoint`), and says so
    through ``on_resume(layers done, total)``.
    """
    counts = {info.num_experts for info in adapter.layers}
    if len(counts) != 1:
        raise ValueError(f"MoE layers have different expert counts {sorted(counts)}; calibrate an unpruned model")
    num_experts = counts.pop()
    layers = [info.index for info in adapter.layers]
    position = {index: i for i, index in enumerate(layers)}
    stats = ExpertStatistics(len(layers), num_experts, adapter.layers[0].hidden)
    gated = torch.zeros(len(layers), num_experts, dtype=torch.float64)
    model = adapter.model
    device = next(p.device for p in model.parameters() if not p.is_meta)

    def on_outputs(layer: int, expert: int, outputs: Tensor, gates: Tensor, rows: Tensor) -> None:
        stats.update(position[layer], expert, outputs, gates)
        norms = torch.linalg.vector_norm(outputs.detach().double(), dim=-1).cpu()
        gated[position[layer], expert] += (gates.detach().double().cpu() * norms).sum()

    sampled: dict[int, list[Tensor]] = {index: [] for index in layers}
    total_tokens = windows.numel()
    chosen = torch.zeros(total_tokens, dtype=torch.bool)
    if keep_inputs:
        generator = torch.Generator().manual_seed(seed)
        chosen[torch.randperm(total_tokens, generator=generator)[: min(keep_inputs, total_tokens)]] = True
    handles = []
    offset = [0]
    if keep_inputs:
        for info in adapter.layers:

            def grab(module: Any, args: tuple[Any, ...], index: int = info.index) -> None:
                hidden = args[0].detach().reshape(-1, args[0].shape[-1])
                rows = chosen[offset[0] : offset[0] + len(hidden)].to(hidden.device)
                sampled[index].append(hidden[rows].float().cpu())

            handles.append(model.get_submodule(info.name).register_forward_pre_hook(grab))
    starts = list(range(0, len(windows), batch_size))
    try:
        if sequential:
            from mlcore.hf.sequential import PassCheckpoint, batches_key, run_sequentially

            def before_batch(b: int) -> None:
                offset[0] = starts[b] * windows.shape[1]

            batches = [windows[start : start + batch_size] for start in starts]
            checkpoint = None
            if checkpoint_dir is not None:

                def save_state(path: Path) -> None:
                    torch.save({"stats": stats.state_dict(), "gated": gated, "sampled": sampled}, path)

                def load_state(path: Path) -> None:
                    saved = torch.load(path, weights_only=True)
                    stats.load_state_dict(saved["stats"])
                    gated.copy_(saved["gated"])
                    sampled.update(saved["sampled"])

                key = f"{batches_key(model, batches)}-{keep_inputs}-{seed}"
                checkpoint = PassCheckpoint(
                    checkpoint_dir, key, save_state=save_state, load_state=load_state, on_resume=on_resume
                )
            with adapter.capture_expert_outputs(on_outputs):
                run_sequentially(
                    model,
                    batches,
                    before_batch=before_batch,
                    on_layer=on_layer,
                    spill_dir=spill_dir,
                    checkpoint=checkpoint,
                )
            for i in range(len(layers)):
                stats.count_tokens(i, windows.numel())
        else:
            with torch.inference_mode(), adapter.capture_expert_outputs(on_outputs):
                for start in starts:
                    batch = windows[start : start + batch_size]
                    model(input_ids=batch.to(device))
                    for i in range(len(layers)):
                        stats.count_tokens(i, batch.numel())
                    offset[0] += batch.numel()
                    if on_batch is not None:
                        on_batch(min(start + batch_size, len(windows)), len(windows))
    finally:
        for handle in handles:
            handle.remove()
    inputs = {index: torch.cat(rows) for index, rows in sampled.items() if rows} if keep_inputs else {}
    return Calibration(layers, adapter.layers[0].top_k, stats, gated, inputs)
