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

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.hf import routing
from mlcore.hf.architectures import SUPPORTED, ArchSpec, HFModelError, arch_spec, group_limited
from mlcore.hf.novices import EXPERT_TENSORS, novice_state, routing_args, set_novices, slice_novices
from mlcore.hf.support import support_for

RoutingCallback = Callable[[int, Tensor, Tensor, Tensor | None], Any]
ExpertOutputCallback = Callable[[int, int, Tensor, Tensor, Tensor], Any]

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")


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


def adapt(model: nn.Module) -> MoEAdapter:
    """The adapter for a transformers MoE causal LM; a one-line error for anything else."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED:
        raise HFModelError(
            f"{type(model).__name__} is not a supported Hugging Face MoE model; supported: {', '.join(SUPPORTED)}."
        )
    return MoEAdapter(model)


class MoEAdapter:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.spec: ArchSpec = arch_spec(model.config.model_type)
        self.arch: str = self.spec.name
        self.layers: list[MoELayerInfo] = self._enumerate()
        if not self.layers:
            raise HFModelError(f"{type(model).__name__} has no MoE layers (num_experts is 0 or every layer is dense).")

    # -- enumeration -------------------------------------------------------------------------

    def _enumerate(self) -> list[MoELayerInfo]:
        config = self.model.config
        layers = []
        for name, block in self.model.named_modules():
            experts = getattr(block, "experts", None)
            router = getattr(block, self.spec.router_attr, None)
            if not isinstance(getattr(experts, "gate_up_proj", None), nn.Parameter) or router is None:
                continue
            match = _LAYER_INDEX.search(name + ".")
            if match is None:
                raise HFModelError(f"MoE block {name!r} is not inside a decoder layer; cannot number it.")
            layers.append(
                MoELayerInfo(
                    index=int(match.group(1)),
                    name=name,
                    num_experts=router.weight.shape[0],
                    top_k=router.top_k,
                    num_shared_experts=self._shared_count(block),
                    hidden=config.hidden_size,
                    intermediate=getattr(config, self.spec.intermediate_field),
                    router=router,
                    experts=experts,
                )
            )
        return sorted(layers, key=lambda info: info.index)

    def _shared_count(self, block: nn.Module) -> int:
        if not any(hasattr(block, attr) for attr in self.spec.shared_attrs):
            return 0
        # Qwen2-MoE builds an empty shared expert when its intermediate size is 0: that is no shared expert.
        if getattr(self.model.config, "shared_expert_intermediate_size", None) == 0:
            return 0
        return int(getattr(self.model.config, "n_shared_experts", 1))

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
        """Operation → "yes" | "masked" | "no" for this model (see docs/hf-support.md)."""
        return support_for(self.model.config)

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
        counts = {len(plan[i.index]) if i.index in plan else i.num_experts for i in self.layers}
        config = self.model.config
        if group_limited(config) or len(counts) > 1:
            self.mask_experts(keep)
            return
        for index, ids in plan.items():
            self._slice(index, ids)
        setattr(config, self.spec.experts_field, counts.pop())
        self.layers = self._enumerate()

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
        routing.apply_mask(self.spec, info.router, masked)

    def _slice(self, index: int, ids: Tensor) -> None:
        info = self.layer(index)
        if len(ids) < 2 and self.spec.router_rule == "deepseek_v3":
            raise HFModelError(f"Layer {index}: DeepSeek-V3 routing scores the top two experts; keep at least 2.")
        names = [(info.experts, name) for name in EXPERT_TENSORS] + [
            (info.router, name) for name in ("weight", "bias", "e_score_correction_bias")
        ]
        for module, name in names:
            tensor = getattr(module, name, None)
            if tensor is None:
                continue
            kept = tensor.data[ids.to(tensor.device)].clone()
            if isinstance(tensor, nn.Parameter):
                setattr(module, name, nn.Parameter(kept, requires_grad=tensor.requires_grad))
            else:
                setattr(module, name, kept)
        info.experts.num_experts = info.router.num_experts = len(ids)
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
            set_novices(info.experts, vectors, native=self.spec.expert_biases)

    def save(self, path: Path) -> None:
        """Write a safetensors checkpoint (stock ``save_pretrained``, updated config) plus the
        sidecar of masks and novices that ``mlcore.hf.load_model`` applies."""
        from mlcore.hf.checkpoint import write_sidecar

        path = Path(path)
        self.model.save_pretrained(path)
        write_sidecar(self, path)


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
