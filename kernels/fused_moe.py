"""Fused Mixture-of-Experts feed-forward: gather → grouped GEMM → activation → GEMM → gate-weighted scatter.

For tokens x_t with top-k experts e_{t,1..k} and gate weights g_{t,j}, the layer computes

    y_t = Σ_j g_{t,j} · (W2[e] · φ(W1[e] x_t + b1[e]) + b2[e]),      e = e_{t,j}                (1)

where φ(u) = act(u_gate) ⊙ u_up for gated experts (SwiGLU and friends) and φ(u) = act(u) otherwise.

Weight layout is transformers 5.x's fused one: `w_gate_up[E, 2I, H]` with the gate in rows [:I] and
the up projection in rows [I:] (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek: `gate, up = linear(x,
gate_up_proj[e]).chunk(2, dim=-1)`), `w_down[E, H, I]`. GPT-OSS differs and must be converted by the
caller: it stores `gate_up_proj[E, H, 2I]` transposed with gate and up *interleaved* (columns ::2 and
1::2), and its activation is a clamped `(up + 1) · gate · σ(α · gate)`, which is not one of ours.

Both implementations sort the k·T (token, expert) pairs by expert once. The PyTorch twin then runs one
matmul per non-empty expert on a contiguous slice and has a hand-written backward that writes each
expert's weight gradient in place (autograd through `w[e]` slices would allocate a full [E, ...] zero
gradient per expert). The Triton kernel pads each expert's run of rows to a multiple of BLOCK_M
(vLLM's `moe_align_block_size`), so every row block belongs to one expert, and fuses the whole of (1)
into one launch: a program owns BLOCK_M rows and BLOCK_I intermediate columns, computes its slice of
φ(W1 x) and atomically adds its share of W2 φ into the output (split-K over I, so nothing is computed
twice). Rows are addressed by index offsets, never by pointers loaded from memory, so the kernel runs
in Triton's interpreter.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from kernels.dispatch import LAUNCHES, interpreter_on, kernel_backend, triton_available

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "gelu": F.gelu,  # exact (erf) GELU, as transformers' "gelu"
    "relu": F.relu,
}


def _check_inputs(
    hidden: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    activation: str,
    gated: bool,
    b_gate_up: torch.Tensor | None,
    b_down: torch.Tensor | None,
) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {sorted(ACTIVATIONS)}")
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be [T, H], got shape {tuple(hidden.shape)}; flatten batch and sequence first")
    T, H = hidden.shape
    if w_down.dim() != 3 or w_down.shape[1] != H:
        raise ValueError(f"w_down must be [E, H={H}, I], got {tuple(w_down.shape)}")
    E, _, I = w_down.shape
    rows = 2 * I if gated else I
    if tuple(w_gate_up.shape) != (E, rows, H):
        raise ValueError(f"w_gate_up must be [E={E}, {rows}, H={H}] for gated={gated}, got {tuple(w_gate_up.shape)}")
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_ids and topk_weights must both be [T={T}, k], got {tuple(topk_ids.shape)} "
            f"and {tuple(topk_weights.shape)}"
        )
    if topk_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if b_gate_up is not None and tuple(b_gate_up.shape) != (E, rows):
        raise ValueError(f"b_gate_up must be [E={E}, {rows}], got {tuple(b_gate_up.shape)}")
    if b_down is not None and tuple(b_down.shape) != (E, H):
        raise ValueError(f"b_down must be [E={E}, H={H}], got {tuple(b_down.shape)}")
    if topk_ids.numel() and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= E):
        raise ValueError(f"topk_ids must lie in [0, {E}); got values in [{int(topk_ids.min())}, {int(topk_ids.max())}]")


class ExpertSort:
    """The (token, slot) pairs sorted by expert: `order[s]` is the flat index t·k + j of sorted row s."""

    def __init__(self, topk_ids: torch.Tensor, num_experts: int) -> None:
        flat = topk_ids.reshape(-1).long()
        self.top_k = topk_ids.shape[1]
        self.order = torch.argsort(flat, stable=True)
        self.expert = flat[self.order]
        self.token = self.order // self.top_k
        self.counts = torch.bincount(flat, minlength=num_experts)
        # One host sync for the whole layer; the loops below walk non-empty experts only.
        ends = torch.cumsum(self.counts, 0).tolist()
        starts = [0, *ends[:-1]]
        self.segments = [(e, s, t) for e, (s, t) in enumerate(zip(starts, ends)) if t > s]
        self.empty_experts = [e for e, (s, t) in enumerate(zip(starts, ends)) if t == s]

    def weight_grad(self, weight: torch.Tensor) -> torch.Tensor:
        """Storage for a per-expert weight gradient; only experts without tokens need zeros (the rest are written)."""
        grad = torch.empty_like(weight)
        grad[self.empty_experts] = 0
        return grad


def _gated_activation(h1: torch.Tensor, activation: str, gated: bool) -> torch.Tensor:
    act = ACTIVATIONS[activation]
    if not gated:
        return act(h1)
    gate, up = h1.chunk(2, dim=-1)
    return act(gate) * up


def _activation_into(out: torch.Tensor, u: torch.Tensor, activation: str) -> torch.Tensor:
    """out = act(u), written in place (the `out=` ATen variants of the functions in ACTIVATIONS)."""
    if activation == "silu":
        return torch.ops.aten.silu.out(u, out=out)
    if activation == "gelu":
        return torch.ops.aten.gelu.out(u, out=out)
    return torch.clamp_min(u, 0, out=out)


def _activation_grad_into(out: torch.Tensor, grad: torch.Tensor, u: torch.Tensor, activation: str) -> torch.Tensor:
    """out = ∂act(u)/∂u · grad, in place, with the same ATen kernels autograd would call."""
    if activation == "silu":
        return torch.ops.aten.silu_backward.grad_input(grad, u, grad_input=out)
    if activation == "gelu":
        return torch.ops.aten.gelu_backward.grad_input(grad, u, grad_input=out)
    return torch.ops.aten.threshold_backward.grad_input(grad, u, 0, grad_input=out)


def _linear_into(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """out = x @ w.T (+ b), written in place."""
    if b is None:
        return torch.mm(x, w.t(), out=out)
    return torch.addmm(b, x, w.t(), out=out)


class _FusedMoETwin(torch.autograd.Function):
    """Equation (1) on expert-sorted rows, forward and backward written per expert segment.

    With a = φ(h1), h1 = W1 x + b1 and y = W2 a + b2 for a sorted row, and δ the output gradient
    gathered to the row: ∂g = δ·y, ∂y = g·δ, ∂W2[e] = Σ ∂y aᵀ, ∂a = W2ᵀ ∂y, ∂h1 = φ'(h1) ∂a,
    ∂W1[e] = Σ ∂h1 xᵀ, ∂x = W1ᵀ ∂h1 (scattered back to tokens), biases = segment sums.

    Every elementwise step of a segment runs right after the matmul that produced its input, while
    the segment is still in cache, and writes into preallocated rows (`out=` / in place): on a CPU,
    streaming whole [k·T, 2I] tensors through memory, or allocating and copying per-segment
    temporaries, costs a sizeable fraction of the matmuls.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        topk_weights: torch.Tensor,
        b_gate_up: torch.Tensor | None,
        b_down: torch.Tensor | None,
        sort: ExpertSort,
        activation: str,
        gated: bool,
    ) -> torch.Tensor:
        T, H = hidden.shape
        rows = sort.token.shape[0]
        inter = w_down.shape[2]
        gates = topk_weights.reshape(-1)[sort.order].to(hidden.dtype)
        xs = hidden.index_select(0, sort.token)
        h1 = hidden.new_empty(rows, w_gate_up.shape[1])
        a = hidden.new_empty(rows, inter)
        y = hidden.new_empty(rows, H)
        for e, s, t in sort.segments:
            _linear_into(h1[s:t], xs[s:t], w_gate_up[e], None if b_gate_up is None else b_gate_up[e])
            _activation_into(a[s:t], h1[s:t, :inter], activation)
            if gated:
                a[s:t].mul_(h1[s:t, inter:])
            _linear_into(y[s:t], a[s:t], w_down[e], None if b_down is None else b_down[e])
        out = hidden.new_zeros(T, H).index_add_(0, sort.token, y * gates[:, None])
        ctx.save_for_backward(hidden, w_gate_up, w_down, topk_weights, h1, a, y, gates)
        ctx.sort, ctx.activation, ctx.gated = sort, activation, gated
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        hidden, w_gate_up, w_down, topk_weights, h1, a, y, gates = ctx.saved_tensors
        sort: ExpertSort = ctx.sort
        activation, gated = ctx.activation, ctx.gated
        need = ctx.needs_input_grad
        inter = w_down.shape[2]
        gy = grad_out.index_select(0, sort.token)

        grad_topk = None
        if need[3]:
            per_row = torch.linalg.vecdot(gy, y).to(topk_weights.dtype)
            grad_topk = torch.zeros_like(topk_weights).view(-1).index_copy_(0, sort.order, per_row)
            grad_topk = grad_topk.view_as(topk_weights)
        gy.mul_(gates[:, None])  # δ → ∂y = g·δ, for every row at once

        grad_w_down = sort.weight_grad(w_down) if need[2] else None
        grad_w_gate_up = sort.weight_grad(w_gate_up) if need[1] else None
        grad_b_down = gy.new_zeros(w_down.shape[:2]) if need[5] else None
        grad_b_gate_up = gy.new_zeros(w_gate_up.shape[:2]) if need[4] else None
        xs = hidden.index_select(0, sort.token) if grad_w_gate_up is not None else None
        gxs = torch.empty_like(gy) if need[0] else None
        gh1 = torch.empty_like(h1)
        for e, s, t in sort.segments:
            if grad_w_down is not None:
                torch.mm(gy[s:t].t(), a[s:t], out=grad_w_down[e])
            if grad_b_down is not None:
                torch.sum(gy[s:t], 0, out=grad_b_down[e])
            ga = gy[s:t] @ w_down[e]  # ∂a
            if gated:
                gate, up = h1[s:t, :inter], h1[s:t, inter:]
                # ∂up = act(gate)·∂a; ∂gate = act'(gate)·(up·∂a), each written into its half of ∂h1.
                _activation_into(gh1[s:t, inter:], gate, activation).mul_(ga)
                _activation_grad_into(gh1[s:t, :inter], ga.mul_(up), gate, activation)
            else:
                _activation_grad_into(gh1[s:t], ga, h1[s:t], activation)
            if grad_w_gate_up is not None:
                torch.mm(gh1[s:t].t(), xs[s:t], out=grad_w_gate_up[e])
            if grad_b_gate_up is not None:
                torch.sum(gh1[s:t], 0, out=grad_b_gate_up[e])
            if gxs is not None:
                torch.mm(gh1[s:t], w_gate_up[e], out=gxs[s:t])
        grad_hidden = None if gxs is None else torch.zeros_like(hidden).index_add_(0, sort.token, gxs)
        return grad_hidden, grad_w_gate_up, grad_w_down, grad_topk, grad_b_gate_up, grad_b_down, None, None, None


