"""Token-choice routers: what every router returns, and the plain top-k softmax / sigmoid routers.

A router maps tokens x ∈ ℝ^{T×H} to a :class:`Routing`: for each token the k experts it goes to
and the gate weight of each. Every router is dropless (no capacity factor): each token always
gets its experts, however skewed the routing.

- :class:`TopKSoftmaxRouter` — Shazeer et al. 2017 / Switch / Mixtral: p = softmax(W_g·x),
  keep the top k; Mixtral renormalises the kept weights to sum to 1, Switch / DeepSeek-V2 do not.
- :class:`TopKSigmoidRouter` — DeepSeek-V3 style: s = σ(W_g·x), keep the top k, optionally
  renormalised.
- :class:`ExpertChoiceRouter` — the exception: expert choice (EC-DiT), capacity-based, each expert
  takes its top-C tokens; returned in the same token-major :class:`Routing` (padded slots).
- :class:`ExpertRaceRouter` — the other exception: Expert Race (Race-DiT), one global top-(T·k)
  over the whole token × expert score matrix; also token-major with padded slots.

The LD-MoLE sparsemax router, ProMoE's prototype router and MoGA's group router live in
:mod:`mlcore.moe.sparsemax`, :mod:`mlcore.moe.prototype` and :mod:`mlcore.moe.group`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn


@dataclass
class Routing:
    """One router decision for T tokens over E experts, k slots per token.

    ``expert_ids`` are always valid expert indices, so they can go straight to the expert kernel.
    Routers whose expert count varies per token (sparsemax) pad to the batch's largest count and
    mark padded slots in ``active``; padded slots carry gate weight 0 (they change nothing but
    cost a little compute). ``active`` is None when every slot is used.
    """

    expert_ids: Tensor  #: [T, k] int64 in [0, E)
    gate_weights: Tensor  #: [T, k] float32, the weights the experts' outputs are summed with
    logits: Tensor  #: [T, E] the router's scores before its activation (what traces record)
    probs: Tensor  #: [T, E] the full activated distribution (balance losses read this)
    num_experts: int
    active: Tensor | None = None  #: [T, k] bool, or None when every slot is used
    lam: Tensor | None = None  #: [T] LD-MoLE's per-token λ (sparsemax router only)

    @property
    def num_tokens(self) -> int:
        return self.expert_ids.shape[0]

    @property
    def top_k(self) -> int:
        return self.expert_ids.shape[1]

    def active_mask(self) -> Tensor:
        """[T, k] bool: which slots hold a real expert."""
        if self.active is None:
            return torch.ones_like(self.expert_ids, dtype=torch.bool)
        return self.active

    def expert_counts(self) -> Tensor:
        """[E] int64: how many (token, slot) pairs each expert receives."""
        ids = self.expert_ids[self.active_mask()]
        return torch.bincount(ids, minlength=self.num_experts)


class Router(nn.Module):
    """Base class: ``forward(x[T, H], *, null_mask=None) -> Routing``.

    ``null_mask`` ([T] bool, tokens of samples whose condition was dropped for classifier-free
    guidance) is only meaningful for ProMoE's conditional router; the others refuse it.
    """

    #: A stable name written into routing traces.
    kind: str = "router"
    num_experts: int
    top_k: int

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        raise NotImplementedError

    def _refuse_null_mask(self, null_mask: Tensor | None) -> None:
        if null_mask is not None:
            raise ValueError(f"the {self.kind} router has no unconditional expert; use PrototypeRouter for null_mask")


def at_least_float32(t: Tensor) -> Tensor:
    """Router arithmetic runs in float32 (bf16 scores tie and flip the top-k choice), or float64."""
    return t if t.dtype == torch.float64 else t.float()


def gate_weight(
    num_experts: int, hidden: int, *, device: torch.device | str | None, dtype: torch.dtype | None
) -> nn.Parameter:
    """A router's W_g ∈ ℝ^{E×H} (Hugging Face's ``gate.weight`` layout), N(0, 1/H) so logits start O(1)."""
    return nn.Parameter(torch.empty(num_experts, hidden, device=device, dtype=dtype).normal_(std=hidden**-0.5))


def _check_top_k(num_experts: int, top_k: int) -> None:
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be between 1 and num_experts={num_experts}, got {top_k}")


def token_major_routing(chosen: Tensor, scores: Tensor, logits: Tensor, num_experts: int) -> Routing:
    """A [T, E] boolean choice made by the experts or by a global race → the token-major
    :class:`Routing` every router returns: each token's chosen experts first (a stable sort, so in
    expert order), then padded slots up to the largest count any token got, inactive with weight 0.
    The gate weight of a chosen (token, expert) pair is its score."""
    slots = max(1, int(chosen.sum(-1).max())) if len(chosen) else 1
    ids = torch.sort(chosen.to(torch.int8), dim=-1, descending=True, stable=True).indices[:, :slots]
    active = chosen.gather(-1, ids)
    weights = torch.where(active, scores.gather(-1, ids), torch.zeros((), dtype=scores.dtype))
    return Routing(ids, weights, logits, scores, num_experts, active=active)


class _LinearTopKRouter(Router):
    """A linear gate W_g ∈ ℝ^{E×H} (the layout of Hugging Face's ``gate.weight``), an activation
    applied in float32, then the k largest activated scores."""

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        top_k: int,
        *,
        renormalize: bool,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_top_k(num_experts, top_k)
        self.num_experts, self.top_k, self.renormalize = num_experts, top_k, renormalize
        self.weight = gate_weight(num_experts, hidden, device=device, dtype=dtype)

    def activate(self, logits: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        self._refuse_null_mask(null_mask)
        logits = nn.functional.linear(x, self.weight)
        scores = self.activate(at_least_float32(logits))
        weights, ids = torch.topk(scores, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return Routing(ids, weights, logits, scores, self.num_experts)

    def extra_repr(self) -> str:
        return f"experts={self.num_experts}, top_k={self.top_k}, renormalize={self.renormalize}"


class TopKSoftmaxRouter(_LinearTopKRouter):
    """p = softmax(W_g·x) over E experts; gate weights are the k largest p_i, renormalised to sum to
    1 (Mixtral, the default) or not (Switch, DeepSeek-V2)."""

    kind = "topk-softmax"

    def __init__(self, hidden: int, num_experts: int, top_k: int, *, renormalize: bool = True, **factory: Any) -> None:
        super().__init__(hidden, num_experts, top_k, renormalize=renormalize, **factory)

    def activate(self, logits: Tensor) -> Tensor:
        return torch.softmax(logits, dim=-1)


class TopKSigmoidRouter(_LinearTopKRouter):
    """s = σ(W_g·x) per expert, independently; gate weights are the k largest s_i, optionally
    renormalised to sum to 1 (DeepSeek-V3)."""

    kind = "topk-sigmoid"

    def __init__(self, hidden: int, num_experts: int, top_k: int, *, renormalize: bool = False, **factory: Any) -> None:
        super().__init__(hidden, num_experts, top_k, renormalize=renormalize, **factory)

    def activate(self, logits: Tensor) -> Tensor:
        return torch.sigmoid(logits)


class ExpertChoiceRouter(Router):
    """Expert choice (Zhou et al. 2022; EC-DiT, Sun et al. 2024): the *experts* pick the tokens.

    s = softmax(W_g·x) over E experts for each of the T tokens; expert e takes the C tokens with
    the largest s_{·,e} (its column), C = ⌈capacity_factor·T / E⌉, and each chosen token is weighted
    by its score s_{t,e}. Every expert therefore processes exactly C tokens (perfect balance, so no
    balance loss), while a token may get anything from 0 to E experts — ``capacity_factor`` is the
    *average* number of experts per token, the counterpart of a token-choice top-k.

    The choice is made over the whole batch handed to :meth:`forward` (all T tokens compete), so a
    token's experts depend on the other samples in the batch: the known price of expert choice.

    The :class:`Routing` it returns is token-major like every other router's, so
    :class:`~mlcore.moe.layer.MoELayer` runs it unchanged: k slots = the largest number of experts
    any token got, padded slots marked in ``active`` with weight 0. ``top_k`` (what activated-
    parameter counts read) is ``capacity_factor``.
    """

    kind = "expert-choice"

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        capacity_factor: int = 2,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_top_k(num_experts, capacity_factor)
        self.num_experts, self.top_k = num_experts, capacity_factor
        self.weight = gate_weight(num_experts, hidden, device=device, dtype=dtype)

    def capacity(self, num_tokens: int) -> int:
        """C = ⌈capacity_factor·T / E⌉ tokens per expert, at most T."""
        return min(num_tokens, -(-self.top_k * num_tokens // self.num_experts))

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        self._refuse_null_mask(null_mask)
        logits = nn.functional.linear(x, self.weight)
        scores = torch.softmax(at_least_float32(logits), dim=-1)  # [T, E]
        chosen_rows = scores.topk(self.capacity(len(x)), dim=0).indices  # [C, E]: each expert's tokens
        chosen = torch.zeros_like(scores, dtype=torch.bool).scatter_(0, chosen_rows, True)
        return token_major_routing(chosen, scores, logits, self.num_experts)

    def extra_repr(self) -> str:
        return f"experts={self.num_experts}, capacity_factor={self.top_k}"


class ExpertRaceRouter(Router):
    """Expert Race (Race-DiT, Yuan et al. 2025, arXiv 2503.16057, §4): tokens and experts race together.

    Over the T tokens handed to one :meth:`forward`, the router scores every (token, expert) pair,
    s = σ(W_g·x) ∈ (0, 1)^{T×E}, and keeps the T·k largest entries of the *whole* matrix: one global
    top-(T·k), instead of top-k per token (token choice) or top-C per expert (expert choice). A token
    may therefore get anything from 0 to E experts and an expert anything from 0 to T tokens; only
    the total T·k is fixed, so ``top_k`` is the *average* number of experts per token (what
    activated-parameter counts read). The gate weight of a kept pair is its score s_{t,e}.

    **Why sigmoid scores, not softmax.** The race compares scores *across tokens*. A softmax
    normalises each token's row to sum to 1, so a token's scores say how it splits itself between
    experts, not how much it wants any of them: a token torn between two experts (two 0.5s) loses
    to a token sure of one (a 0.9), whatever their importance, and a token can never score high on
    many experts at once — the very allocation ("more experts for harder tokens") the race exists
    for. The sigmoid scores each pair independently, so rows stay comparable, and it keeps gates
    positive and bounded like the other routers here (the identity would allow negative gates).

    As with expert choice, a token's experts depend on the rest of the batch, including the CFG
    null half when sampling; Race-DiT's inference-time threshold and its router similarity loss
    are not modelled (no balance loss is added). The returned :class:`Routing` is token-major with
    padded inactive slots, so :class:`~mlcore.moe.layer.MoELayer` runs it unchanged.
    """

    kind = "expert-race"

    def __init__(
        self,
        hidden: int,
        num_experts: int,
        top_k: int = 2,
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_top_k(num_experts, top_k)
        self.num_experts, self.top_k = num_experts, top_k
        self.weight = gate_weight(num_experts, hidden, device=device, dtype=dtype)

    def forward(self, x: Tensor, *, null_mask: Tensor | None = None) -> Routing:
        self._refuse_null_mask(null_mask)
        logits = nn.functional.linear(x, self.weight)
        scores = torch.sigmoid(at_least_float32(logits))  # [T, E], each pair scored on its own
        # The race: the T·k largest of all T·E scores, wherever they sit (top_k ≤ E, so T·k ≤ T·E).
        winners = scores.reshape(-1).topk(self.top_k * len(x)).indices
        chosen = torch.zeros(scores.numel(), dtype=torch.bool, device=x.device).scatter_(0, winners, True)
        return token_major_routing(chosen.reshape(scores.shape), scores, logits, self.num_experts)

    def extra_repr(self) -> str:
        return f"experts={self.num_experts}, top_k={self.top_k} (on average: one global top-(T·k))"
