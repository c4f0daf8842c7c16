"""Novice experts: an expert replaced by a constant output vector c_e, still routed as before.

The MoE block computes y = Σ_{e ∈ topk(x)} g_e(x) · E_e(x). A novice keeps its router row, so
g_e(x) is unchanged, and E_e(x) becomes the constant c_e: y = Σ_routed g_e E_e(x) + Σ_novice g_e c_e.

GPT-OSS experts have biases, so a novice fits the stock weights exactly: zero weights and
``gate_up_proj_bias`` give a zero GLU, and the down projection then returns its bias c_e. The
other architectures' experts are bias-free SwiGLU MLPs (silu(0) = 0 gives 0, never c_e), so their
experts module gets a forward that adds the novice term, and the vectors go to the adapter's
sidecar file. In memory a novice's weights are zeroed (it still receives its tokens, under gate 0).

A novice's weights are dead: a checkpoint never stores them (the *compact* layout of
:mod:`mlcore.hf.checkpoint`). An experts module with novices serialises as its kept experts only:
a state-dict hook replaces every stacked tensor [E, ...] by its rows for the kept experts, in
ascending expert order ([K, ...], slot j = the j-th kept expert), so ``save_pretrained`` and a layer
written on its own (:mod:`mlcore.compress.streamed`) hold K experts in the family's own layout; a
load-state-dict hook turns such a [K, ...] tensor back into [E, ...] with zero rows for the
novices (GPT-OSS: ``down_proj_bias`` rows = c_e), so a layer read on its own
(:mod:`mlcore.hf.layerwise`) gets its full shapes. In memory the module keeps all E experts (the
adapter's contract: stacked [E, ...] tensors beside an [E, H] router). A checkpoint written before
the compact layout stores all E (zeroed) experts; its layers are read in that layout
(``FULL_LAYOUT``) while they are still on the meta device.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import Tensor, nn

NOVICE_MASK = "moelab_novice_mask"
NOVICE_VECTORS = "moelab_novice_vectors"
#: Set on an experts module whose novices come from a checkpoint in the full layout (written before
#: the compact one): its meta-device weights (a model streamed layer by layer) are read as [E, ...].
FULL_LAYOUT = "moelab_full_layout"
#: Whether the novices' outputs live in the experts' own ``down_proj_bias`` (GPT-OSS).
NATIVE = "moelab_native_novices"
_HOOKED = "moelab_compact_hooks"
#: The per-expert tensors of a fused experts module (biases: GPT-OSS only), first dimension E.
EXPERT_TENSORS = ("gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias")


def routing_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
    """(hidden[T, H], top_k_index[T, k], top_k_weights[T, k]) from an experts-module call, whatever
    the argument names (GPT-OSS calls them ``router_indices`` / ``routing_weights``)."""
    hidden = args[0] if args else kwargs["hidden_states"]
    index = args[1] if len(args) > 1 else kwargs.get("top_k_index", kwargs.get("router_indices"))
    weights = args[2] if len(args) > 2 else kwargs.get("top_k_weights", kwargs.get("routing_weights"))
    return hidden, index, weights


def novice_state(experts: nn.Module) -> tuple[Tensor, Tensor] | None:
    mask = getattr(experts, NOVICE_MASK, None)
    return None if mask is None else (mask, getattr(experts, NOVICE_VECTORS))


def set_novices(experts: nn.Module, vectors: dict[int, Tensor], *, native: bool) -> None:
    """Make each expert ``e`` in ``vectors`` output ``vectors[e]`` (shape [H]) un-gated."""
    if not vectors:
        return
    weight = experts.down_proj
    num_experts, hidden = weight.shape[0], next(iter(vectors.values())).shape[0]
    state = novice_state(experts)
    if state is None:
        # A model being loaded layer by layer has its weights on the meta device; the table must be real.
        device = next(iter(vectors.values())).device if weight.is_meta else weight.device
        mask = torch.zeros(num_experts, dtype=torch.bool, device=device)
        table = torch.zeros(num_experts, hidden, dtype=weight.dtype, device=device)
    else:
        mask, table = state
    with torch.no_grad():
        for expert, vector in vectors.items():
            mask[expert] = True
            table[expert] = vector.to(table.device, table.dtype)
            for name in EXPERT_TENSORS:
                if (tensor := getattr(experts, name, None)) is not None:
                    tensor[expert].zero_()
            if native:
                bias = experts.down_proj_bias
                bias[expert] = vector.to(bias.device, bias.dtype)
    setattr(experts, NOVICE_MASK, mask)
    setattr(experts, NOVICE_VECTORS, table)
    setattr(experts, NATIVE, native)
    if not experts.__dict__.get(_HOOKED, False):
        # Module-level functions reading the module's own attributes: a deep copy carries them and
        # they do nothing once the novices are cleared.
        experts.register_state_dict_post_hook(_kept_rows)
        experts.register_load_state_dict_pre_hook(_all_rows)
        setattr(experts, _HOOKED, True)
    if not native and "forward" not in experts.__dict__:
        experts.forward = types.MethodType(_forward_with_novices, experts)


def clear_novices(experts: nn.Module) -> None:
    """Forget the novices (their experts' weights stay zeroed): for an export that deletes them."""
    for attr in (NOVICE_MASK, NOVICE_VECTORS, NATIVE, FULL_LAYOUT, "forward"):
        experts.__dict__.pop(attr, None)


def stored_experts(experts: nn.Module) -> Tensor | None:
    """The experts a checkpoint of ``experts`` stores, in slot order (ascending ids): every expert
    but the novices. ``None`` when that is all of them: no novices, or weights still on the meta
    device that are read from a checkpoint in the full layout (``FULL_LAYOUT``)."""
    state = novice_state(experts)
    if state is None or not bool(state[0].any()):
        return None
    if experts.__dict__.get(FULL_LAYOUT, False) and any(p.is_meta for p in experts.parameters(recurse=False)):
        return None
    return (~state[0]).nonzero().flatten().cpu()


def _stacked(experts: nn.Module, count: int) -> list[str]:
    """The names of the module's own tensors stacked over its ``count`` experts."""
    return [name for name, p in experts.named_parameters(recurse=False) if p.dim() >= 1 and p.shape[0] == count]


def _kept_rows(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, _metadata: Any) -> None:
    """State-dict post-hook: each stacked tensor [E, ...] becomes its kept experts' rows [K, ...]."""
    kept = stored_experts(module)
    if kept is None:
        return
    with torch.no_grad():
        for name in _stacked(module, getattr(module, NOVICE_MASK).numel()):
            key = prefix + name
            if key in state_dict:
                tensor = state_dict[key]
                state_dict[key] = tensor.detach().index_select(0, kept.to(tensor.device))


def _all_rows(module: nn.Module, state_dict: dict[str, Tensor], prefix: str, *_: Any) -> None:
    """Load-state-dict pre-hook: a stored tensor [K, ...] becomes [E, ...] with the novices' rows
    as :func:`set_novices` leaves them (zeros; GPT-OSS's ``down_proj_bias`` rows are c_e). A tensor
    that already has E rows (the full layout) is loaded as it is."""
    kept = stored_experts(module)
    if kept is None:
        return
    mask, table = novice_state(module)  # type: ignore[misc]
    with torch.no_grad():
        for name in _stacked(module, mask.numel()):
            tensor = state_dict.get(prefix + name)
            if tensor is None or tensor.shape[0] != kept.numel():
                continue
            state_dict[prefix + name] = expand_rows(tensor, kept, mask.numel())
            if name == "down_proj_bias" and module.__dict__.get(NATIVE, False):
                rows = mask.nonzero().flatten()
                state_dict[prefix + name][rows.to(tensor.device)] = table[rows].to(tensor.device, tensor.dtype)


def expand_rows(tensor: Tensor, kept: Tensor, count: int) -> Tensor:
    """[K, ...] rows of the ``kept`` experts → [count, ...] with zero rows for the others."""
    full = tensor.new_zeros((count, *tensor.shape[1:]))
    full[kept.to(tensor.device)] = tensor
    return full


def allocate_stored(experts: nn.Module, count: int) -> None:
    """Make every stacked tensor of ``experts`` an empty [count, ...] (on its device, in its dtype),
    for ``from_pretrained`` to fill from a compact checkpoint; :func:`expand_stored` restores E."""
    total = next(experts.parameters(recurse=False)).shape[0]
    for name in _stacked(experts, total):
        old = getattr(experts, name)
        shape = (count, *old.shape[1:])
        setattr(experts, name, nn.Parameter(torch.empty(shape, dtype=old.dtype, device=old.device), old.requires_grad))


def expand_stored(experts: nn.Module, kept: Tensor, count: int) -> None:
    """The [K, ...] tensors :func:`allocate_stored` made and a load filled, back to [count, ...]
    with zero rows for the experts not stored, one tensor at a time."""
    with torch.no_grad():
        for name in _stacked(experts, kept.numel()):
            old = getattr(experts, name)
            setattr(experts, name, nn.Parameter(expand_rows(old.data, kept, count), old.requires_grad))


def slice_novices(experts: nn.Module, keep: Tensor) -> None:
    state = novice_state(experts)
    if state is not None:
        mask, table = state
        keep = keep.to(mask.device)
        setattr(experts, NOVICE_MASK, mask[keep].clone())
        setattr(experts, NOVICE_VECTORS, table[keep].clone())


def _forward_with_novices(self: nn.Module, *args: Any, **kwargs: Any) -> Tensor:
    hidden, index, weights = routing_args(args, kwargs)
    # The tables are plain attributes (not buffers, so no checkpoint or meta-device move touches
    # them); follow the activations' device here instead.
    novice = getattr(self, NOVICE_MASK).to(index.device)[index]
    vectors = getattr(self, NOVICE_VECTORS).to(hidden.device)[index]
    routed = type(self).forward(self, hidden, index, weights.masked_fill(novice, 0.0))
    # Σ_novice g_e c_e, gathered per (token, slot): no loop over tokens or experts.
    constant = (weights.masked_fill(~novice, 0.0).unsqueeze(-1) * vectors).sum(dim=1)
    return routed + constant.to(routed.dtype)
