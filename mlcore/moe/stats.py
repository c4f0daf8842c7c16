"""Per-expert output statistics in one streaming pass, with exactly merged moments.

MoNE (arXiv 2507.00390) scores experts from these. For layer ℓ, expert i, calibration tokens X
and R_i = {x ∈ X : i ∈ T(x)}:

- count |R_i| and gate-weighted frequency φ_freq,i = (1/|X|)·Σ_{x∈R_i} g_i(x)  (frequency score)
- mean output μ_i = (1/|R_i|)·Σ_{x∈R_i} E_i(x) ∈ ℝ^d — a pruned expert's "novice"
- unbiased per-dimension variance σ²_i = Σ_{x∈R_i} (E_i(x) − μ_i)² / (|R_i| − 1); φ_var,i = ‖σ_i‖₂ (variance score)
- mean output norm (1/|R_i|)·Σ_{x∈R_i} ‖E_i(x)‖₂ (EAN / REAP baselines)

Every batch is reduced to (n, mean, M2) in float64 and merged with Chan, Golub & LeVeque's update
(1979): n = n_a + n_b, δ = μ_b − μ_a, μ = μ_a + δ·n_b/n, M2 = M2_a + M2_b + δ²·n_a·n_b/n. This is
exact up to float64 rounding for any split into batches (unlike skipping an expert's first batch,
as MoNE's reference code does), and two collectors merge the same way (:meth:`ExpertStatistics.merge`).

Conventions for experts with too few tokens: an expert with no token has mean 0 and variance 0; an
expert with one token has variance 0. Read ``count`` to tell them apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from mlcore.moe.layer import MoELayer, moe_layers
from mlcore.moe.observe import TokenMask, observing
from mlcore.moe.routers import Routing

f64 = torch.float64


class ExpertStatistics:
    """Streaming per-expert statistics for ``num_layers`` layers of ``num_experts`` experts with
    outputs of width ``hidden``; all accumulators are float64 on the CPU.

    Feed it with :meth:`update` (one expert) or :meth:`update_many` (a batch of (expert, output,
    gate) rows), and :meth:`count_tokens` once per layer and batch with the number of tokens the
    layer saw (|X|, the denominator of the gate-weighted frequency).
    """

    def __init__(self, num_layers: int, num_experts: int, hidden: int) -> None:
        self.num_layers, self.num_experts, self.hidden = num_layers, num_experts, hidden
        self.count = torch.zeros(num_layers, num_experts, dtype=torch.int64)
        self.gate_sum = torch.zeros(num_layers, num_experts, dtype=f64)
        self.norm_sum = torch.zeros(num_layers, num_experts, dtype=f64)
        self.mean = torch.zeros(num_layers, num_experts, hidden, dtype=f64)
        self.m2 = torch.zeros(num_layers, num_experts, hidden, dtype=f64)
        self.tokens = torch.zeros(num_layers, dtype=torch.int64)

    #: The accumulators, the whole state of a pass so far.
    ACCUMULATORS = ("count", "gate_sum", "norm_sum", "mean", "m2", "tokens")

    def state_dict(self) -> dict[str, Tensor]:
        return {name: getattr(self, name) for name in self.ACCUMULATORS}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Continue from saved accumulators (of statistics of the same shape)."""
        for name in self.ACCUMULATORS:
            mine = getattr(self, name)
            if state[name].shape != mine.shape or state[name].dtype != mine.dtype:
                raise ValueError(
                    f"saved {name} is {tuple(state[name].shape)} {state[name].dtype}, not {tuple(mine.shape)}"
                )
            mine.copy_(state[name])

    # -- accumulation ------------------------------------------------------------------------
    def count_tokens(self, layer: int, n: int) -> None:
        """Add n tokens to the layer's |X| (every token the layer saw, selected or not)."""
        self.tokens[layer] += n

    def update(self, layer: int, expert: int, outputs: Tensor, gates: Tensor) -> None:
        """Add one expert's outputs E_i(x) [n, H] and gate weights g_i(x) [n] for n routed tokens."""
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"expert {expert} is out of range for {self.num_experts} experts")
        ids = torch.full((len(outputs),), expert, dtype=torch.int64, device=outputs.device)
        self.update_many(layer, ids, outputs, gates)

    def update_many(self, layer: int, experts: Tensor, outputs: Tensor, gates: Tensor) -> None:
        """Add rows (expert id [n], expert output [n, H], gate weight [n]) of any experts at once."""
        if outputs.dim() != 2 or outputs.shape[1] != self.hidden:
            raise ValueError(f"outputs must be [n, {self.hidden}], got {tuple(outputs.shape)}")
        if experts.shape != (len(outputs),) or gates.shape != (len(outputs),):
            raise ValueError(
                f"experts and gates must be [{len(outputs)}], got {tuple(experts.shape)}, {tuple(gates.shape)}"
            )
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer {layer} is out of range for {self.num_layers} layers")
        if len(outputs) == 0:
            return
        ids = experts.detach().to("cpu", torch.int64)
        if int(ids.min()) < 0 or int(ids.max()) >= self.num_experts:
            raise ValueError(f"expert ids must lie in [0, {self.num_experts})")
        x = outputs.detach().to("cpu", f64)
        n_b = torch.bincount(ids, minlength=self.num_experts)
        safe = n_b.clamp_min(1).to(f64).unsqueeze(-1)
        mean_b = torch.zeros(self.num_experts, self.hidden, dtype=f64).index_add_(0, ids, x) / safe
        m2_b = torch.zeros_like(mean_b).index_add_(0, ids, (x - mean_b[ids]).square())
        self._merge_moments(layer, n_b, mean_b, m2_b)
        self.gate_sum[layer].index_add_(0, ids, gates.detach().to("cpu", f64))
        self.norm_sum[layer].index_add_(0, ids, torch.linalg.vector_norm(x, dim=-1))

    def _merge_moments(self, layer: int | slice, n_b: Tensor, mean_b: Tensor, m2_b: Tensor) -> None:
        """Chan et al.'s pairwise update of (n, μ, M2), for every expert of ``layer`` at once."""
        n_a, n_b = self.count[layer].to(f64), n_b.to(f64)
        n = (n_a + n_b).clamp_min(1)  # the clamp only touches experts empty on both sides
        delta = mean_b - self.mean[layer]
        weight_b = (n_b / n).unsqueeze(-1)
        cross = (n_a * n_b / n).unsqueeze(-1)
        self.mean[layer] += delta * weight_b
        self.m2[layer] += m2_b + delta.square() * cross
        self.count[layer] += n_b.to(torch.int64)

    def merge(self, other: ExpertStatistics) -> ExpertStatistics:
        """Fold another collector's statistics (e.g. another worker's shard) into this one."""
        if (other.num_layers, other.num_experts, other.hidden) != (self.num_layers, self.num_experts, self.hidden):
            raise ValueError(
                f"cannot merge statistics of shape {(other.num_layers, other.num_experts, other.hidden)} "
                f"into {(self.num_layers, self.num_experts, self.hidden)}"
            )
        self._merge_moments(slice(None), other.count, other.mean, other.m2)
        self.gate_sum += other.gate_sum
        self.norm_sum += other.norm_sum
        self.tokens += other.tokens
        return self

    # -- results -----------------------------------------------------------------------------
    def variance(self) -> Tensor:
        """[L, E, H] unbiased per-dimension variance σ²; 0 for experts with fewer than two tokens."""
        return torch.where(
            (self.count >= 2).unsqueeze(-1), self.m2 / (self.count - 1).clamp_min(1).to(f64).unsqueeze(-1), 0.0
        )

    def std_norm(self) -> Tensor:
        """[L, E] φ_var = ‖σ‖₂ = √(Σ_d σ²_d) (MoNE's variance score)."""
        return self.variance().sum(dim=-1).sqrt()

    def gate_weighted_frequency(self) -> Tensor:
        """[L, E] φ_freq = (1/|X|)·Σ_{x∈R_i} g_i(x) (MoNE's frequency score)."""
        if bool((self.tokens == 0).any()):
            raise ValueError("no tokens were counted for some layer; call count_tokens(layer, n) for every batch")
        return self.gate_sum / self.tokens.to(f64).unsqueeze(-1)

    def mean_output_norm(self) -> Tensor:
        """[L, E] mean of ‖E_i(x)‖₂ over the tokens routed to expert i (0 for unused experts)."""
        return self.norm_sum / self.count.clamp_min(1).to(f64)


