"""GPU benchmark of every kernel: correctness against its twin in bf16, then times and TFLOP/s.

Run through `bash bench/kernels_gpu.sh` on a CUDA machine; it needs only torch, triton and numpy.
Each section prints one table that ends with the fraction of the machine's measured bf16 matmul
peak, so a reader sees how far each implementation is from the limit. `--dry-run` runs the same
code on tiny fp32 shapes on the CPU under TRITON_INTERPRET=1 (timings there mean nothing).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F

from kernels.fused_moe import ACTIVATIONS, fused_moe_torch, fused_moe_triton_forward
from kernels.group_attention import group_attention_torch, group_attention_triton_forward
from kernels.timing import time_ms

# bf16 output against an fp32 computation of the same thing: ~3 significant digits survive.
BF16_TOLERANCE = 2e-2
FP32_TOLERANCE = 1e-4


@dataclass
class Row:
    case: str
    impl: str
    ms: float
    flops: float
    error: float | None = None

    def cells(self, peak: float) -> list[str]:
        tflops = self.flops / (self.ms * 1e-3) / 1e12
        error = "" if self.error is None else f"{self.error:.1e}"
        return [self.case, self.impl, f"{self.ms:.3f}", f"{tflops:.1f}", f"{100 * tflops * 1e12 / peak:.1f}%", error]


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """The machine's measured dense matmul throughput in FLOP/s: the denominator of '% of peak'."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / (time_ms(lambda: a @ b, device, repeats) * 1e-3)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).abs().max() / expected.float().abs().max().clamp_min(1e-12))


@dataclass
class Section:
    """One kernel's table: checks each implementation against the fp32 twin, times it, collects rows."""

    kernel: str
    device: torch.device
    dtype: torch.dtype
    repeats: int
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def measure(
        self, case: str, impl: str, fn: Callable[[], torch.Tensor], flops: float, expected: torch.Tensor | None
    ) -> None:
        tolerance = BF16_TOLERANCE if self.dtype == torch.bfloat16 else FP32_TOLERANCE
        try:
            with torch.no_grad():
                error = relative_error(fn(), expected) if expected is not None else None
                ms = time_ms(fn, self.device, self.repeats)
        except Exception as exc:  # one broken implementation must not hide the others' numbers
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            self.failures.append(f"{self.kernel} {case} {impl}: {type(exc).__name__}: {first_line}")
            self.rows.append(Row(case, impl, float("nan"), flops))
            return
        self.rows.append(Row(case, impl, ms, flops, error))
        if error is not None and error > tolerance:
            self.failures.append(f"{self.kernel} {case} {impl}: relative error {error:.2e} above {tolerance:.0e}")


def grouped_mm() -> Callable[..., torch.Tensor] | None:
    """torch's grouped GEMM where this build has one: F.grouped_mm (≥ 2.10) or torch._grouped_mm."""
    return getattr(F, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)


