"""Self-attention for the video DiT: full, MoGA + static local branches, or local branches only.

MoGA, arXiv 2510.18692 (ICLR 2026):

- **§3 token router.** r = W_r·x ∈ ℝ^M, p = softmax(r), g(x) = argmax_i p_i (top-1, one group
  per token shared by every head; :class:`mlcore.moe.GroupRouter`).
- **§3 group attention.** MoGA(x) = p_{g(x)}(x)·Attn(q, K_{g(x)}, V_{g(x)}): full softmax attention
  among the tokens of one group (:func:`kernels.group_attention`, the Triton kernel on CUDA and its
  sorted, SDPA-per-group twin elsewhere), the output scaled by the routing probability — the only
  way the router receives gradient besides the group balance loss L = α·M·Σ_i F_i·P_i
  (:func:`mlcore.moe.group_balance_loss`, α = 0.1).
- **§3.2 static local branches** (the paper's "local" context, required: MoGA alone produced no
  meaningful content): spatial windows within a temporal chunk of frames, and per-frame attention.
  The paper averages the branches; so do we: y = mean(MoGA, window, frame).

The diffusers attention processors never see the (frames, height, width) grid, which the local
branches need, so the grid is an explicit argument of :meth:`VideoAttention.forward`.

The static branches have equal-size groups, so they run as one batched SDPA over the permuted
tokens ([B·G, heads, n, d]) instead of a loop over groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kernels import group_attention
from mlcore.moe import GroupRouter, Routing, group_balance_loss

AttentionMode = Literal["full", "moga", "local"]
ATTENTION_MODES: tuple[str, ...] = ("full", "moga", "local")
Grid = tuple[int, int, int]

#: Below this many tokens the MoGA branch runs as SDPA with a block-diagonal mask on the CPU: the
#: result is identical, and one fused call beats a Python loop over groups at short lengths.
MASKED_MOGA_MAX_TOKENS = 1024


@dataclass
class AttentionStats:
    """What one MoGA forward recorded: the routing (for the balance loss and the size histogram)."""

    routing: Routing
    group_ids: Tensor  # [B, N]
    balance_loss: Tensor

    def group_sizes(self) -> Tensor:
        """Tokens per group [M], summed over the batch (empty groups included)."""
        return torch.bincount(self.group_ids.reshape(-1), minlength=self.routing.num_experts)

    def flop_fraction(self) -> float:
        """Σ_i n_i² / N² per sample, averaged: the share of full attention's score FLOPs MoGA computes."""
        B, N = self.group_ids.shape
        counts = torch.zeros(B, self.routing.num_experts, device=self.group_ids.device)
        counts.scatter_add_(1, self.group_ids, torch.ones_like(self.group_ids, dtype=counts.dtype))
        return float((counts.square().sum(1) / N**2).mean())


def window_ids(grid: Grid, window: Grid, device: torch.device | None = None) -> Tensor:
    """Static window id of each token (frame-major order) for windows of ``window`` = (frames, rows, cols)."""
    f, h, w = grid
    wf, wh, ww = window
    if f % wf or h % wh or w % ww:
        raise ValueError(f"the token grid {grid} must be divisible by the local window {window}")
    t = torch.arange(f, device=device).div(wf, rounding_mode="floor")
    y = torch.arange(h, device=device).div(wh, rounding_mode="floor")
    x = torch.arange(w, device=device).div(ww, rounding_mode="floor")
    per_row, per_frame = w // ww, (h // wh) * (w // ww)
    ids = t[:, None, None] * per_frame + y[None, :, None] * per_row + x[None, None, :]
    return ids.reshape(-1)


def static_group_attention(q: Tensor, k: Tensor, v: Tensor, ids: Tensor) -> Tensor:
    """Attention within equal-size static groups ``ids`` [N] (shared by the batch) as one batched SDPA."""
    B, H, N, D = q.shape
    groups = int(ids.max()) + 1
    size = N // groups
    order = torch.sort(ids, stable=True).indices
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(N, device=order.device)

    def fold(t: Tensor) -> Tensor:  # [B, H, N, D] → [B·G, H, n, D]
        return t.index_select(2, order).reshape(B, H, groups, size, D).transpose(1, 2).reshape(B * groups, H, size, D)

    out = F.scaled_dot_product_attention(fold(q), fold(k), fold(v))
    out = out.reshape(B, groups, H, size, D).transpose(1, 2).reshape(B, H, N, D)
    return out.index_select(2, inverse)


