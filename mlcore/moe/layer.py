"""The Mixture-of-Experts feed-forward layer: a pluggable router, E routed experts, optional shared
experts, dropless token-choice dispatch.

    y(x) = Σ_{e ∈ T(x)} g_e(x)·E_e(x) + Σ_{s} S_s(x)

(Shazeer et al. 2017, eq. 1; shared-expert isolation as in DeepSeekMoE, Dai et al. 2024), with each
expert E_e(x) = W_down[e]·φ(W_gate_up[e]·x), φ(u) = act(u_gate) ⊙ u_up for gated experts
(SwiGLU: act = SiLU; GEGLU; ReGLU) or act(u) for plain MLPs.

Expert weights are stored fused, in transformers 5.x's layout (``gate_up_proj[E, 2I, H]`` with the
gate in rows [:I], ``down_proj[E, H, I]``), so Hugging Face checkpoints and the kernel share it;
the expert computation is :func:`kernels.fused_moe` (Triton on CUDA, its PyTorch twin elsewhere).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, overload

import torch
from torch import Tensor, nn

from kernels import fused_moe
from mlcore.moe.routers import Router, Routing, TopKSoftmaxRouter

Activation = Literal["silu", "gelu", "relu"]
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu", "relu")


class MoEObserver(Protocol):
    """Something that watches a layer's forward: routing traces and per-expert statistics.

    Called after the layer's output is computed, with the flattened input x [T, H] and the routing.
    Observers that need each expert's own output call :meth:`MoELayer.expert_outputs`.
    """

    def observe(self, layer: MoELayer, x: Tensor, routing: Routing) -> None: ...


def _expert_weights(num_experts: int, rows: int, cols: int, factory: dict[str, Any]) -> nn.Parameter:
    # nn.Linear's default: U(−1/√fan_in, 1/√fan_in), fan_in = cols.
    bound = cols**-0.5
    return nn.Parameter(torch.empty(num_experts, rows, cols, **factory).uniform_(-bound, bound))


class MoELayer(nn.Module):
    """A dropless token-choice MoE feed-forward layer.

    ``router`` defaults to a renormalised top-k softmax router over ``num_experts``; any
    :class:`~mlcore.moe.routers.Router` plugs in (its ``num_experts`` then sets the expert count).
    ``num_shared_experts`` shared experts of width ``shared_intermediate`` (default
    ``intermediate``) see every token with weight 1; they are stored as one MLP whose hidden units
    are theirs concatenated, which computes the same sum.

    ``observers`` is a list of :class:`MoEObserver`; the normal path only checks that it is empty.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        num_experts: int | None = None,
        top_k: int = 2,
        *,
        router: Router | None = None,
        activation: Activation = "silu",
        gated: bool = True,
        num_shared_experts: int = 0,
        shared_intermediate: int | None = None,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        if router is None:
            if num_experts is None:
                raise ValueError("MoELayer needs num_experts (or a router)")
            router = TopKSoftmaxRouter(hidden, num_experts, top_k, device=device, dtype=dtype)
        elif num_experts is not None and num_experts != router.num_experts:
            raise ValueError(f"num_experts={num_experts} disagrees with the router's {router.num_experts}")
        if num_shared_experts < 0:
            raise ValueError(f"num_shared_experts must be ≥ 0, got {num_shared_experts}")
        factory = {"device": device, "dtype": dtype}
        self.hidden, self.intermediate = hidden, intermediate
        self.num_experts = router.num_experts
        self.activation, self.gated = activation, gated
        self.router = router
        rows = 2 * intermediate if gated else intermediate
        self.gate_up_proj = _expert_weights(self.num_experts, rows, hidden, factory)
        self.down_proj = _expert_weights(self.num_experts, hidden, intermediate, factory)
        self.gate_up_proj_bias = nn.Parameter(torch.zeros(self.num_experts, rows, **factory)) if bias else None
        self.down_proj_bias = nn.Parameter(torch.zeros(self.num_experts, hidden, **factory)) if bias else None

        self.num_shared_experts = num_shared_experts
        self.shared_intermediate = shared_intermediate or intermediate
        self.shared_gate_up_proj: nn.Parameter | None = None
        self.shared_down_proj: nn.Parameter | None = None
        if num_shared_experts:
            width = num_shared_experts * self.shared_intermediate
            self.shared_gate_up_proj = _expert_weights(1, 2 * width if gated else width, hidden, factory)
            self.shared_down_proj = _expert_weights(1, hidden, width, factory)
        self.observers: list[MoEObserver] = []

    @property
    def top_k(self) -> int:
        return self.router.top_k

    def extra_repr(self) -> str:
        kind = f"{'gated ' if self.gated else ''}{self.activation}"
        return (
            f"hidden={self.hidden}, intermediate={self.intermediate}, experts={self.num_experts}, "
            f"top_k={self.top_k}, shared={self.num_shared_experts}, experts_act={kind}"
        )

    @overload
    def forward(self, x: Tensor, *, null_mask: Tensor | None = ..., return_routing: Literal[False] = ...) -> Tensor: ...
    @overload
    def forward(
        self, x: Tensor, *, null_mask: Tensor | None = ..., return_routing: Literal[True]
    ) -> tuple[Tensor, Routing]: ...

    def forward(
        self, x: Tensor, *, null_mask: Tensor | None = None, return_routing: bool = False
    ) -> Tensor | tuple[Tensor, Routing]:
        """x: [..., H] → y: [..., H]. ``null_mask`` (ProMoE) flags null-condition tokens; it may
        have the shape of x's leading dimensions or a prefix of it (e.g. [B] per sample).
        With ``return_routing`` the routing is returned too, for the auxiliary losses."""
        if x.shape[-1] != self.hidden:
            raise ValueError(f"MoELayer expects inputs of width {self.hidden}, got shape {tuple(x.shape)}")
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.hidden)
        if null_mask is None:
            routing = self.router(x2)
        else:
            expanded = null_mask.reshape(*null_mask.shape, *([1] * (len(lead) - null_mask.dim())))
            routing = self.router(x2, null_mask=expanded.expand(lead).reshape(-1))
        y = fused_moe(
            x2,
            self.gate_up_proj,
            self.down_proj,
            routing.expert_ids,
            routing.gate_weights,
            activation=self.activation,
            gated=self.gated,
            b_gate_up=self.gate_up_proj_bias,
            b_down=self.down_proj_bias,
        )
        if self.shared_gate_up_proj is not None:
            y = y + self.shared_output(x2)
        if self.observers:
            with torch.no_grad():
                for observer in self.observers:
                    observer.observe(self, x2, routing)
        y = y.reshape(x.shape)
        return (y, routing) if return_routing else y

    def shared_output(self, x: Tensor) -> Tensor:
        """Σ_s S_s(x) for x [T, H]: the shared experts as one expert every token takes with weight 1."""
        assert self.shared_gate_up_proj is not None and self.shared_down_proj is not None
        ids = torch.zeros(len(x), 1, dtype=torch.int64, device=x.device)
        ones = torch.ones(len(x), 1, dtype=x.dtype, device=x.device)
        return fused_moe(
            x, self.shared_gate_up_proj, self.shared_down_proj, ids, ones, activation=self.activation, gated=self.gated
        )

    def expert_outputs(self, x: Tensor, expert_ids: Tensor) -> Tensor:
        """E_{e_n}(x_n) for rows x [n, H] and one expert id per row [n]: each expert's own output,
        before gating (what per-expert statistics and MoNE's novices are built from)."""
        ones = torch.ones(len(x), 1, dtype=x.dtype, device=x.device)
        return fused_moe(
            x,
            self.gate_up_proj,
            self.down_proj,
            expert_ids.reshape(-1, 1).long(),
            ones,
            activation=self.activation,
            gated=self.gated,
            b_gate_up=self.gate_up_proj_bias,
            b_down=self.down_proj_bias,
        )


def moe_layers(model: nn.Module) -> list[MoELayer]:
    """The model's MoE layers in ``model.modules()`` order; a layer's index in this list is its
    layer index in traces and statistics."""
    return [m for m in model.modules() if isinstance(m, MoELayer)]
