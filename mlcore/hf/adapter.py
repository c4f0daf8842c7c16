"""One adapter over Hugging Face MoE causal LMs (transformers 5.x, fused experts).

``adapt(model)`` lists the MoE layers (keyed by decoder-layer index, so a DeepSeek model with a
leading dense layer has MoE layers 1, 2, ...), captures what the routers decide and what each
expert outputs through forward hooks, and edits experts in place: removing them (slicing
``gate_up_proj`` / ``down_proj`` / router rows, then updating the config's expert count) or
masking them where slicing is ill-defined, and replacing them by constant "novice" outputs.
Shared experts (Qwen2-MoE's ``shared_expert`` with its gate, DeepSeek's ``shared_experts``) are
always on and never pruned or replaced. Edits live on the modules, so any adapter of the same model
sees them, and ``save`` writes them to a checkpoint that ``mlcore.hf.load_model`` restores.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.hf import routing
from mlcore.hf.architectures import ArchSpec, HFModelError, arch_spec, group_limited
from mlcore.hf.discovery import COUNT_ATTRS, MoEBlock, expert_axis, find_moe_blocks
from mlcore.hf.families import EXPERT_COUNT_FIELDS
from mlcore.hf.novices import clear_novices, novice_state, routing_args, set_novices, slice_novices
from mlcore.hf.support import support_for

RoutingCallback = Callable[[int, Tensor, Tensor, Tensor | None], Any]
ExpertOutputCallback = Callable[[int, int, Tensor, Tensor, Tensor], Any]


@dataclass(frozen=True)
class MoELayerInfo:
    #: Decoder-layer index (the key used by every adapter method and callback).
    index: int
    #: Module name of the MoE block, e.g. ``model.layers.1.mlp``.
    name: str
    num_experts: int
    top_k: int
    num_shared_experts: int
    hidden: int
    intermediate: int
    router: nn.Module
    experts: nn.Module
    #: What discovery found (block module, router tensors, shared-expert names).
    block: MoEBlock


def adapt(model: nn.Module) -> MoEAdapter:
    """The adapter for a transformers MoE causal LM of any family (found by structure, see
    ``mlcore.hf.discovery``); a one-line error for anything else."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) is None:
        raise HFModelError(f"{type(model).__name__} is not a Hugging Face model (it has no config.model_type).")
    return MoEAdapter(model)


