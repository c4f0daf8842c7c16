"""Novice experts: an expert replaced by a constant output vector c_e, still routed as before.

The MoE block computes y = Σ_{e ∈ topk(x)} g_e(x) · E_e(x). A novice keeps its router row, so
g_e(x) is unchanged, and E_e(x) becomes the constant c_e: y = Σ_routed g_e E_e(x) + Σ_novice g_e c_e.

GPT-OSS experts have biases, so a novice fits the stock weights exactly: zero weights and
``gate_up_proj_bias`` give a zero GLU, and the down projection then returns its bias c_e. The
other architectures' experts are bias-free SwiGLU MLPs (silu(0) = 0 gives 0, never c_e), so their
experts module gets a forward that adds the novice term, and the vectors go to the adapter's
sidecar file; their weights are zeroed so that a stock load without the sidecar is recognisably
an expert that outputs 0 rather than the old expert.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import Tensor, nn

NOVICE_MASK = "moelab_novice_mask"
NOVICE_VECTORS = "moelab_novice_vectors"
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
    if not native and "forward" not in experts.__dict__:
        experts.forward = types.MethodType(_forward_with_novices, experts)


def clear_novices(experts: nn.Module) -> None:
    """Forget the novices (their experts' weights stay zeroed): for an export that deletes them."""
    for attr in (NOVICE_MASK, NOVICE_VECTORS, "forward"):
        experts.__dict__.pop(attr, None)


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
