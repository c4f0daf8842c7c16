"""Compile the Triton kernels for a Hopper GPU (sm_90: H100, H200) on a machine without one.

Run `python -m tests.kernels.compile_for_gpu` with TRITON_INTERPRET unset. The interpreter runs the
kernels' Python, not Triton's compiler; this catches what only the compiler rejects (types, layouts,
control flow) where no GPU is available.
"""

from __future__ import annotations

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.fused_moe import _fused_moe_kernel
from kernels.group_attention import _group_attention_kernel

HOPPER = GPUTarget("cuda", 90, 32)


def signature(kernel: triton.JITFunction, pointers: dict[str, str], constexprs: dict[str, object]) -> dict[str, str]:
    """Every runtime argument: the given pointer/float types, i32 for the rest (sizes and strides)."""
    return {name: pointers.get(name, "i32") for name in kernel.arg_names if name not in constexprs}


def compile_all() -> list[str]:
    compiled = []
    moe_pointers = {name: "*bf16" for name in ("x_ptr", "w1_ptr", "w2_ptr", "b1_ptr", "b2_ptr", "gates_ptr")}
    moe_pointers |= {"out_ptr": "*fp32", "sorted_ids_ptr": "*i64", "block_expert_ptr": "*i64"}
    for activation, gated, bias in (("silu", True, False), ("gelu", False, True)):
        constexprs = {
            "ACTIVATION": activation,
            "GATED": gated,
            "HAS_B1": bias,
            "HAS_B2": bias,
            "DOT_PRECISION": "tf32",
            "BLOCK_M": 64,
            "BLOCK_I": 64,
            "BLOCK_K": 64,
            "BLOCK_N": 64,
        }
        source = ASTSource(_fused_moe_kernel, signature(_fused_moe_kernel, moe_pointers, constexprs), constexprs)
        triton.compile(source, target=HOPPER)
        compiled.append(f"fused_moe {activation} gated={gated} bias={bias}")
    attention_pointers = {name: "*bf16" for name in ("q_ptr", "k_ptr", "v_ptr", "o_ptr")}
    attention_pointers |= {
        name: "*i64"
        for name in ("perm_ptr", "blk_batch_ptr", "blk_q_start_ptr", "blk_seg_start_ptr", "blk_seg_end_ptr")
    }
    attention_pointers["scale"] = "fp32"
    for causal, window in ((False, False), (True, True)):
        constexprs = {
            "CAUSAL": causal,
            "HAS_WINDOW": window,
            "DOT_PRECISION": "tf32",
            "BLOCK_M": 64,
            "BLOCK_N": 64,
            "BLOCK_D": 128,
        }
        kernel = _group_attention_kernel
        triton.compile(ASTSource(kernel, signature(kernel, attention_pointers, constexprs), constexprs), target=HOPPER)
        compiled.append(f"group_attention causal={causal} window={window}")
    return compiled


if __name__ == "__main__":
    for line in compile_all():
        print("compiled", line)
