"""Float64 references written token by token, for comparing the layer and the statistics against."""

from __future__ import annotations

import torch
from torch import Tensor

ACT = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu, "relu": torch.relu}


def expert_output(layer, e: int, x_t: Tensor) -> Tensor:
    """E_e(x) for one token, in float64, straight from the layer's fused weights."""
    w1 = layer.gate_up_proj[e].double()
    w2 = layer.down_proj[e].double()
    h = w1 @ x_t.double()
    if layer.gate_up_proj_bias is not None:
        h = h + layer.gate_up_proj_bias[e].double()
    act = ACT[layer.activation]
    if layer.gated:
        gate, up = h.chunk(2)
        h = act(gate) * up
    else:
        h = act(h)
    out = w2 @ h
    if layer.down_proj_bias is not None:
        out = out + layer.down_proj_bias[e].double()
    return out


def shared_output(layer, x_t: Tensor) -> Tensor:
    act = ACT[layer.activation]
    h = layer.shared_gate_up_proj[0].double() @ x_t.double()
    if layer.gated:
        gate, up = h.chunk(2)
        h = act(gate) * up
    else:
        h = act(h)
    return layer.shared_down_proj[0].double() @ h


def moe_reference(layer, x: Tensor, ids: Tensor, weights: Tensor) -> Tensor:
    """y_t = Σ_j g_tj·E_{e_tj}(x_t) (+ shared experts), one token and one slot at a time."""
    rows = []
    for t in range(len(x)):
        y_t = sum(weights[t, j].double() * expert_output(layer, int(ids[t, j]), x[t]) for j in range(ids.shape[1]))
        if layer.shared_gate_up_proj is not None:
            y_t = y_t + shared_output(layer, x[t])
        rows.append(y_t)
    return torch.stack(rows)