def fused_moe_torch(
    hidden: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    activation: str = "silu",
    gated: bool = True,
    b_gate_up: torch.Tensor | None = None,
    b_down: torch.Tensor | None = None,
) -> torch.Tensor:
    """The PyTorch twin of the fused kernel: equation (1), sorted by expert, one matmul per non-empty expert."""
    _check_inputs(hidden, w_gate_up, w_down, topk_ids, topk_weights, activation, gated, b_gate_up, b_down)
    sort = ExpertSort(topk_ids, w_down.shape[0])
    return _FusedMoETwin.apply(hidden, w_gate_up, w_down, topk_weights, b_gate_up, b_down, sort, activation, gated)


def fused_moe_reference(
    hidden: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    activation: str = "silu",
    gated: bool = True,
    b_gate_up: torch.Tensor | None = None,
    b_down: torch.Tensor | None = None,
) -> torch.Tensor:
    """Equation (1) written literally with a dense per-slot gather of weights; slow, for tests only."""
    out = torch.zeros_like(hidden)
    for j in range(topk_ids.shape[1]):
        e = topk_ids[:, j]
        h1 = torch.einsum("th,tnh->tn", hidden, w_gate_up[e])
        if b_gate_up is not None:
            h1 = h1 + b_gate_up[e]
        y = torch.einsum("ti,thi->th", _gated_activation(h1, activation, gated), w_down[e])
        if b_down is not None:
            y = y + b_down[e]
        out = out + topk_weights[:, j, None].to(hidden.dtype) * y
    return out


