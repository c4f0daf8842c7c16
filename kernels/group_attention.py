"""Group attention (MoGA, arXiv 2510.18692, §3): softmax attention only among tokens of the same group.

For a token i in group g(i),

    o_i = Σ_{j: g(j)=g(i), mask(i,j)} softmax_j(q_i·k_j · scale) v_j                                (1)

with mask(i, j) = [j ≤ i] when causal and [|i − j| < window] when a window is given (original
positions). Both implementations stable-sort the tokens of each sequence by group, which makes every
group a contiguous segment whose tokens keep their original order, so the causal mask inside a
segment is the ordinary lower triangle. The cost is Σ_g n_g² instead of N².

The PyTorch twin runs SDPA on each non-empty segment and inverse-permutes the outputs. The Triton
kernel is a variable-length flash attention over the sorted segments (online softmax, Milakov &
Gimelshein 2018): one program per (BLOCK_M query rows of one segment, head), reading rows of q, k
and v through the permutation by index offsets and writing its outputs straight back to their
original rows, so neither the permutation nor its inverse is materialised.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.dispatch import LAUNCHES, interpreter_on, kernel_backend, triton_available


def _check_inputs(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, group_ids: torch.Tensor, window: int | None
) -> None:
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(
            f"q, k, v must all be [B, heads, N, d] of one shape, got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    B, _, N, _ = q.shape
    if tuple(group_ids.shape) != (B, N):
        raise ValueError(f"group_ids must be [B={B}, N={N}], got {tuple(group_ids.shape)}")
    if group_ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"group_ids must be an integer tensor, got {group_ids.dtype}")
    if group_ids.numel() and int(group_ids.min()) < 0:
        raise ValueError("group_ids must be non-negative; use 0..G-1 for G groups")
    if window is not None and window < 1:
        raise ValueError(f"window must be a positive number of tokens, got {window}")


class GroupSort:
    """Per sequence, the tokens stable-sorted by group: `perm[b, s]` is the original position of sorted row s."""

    def __init__(self, group_ids: torch.Tensor) -> None:
        B = group_ids.shape[0]
        ids = group_ids.long()
        self.num_groups = int(ids.max()) + 1 if ids.numel() else 0
        self.perm = torch.argsort(ids, dim=1, stable=True)
        self.counts = torch.zeros(B, self.num_groups, dtype=torch.int64, device=ids.device)
        self.counts.scatter_add_(1, ids, torch.ones_like(ids))


def _segment_mask(pos: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
    """Boolean [n, n] mask (True = attend) for one segment's original positions `pos` (increasing)."""
    diff = pos[:, None] - pos[None, :]
    mask = diff.abs() < window if window is not None else torch.ones_like(diff, dtype=torch.bool)
    return mask & (diff >= 0) if causal else mask


def group_attention_torch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The PyTorch twin: equation (1) as SDPA over each contiguous group segment of the sorted tokens."""
    _check_inputs(q, k, v, group_ids, window)
    sort = GroupSort(group_ids)
    outputs = []
    for b in range(q.shape[0]):
        perm = sort.perm[b]
        sizes = sort.counts[b].tolist()
        # Segments stay 4-D [1, heads, n, d]: SDPA's CPU flash path takes 4-D inputs only (3-D is ~3x slower).
        qs, ks, vs = (t[b : b + 1].index_select(2, perm) for t in (q, k, v))
        positions = perm.split(sizes)
        segments = []
        # torch.split's backward concatenates, so gradients never pay for full-size zero tensors per segment.
        for qg, kg, vg, pos in zip(qs.split(sizes, 2), ks.split(sizes, 2), vs.split(sizes, 2), positions):
            if pos.numel() == 0:
                continue
            if window is None:
                segments.append(F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal, scale=scale))
            else:
                mask = _segment_mask(pos, causal, window)
                segments.append(F.scaled_dot_product_attention(qg, kg, vg, attn_mask=mask, scale=scale))
        sorted_out = torch.cat(segments, dim=2) if segments else qs
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel(), device=perm.device)
        outputs.append(sorted_out.index_select(2, inverse))
    return torch.cat(outputs) if outputs else q.clone()


def group_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Equation (1) as dense attention with an explicit [B, N, N] mask; O(N²), for tests only."""
    N = q.shape[2]
    same = group_ids[:, :, None] == group_ids[:, None, :]
    mask = same & _segment_mask(torch.arange(N, device=q.device), causal, window)[None]
    scores = torch.einsum("bhid,bhjd->bhij", q, k) * (scale if scale is not None else q.shape[-1] ** -0.5)
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    return torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)


# ---------------------------------------------------------------------------------------------- Triton

