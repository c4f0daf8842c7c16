"""Find the MoE blocks of a transformers causal LM by structure, whatever its ``model_type``.

An *experts module* holds the routed experts as stacked parameters: every parameter is at least
2-D with the same leading dimension E ≥ 2 (``gate_up_proj[E, 2I, H]`` / ``down_proj[E, H, I]``,
transposed variants, ``up_proj`` without a gate, per-expert biases), and it is called as
``experts(hidden[T, H], top_k_index[T, k], top_k_weights[T, k])`` — transformers 5's experts
interface, so the ids and gates it receives are exactly the model's routing decision. Its *router*
is the sibling module holding a weight of shape [E, H] (directly, like Mixtral's ``gate``, or
nested, like AFMoE's ``router.gate``); siblings named ``shared*`` are always-on shared experts.

Structures outside that contract are refused for a named reason (``StructuralRefusal``): experts
whose stacked tensors disagree on E (extra zero-compute experts), experts called without
(ids, gates) (the router scales their inputs instead), or experts inside attention.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from mlcore.hf.architectures import HFModelError
from mlcore.hf.families import TOP_K_FIELDS, expert_count

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
#: Module attributes that cache the expert count and must follow a slice.
COUNT_ATTRS = ("num_experts", "n_routed_experts", "num_local_experts", "moe_num_experts", "n_experts")
#: Router tensors of shape [E] that are added to the selection score (so -inf there masks an expert).
SELECTION_BIASES = ("e_score_correction_bias", "expert_bias", "bias")


class StructuralRefusal(HFModelError):
    """An MoE structure the adapter cannot edit correctly; ``reason`` names it for the matrix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class MoEBlock:
    name: str
    index: int
    block: nn.Module
    router: nn.Module
    router_name: str
    experts: nn.Module
    num_experts: int
    top_k: int
    hidden: int
    intermediate: int
    shared: list[str] = field(default_factory=list)

    def router_tensors(self) -> list[tuple[nn.Module, str, Tensor]]:
        """(module, attribute, tensor) for every router parameter or buffer with one entry per expert
        (see :func:`expert_axis`), and the block's own (AFMoE keeps its selection bias on the block
        and passes it to the router)."""
        found = []
        for module in [*self.router.modules(), self.block]:
            for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
                if tensor is not None and expert_axis(tensor, self.num_experts) is not None:
                    found.append((module, name, tensor))
        return found

    def expert_tensors(self) -> list[str]:
        return [name for name, _ in self.experts.named_parameters(recurse=False)]

    def selection_bias(self) -> tuple[nn.Module, str] | None:
        """The router's per-expert additive selection term, if it has one."""
        for module, name, tensor in self.router_tensors():
            if name in SELECTION_BIASES and tensor.numel() == self.num_experts:
                return module, name
        return None


def expert_axis(tensor: Tensor, num_experts: int) -> int | None:
    """The axis of ``tensor`` that runs over the experts, if it has one: the leading one ([E, ...]),
    or the last one of a per-expert vector stored with singleton group axes (ERNIE-4.5's
    ``moe_statics.e_score_correction_bias`` is [1, E]: one row per expert group, and one group)."""
    if tensor.dim() >= 1 and tensor.shape[0] == num_experts:
        return 0
    if tensor.dim() >= 2 and tensor.shape[-1] == num_experts and all(d == 1 for d in tensor.shape[:-1]):
        return tensor.dim() - 1
    return None


def stacked_experts(module: nn.Module) -> int | None:
    """E if ``module`` holds only stacked per-expert parameters with a common leading dim E ≥ 2."""
    if isinstance(module, nn.modules.conv._ConvNd | nn.Embedding | nn.Linear):
        return None
    params = list(module.named_parameters(recurse=False))
    if not params or any(p.dim() < 2 for _, p in params):
        return None
    if not any(p.dim() == 3 for _, p in params):
        return None
    leading = {p.shape[0] for _, p in params}
    if len(leading) != 1:
        raise StructuralRefusal(
            "zero-compute experts",
            f"{type(module).__name__} stacks experts of different counts {sorted(leading)} (extra zero-compute "
            "experts beside the routed ones); MoE Lab cannot prune or capture them.",
        )
    count = leading.pop()
    return count if count >= 2 else None


def _takes_routing(experts: nn.Module) -> bool:
    """Called as (hidden, expert ids, gates): transformers names them ``top_k_index`` /
    ``top_k_weights`` (GPT-OSS ``router_indices`` / ``routing_weights``)."""
    # The class's forward: an instance may carry a novice wrapper taking *args.
    params = [p for p in inspect.signature(type(experts).forward).parameters.values() if p.kind != p.VAR_KEYWORD]
    if len(params) < 4:
        return False
    ids, gates = params[2].name.lower(), params[3].name.lower()
    return any(s in ids for s in ("ind", "idx", "ids")) and any(s in gates for s in ("weight", "gate", "score"))


def _named_as_experts(module: nn.Module) -> bool:
    name = type(module).__name__.lower()
    return "expert" in name or name.endswith("moa")