# ---------------------------------------------------------------------------------------------- Triton

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _activation(u, ACTIVATION: tl.constexpr):
        if ACTIVATION == "silu":
            return u * tl.sigmoid(u)
        elif ACTIVATION == "gelu":
            return 0.5 * u * (1.0 + tl.math.erf(u * 0.7071067811865476))
        else:
            return tl.maximum(u, 0.0)

    @triton.jit
    def _fused_moe_kernel(
        x_ptr,
        w1_ptr,
        w2_ptr,
        b1_ptr,
        b2_ptr,
        out_ptr,
        sorted_ids_ptr,
        block_expert_ptr,
        gates_ptr,
        num_pairs,
        H,
        I,
        top_k,
        stride_xt,
        stride_xh,
        stride_w1e,
        stride_w1n,
        stride_w1k,
        stride_w2e,
        stride_w2n,
        stride_w2k,
        stride_b1e,
        stride_b2e,
        stride_ot,
        stride_oh,
        ACTIVATION: tl.constexpr,
        GATED: tl.constexpr,
        HAS_B1: tl.constexpr,
        HAS_B2: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_I: tl.constexpr,
        BLOCK_K: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        pid_m = tl.program_id(0)
        pid_i = tl.program_id(1)
        e = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(sorted_ids_ptr + rows)  # t·k + j, or num_pairs for block padding
        row_ok = pair < num_pairs
        token = (pair // top_k).to(tl.int64)
        gate_w = tl.load(gates_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
        offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
        i_ok = offs_i < I

        # GEMM 1: this program's BLOCK_I columns of W1[e] x (and of the up half when gated).
        acc_g = tl.zeros((BLOCK_M, BLOCK_I), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_I), dtype=tl.float32)
        w1_base = w1_ptr + e * stride_w1e
        for k0 in range(0, H, BLOCK_K):
            offs_k = k0 + tl.arange(0, BLOCK_K)
            k_ok = offs_k < H
            x = tl.load(
                x_ptr + token[:, None] * stride_xt + offs_k[None, :] * stride_xh,
                mask=row_ok[:, None] & k_ok[None, :],
                other=0.0,
            )
            w_mask = k_ok[:, None] & i_ok[None, :]
            wg = tl.load(w1_base + offs_i[None, :] * stride_w1n + offs_k[:, None] * stride_w1k, mask=w_mask, other=0.0)
            acc_g += tl.dot(x, wg, input_precision=DOT_PRECISION)
            if GATED:
                wu = tl.load(
                    w1_base + (offs_i[None, :] + I) * stride_w1n + offs_k[:, None] * stride_w1k, mask=w_mask, other=0.0
                )
                acc_u += tl.dot(x, wu, input_precision=DOT_PRECISION)
        if HAS_B1:
            acc_g += tl.load(b1_ptr + e * stride_b1e + offs_i, mask=i_ok, other=0.0).to(tl.float32)[None, :]
            if GATED:
                acc_u += tl.load(b1_ptr + e * stride_b1e + I + offs_i, mask=i_ok, other=0.0).to(tl.float32)[None, :]
        act = _activation(acc_g, ACTIVATION)
        if GATED:
            act = act * acc_u
        # The gate weight is a per-row scalar, so it can scale φ before the second (linear) GEMM.
        act = (act * gate_w[:, None]).to(w2_ptr.dtype.element_ty)

        # GEMM 2 + scatter: add this I-slice's contribution to every output column of each row's token.
        w2_base = w2_ptr + e * stride_w2e
        for n0 in range(0, H, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            n_ok = offs_n < H
            w2 = tl.load(
                w2_base + offs_n[None, :] * stride_w2n + offs_i[:, None] * stride_w2k,
                mask=i_ok[:, None] & n_ok[None, :],
                other=0.0,
            )
            part = tl.dot(act, w2, input_precision=DOT_PRECISION)
            if HAS_B2:
                # Only the first I-slice adds g · b2[e], so the bias is counted once per (token, expert).
                first = (pid_i == 0).to(tl.float32)
                b2 = tl.load(b2_ptr + e * stride_b2e + offs_n, mask=n_ok, other=0.0).to(tl.float32)
                part += (first * gate_w)[:, None] * b2[None, :]
            tl.atomic_add(
                out_ptr + token[:, None] * stride_ot + offs_n[None, :] * stride_oh,
                part,
                mask=row_ok[:, None] & n_ok[None, :],
            )


def align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted pair indices with each expert's run padded to a multiple of `block_m`, and each block's expert.

    Padding slots hold T·k (one past the last pair) so the kernel masks them; empty experts get no block.
    """
    flat = topk_ids.reshape(-1).long()
    n_pairs = flat.numel()
    order = torch.argsort(flat, stable=True)
    expert = flat[order]
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    pad_start = torch.cumsum(padded, 0) - padded
    start = torch.cumsum(counts, 0) - counts
    dest = pad_start[expert] + torch.arange(n_pairs, device=flat.device) - start[expert]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), n_pairs, dtype=torch.int64, device=flat.device)
    sorted_ids[dest] = order
    block_expert = torch.repeat_interleave(torch.arange(num_experts, device=flat.device), padded // block_m)
    return sorted_ids, block_expert


def fused_moe_triton_forward(
    hidden: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    activation: str = "silu",
    gated: bool = True,
    b_gate_up: torch.Tensor | None = None,
    b_down: torch.Tensor | None = None,
    block_m: int | None = None,
    block_i: int | None = None,
) -> torch.Tensor:
    """Launch the fused kernel (no autograd); accumulates in fp32 and returns hidden's dtype."""
    if not triton_available():
        raise RuntimeError("the fused MoE kernel needs triton; pip install triton or set MOELAB_KERNELS=torch")
    if interpreter_on() and hidden.dtype != torch.float32:
        raise ValueError(f"the Triton interpreter runs fp32 only, got {hidden.dtype}; cast to float32 on CPU")
    T, H = hidden.shape
    E, _, I = w_down.shape
    out = torch.zeros(T, H, dtype=torch.float32, device=hidden.device)
    if T == 0:
        return out.to(hidden.dtype)
    interp = interpreter_on()
    # Small tiles keep the interpreter fast. On a GPU, 16-row blocks waste little padding when experts
    # see few tokens; 64-row blocks reuse each weight tile 4x more when they see many.
    block_m = block_m or (16 if interp or topk_ids.numel() < 64 * E else 64)
    block_i = block_i or (32 if interp else 64)
    block_k = 32 if interp else 64
    block_n = 32 if interp else 64
    sorted_ids, block_expert = align_block_size(topk_ids, E, block_m)
    gates = topk_weights.reshape(-1).contiguous()
    dummy = out  # unused pointer when a bias is absent
    b1 = b_gate_up if b_gate_up is not None else dummy
    b2 = b_down if b_down is not None else dummy
    grid = (block_expert.numel(), triton.cdiv(I, block_i))
    _fused_moe_kernel[grid](
        hidden,
        w_gate_up,
        w_down,
        b1,
        b2,
        out,
        sorted_ids,
        block_expert,
        gates,
        topk_ids.numel(),
        H,
        I,
        topk_ids.shape[1],
        hidden.stride(0),
        hidden.stride(1),
        w_gate_up.stride(0),
        w_gate_up.stride(1),
        w_gate_up.stride(2),
        w_down.stride(0),
        w_down.stride(1),
        w_down.stride(2),
        b1.stride(0),
        b2.stride(0),
        out.stride(0),
        out.stride(1),
        ACTIVATION=activation,
        GATED=gated,
        HAS_B1=b_gate_up is not None,
        HAS_B2=b_down is not None,
        DOT_PRECISION="ieee" if hidden.dtype == torch.float32 else "tf32",
        BLOCK_M=block_m,
        BLOCK_I=block_i,
        BLOCK_K=block_k,
        BLOCK_N=block_n,
    )
    LAUNCHES["fused_moe"] += 1
    return out.to(hidden.dtype)


class _FusedMoETriton(torch.autograd.Function):
    """Forward in Triton; backward recomputes through the twin (same semantics, so same gradients)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        hidden: torch.Tensor,
        w_gate_up: torch.Tensor,
        w_down: torch.Tensor,
        topk_weights: torch.Tensor,
        b_gate_up: torch.Tensor | None,
        b_down: torch.Tensor | None,
        topk_ids: torch.Tensor,
        activation: str,
        gated: bool,
    ) -> torch.Tensor:
        ctx.save_for_backward(hidden, w_gate_up, w_down, topk_weights, b_gate_up, b_down, topk_ids)
        ctx.activation, ctx.gated = activation, gated
        return fused_moe_triton_forward(
            hidden,
            w_gate_up,
            w_down,
            topk_ids,
            topk_weights,
            activation=activation,
            gated=gated,
            b_gate_up=b_gate_up,
            b_down=b_down,
        )

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        hidden, w_gate_up, w_down, topk_weights, b_gate_up, b_down, topk_ids = ctx.saved_tensors
        inputs = [hidden, w_gate_up, w_down, topk_weights, b_gate_up, b_down]
        with torch.enable_grad():
            leaves = [
                t.detach().requires_grad_(need) if t is not None else None
                for t, need in zip(inputs, ctx.needs_input_grad)
            ]
            out = fused_moe_torch(
                leaves[0],
                leaves[1],
                leaves[2],
                topk_ids,
                leaves[3],
                activation=ctx.activation,
                gated=ctx.gated,
                b_gate_up=leaves[4],
                b_down=leaves[5],
            )
            wanted = [t for t in leaves if t is not None and t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad_out))
        result = [next(grads) if t is not None and t.requires_grad else None for t in leaves]
        return (*result, None, None, None)


def fused_moe(
    hidden: torch.Tensor,
    w_gate_up: torch.Tensor,
    w_down: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    *,
    activation: str = "silu",
    gated: bool = True,
    b_gate_up: torch.Tensor | None = None,
    b_down: torch.Tensor | None = None,
) -> torch.Tensor:
    """Equation (1) for every token: the Triton kernel on CUDA, the PyTorch twin elsewhere (see dispatch)."""
    if kernel_backend(hidden.device) == "torch":
        return fused_moe_torch(
            hidden,
            w_gate_up,
            w_down,
            topk_ids,
            topk_weights,
            activation=activation,
            gated=gated,
            b_gate_up=b_gate_up,
            b_down=b_down,
        )
    _check_inputs(hidden, w_gate_up, w_down, topk_ids, topk_weights, activation, gated, b_gate_up, b_down)
    return _FusedMoETriton.apply(
        hidden, w_gate_up, w_down, topk_weights, b_gate_up, b_down, topk_ids, activation, gated
    )