def masked_group_attention(q: Tensor, k: Tensor, v: Tensor, group_ids: Tensor) -> Tensor:
    """Equation (1) of the kernel as one SDPA with a block-diagonal mask (exact; for short sequences)."""
    mask = group_ids[:, None, :, None] == group_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class VideoAttention(nn.Module):
    """Multi-head self-attention over space-time tokens with a selectable pattern.

    ``mode``: ``full`` (SDPA over all N tokens), ``moga`` (MoGA + window + per-frame branches,
    averaged), ``local`` (window + per-frame branches, averaged). The router exists in every mode,
    so one checkpoint can be run with any pattern; only ``moga`` uses it.
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        *,
        mode: AttentionMode = "full",
        num_groups: int = 4,
        window: Grid = (4, 2, 2),
        balance_alpha: float = 0.1,
        balance_variant: Literal["switch", "paper"] = "switch",
    ) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} must be divisible by heads={heads}")
        if mode not in ATTENTION_MODES:
            raise ValueError(f"attention mode must be one of {ATTENTION_MODES}, got {mode!r}")
        self.dim, self.heads, self.mode = dim, heads, mode
        self.window = tuple(window)
        self.balance_alpha, self.balance_variant = balance_alpha, balance_variant
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.router = GroupRouter(dim, num_groups)
        #: Set by every MoGA forward; read by training (balance loss) and the generate job (histogram).
        self.last_stats: AttentionStats | None = None
        #: "auto": block-diagonal mask up to MASKED_MOGA_MAX_TOKENS on CPU, the group kernel beyond;
        #: "kernel": always :func:`kernels.group_attention`.
        self.moga_backend: Literal["auto", "kernel", "mask"] = "auto"

    @property
    def num_groups(self) -> int:
        return self.router.num_experts

    def forward(self, x: Tensor, grid: Grid, *, mode: AttentionMode | None = None) -> Tensor:
        """x [B, N, dim] with N = f·h·w tokens in frame-major order → [B, N, dim]."""
        B, N, _ = x.shape
        if grid[0] * grid[1] * grid[2] != N:
            raise ValueError(f"got {N} tokens for a grid {grid} of {grid[0] * grid[1] * grid[2]}")
        mode = mode or self.mode
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        if mode == "full":
            out = F.scaled_dot_product_attention(q, k, v)
        else:
            # A window that does not divide the grid shrinks to the largest size that does (gcd).
            window = tuple(math.gcd(a, b) for a, b in zip(self.window, grid))
            branches = [
                static_group_attention(q, k, v, window_ids(grid, window, x.device)),  # type: ignore[arg-type]
                static_group_attention(q, k, v, window_ids(grid, (1, grid[1], grid[2]), x.device)),  # per frame
            ]
            if mode == "moga":
                branches.append(self._moga(x, q, k, v))
            out = torch.stack(branches).mean(0)
        return self.proj(out.transpose(1, 2).reshape(B, N, self.dim))

    def _moga(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        B, N, _ = x.shape
        routing = self.router(x.reshape(B * N, -1))
        group_ids = routing.expert_ids[:, 0].reshape(B, N)
        gate = routing.gate_weights[:, 0].reshape(B, 1, N, 1).to(q.dtype)  # p_{g(x)}(x)
        use_mask = self.moga_backend == "mask" or (
            self.moga_backend == "auto" and x.device.type != "cuda" and N <= MASKED_MOGA_MAX_TOKENS
        )
        attended = masked_group_attention(q, k, v, group_ids) if use_mask else group_attention(q, k, v, group_ids)
        balance = group_balance_loss(routing, self.balance_alpha, variant=self.balance_variant)
        self.last_stats = AttentionStats(routing, group_ids.detach(), balance)
        return gate * attended


def in_group_mass(q: Tensor, k: Tensor, group_ids: Tensor, *, key_groups: Tensor | None = None) -> Tensor:
    """Per query, the share of its full-softmax attention mass that lands on keys of its own group.

    q [B, H, Nq, D], k [B, H, N, D]; ``group_ids`` [B, Nq] are the queries' groups and ``key_groups``
    [B, N] the keys' (default: the same tensor, when every token is a query) → [B, H, Nq]. 1 means the
    group holds everything full attention would have looked at; a random balanced partition gives ≈ 1/M.
    """
    key_groups = group_ids if key_groups is None else key_groups
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5
    probs = scores.softmax(-1)
    same = (group_ids[:, :, None] == key_groups[:, None, :]).unsqueeze(1)
    return (probs * same).sum(-1)