class MoEAdapter:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.layers: list[MoELayerInfo] = self._enumerate()
        if not self.layers:
            raise HFModelError(
                f"{type(model).__name__} has no MoE layers: no module holds stacked experts with a router "
                "(a dense model, or num_experts is 0)."
            )
        spec = arch_spec(model.config.model_type)
        if spec.router_rule == "detected":
            spec = dataclasses.replace(spec, **_detected_rule(self.layers[0].block))
            flag = getattr(self.layers[0].router, "norm_topk_prob", None)
            for info in self.layers[1:]:
                if flag is not None and not hasattr(info.router, "norm_topk_prob"):
                    # Every layer runs the same router code, so it renormalises as the probed one does.
                    info.router.norm_topk_prob = flag
        self.spec: ArchSpec = spec
        self.arch: str = self.spec.name

    # -- enumeration -------------------------------------------------------------------------

    def _enumerate(self) -> list[MoELayerInfo]:
        config = self.model.config
        return [
            MoELayerInfo(
                index=block.index,
                name=block.name,
                num_experts=block.num_experts,
                top_k=block.top_k,
                num_shared_experts=self._shared_count(block),
                hidden=block.hidden,
                intermediate=block.intermediate,
                router=block.router,
                experts=block.experts,
                block=block,
            )
            for block in find_moe_blocks(self.model)
            if config is not None
        ]

    def _shared_count(self, block: MoEBlock) -> int:
        # The sigmoid gate beside Qwen's shared expert is not an expert itself.
        modules = [block.block.get_submodule(name) for name in block.shared if not name.endswith("gate")]
        # A shared expert with no weights (Qwen2-MoE with shared_expert_intermediate_size = 0) is none.
        if not any(p.numel() for m in modules for p in m.parameters()):
            return 0
        for field in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"):
            value = getattr(self.model.config, field, None)
            if isinstance(value, int) and value > 0:
                return value
        return 1

    def layer(self, index: int) -> MoELayerInfo:
        for info in self.layers:
            if info.index == index:
                return info
        raise HFModelError(f"Layer {index} is not an MoE layer; MoE layers: {[i.index for i in self.layers]}.")

    @property
    def masks(self) -> dict[int, Tensor]:
        """Per MoE layer, the experts taken out of routing by a mask (True = masked)."""
        found = {info.index: routing.router_mask(info.router) for info in self.layers}
        return {index: mask for index, mask in found.items() if mask is not None and bool(mask.any())}

    @property
    def novices(self) -> dict[int, dict[int, Tensor]]:
        """Per MoE layer, expert → its constant output vector c_e."""
        result = {}
        for info in self.layers:
            state = novice_state(info.experts)
            if state is not None and bool(state[0].any()):
                mask, table = state
                result[info.index] = {int(e): table[e] for e in mask.nonzero().flatten()}
        return result

    def support(self) -> dict[str, str]:
        """Operation → "yes" | "masked" | "uniform" | "no" for this model (see docs/hf-support.md)."""
        return support_for(self.model.config, self.spec.router_rule)

    # -- capture -----------------------------------------------------------------------------

    @contextmanager
    def capture_routing(self, callback: RoutingCallback, *, logits: bool = False) -> Iterator[None]:
        """Call ``callback(layer, expert_ids[T, k], gate_weights[T, k], router_logits[T, E] | None)``
        on every forward of every MoE layer, with the ids and weights the experts module receives:
        after group-limited selection, renormalisation and ``routed_scaling_factor``. Masked
        experts' logits read ``-inf``. Tensors are detached."""
        handles = []
        for info in self.layers:
            slot: dict[str, Tensor] = {}
            if logits:
                handles.append(info.router.register_forward_hook(partial(_stash_logits, slot)))
            emit = partial(_emit_routing, info.index, info.router, slot, callback)
            handles.append(info.experts.register_forward_pre_hook(emit, with_kwargs=True))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    @contextmanager
    def capture_expert_outputs(self, callback: ExpertOutputCallback) -> Iterator[None]:
        """Call ``callback(layer, expert, outputs[n, H], gates[n], token_index[n])`` for every
        expert that received tokens in a forward: its un-gated outputs E_e(x) (a novice's c_e),
        the gate weights it was applied with and the token rows ([T] = flattened batch × sequence).
        The experts run once more on the routed (token, slot) pairs, batched per expert."""
        handles = [
            info.experts.register_forward_hook(partial(_emit_expert_outputs, info.index, callback), with_kwargs=True)
            for info in self.layers
        ]
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    # -- edits -------------------------------------------------------------------------------

    def remove_experts(self, keep: Mapping[int, Sequence[int]]) -> None:
        """Keep only ``keep[layer]`` (expert ids) in each listed layer; other layers keep all.

        Slices the experts' tensors and router rows and updates the config's expert count when
        every MoE layer ends with the same count and routing is not group-limited; otherwise keeps
        the shapes and masks the removed experts' router rows (``self.masks`` records them)."""
        plan = {index: self._checked_ids(index, ids) for index, ids in keep.items()}
        if self.removal(keep) == "mask":
            self.mask_experts(keep)
            return
        old = {info.num_experts for info in self.layers}
        for index, ids in plan.items():
            self._slice(index, ids)
        self.set_expert_count(len(next(iter(plan.values()))) if plan else old.pop(), old)
        self.refresh()

    def refresh(self) -> None:
        """Re-read the MoE layers after an edit that changed their expert counts."""
        self.layers = self._enumerate()

    def removal(self, keep: Mapping[int, Sequence[int]]) -> str:
        """How :meth:`remove_experts` carries out ``keep``: ``"slice"`` (same count in every layer,
        no group-limited routing) or ``"mask"``; refused where the router cannot hold a mask."""
        counts = {len(keep[i.index]) if i.index in keep else i.num_experts for i in self.layers}
        config = self.model.config
        if not (group_limited(config) or len(counts) > 1):
            return "slice"
        if self.spec.router_rule == "opaque":
            raise HFModelError(
                f"{self.spec.title}: removing experts here needs masks ("
                + ("group-limited routing" if group_limited(config) else "different counts per layer")
                + "), and this router has no per-expert selection term to hold them; "
                "keep the same number of experts in every layer (scope 'layer')."
            )
        return "mask"

    def remove_in_layer(self, index: int, ids: Sequence[int], how: str) -> None:
        """One layer's part of a removal decided by :meth:`removal` for the whole model: for a model
        streamed layer by layer, edited while that layer is in memory. After the last layer of a
        ``"slice"``, :meth:`set_expert_count` updates the config."""
        checked = self._checked_ids(index, ids)
        if how == "slice":
            self._slice(index, checked)
        else:
            self._mask(index, checked)

    def set_expert_count(self, new: int, old: set[int]) -> None:
        """Write ``new`` into the config's expert-count fields that held one of the ``old`` counts."""
        config = self.model.config
        for source in (config, getattr(config, "ffn_config", None)):
            for field in EXPERT_COUNT_FIELDS:
                if source is not None and getattr(source, field, None) in old:
                    setattr(source, field, new)

    def _checked_ids(self, index: int, ids: Sequence[int]) -> Tensor:
        info = self.layer(index)
        ids = [int(e) for e in ids]
        if len(set(ids)) != len(ids) or any(not 0 <= e < info.num_experts for e in ids):
            raise HFModelError(f"Layer {index}: expert ids must be distinct and in [0, {info.num_experts}); got {ids}.")
        if len(ids) < info.top_k:
            raise HFModelError(f"Layer {index}: keep at least top_k={info.top_k} experts, not {len(ids)}.")
        return torch.tensor(sorted(ids), dtype=torch.long)

    def mask_experts(self, keep: Mapping[int, Sequence[int]]) -> None:
        """Keep the shapes and take every expert not in ``keep[layer]`` out of routing (see
        ``mlcore.hf.routing``); ``self.masks`` records them and ``save`` persists them."""
        for index, ids in keep.items():
            self._mask(index, self._checked_ids(index, ids))

    def _mask(self, index: int, ids: Tensor) -> None:
        info = self.layer(index)
        masked = torch.ones(info.num_experts, dtype=torch.bool)
        masked[ids] = False
        previous = routing.router_mask(info.router)
        if previous is not None:
            masked |= previous.cpu()
        routing.check_capacity(
            self.spec, info.router, masked, layer=index, group_limited=group_limited(self.model.config)
        )
        bias = info.block.selection_bias() if self.spec.router_rule == "selection_bias" else None
        routing.apply_mask(self.spec, info.router, masked, bias=getattr(*bias) if bias else None)

    def _slice(self, index: int, ids: Tensor) -> None:
        info = self.layer(index)
        if len(ids) < 2 and self.spec.router_rule == "deepseek_v3":
            raise HFModelError(f"Layer {index}: DeepSeek-V3 routing scores the top two experts; keep at least 2.")
        old = info.num_experts
        names = [(info.experts, name) for name in info.block.expert_tensors()]
        names += [(module, name) for module, name, _ in info.block.router_tensors()]
        for module, name in names:
            tensor = getattr(module, name, None)
            if tensor is None:
                continue
            axis = expert_axis(tensor, old) or 0
            kept = tensor.data.index_select(axis, ids.to(tensor.device)).clone()
            if isinstance(tensor, nn.Parameter):
                setattr(module, name, nn.Parameter(kept, requires_grad=tensor.requires_grad))
            else:
                setattr(module, name, kept)
        # Routers, experts and blocks cache the count (for views, one-hots and loops over experts).
        for module in [info.block.block, *info.router.modules(), info.experts]:
            for attr in COUNT_ATTRS:
                if getattr(module, attr, None) == old and not isinstance(getattr(module, attr), bool):
                    setattr(module, attr, len(ids))
        slice_novices(info.experts, ids)
        routing.slice_mask(info.router, ids)

    def replace_with_novices(self, novices: Mapping[int, Mapping[int, Tensor]]) -> None:
        """Replace experts by constant outputs: layer → expert → c_e [H]. Router rows stay."""
        for index, vectors in novices.items():
            info = self.layer(index)
            for expert, vector in vectors.items():
                if not 0 <= int(expert) < info.num_experts:
                    raise HFModelError(f"Layer {index}: expert {expert} is not in [0, {info.num_experts}).")
                if tuple(vector.shape) != (info.hidden,) or not bool(torch.isfinite(vector).all()):
                    raise HFModelError(
                        f"Layer {index}, expert {expert}: a novice vector must be finite with shape ({info.hidden},), "
                        f"got {tuple(vector.shape)}."
                    )
            vectors = {int(e): v.detach() for e, v in vectors.items()}
            set_novices(info.experts, vectors, native=hasattr(info.experts, "down_proj_bias"))

    def save(self, path: Path) -> None:
        """Write a safetensors checkpoint (stock ``save_pretrained``, updated config) plus the
        sidecar of masks and novices that ``mlcore.hf.load_model`` applies."""
        from mlcore.hf.checkpoint import write_sidecar

        path = Path(path)
        self.model.save_pretrained(path)
        write_sidecar(self, path)

    def save_without_novices(self, path: Path, *, in_place: bool = False) -> MoEAdapter:
        """Write the model with every novice *deleted* (its expert and router row removed, the
        config's expert count updated): a different model from the one with novices, which any
        stock tool serves. Returns the adapter of that exported copy (for evaluating it);
        ``in_place`` edits this adapter's model instead of a copy (a caller done with the model
        with novices saves a whole copy of memory).

        Under group-limited routing experts cannot be deleted without breaking the contiguous
        index groups, so they are masked instead; that export is stock only where the router has a
        per-expert selection term to hold the mask (DeepSeek-V3-style ``e_score_correction_bias``),
        and is refused otherwise."""
        from mlcore.hf.checkpoint import needs_sidecar

        novices = self.novices
        exported = MoEAdapter(self.model if in_place else copy.deepcopy(self.model))
        keep = {
            info.index: [e for e in range(info.num_experts) if e not in novices.get(info.index, {})]
            for info in exported.layers
        }
        for info in exported.layers:
            clear_novices(info.experts)
        with torch.no_grad():
            exported.remove_experts(keep)
        if needs_sidecar(exported):
            raise HFModelError(
                f"{self.spec.title}: with group-limited routing, deleted experts can only be masked, and this router "
                "has no per-expert selection term to carry the mask in a stock checkpoint; use the checkpoint "
                "with novices (mlcore.hf.load_model, or trust_remote_code=True) instead."
            )
        exported.save(path)
        return exported


