"""Self-attention for the video DiT: full, MoGA + static local branches, local branches only, and
the MoGA card's sparse baselines (random groups, block top-k, 3-D sliding tile).

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

Baselines (the MoGA card, §3), same projections, so one checkpoint runs every pattern:

- ``random``: MoGA with the learned router replaced by a **fixed random partition** into M equal
  groups (seeded per sequence length, shared by the batch), output not scaled, averaged with the
  same local branches — isolates what the learned router adds.
- ``blocktopk`` (MoBA, Lu et al. 2025; VMoBA): the frame-major sequence is cut into
  ``block_count`` contiguous blocks, keys are mean-pooled per block (k̄_b), and each query, per
  head, attends to all keys of the ``block_topk`` blocks with the largest q·k̄_b. Used alone (as
  published), no local branches.
- ``sta`` (Sliding Tile Attention, Zhang et al. 2025): tokens are grouped in space-time tiles;
  every query of a tile attends to the tiles of a fixed ``sta_window`` (in tiles) centred on its
  own, shifted inward at the borders so every query sees the same number of keys. Used alone.

Below :data:`MASKED_MOGA_MAX_TOKENS` the sparse patterns run as one SDPA with a boolean mask (exact,
and one fused call beats gathers at the DiT's 512 tokens); beyond it as gathers of just the
attended keys, so the cost follows the FLOP fraction (what the attention benchmark times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from kernels import group_attention
from mlcore.moe import GroupRouter, Routing, group_balance_loss

AttentionMode = Literal["full", "moga", "local", "random", "blocktopk", "sta"]
ATTENTION_MODES: tuple[str, ...] = ("full", "moga", "local", "random", "blocktopk", "sta")
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
        block_count: int = 16,
        block_topk: int = 8,
        sta_tile: Grid = (2, 2, 2),
        sta_window: Grid = (2, 2, 2),
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
        #: Block top-k: key blocks per sequence and blocks per query (8 of 16: half the scores, the
        #: budget of MoGA + local at the quality study's 128 tokens). STA: tile and window (in tiles;
        #: 2³ tiles and a 2³ window: half the tiles of that (8, 4, 4) grid).
        self.block_count, self.block_topk = block_count, block_topk
        self.sta_tile, self.sta_window = tuple(sta_tile), tuple(sta_window)
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
        sparse = N > MASKED_MOGA_MAX_TOKENS or x.device.type == "cuda"
        if mode == "full":
            out = F.scaled_dot_product_attention(q, k, v)
        elif mode == "blocktopk":
            out = block_topk_attention(q, k, v, max(1, N // self.block_count), self.block_topk, gather=sparse)
        elif mode == "sta":
            out = sliding_tile_attention(q, k, v, grid, self.sta_tile, self.sta_window, gather=sparse)
        else:
            # A window that does not divide the grid shrinks to the largest size that does (gcd).
            window = tuple(math.gcd(a, b) for a, b in zip(self.window, grid))
            branches = [
                static_group_attention(q, k, v, window_ids(grid, window, x.device)),  # type: ignore[arg-type]
                static_group_attention(q, k, v, window_ids(grid, (1, grid[1], grid[2]), x.device)),  # per frame
            ]
            if mode == "moga":
                branches.append(self._moga(x, q, k, v))
            elif mode == "random":
                ids = random_group_ids(N, self.num_groups).to(x.device).expand(B, N)
                attend = masked_group_attention if self._use_mask(x) else group_attention
                branches.append(attend(q, k, v, ids))
            out = torch.stack(branches).mean(0)
        return self.proj(out.transpose(1, 2).reshape(B, N, self.dim))

    def _use_mask(self, x: Tensor) -> bool:
        """Group attention as one masked SDPA (short CPU sequences) or through the group kernel."""
        return self.moga_backend == "mask" or (
            self.moga_backend == "auto" and x.device.type != "cuda" and x.shape[1] <= MASKED_MOGA_MAX_TOKENS
        )

    def _moga(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        B, N, _ = x.shape
        routing = self.router(x.reshape(B * N, -1))
        group_ids = routing.expert_ids[:, 0].reshape(B, N)
        gate = routing.gate_weights[:, 0].reshape(B, 1, N, 1).to(q.dtype)  # p_{g(x)}(x)
        attended = (
            masked_group_attention(q, k, v, group_ids) if self._use_mask(x) else group_attention(q, k, v, group_ids)
        )
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


# ------------------------------------------------------------------------------ sparse baselines


@lru_cache(maxsize=32)
def random_group_ids(tokens: int, groups: int, seed: int = 0) -> Tensor:
    """A fixed random partition of ``tokens`` positions into ``groups`` equal groups (sizes differ by
    at most one when ``groups`` does not divide ``tokens``): the same for every call with these arguments."""
    perm = torch.randperm(tokens, generator=torch.Generator().manual_seed(seed * 1_000_003 + tokens))
    ids = torch.empty(tokens, dtype=torch.int64)
    ids[perm] = torch.arange(tokens) % groups
    return ids


def _block_layout(tokens: int, block_size: int, topk: int) -> tuple[int, int, int]:
    """(block size, blocks, top-k) for ``tokens``: a block size that does not divide the sequence
    shrinks to the gcd; top-k is capped at the block count."""
    size = math.gcd(block_size, tokens)
    blocks = tokens // size
    return size, blocks, min(topk, blocks)


def block_topk_selection(q: Tensor, k: Tensor, block_size: int, topk: int) -> Tensor:
    """MoBA's gate: per query and head, the ``topk`` key blocks with the largest q·k̄_b → [B, H, Nq, topk].

    q [B, H, Nq, D] (any subset of queries), k [B, H, N, D] (all keys, frame-major order).
    """
    B, H, N, D = k.shape
    size, blocks, topk = _block_layout(N, block_size, topk)
    pooled = k.reshape(B, H, blocks, size, D).mean(3)  # k̄_b
    return (q @ pooled.transpose(-1, -2)).topk(topk, dim=-1).indices


def block_topk_mask(q: Tensor, k: Tensor, block_size: int, topk: int) -> Tensor:
    """The keys each query attends to under block top-k, as a bool mask [B, H, Nq, N]."""
    N = k.shape[2]
    size, blocks, _ = _block_layout(N, block_size, topk)
    selection = block_topk_selection(q, k, block_size, topk)
    chosen = torch.zeros(*selection.shape[:-1], blocks, dtype=torch.bool, device=q.device)
    chosen.scatter_(-1, selection, True)
    return chosen.repeat_interleave(size, dim=-1)


def _block_topk_sparse(q: Tensor, k: Tensor, v: Tensor, selection: Tensor, size: int) -> Tensor:
    """Block top-k without a dense mask, MoBA's way: for every key block, the (query, slot) pairs that
    chose it attend to that block alone (one matmul, keys not duplicated per query); each query's k
    partial results are then merged by their log-sum-exps. Costs Σ n_b·size = N·k·size, not N²."""
    B, H, N, D = q.shape
    topk = selection.shape[-1]
    blocks = N // size
    scale = D**-0.5
    rows = []
    for b in range(B):
        heads = []
        for h in range(H):
            chosen = selection[b, h].reshape(-1)  # pair p = query·topk + slot → its block
            order = torch.sort(chosen, stable=True).indices
            counts = torch.bincount(chosen, minlength=blocks).tolist()
            outs, lses = [], []
            for block, pairs in enumerate(order.split(counts)):
                if not pairs.numel():
                    continue
                keys = slice(block * size, (block + 1) * size)
                scores = (q[b, h].index_select(0, pairs // topk) @ k[b, h, keys].T) * scale
                lses.append(scores.logsumexp(-1))
                outs.append(scores.softmax(-1) @ v[b, h, keys])
            inverse = torch.empty_like(order)
            inverse[order] = torch.arange(order.numel(), device=order.device)
            out = torch.cat(outs).index_select(0, inverse).reshape(N, topk, D)
            weight = torch.cat(lses).index_select(0, inverse).reshape(N, topk).softmax(-1)  # merge the k partials
            heads.append((weight[..., None] * out).sum(1))
        rows.append(torch.stack(heads))
    return torch.stack(rows)


def block_topk_attention(
    q: Tensor, k: Tensor, v: Tensor, block_size: int, topk: int, *, gather: bool = False
) -> Tensor:
    """Block top-k attention (MoBA style) over all N tokens; ``gather`` picks the sparse path."""
    if not gather:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=block_topk_mask(q, k, block_size, topk))
    size, _, _ = _block_layout(k.shape[2], block_size, topk)
    return _block_topk_sparse(q, k, v, block_topk_selection(q, k, block_size, topk), size)


@dataclass(frozen=True)
class TileLayout:
    """Sliding tile attention's static structure for one grid: which tile each token is in, and
    which tiles each tile attends to."""

    tile_of_token: Tensor  # [N]
    tokens_of_tile: Tensor  # [tiles, tile volume], original token indices
    window_tiles: Tensor  # [tiles, window volume]: the key tiles of each query tile
    allowed: Tensor  # [tiles, tiles] bool

    def mask(self, rows: Tensor | None = None) -> Tensor:
        """[N, N] bool: query i may attend key j; only the query ``rows`` ([R, N]) when given.

        Rows keep a sampled measurement linear in N: the whole mask's index tensors alone take
        16·N² bytes (32 GiB at 32k tokens)."""
        t = self.tile_of_token
        queries = t if rows is None else t[rows]
        return self.allowed[queries[:, None], t[None, :]]

    def flop_fraction(self) -> float:
        return float(self.allowed.float().mean())


@lru_cache(maxsize=32)
def tile_layout(grid: Grid, tile: Grid, window: Grid, device: str = "cpu") -> TileLayout:
    """The STA layout for a grid: tiles of ``tile`` tokens (shrunk to the gcd with the grid) and a
    window of ``window`` tiles per axis (capped at the tile count), shifted inward at the borders."""
    tile = tuple(math.gcd(a, b) for a, b in zip(tile, grid))
    counts = tuple(g // t for g, t in zip(grid, tile))
    window = tuple(min(w, c) for w, c in zip(window, counts))
    tile_of_token = window_ids(grid, tile, torch.device(device))  # type: ignore[arg-type]
    coords = torch.stack(
        torch.meshgrid(*(torch.arange(c, device=device) for c in counts), indexing="ij"), dim=-1
    ).reshape(-1, 3)  # tile coordinates, in window_ids' (frame-major) tile order
    extent = torch.tensor(counts, device=device)
    size = torch.tensor(window, device=device)
    start = (coords - size // 2).clamp(min=torch.zeros_like(extent), max=extent - size)  # [tiles, 3]
    inside = (coords[None, :, :] >= start[:, None, :]) & (coords[None, :, :] < (start + size)[:, None, :])
    allowed = inside.all(-1)  # [query tile, key tile]
    tokens_of_tile = torch.sort(tile_of_token, stable=True).indices.reshape(len(coords), -1)
    window_tiles = allowed.nonzero()[:, 1].reshape(len(coords), -1)
    return TileLayout(tile_of_token, tokens_of_tile, window_tiles, allowed)


#: Elements of gathered keys (and as many values) one chunk of sliding tile attention may hold.
GATHER_ELEMENTS = 2**26


def sliding_tile_attention(
    q: Tensor, k: Tensor, v: Tensor, grid: Grid, tile: Grid, window: Grid, *, gather: bool = False
) -> Tensor:
    """3-D sliding tile attention (STA style); ``gather`` picks the sparse path."""
    layout = tile_layout(tuple(grid), tuple(tile), tuple(window), str(q.device))  # type: ignore[arg-type]
    if not gather:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=layout.mask())
    B, H, N, D = q.shape
    tiles, volume = layout.tokens_of_tile.shape
    # Every query of a tile shares its key list: one SDPA per tile, batched as [B·tiles, H, n, D].
    keys = layout.tokens_of_tile[layout.window_tiles].reshape(tiles, -1)  # [tiles, L]
    qt = q.index_select(2, layout.tokens_of_tile.reshape(-1)).reshape(B, H, tiles, volume, D)
    # The gathered keys hold tiles·L ≈ N²/4 rows for a quarter-grid window (17 GiB at 64k tokens),
    # so they are gathered a chunk of tiles at a time, within ~256 MiB each.
    chunk = max(1, GATHER_ELEMENTS // max(1, B * H * keys.shape[1] * D))
    out = q.new_empty(B, tiles, H, volume, D)

    def fold(t: Tensor) -> Tensor:
        return t.transpose(1, 2).reshape(-1, H, t.shape[3], D)

    for start in range(0, tiles, chunk):
        part = keys[start : start + chunk]
        kt = k.index_select(2, part.reshape(-1)).reshape(B, H, len(part), -1, D)
        vt = v.index_select(2, part.reshape(-1)).reshape(B, H, len(part), -1, D)
        attended = F.scaled_dot_product_attention(fold(qt[:, :, start : start + chunk]), fold(kt), fold(vt))
        out[:, start : start + chunk] = attended.reshape(B, len(part), H, volume, D)
    out = out.transpose(1, 2).reshape(B, H, N, D)
    order = layout.tokens_of_tile.reshape(-1)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(N, device=order.device)
    return out.index_select(2, inverse)


def mass_inside(q: Tensor, k: Tensor, mask: Tensor) -> Tensor:
    """Per query, the share of its full-softmax attention mass on the keys ``mask`` lets it attend.

    q [B, H, Nq, D], k [B, H, N, D], ``mask`` bool broadcastable to [B, H, Nq, N] → [B, H, Nq]
    (the generalisation of :func:`in_group_mass` to any sparse pattern).
    """
    probs = (torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5).softmax(-1)
    return (probs * mask).sum(-1)
