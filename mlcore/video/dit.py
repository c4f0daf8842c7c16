"""A small class-conditional video diffusion transformer (DiT) with selectable attention and FFN.

Architecture after DiT (Peebles & Xie 2023): patchified space-time tokens (patch (p_t, p_h, p_w)),
fixed 3-D sine-cosine positions (so any frame count / resolution divisible by the patch runs),
adaLN-Zero blocks conditioned on c = emb(t) + emb(digit) + emb(direction). Class conditioning
has a **null** class per label (index ``num_digits`` / ``num_directions``) for classifier-free
guidance; a sample is "null" when its digit is the null class.

Self-attention is :class:`mlcore.video.attention.VideoAttention` (full / MoGA + local / local, and
the sparse baselines random groups / block top-k / sliding tile).
The feed-forward network is one of

- ``dense``: GELU MLP of width ``ffn_width``;
- ``moe`` (DiT-MoE style, Fei et al. 2024): top-2 softmax router over ``num_experts`` experts of
  width ``ffn_width/4`` plus one shared expert of width ``ffn_width/2`` (equal activated width),
  Switch balance loss;
- ``promoe`` (ProMoE, arXiv 2510.24711): conditional routing of null tokens to an unconditional
  expert, prototypical top-1 routing by cosine similarity (identity activation) over experts of
  width ``ffn_width/2``, one shared expert of width ``ffn_width/2``, routing contrastive loss τ = 0.07.
  ``promoe_conditional=False`` ablates step 1; ``promoe_activation="sigmoid"`` / ``"softmax"`` ablates
  the identity activation (the paper's ablation: identity 6.39, sigmoid 6.63, softmax 6.92 FID).
- ``ec`` (EC-DiT style, Sun et al. 2024): the DiT-MoE experts and shared expert, routed by expert
  choice (:class:`mlcore.moe.routers.ExpertChoiceRouter`: each expert takes its top-C tokens of the
  batch, C = 2·T/E, so 2 experts per token on average, equal activated width); no balance loss.
- ``race`` (Race-DiT style, Yuan et al. 2025): the same experts and shared expert, routed by Expert
  Race (:class:`mlcore.moe.routers.ExpertRaceRouter`: the 2·T largest sigmoid scores of the whole
  T × E matrix, so 2 experts per token on average, 0..E each); no balance loss. A token that wins
  no expert still gets the shared expert.

The network predicts the rectified-flow velocity v = ε − x₀ at x_t = (1 − t)·x₀ + t·ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import Tensor, nn

from mlcore.moe import (
    ActivatedPrototypeRouter,
    ExpertChoiceRouter,
    ExpertRaceRouter,
    MoELayer,
    PrototypeRouter,
    Routing,
    TopKSoftmaxRouter,
)
from mlcore.moe.losses import routing_contrastive_loss, switch_load_balance_loss
from mlcore.video.attention import ATTENTION_MODES, AttentionMode, Grid, VideoAttention

FFN_KINDS: tuple[str, ...] = ("dense", "moe", "promoe", "ec", "race")
FFNKind = Literal["dense", "moe", "promoe", "ec", "race"]
#: The activation on ProMoE's cosine scores: the paper's identity, or one of its two ablated alternatives.
PROMOE_ACTIVATIONS: tuple[str, ...] = ("identity", "sigmoid", "softmax")
PromoeActivation = Literal["identity", "sigmoid", "softmax"]


def sincos(positions: Tensor, dim: int) -> Tensor:
    """Transformer sine-cosine features of ``positions`` [n] → [n, dim] (dim even)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=positions.device) / max(half, 1))
    angles = positions.float()[:, None] * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def grid_positions(grid: Grid, dim: int, device: torch.device) -> Tensor:
    """3-D positions [f·h·w, dim]: the channels split between time, rows and columns."""
    f, h, w = grid
    dt = 2 * (dim // 6)
    dh = 2 * ((dim - dt) // 4)
    dw = dim - dt - dh
    t, y, x = torch.meshgrid(
        torch.arange(f, device=device), torch.arange(h, device=device), torch.arange(w, device=device), indexing="ij"
    )
    return torch.cat([sincos(t.reshape(-1), dt), sincos(y.reshape(-1), dh), sincos(x.reshape(-1), dw)], dim=-1)


@dataclass
class AuxLosses:
    """The auxiliary losses one forward produced, each unweighted and summed over layers."""

    group_balance: Tensor | None = None
    expert_balance: Tensor | None = None
    contrastive: Tensor | None = None
    routings: list[Routing] = field(default_factory=list)

    def add(self, name: str, value: Tensor) -> None:
        current = getattr(self, name)
        setattr(self, name, value if current is None else current + value)


class FeedForward(nn.Module):
    """The block's FFN: dense, DiT-MoE, ProMoE, EC-DiT or Race-DiT (see the module docstring)."""

    def __init__(
        self,
        dim: int,
        width: int,
        kind: FFNKind,
        *,
        num_experts: int = 8,
        promoe_conditional: bool = True,
        promoe_activation: PromoeActivation = "identity",
    ) -> None:
        super().__init__()
        if kind not in FFN_KINDS:
            raise ValueError(f"ffn must be one of {FFN_KINDS}, got {kind!r}")
        if promoe_activation not in PROMOE_ACTIVATIONS:
            raise ValueError(f"promoe_activation must be one of {PROMOE_ACTIVATIONS}, got {promoe_activation!r}")
        self.kind = kind
        if kind == "dense":
            self.mlp = nn.Sequential(nn.Linear(dim, width), nn.GELU(approximate="tanh"), nn.Linear(width, dim))
        elif kind in ("moe", "ec", "race"):
            # Same experts and shared expert for all three: only the routing differs (2 experts per
            # token, exactly for DiT-MoE, on average for expert choice and the race).
            routers = {"moe": TopKSoftmaxRouter, "ec": ExpertChoiceRouter, "race": ExpertRaceRouter}
            router = routers[kind](dim, num_experts, 2)
            self.moe = MoELayer(
                dim,
                width // 4,
                router=router,
                activation="gelu",
                gated=False,
                num_shared_experts=1,
                shared_intermediate=width // 2,
            )
        else:
            router = (
                PrototypeRouter(dim, num_experts, 1, unconditional=promoe_conditional)
                if promoe_activation == "identity"
                else ActivatedPrototypeRouter(
                    dim, num_experts, 1, activation=promoe_activation, unconditional=promoe_conditional
                )
            )
            self.moe = MoELayer(
                dim,
                width // 2,
                router=router,
                activation="gelu",
                gated=False,
                num_shared_experts=1,
                shared_intermediate=width // 2,
            )
        self.conditional = kind == "promoe" and promoe_conditional

    def forward(self, x: Tensor, null: Tensor, aux: AuxLosses) -> Tensor:
        """x [B, N, dim]; ``null`` [B] flags null-condition samples (ProMoE's conditional routing)."""
        if self.kind == "dense":
            return self.mlp(x)
        null_mask = null if self.conditional else None
        y, routing = self.moe(x, null_mask=null_mask, return_routing=True)
        aux.routings.append(routing)
        if self.kind == "moe":
            aux.add("expert_balance", switch_load_balance_loss(routing))
        elif self.kind == "promoe":
            prototypes = self.moe.router.prototypes  # type: ignore[union-attr]
            aux.add("contrastive", routing_contrastive_loss(x.reshape(-1, x.shape[-1]), routing, prototypes))
        return y


def modulate(x: Tensor, shift: Tensor, scale: Tensor) -> Tensor:
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


class DiTBlock(nn.Module):
    """adaLN-Zero transformer block (DiT §3.2): the modulation starts at zero, so each block starts as identity."""

    def __init__(self, dim: int, heads: int, ffn: FeedForward, attention: VideoAttention) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.attn = attention
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.ffn = ffn
        self.modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 6 * dim))
        nn.init.zeros_(self.modulation[1].weight)
        nn.init.zeros_(self.modulation[1].bias)

    def forward(
        self, x: Tensor, c: Tensor, grid: Grid, null: Tensor, aux: AuxLosses, mode: AttentionMode | None
    ) -> Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c).chunk(6, dim=-1)
        x = x + gate1.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift1, scale1), grid, mode=mode)
        if self.attn.last_stats is not None and (mode or self.attn.mode) == "moga":
            aux.add("group_balance", self.attn.last_stats.balance_loss)
        return x + gate2.unsqueeze(1) * self.ffn(modulate(self.norm2(x), shift2, scale2), null, aux)