def _stash_logits(slot: dict[str, Tensor], router: nn.Module, args: Any, output: tuple[Tensor, ...]) -> None:
    slot["logits"] = output[0]


def _emit_routing(
    layer: int,
    router: nn.Module,
    slot: dict[str, Tensor],
    callback: RoutingCallback,
    experts: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    _, index, weights = routing_args(args, kwargs)
    logits = slot.pop("logits", None)
    if logits is not None:
        logits = logits.detach().reshape(index.shape[0], -1)
        masked = routing.router_mask(router)
        if masked is not None:
            logits = logits.masked_fill(masked.to(logits.device), float("-inf"))
    callback(layer, index.detach(), weights.detach(), logits)


def _emit_expert_outputs(
    layer: int,
    callback: ExpertOutputCallback,
    experts: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    output: Tensor,
) -> None:
    hidden, index, weights = routing_args(args, kwargs)
    tokens, top_k = index.shape
    flat = index.reshape(-1)
    with torch.no_grad():
        # One extra pass of the experts with unit gates gives E_e(x) for every (token, slot)
        # pair; calling ``forward`` directly keeps novices and skips these hooks.
        ones = torch.ones(tokens * top_k, 1, dtype=weights.dtype, device=weights.device)
        outputs = experts.forward(hidden.detach().repeat_interleave(top_k, dim=0), flat[:, None], ones)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=experts.num_experts).tolist()
        outputs, gates, rows = outputs[order], weights.detach().reshape(-1)[order], order // top_k
    start = 0
    for expert, count in enumerate(counts):
        if count:
            end = start + count
            callback(layer, expert, outputs[start:end], gates[start:end], rows[start:end])
            start = end