if triton_available():
    import triton
    import triton.language as tl

    @triton.jit
    def _group_attention_kernel(
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        perm_ptr,
        blk_batch_ptr,
        blk_q_start_ptr,
        blk_seg_start_ptr,
        blk_seg_end_ptr,
        N,
        D,
        scale,
        window,
        stride_qb,
        stride_qh,
        stride_qn,
        stride_qd,
        stride_kb,
        stride_kh,
        stride_kn,
        stride_kd,
        stride_vb,
        stride_vh,
        stride_vn,
        stride_vd,
        stride_ob,
        stride_oh,
        stride_on,
        stride_od,
        CAUSAL: tl.constexpr,
        HAS_WINDOW: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):
        blk = tl.program_id(0)
        h = tl.program_id(1).to(tl.int64)
        b = tl.load(blk_batch_ptr + blk).to(tl.int64)
        q0 = tl.load(blk_q_start_ptr + blk).to(tl.int32)
        s0 = tl.load(blk_seg_start_ptr + blk).to(tl.int32)
        s1 = tl.load(blk_seg_end_ptr + blk).to(tl.int32)

        rows = q0 + tl.arange(0, BLOCK_M)
        m_ok = rows < s1
        pos_m = tl.load(perm_ptr + b * N + rows, mask=m_ok, other=0)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < D
        q = tl.load(
            q_ptr + b * stride_qb + h * stride_qh + pos_m[:, None] * stride_qn + offs_d[None, :] * stride_qd,
            mask=m_ok[:, None] & d_ok[None, :],
            other=0.0,
        )

        m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        # Sorted order preserves original order inside a segment, so causal keys end at this block's last row.
        kv_end = s1
        if CAUSAL:
            kv_end = tl.minimum(s1, q0 + BLOCK_M)
        for n0 in range(s0, kv_end, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            n_ok = cols < kv_end
            pos_n = tl.load(perm_ptr + b * N + cols, mask=n_ok, other=0)
            kt = tl.load(
                k_ptr + b * stride_kb + h * stride_kh + pos_n[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                mask=n_ok[None, :] & d_ok[:, None],
                other=0.0,
            )
            s = tl.dot(q, kt, input_precision=DOT_PRECISION) * scale
            valid = n_ok[None, :] & m_ok[:, None]
            if CAUSAL:
                valid = valid & (pos_n[None, :] <= pos_m[:, None])
            if HAS_WINDOW:
                gap = pos_m[:, None] - pos_n[None, :]
                valid = valid & (gap < window) & (gap > -window)
            s = tl.where(valid, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row that has seen no valid key yet keeps m = -inf; shift by 0 instead, to avoid inf - inf.
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(s - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            v = tl.load(
                v_ptr + b * stride_vb + h * stride_vh + pos_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=n_ok[:, None] & d_ok[None, :],
                other=0.0,
            )
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(
            o_ptr + b * stride_ob + h * stride_oh + pos_m[:, None] * stride_on + offs_d[None, :] * stride_od,
            out.to(o_ptr.dtype.element_ty),
            mask=m_ok[:, None] & d_ok[None, :],
        )


def segment_blocks(sort: GroupSort, block_m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The work list: for every BLOCK_M query rows of every non-empty segment, (batch, q start, seg start, seg end)."""
    B, G = sort.counts.shape
    device = sort.counts.device
    lengths = sort.counts.reshape(-1)
    starts = (torch.cumsum(sort.counts, 1) - sort.counts).reshape(-1)
    n_blocks = (lengths + block_m - 1) // block_m
    segment = torch.repeat_interleave(torch.arange(B * G, device=device), n_blocks)
    first_block = torch.cumsum(n_blocks, 0) - n_blocks
    within = torch.arange(segment.numel(), device=device) - first_block[segment]
    seg_start = starts[segment]
    return segment // G, seg_start + within * block_m, seg_start, seg_start + lengths[segment]


def group_attention_triton_forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Launch the variable-length group attention kernel (no autograd)."""
    if not triton_available():
        raise RuntimeError("the group attention kernel needs triton; pip install triton or set MOELAB_KERNELS=torch")
    if interpreter_on() and q.dtype != torch.float32:
        raise ValueError(f"the Triton interpreter runs fp32 only, got {q.dtype}; cast to float32 on CPU")
    _, heads, N, D = q.shape
    out = torch.empty_like(q)
    if q.numel() == 0:
        return out
    sort = GroupSort(group_ids)
    interp = interpreter_on()
    block_m = 16 if interp else 64
    block_n = 16 if interp else 64
    blk_batch, blk_q_start, blk_seg_start, blk_seg_end = segment_blocks(sort, block_m)
    perm = sort.perm.contiguous()
    grid = (blk_batch.numel(), heads)
    _group_attention_kernel[grid](
        q,
        k,
        v,
        out,
        perm,
        blk_batch,
        blk_q_start,
        blk_seg_start,
        blk_seg_end,
        N,
        D,
        scale if scale is not None else D**-0.5,
        window if window is not None else N + 1,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        CAUSAL=causal,
        HAS_WINDOW=window is not None,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=max(16, triton.next_power_of_2(D)),
    )
    LAUNCHES["group_attention"] += 1
    return out


class _GroupAttentionTriton(torch.autograd.Function):
    """Forward in Triton; backward recomputes through the twin (same semantics, so same gradients)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        group_ids: torch.Tensor,
        causal: bool,
        window: int | None,
        scale: float | None,
    ) -> torch.Tensor:
        ctx.save_for_backward(q, k, v, group_ids)
        ctx.options = {"causal": causal, "window": window, "scale": scale}
        return group_attention_triton_forward(q, k, v, group_ids, **ctx.options)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, group_ids = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = group_attention_torch(*leaves, group_ids, **ctx.options)
            grads = torch.autograd.grad(out, leaves, grad_out)
        return (*grads, None, None, None, None)


def group_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Equation (1) in the original token order: the Triton kernel on CUDA, the twin elsewhere (see dispatch)."""
    if kernel_backend(q.device) == "torch":
        return group_attention_torch(q, k, v, group_ids, causal=causal, window=window, scale=scale)
    _check_inputs(q, k, v, group_ids, window)
    return _GroupAttentionTriton.apply(q, k, v, group_ids, causal, window, scale)