class VideoDiT(ModelMixin, ConfigMixin):
    """Class-conditional video DiT; input and output [B, C, F, H, W]."""

    config_name = "config.json"

    @register_to_config
    def __init__(
        self,
        in_channels: int = 1,
        patch_size: tuple[int, int, int] = (1, 4, 4),
        dim: int = 96,
        depth: int = 4,
        heads: int = 4,
        ffn_width: int = 384,
        ffn: str = "dense",
        num_experts: int = 8,
        promoe_conditional: bool = True,
        promoe_activation: str = "identity",
        attention: str = "full",
        num_groups: int = 4,
        window: tuple[int, int, int] = (4, 2, 2),
        block_count: int = 16,
        block_topk: int = 8,
        sta_tile: tuple[int, int, int] = (2, 2, 2),
        sta_window: tuple[int, int, int] = (2, 2, 2),
        num_digits: int = 10,
        num_directions: int = 4,
        sample_frames: int = 8,
        sample_size: int = 16,
    ) -> None:
        super().__init__()
        if attention not in ATTENTION_MODES:
            raise ValueError(f"attention must be one of {ATTENTION_MODES}, got {attention!r}")
        self.patch = tuple(patch_size)
        patch_volume = in_channels * self.patch[0] * self.patch[1] * self.patch[2]
        self.embed = nn.Linear(patch_volume, dim)
        self.time_mlp = nn.Sequential(nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.digit_embed = nn.Embedding(num_digits + 1, dim)  # the last row is the null class
        self.direction_embed = nn.Embedding(num_directions + 1, dim)
        self.blocks = nn.ModuleList(
            DiTBlock(
                dim,
                heads,
                FeedForward(
                    dim,
                    ffn_width,
                    ffn,  # type: ignore[arg-type]
                    num_experts=num_experts,
                    promoe_conditional=promoe_conditional,
                    promoe_activation=promoe_activation,  # type: ignore[arg-type]
                ),
                VideoAttention(
                    dim,
                    heads,
                    mode=attention,  # type: ignore[arg-type]
                    num_groups=num_groups,
                    window=tuple(window),  # type: ignore[arg-type]
                    block_count=block_count,
                    block_topk=block_topk,
                    sta_tile=tuple(sta_tile),  # type: ignore[arg-type]
                    sta_window=tuple(sta_window),  # type: ignore[arg-type]
                ),
            )
            for _ in range(depth)
        )
        self.final_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.final_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 2 * dim))
        self.final = nn.Linear(dim, patch_volume)
        for module in (self.final_modulation[1], self.final):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    @property
    def null_digit(self) -> int:
        return int(self.config.num_digits)

    @property
    def null_direction(self) -> int:
        return int(self.config.num_directions)

    def token_grid(self, frames: int, height: int, width: int) -> Grid:
        pt, ph, pw = self.patch
        if frames % pt or height % ph or width % pw:
            raise ValueError(
                f"frames×height×width {frames}×{height}×{width} must be divisible by the patch {self.patch}"
            )
        return frames // pt, height // ph, width // pw

    def patchify(self, x: Tensor) -> Tensor:
        B, C, F, H, W = x.shape
        pt, ph, pw = self.patch
        x = x.reshape(B, C, F // pt, pt, H // ph, ph, W // pw, pw)
        return x.permute(0, 2, 4, 6, 1, 3, 5, 7).reshape(B, (F // pt) * (H // ph) * (W // pw), -1)

    def unpatchify(self, tokens: Tensor, grid: Grid) -> Tensor:
        B = tokens.shape[0]
        f, h, w = grid
        pt, ph, pw = self.patch
        C = int(self.config.in_channels)
        x = tokens.reshape(B, f, h, w, C, pt, ph, pw).permute(0, 4, 1, 5, 2, 6, 3, 7)
        return x.reshape(B, C, f * pt, h * ph, w * pw)

    def forward(
        self,
        x: Tensor,
        t: Tensor,
        digit: Tensor,
        direction: Tensor,
        *,
        attention: AttentionMode | None = None,
        aux: AuxLosses | None = None,
    ) -> Tensor:
        """Velocity [B, C, F, H, W] at noise level t ∈ [0, 1] ([B]); ``aux`` collects the router losses."""
        if x.dim() != 5:
            raise ValueError(f"VideoDiT expects [B, C, F, H, W], got {tuple(x.shape)}")
        aux = aux if aux is not None else AuxLosses()
        grid = self.token_grid(*x.shape[2:])
        dim = int(self.config.dim)
        tokens = self.embed(self.patchify(x)) + grid_positions(grid, dim, x.device).to(x.dtype)
        c = (
            self.time_mlp(sincos(t * 1000.0, dim).to(x.dtype))
            + self.digit_embed(digit)
            + self.direction_embed(direction)
        )
        null = digit == self.null_digit
        for block in self.blocks:
            tokens = block(tokens, c, grid, null, aux, attention)
        shift, scale = self.final_modulation(c).chunk(2, dim=-1)
        return self.unpatchify(self.final(modulate(self.final_norm(tokens), shift, scale)), grid)

    def attention_layers(self) -> list[VideoAttention]:
        return [block.attn for block in self.blocks]


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def activated_ffn_parameters(model: VideoDiT) -> int:
    """FFN parameters one (conditional) token passes through, summed over blocks."""
    total = 0
    for block in model.blocks:
        ffn = block.ffn
        if ffn.kind == "dense":
            total += sum(p.numel() for p in ffn.mlp.parameters())
            continue
        moe = ffn.moe
        per_expert = moe.gate_up_proj[0].numel() + moe.down_proj[0].numel()
        shared = (
            (moe.shared_gate_up_proj.numel() + moe.shared_down_proj.numel())
            if moe.shared_gate_up_proj is not None
            else 0
        )
        total += moe.top_k * per_expert + shared
    return total