def _detected_rule(block: MoEBlock) -> dict[str, Any]:
    """How masks reach a family without a hand-checked spec: through the router's per-expert
    selection term when it has one (-inf there is never selected), else through the softmax top-k
    rule when the router's own output is reproduced by it exactly, else not at all ("opaque")."""
    if block.selection_bias() is not None:
        return {"router_rule": "selection_bias"}
    if _reproduces_softmax_topk(block):
        return {"router_rule": "softmax_topk"}
    return {"router_rule": "opaque"}


def _reproduces_softmax_topk(block: MoEBlock) -> bool:
    """Whether the router's own output is softmax top-k of its logits. The rule is a property of the
    code, not the weights: a model streamed layer by layer (meta device) is probed on a random copy."""
    router = block.router
    weight = next(p for p in router.parameters() if p.dim() == 2)
    if weight.is_meta:
        router = copy.deepcopy(router).to_empty(device="cpu")
        with torch.no_grad():
            for param in router.parameters():
                param.normal_(generator=torch.Generator().manual_seed(0))
        weight = next(p for p in router.parameters() if p.dim() == 2)
    probe = torch.randn(64, block.hidden, generator=torch.Generator().manual_seed(0)).to(weight)
    try:
        with torch.no_grad():
            output = router(probe)
    except Exception:
        return False
    if not (isinstance(output, tuple) and len(output) == 3 and output[1].shape == (64, block.top_k)):
        return False
    logits, weights, indices = output
    masked = torch.zeros(block.num_experts, dtype=torch.bool, device=logits.device)
    own = getattr(router, "norm_topk_prob", None)
    for renormalise in (True, False) if own is None else (bool(own),):
        probe_router = _Probe(block.top_k, renormalise)
        mine, ids = routing.softmax_topk(probe_router, logits.reshape(64, -1), masked)
        if torch.equal(ids, indices) and torch.allclose(mine.to(weights.dtype), weights, rtol=1e-5, atol=1e-6):
            if own is None:
                # The rule reads it from the router; this router renormalises implicitly.
                block.router.norm_topk_prob = renormalise
            return True
    return False


@dataclasses.dataclass
class _Probe:
    top_k: int
    norm_topk_prob: bool