def find_moe_blocks(model: nn.Module, *, strict: bool = True) -> list[MoEBlock]:
    """Every MoE block, ordered by decoder layer; ``strict`` raises ``StructuralRefusal`` on an
    experts module outside the contract in the module docstring (else skips it)."""
    config = getattr(model, "config", None)
    hidden = int(getattr(config, "hidden_size", 0) or getattr(config, "d_model", 0) or 0)
    blocks: list[MoEBlock] = []
    for name, module in model.named_modules():
        if "attention" in name.rsplit(".", 1)[-1] or "attn" in name.rsplit(".", 1)[-1]:
            if strict and any(p.dim() == 3 for p in module.parameters()) and _has_experts_below(module):
                raise StructuralRefusal(
                    "experts inside attention",
                    f"{type(model).__name__} routes tokens to experts inside attention ({name}); MoE Lab edits "
                    "feed-forward experts only.",
                )
            continue
        try:
            count = stacked_experts(module)
        except StructuralRefusal:
            if strict:
                raise
            continue
        if count is None:
            continue
        if not _takes_routing(module):
            # Stacked 3-D weights that are not experts (e.g. per-head message projections) are skipped.
            if strict and _named_as_experts(module):
                raise StructuralRefusal(
                    "experts without an (ids, gates) call",
                    f"{type(module).__name__} is called without (expert ids, gates) (the block scales or dispatches "
                    "the tokens itself), so there is no routing decision to capture or edit.",
                )
            continue
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        router_name, router = _router(parent, attr, count, hidden)
        if router is None:
            if strict:
                raise StructuralRefusal(
                    "router rows do not match the experts",
                    f"{name}: {count} stacked experts, but no router holds exactly one [{count}, {hidden}] row per "
                    "expert (it scores extra slots or is an MLP), so experts cannot be removed, masked or captured.",
                )
            continue
        match = _LAYER_INDEX.search(name + ".")
        if match is None:
            raise HFModelError(f"MoE block {parent_name!r} is not inside a decoder layer; cannot number it.")
        blocks.append(
            MoEBlock(
                name=parent_name,
                index=int(match.group(1)),
                block=parent,
                router=router,
                router_name=router_name,
                experts=module,
                num_experts=count,
                top_k=_top_k(router, parent, module, config),
                hidden=hidden,
                intermediate=_intermediate(module, hidden),
                shared=[child for child, _ in parent.named_children() if child.startswith("shared")],
            )
        )
    if strict and not blocks and (expert_count(config) or 0) >= 2:
        raise StructuralRefusal(
            "experts in another layout",
            f"{type(model).__name__} declares {expert_count(config)} experts, but none are stacked [E, ...] tensors "
            "called with (expert ids, gates) beside an [E, H] router; MoE Lab cannot read this layout.",
        )
    return sorted(blocks, key=lambda block: block.index)


def _has_experts_below(module: nn.Module) -> bool:
    return any("expert" in type(m).__name__.lower() or "moa" in type(m).__name__.lower() for m in module.modules())


def _router(parent: nn.Module, experts_attr: str, count: int, hidden: int) -> tuple[str, nn.Module | None]:
    """The sibling of the experts holding an [E, H] weight. Where several do, a router module (its
    class named a router or gate) wins over a bare projection: Gemma 4's MoE block is the whole
    decoder layer, whose ``per_layer_input_gate`` (a Linear to ``hidden_size_per_layer_input``
    rows) comes before its ``router`` and has the same shape when that width equals E."""
    candidates = []
    for child_name, child in parent.named_children():
        if child_name == experts_attr or child_name.startswith("shared"):
            continue
        if any(param.dim() == 2 and tuple(param.shape) == (count, hidden) for param in child.parameters()):
            candidates.append((child_name, child))
    if not candidates:
        return "", None
    return min(candidates, key=lambda found: 0 if _is_router_class(found[1]) else 1)


def _is_router_class(module: nn.Module) -> bool:
    name = type(module).__name__.lower()
    return not isinstance(module, nn.Linear) and ("router" in name or "gate" in name)


def _top_k(router: nn.Module, block: nn.Module, experts: nn.Module, config: Any) -> int:
    for module in (router, block, experts):
        for attr in ("top_k", "num_experts_per_tok", "top_k_experts"):
            value = getattr(module, attr, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    for source in (config, getattr(config, "ffn_config", None)):
        for name in (*TOP_K_FIELDS, "moe_top_k"):
            value = getattr(source, name, None)
            if isinstance(value, int) and not isinstance(value, bool):
                return value
    raise HFModelError(f"{type(router).__name__}: cannot tell how many experts each token picks (top-k).")


def _intermediate(experts: nn.Module, hidden: int) -> int:
    down = getattr(experts, "down_proj", None)
    if isinstance(down, Tensor) and down.dim() == 3:
        transposed = bool(getattr(experts, "is_transposed", False))
        return int(down.shape[1] if transposed else down.shape[2])
    for param in experts.parameters():
        if param.dim() == 3:
            dims = [d for d in param.shape[1:] if d != hidden]
            if dims:
                return int(min(dims))
    return hidden