def moe_per_expert_loop(hidden, w_gate_up, w_down, topk_ids, topk_weights) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The textbook baseline (transformers' 'eager' experts): find each expert's tokens, run its MLP."""
    out = torch.zeros_like(hidden)
    for e in range(w_down.shape[0]):
        token, slot = torch.where(topk_ids == e)
        if token.numel() == 0:
            continue
        gate, up = F.linear(hidden[token], w_gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, w_down[e]) * topk_weights[token, slot, None]
        out.index_add_(0, token, y.to(hidden.dtype))
    return out


def moe_grouped_mm(hidden, w_gate_up, w_down, topk_ids, topk_weights) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """transformers' 'grouped_mm' experts: sort by expert, two grouped GEMMs with cumulative offsets."""
    mm = grouped_mm()
    assert mm is not None
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    offsets = torch.cumsum(torch.bincount(flat, minlength=w_down.shape[0]), 0).to(torch.int32)
    h1 = mm(hidden[order // topk_ids.shape[1]], w_gate_up.transpose(1, 2), offs=offsets)
    gate, up = h1.chunk(2, dim=-1)
    y = mm(F.silu(gate) * up, w_down.transpose(1, 2), offs=offsets)
    y = y * topk_weights.reshape(-1)[order, None].to(y.dtype)
    return torch.zeros_like(hidden).index_add_(0, order // topk_ids.shape[1], y)


def moe_section(device: torch.device, dtype: torch.dtype, dry: bool, repeats: int) -> Section:
    # (name, tokens, hidden, intermediate, experts, top-k)
    cases = (
        [("tiny", 13, 32, 32, 6, 2), ("tiny-E>T", 3, 32, 16, 9, 3)]
        if dry
        else [
            ("mixtral-8x7b", 4096, 4096, 14336, 8, 2),
            ("qwen3-30b-a3b", 4096, 2048, 768, 128, 8),
            ("decode-64", 64, 4096, 14336, 8, 2),
        ]
    )
    section = Section("fused_moe", device, dtype, repeats)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, T, H, I, E, k in cases:
        hidden = torch.randn(T, H, device=device, generator=gen)
        w_gate_up = torch.randn(E, 2 * I, H, device=device, generator=gen) / H**0.5
        w_down = torch.randn(E, H, I, device=device, generator=gen) / I**0.5
        topk_weights, topk_ids = torch.randn(T, E, device=device, generator=gen).softmax(-1).topk(k)
        expected = fused_moe_torch(hidden, w_gate_up, w_down, topk_ids, topk_weights)
        args = (hidden.to(dtype), w_gate_up.to(dtype), w_down.to(dtype), topk_ids, topk_weights.to(dtype))
        flops = 2.0 * T * k * (2 * I * H + H * I)
        case = f"{name} T={T} H={H} I={I} E={E} k={k}"
        impls: dict[str, Callable[[], torch.Tensor]] = {
            "triton fused": partial(fused_moe_triton_forward, *args),
            "twin (sorted, per-expert mm)": partial(fused_moe_torch, *args),
            "torch per-expert loop": partial(moe_per_expert_loop, *args),
        }
        if device.type == "cuda" and grouped_mm() is not None:
            impls["torch grouped_mm"] = partial(moe_grouped_mm, *args)
        for impl, fn in impls.items():
            section.measure(case, impl, fn, flops, expected)
        del hidden, w_gate_up, w_down, expected, args
    return section


def attention_section(device: torch.device, dtype: torch.dtype, dry: bool, repeats: int) -> Section:
    # (name, batch, heads, tokens, head dim, groups, causal)
    cases = (
        [("tiny", 1, 2, 40, 16, 3, False), ("tiny-causal", 2, 1, 33, 16, 4, True)]
        if dry
        else [
            ("moga-32k", 1, 16, 32768, 128, 8, False),
            ("moga-32k-causal", 1, 16, 32768, 128, 8, True),
            ("moga-64k-G16", 1, 8, 65536, 128, 16, False),
        ]
    )
    section = Section("group_attention", device, dtype, repeats)
    gen = torch.Generator(device=device).manual_seed(0)
    for name, B, heads, N, d, G, causal in cases:
        q, k, v = (torch.randn(B, heads, N, d, device=device, generator=gen) for _ in range(3))
        groups = torch.stack([torch.randperm(N, device=device, generator=gen) % G for _ in range(B)])
        expected = group_attention_torch(q, k, v, groups, causal=causal)
        sizes = torch.stack([torch.bincount(g, minlength=G) for g in groups]).double()
        pairs = float((sizes * (sizes + 1) / 2).sum() if causal else (sizes**2).sum())
        full_pairs = B * (N * (N + 1) / 2 if causal else N * N)
        group_flops = 4.0 * pairs * d * heads
        case = f"{name} B={B} h={heads} N={N} d={d} G={G}"
        qb, kb, vb = q.to(dtype), k.to(dtype), v.to(dtype)
        impls: dict[str, tuple[Callable[[], torch.Tensor], float, bool]] = {
            "triton group attention": (
                partial(group_attention_triton_forward, qb, kb, vb, groups, causal=causal),
                group_flops,
                True,
            ),
            "twin (sorted, SDPA per group)": (
                partial(group_attention_torch, qb, kb, vb, groups, causal=causal),
                group_flops,
                True,
            ),
            "full SDPA (all N², no groups)": (
                partial(F.scaled_dot_product_attention, qb, kb, vb, is_causal=causal),
                4.0 * full_pairs * d * heads,
                False,
            ),
        }
        for impl, (fn, flops, checked) in impls.items():
            section.measure(case, impl, fn, flops, expected if checked else None)
        del q, k, v, qb, kb, vb, expected
    return section


def markdown(title: str, rows: list[Row], peak: float) -> str:
    head = ["case", "implementation", "ms", "TFLOP/s", "% of matmul peak", "max rel. error"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row.cells(peak)) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny fp32 shapes on the CPU (TRITON_INTERPRET=1)")
    options = parser.parse_args(argv)
    dry = options.dry_run
    if not dry and not torch.cuda.is_available():
        print("no CUDA device: run on a GPU machine, or pass --dry-run (with TRITON_INTERPRET=1) to test the script")
        return 2
    device = torch.device("cpu" if dry else "cuda")
    dtype = torch.float32 if dry else torch.bfloat16
    repeats = 1 if dry else 20
    peak = matmul_peak(device, dtype, 256 if dry else 8192, repeats)
    name = "CPU (dry run)" if dry else torch.cuda.get_device_name()
    print(f"# Kernel benchmark on {name}: {dtype}, measured matmul peak {peak / 1e12:.1f} TFLOP/s\n")
    failures: list[str] = []
    for title, run_section in (
        (f"Fused MoE ({', '.join(ACTIVATIONS)} supported; silu gated timed)", moe_section),
        ("Group attention (MoGA), balanced random groups", attention_section),
    ):
        section = run_section(device, dtype, dry, repeats)
        failures += section.failures
        print(markdown(title, section.rows, peak) + "\n", flush=True)
    for failure in failures:
        print("FAIL", failure)
    print("all kernels match their twins" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
