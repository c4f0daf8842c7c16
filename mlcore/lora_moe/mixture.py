"""A mixture of LoRA experts on one frozen projection, and the routings the paper compares.

LD-MoLE section 2: each frozen linear map W of the base model becomes

    y = W·x + Σ_i p_i(x) · (α/r) · B_i·A_i·x                               (adapted layer)

with E experts (A_i ∈ ℝ^{r×in}, B_i ∈ ℝ^{out×r}, B_i = 0 at the start, so fine-tuning starts at
the base model). ``routing`` picks p:

- ``lora``: one adapter of rank E·r, p = 1 (the single-LoRA baseline; :mod:`mlcore.lora_moe.budget`
  resizes it, and LD-MoLE, so every routing has the same trainable parameters);
- ``top1`` / ``top2``: softmax router, keep the top k, renormalise, plus a Switch balance loss
  (MixLoRA-style);
- ``relu``: p = ReLU(u) with an L1 penalty (ReMoE-style); a token may get no expert at all;
- ``sparsemax``: p = sparsemax(u), i.e. λ = 0 for every token;
- ``ld-mole``: p = sparsemax(u / (1 − λ)), λ = 0.99 + log σ(f(x)) from one MLP shared by every
  adapted projection (:class:`mlcore.moe.sparsemax.LambdaNet`), plus the analytical sparsity loss
  mean ReLU(b_k − λ) (:func:`mlcore.moe.sparsemax.sparsity_loss`);
- ``ld-mole-nosparsity``: the same router without the sparsity loss;
- ``hydra``: HydraLoRA (Tian et al. 2024), asymmetric: one A shared by all experts, E B heads,
  a dense softmax router, y = W·x + Σ_i ω_i(x)·(α/r)·B_i·A·x (:class:`LoRAMixtureLinear` docstring);
- ``mola``: MoLA (Gao et al. 2024, "Higher layers need more LoRA experts"): top-2 softmax routing
  as ``top2``, with a layer-wise expert count (:func:`mola_allocation`, the paper's ▽ shape: more
  experts in higher layers).

peft has no LoRA mixtures, so the mixture is written here rather than patched into peft.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mlcore.lora_moe.base import PROJECTIONS
from mlcore.moe.routers import TopKSoftmaxRouter, at_least_float32, gate_weight
from mlcore.moe.sparsemax import LambdaNet, SparsemaxRouter, sparsemax, sparsity_loss

ROUTINGS: tuple[str, ...] = (
    "lora", "top1", "top2", "relu", "sparsemax", "ld-mole", "ld-mole-nosparsity", "hydra", "mola",
)  # fmt: skip
#: Routings that keep the top 2 of a softmax router.
TOP2 = ("top2", "mola")


@dataclass(frozen=True)
class MixtureConfig:
    routing: str = "ld-mole"
    experts: int = 8
    rank: int = 4
    #: LoRA α; each adapter's output is scaled by α / its rank.
    alpha: float = 16.0
    dropout: float = 0.1
    projections: tuple[str, ...] = PROJECTIONS
    #: Hidden width of LD-MoLE's shared λ network (the paper uses 256–512 on billion-parameter models).
    lambda_hidden: int = 32
    #: LD-MoLE's sparsity loss: at most ``sparsity_k`` experts per token, weight ``sparsity_weight``.
    sparsity_k: int = 2
    sparsity_weight: float = 0.1
    #: Switch load-balance weight (top-k, sparsemax and LD-MoLE routers).
    balance_weight: float = 0.01
    #: ReLU routing's L1 penalty on the routing weights (ReMoE).
    l1_weight: float = 1e-3
    #: MoLA: experts per layer, bottom to top; empty = :func:`mola_allocation` of ``experts`` per layer.
    layer_experts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {self.routing!r}")
        if self.experts < 1 or self.rank < 1:
            raise ValueError("experts and rank must be at least 1")
        if self.routing in ("top1", "top2") and self.experts < int(self.routing[-1]):
            raise ValueError(f"{self.routing} routing needs at least {self.routing[-1]} experts")
        if self.routing == "mola" and min((self.experts, *self.layer_experts)) < 2:
            raise ValueError("mola routing keeps the top 2 experts, so every layer needs at least 2")
        if self.routing == "ld-mole" and not 1 <= self.sparsity_k < self.experts:
            raise ValueError(f"sparsity_k must be between 1 and experts − 1 = {self.experts - 1}")
        unknown = set(self.projections) - set(PROJECTIONS)
        if unknown or not self.projections:
            raise ValueError(f"projections must be a non-empty subset of {PROJECTIONS}, got {self.projections}")


def switch_balance(p: Tensor, probs: Tensor) -> Tensor:
    """Switch eq. 4 on dense weights: E·Σ_i f_i·P_i, f_i the share of active (token, expert) pairs
    that go to expert i (no gradient), P_i the mean routing probability of expert i."""
    active = (p > 0).to(probs.dtype)
    f = active.sum(0) / active.sum().clamp_min(1)
    return p.shape[-1] * (f * probs.mean(0)).sum()


def mola_allocation(layers: int, experts: int) -> tuple[int, ...]:
    """MoLA's ▽ allocation: the expert count grows linearly with depth, n_l ∝ l + 1 (the paper's best
    layout, MoLA(2468): 2, 4, 6, 8 experts in the four quarters of a 32-layer model), scaled so the
    layers hold ``layers``·``experts`` experts in all (the same adapter budget as a uniform mixture)
    and rounded by largest remainder; every layer keeps at least the 2 experts top-2 routing needs."""
    if layers < 1 or experts < 2:
        raise ValueError("MoLA needs at least one layer and 2 experts per layer on average")
    total, weights = layers * experts, [layer + 1 for layer in range(layers)]
    raw = [max(2.0, total * w / sum(weights)) for w in weights]
    counts = [math.floor(r) for r in raw]
    for i in sorted(range(layers), key=lambda i: raw[i] - counts[i], reverse=True)[: total - sum(counts)]:
        counts[i] += 1
    return tuple(counts)


class LoRAMixtureLinear(nn.Module):
    """A frozen :class:`nn.Linear` plus E LoRA experts mixed by one of :data:`ROUTINGS`.

    HydraLoRA (``hydra``) is asymmetric: A ∈ ℝ^{r×in} is one matrix shared by every expert (it
    captures what the tasks have in common), the heads B_i ∈ ℝ^{out×r} specialise, and a dense
    softmax router mixes them,

        y = W·x + (α/r) · Σ_i ω_i(x) · B_i·A·x,   ω(x) = softmax(W_g·x)   (HydraLoRA: asymmetric mixture)

    so ``lora_A`` has one slice and ``lora_B`` E. ``experts`` overrides the configured count (MoLA's
    per-layer allocation).

    After each forward, ``aux_loss`` holds the routing's auxiliary loss (already weighted) and
    ``active`` the number of experts each token used ([tokens], detached).
    """

    def __init__(
        self,
        base: nn.Linear,
        config: MixtureConfig,
        lambda_net: LambdaNet | None = None,
        *,
        experts: int | None = None,
    ) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.config = config
        self.routing = config.routing
        count = config.experts if experts is None else experts
        num, rank = (1, count * config.rank) if config.routing == "lora" else (count, config.rank)
        self.num_experts, self.rank = num, rank
        self.scale = config.alpha / rank
        fan_in, fan_out = base.in_features, base.out_features
        # A as nn.Linear initialises its weight (Kaiming-uniform, a = √5), B zero: LoRA's start.
        bound = 1 / math.sqrt(fan_in)
        shared = config.routing == "hydra"
        self.lora_A = nn.Parameter(torch.empty(1 if shared else num, rank, fan_in).uniform_(-bound, bound))
        self.lora_B = nn.Parameter(torch.zeros(num, fan_out, rank))
        self.dropout = nn.Dropout(config.dropout)
        self.router: nn.Module | None = None
        self.gate: nn.Parameter | None = None
        if config.routing in ("top1", *TOP2):
            self.router = TopKSoftmaxRouter(fan_in, num, 1 if config.routing == "top1" else 2, renormalize=True)
        elif config.routing in ("ld-mole", "ld-mole-nosparsity"):
            if lambda_net is None:
                raise ValueError("LD-MoLE routing needs the shared LambdaNet")
            self.router = SparsemaxRouter(fan_in, num, lambda_net)
        elif config.routing in ("relu", "sparsemax", "hydra"):
            self.gate = gate_weight(num, fan_in, device=None, dtype=None)
        self.aux_loss: Tensor = torch.zeros(())
        self.active: Tensor = torch.zeros(0)
        self.lam: Tensor | None = None

    def route(self, x: Tensor) -> Tensor:
        """x: [T, in] → dense routing weights p: [T, E]; sets ``aux_loss`` and ``lam``."""
        c = self.config
        self.lam = None
        if self.routing == "lora":
            self.aux_loss = x.new_zeros(())
            return x.new_ones(len(x), 1)
        if self.gate is not None:
            u = at_least_float32(nn.functional.linear(x, self.gate))
            if self.routing == "relu":
                p = torch.relu(u)
                self.aux_loss = c.l1_weight * p.sum(-1).mean()  # ReMoE's L1 on the routing weights
            elif self.routing == "hydra":
                p = torch.softmax(u, dim=-1)
                # Dense: every head is active, so Switch's f is uniform and its balance loss a constant.
                self.aux_loss = x.new_zeros(())
            else:
                p = sparsemax(u)  # λ = 0 for every token
                self.aux_loss = c.balance_weight * switch_balance(p, p)
            return p
        assert self.router is not None
        routing = self.router(x)
        p = torch.zeros_like(routing.probs).scatter(-1, routing.expert_ids, routing.gate_weights)
        self.aux_loss = c.balance_weight * switch_balance(p, routing.probs)
        if self.routing == "ld-mole":
            # The analytical sparsity loss: λ ≥ b_k keeps at most k experts active.
            self.aux_loss = self.aux_loss + c.sparsity_weight * sparsity_loss(routing.logits, routing.lam, c.sparsity_k)
        self.lam = routing.lam
        return p

    def forward(self, x: Tensor) -> Tensor:
        # The adapters and routers train in their own (float32) dtype whatever the frozen base
        # computes in (a bfloat16 checkpoint stays bfloat16); their update joins in the base's dtype.
        x2 = x.reshape(-1, x.shape[-1]).to(self.lora_A.dtype)
        p = self.route(x2)
        self.active = (p > 0).sum(-1).detach()
        if self.routing == "hydra":
            h = self.dropout(x2) @ self.lora_A[0].T  # the shared A·x: [T, r]
            delta = torch.einsum("te,tr,eor->to", p.to(x2.dtype), h, self.lora_B)
        else:
            h = torch.einsum("ti,eri->ter", self.dropout(x2), self.lora_A) * p.to(x2.dtype).unsqueeze(-1)
            delta = torch.einsum("ter,eor->to", h, self.lora_B)
        out = self.base(x)
        return out + (self.scale * delta).reshape(*x.shape[:-1], -1).to(out.dtype)


def attach_lora_mixture(model: nn.Module, config: MixtureConfig) -> list[tuple[str, LoRAMixtureLinear]]:
    """Freeze ``model`` and replace each of its ``config.projections`` by a :class:`LoRAMixtureLinear`.

    The model names its projections through ``lora_sites(projections)``: (name, parent module,
    attribute) triples in model order, e.g. ``("0.q", block, "q")``. Returns (name, module) pairs.
    LD-MoLE routings share one :class:`LambdaNet` (one input head per input width), stored on the
    model as ``lambda_net``.
    """
    sites_of = getattr(model, "lora_sites", None)
    if sites_of is None:
        raise ValueError(f"{type(model).__name__} does not name its projections (lora_sites); use a supported base")
    sites = sites_of(config.projections)
    model.requires_grad_(False)
    experts = layer_experts(config, [name for name, _, _ in sites])
    lambda_net = None
    if config.routing in ("ld-mole", "ld-mole-nosparsity"):
        widths = {getattr(parent, attr).in_features for _, parent, attr in sites}
        lambda_net = LambdaNet(widths, hidden=config.lambda_hidden)
        model.lambda_net = lambda_net
    adapted = []
    for (name, parent, attr), count in zip(sites, experts, strict=True):
        module = LoRAMixtureLinear(getattr(parent, attr), config, lambda_net, experts=count)
        setattr(parent, attr, module)
        adapted.append((name, module))
    return adapted


def layer_experts(config: MixtureConfig, names: list[str]) -> list[int]:
    """The expert count of each adapted site, named ``"<layer>.<projection>"``: ``config.experts``
    everywhere, except MoLA, whose count depends on the site's layer (:func:`mola_allocation`, or
    ``config.layer_experts``)."""
    if config.routing != "mola":
        return [config.experts] * len(names)
    layers = list(dict.fromkeys(name.split(".")[0] for name in names))
    counts = config.layer_experts or mola_allocation(len(layers), config.experts)
    if len(counts) != len(layers):
        raise ValueError(f"layer_experts names {len(counts)} layers, the model has {len(layers)} layers")
    of = dict(zip(layers, counts, strict=True))
    return [of[name.split(".")[0]] for name in names]


def trainable_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