class StatisticsCollector(TokenMask):
    """What :func:`collect_expert_statistics` yields: ``statistics``, and ``batch(mask)`` to skip
    padding tokens of a padded batch."""

    def __init__(self, statistics: ExpertStatistics) -> None:
        super().__init__()
        self.statistics = statistics

    def observe(self, index: int, layer: MoELayer, x: Tensor, routing: Routing) -> None:
        keep = self.keep(len(x))
        slots = routing.active_mask()
        if keep is not None:
            slots = slots & keep.to(slots.device).unsqueeze(-1)
        tokens = torch.arange(len(x), device=x.device).unsqueeze(-1).expand_as(slots)[slots]
        experts = routing.expert_ids[slots]
        outputs = layer.expert_outputs(x[tokens], experts)
        self.statistics.update_many(index, experts, outputs, routing.gate_weights[slots])
        self.statistics.count_tokens(index, len(x) if keep is None else int(keep.sum()))


@contextmanager
def collect_expert_statistics(model: nn.Module) -> Iterator[StatisticsCollector]:
    """Collect :class:`ExpertStatistics` over every forward of ``model``'s MoE layers inside the block.

    For Hugging Face models the adapter in ``mlcore.hf`` calls :meth:`ExpertStatistics.update`.
    """
    layers = moe_layers(model)
    if not layers:
        raise ValueError("the model has no MoELayer; collect Hugging Face models' statistics through mlcore.hf")
    widths = {(layer.num_experts, layer.hidden) for layer in layers}
    if len(widths) > 1:
        raise ValueError(f"layers differ in expert count or width ({sorted(widths)}); collect them separately")
    num_experts, hidden = widths.pop()
    collector = StatisticsCollector(ExpertStatistics(len(layers), num_experts, hidden))
    with observing(model, collector.observe):
        yield collector
