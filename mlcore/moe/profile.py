"""Timing helpers for the MoE layer: :class:`~mlcore.moe.layer.MoELayer` forward + backward
timed against per-expert Python loops (the textbook one over per-expert parameters, and one over
the layer's fused weights) and against transformers' ``MixtralSparseMoeBlock`` with each of its
experts implementations (``eager``, ``grouped_mm``, ``batched_mm``), at one config.

Every contender gets the same fp32 weights, the same input, the same thread count and the same
routing (the same router weights; the loops reuse MoELayer's router), and implementations are
timed round-robin so that load from other processes hits them alike. ``bench/moe_layer.py``
builds ``make bench-core``'s tables from these helpers; the ``moe-profile`` job kind uses the timing
helpers and ``loop_forward``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from kernels.fused_moe import ACTIVATIONS, ExpertSort
from mlcore.moe.layer import MoELayer


def per_expert_loop(
    x: Tensor,
    w_gate_up: Sequence[Tensor],
    w_down: Sequence[Tensor],
    ids: Tensor,
    weights: Tensor,
    *,
    activation: str,
    gated: bool,
) -> Tensor:
    """The naive baseline: one Python iteration per expert: mask its (token, slot) pairs, index its
    tokens, two matmuls, ``index_add_`` the gated output (transformers 4.x's Mixtral block)."""
    act = ACTIVATIONS[activation]
    out = torch.zeros_like(x)
    for e, (w1, w2) in enumerate(zip(w_gate_up, w_down)):
        token, slot = torch.where(ids == e)
        if len(token) == 0:
            continue
        h = x[token] @ w1.T
        if gated:
            gate, up = h.chunk(2, dim=-1)
            h = act(gate) * up
        else:
            h = act(h)
        out.index_add_(0, token, (h @ w2.T) * weights[token, slot].unsqueeze(-1).to(x.dtype))
    return out


def _loop(layer: MoELayer, x: Tensor, w_gate_up: Sequence[Tensor], w_down: Sequence[Tensor]) -> Tensor:
    if layer.gate_up_proj_bias is not None:
        raise ValueError("the per-expert loop baseline has no expert biases; profile a layer without bias")
    routing = layer.router(x)
    out = per_expert_loop(
        x,
        w_gate_up,
        w_down,
        routing.expert_ids,
        routing.gate_weights,
        activation=layer.activation,
        gated=layer.gated,
    )
    return out + layer.shared_output(x) if layer.num_shared_experts else out


def loop_forward(layer: MoELayer, x: Tensor) -> Tensor:
    """MoELayer's router, then :func:`per_expert_loop` over the layer's own fused expert weights
    (unbound once, so autograd stacks one gradient per weight instead of a full-size one per expert),
    plus the layer's shared experts if any."""
    return _loop(layer, x, layer.gate_up_proj.unbind(0), layer.down_proj.unbind(0))


def module_list_loop(layer: MoELayer) -> Callable[[Tensor], Tensor]:
    """The textbook MoE: :func:`loop_forward` with every expert's weights its own parameter (what an
    ``nn.ModuleList`` of MLPs holds), copied from ``layer``, so no gradient is ever stacked. Returns
    the forward; the copies are its leaves."""
    w_gate_up = [w.detach().clone().requires_grad_() for w in layer.gate_up_proj.unbind(0)]
    w_down = [w.detach().clone().requires_grad_() for w in layer.down_proj.unbind(0)]
    return lambda x: _loop(layer, x, w_gate_up, w_down)


def layer_flops(layer: MoELayer, tokens: int, slots: int) -> float:
    """Matmul FLOPs of one forward + backward (3× forward) of ``layer`` on ``tokens`` tokens routed
    to ``slots`` (token, expert) pairs in all: router, routed experts, shared experts."""
    rows = layer.gate_up_proj.shape[1]
    forward = 2 * tokens * layer.hidden * layer.num_experts + 2 * slots * (rows + layer.intermediate) * layer.hidden
    if layer.shared_gate_up_proj is not None:
        forward += 2 * tokens * (layer.shared_gate_up_proj.shape[1] + layer.shared_down_proj.shape[2]) * layer.hidden
    return 3.0 * forward


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def graph_leaves(loss: Tensor) -> list[Tensor]:
    """The leaf tensors a backward from ``loss`` accumulates gradients into (its AccumulateGrad nodes)."""
    leaves, seen, stack = [], set(), [loss.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if hasattr(node, "variable"):
            leaves.append(node.variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return leaves


def train_step(forward: Callable[[Tensor], Tensor], x: Tensor, probe: Tensor) -> Callable[[], None]:
    """A closure running forward + backward of ⟨forward(x), probe⟩, finished on the device.

    Gradients are reset to None before each step, as ``optimizer.zero_grad()`` does, so no step
    pays for adding into the previous step's gradients (for 64 experts at ``bench.moe_layer.CONFIG`` that
    addition streams ~1 GB and would be ~10% of every contender's step)."""
    leaves: list[Tensor] = []

    def step() -> None:
        for leaf in leaves:
            leaf.grad = None
        loss = (forward(x) * probe).sum()
        if not leaves:
            leaves.extend(graph_leaves(loss))
        loss.backward()
        synchronize(x.device)

    return step


def expert_matmuls(layer: MoELayer, x: Tensor) -> Callable[[], None]:
    """The floor of one training step: exactly the expert GEMMs of forward + backward of ``layer``
    on ``x`` under its router's routing, per expert, in a training step's order (every expert's
    forward, then every expert's backward), into preallocated rows, and nothing else: no router,
    gather, activation, scatter or autograd.

    Every contender in :func:`measure` runs these very GEMMs (transformers' ``grouped_mm`` on a
    CPU is the same per-expert matmul loop, bit for bit), so no implementation on this machine's
    GEMM library beats the loop by more than loop / floor, whatever it does around them."""
    if layer.num_shared_experts:
        raise ValueError("the GEMM floor covers routed experts only; profile a layer without shared experts")
    with torch.no_grad():
        sort = ExpertSort(layer.router(x).expert_ids, layer.num_experts)
    w_gate_up, w_down = layer.gate_up_proj.detach(), layer.down_proj.detach()
    rows, width, inter = sort.token.shape[0], w_gate_up.shape[1], layer.intermediate
    xs = x.detach().index_select(0, sort.token)

    def step() -> None:
        h1, a, y = xs.new_empty(rows, width), xs.new_empty(rows, inter), xs.new_empty(rows, layer.hidden)
        for e, s, t in sort.segments:
            torch.mm(xs[s:t], w_gate_up[e].t(), out=h1[s:t])
            torch.mm(a[s:t], w_down[e].t(), out=y[s:t])
        grad_w_gate_up, grad_w_down = torch.empty_like(w_gate_up), torch.empty_like(w_down)
        grad_a, grad_x = torch.empty_like(a), torch.empty_like(xs)
        for e, s, t in sort.segments:
            torch.mm(y[s:t].t(), a[s:t], out=grad_w_down[e])
            torch.mm(y[s:t], w_down[e], out=grad_a[s:t])
            torch.mm(h1[s:t].t(), xs[s:t], out=grad_w_gate_up[e])
            torch.mm(h1[s:t], w_gate_up[e], out=grad_x[s:t])
        synchronize(x.device)

    return step


#: glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(limit: int = 2**30) -> bool:
    """Have glibc's malloc serve blocks up to ``limit`` bytes from its heap and keep what is freed
    (what ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` do, and PyTorch's CPU tuning guide
    gets from jemalloc or tcmalloc). By default every tensor above 32 MiB is a fresh ``mmap``
    whose pages the kernel faults in and zeroes on first touch, on every training step: for a
    64-expert layer's activations and weight gradients (~0.6 GB a step) that is a quarter of the
    step. Process-wide, so it helps every contender of a benchmark alike. False where the C library
    has no ``mallopt`` (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(limit)) and mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)))


def cpu_clock() -> Callable[[], float]:
    """The clock for CPU benchmarks: this process's CPU time when torch runs one thread, which other
    processes' load on a shared machine leaves alone; wall time otherwise (CPU time would add up
    the threads)."""
    return time.process_time if torch.get_num_threads() == 1 else time.perf_counter


def _clock_name(clock: Callable[[], float]) -> str:
    return "process CPU time" if clock is time.process_time else "wall time"


def round_robin(
    steps: dict[str, Callable[[], None]],
    rounds: int,
    *,
    warmup: bool = True,
    after_round: Callable[[int], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    samples: dict[str, list[float]] | None = None,
) -> dict[str, float]:
    """Median seconds of each step, timing one of each per round so load drifts hit all alike.
    ``after_round(i)`` runs after the warm-up (i = 0) and after each timed round (i = 1..rounds);
    ``samples``, if given, receives every round's seconds per step (for per-round ratios)."""
    if warmup:
        for step in steps.values():
            step()
    if after_round:
        after_round(0)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for i in range(rounds):
        for name, step in steps.items():
            start = clock()
            step()
            times[name].append(clock() - start)
        if after_round:
            after_round(i + 1)
    if samples is not None:
        samples.update(times)
    return {name: statistics.median(values) for name, values in times.items()}


def matmul_peak(
    device: torch.device, n: int | None = None, repeats: int = 5, clock: Callable[[], float] = time.perf_counter
) -> float:
    """Measured fp32 matmul FLOP/s on ``device`` (the denominator of 'fraction of peak'), n×n
    matmuls (1024 on a CPU, 2048 on a GPU), timed with ``clock``."""
    n = n or (1024 if device.type == "cpu" else 2048)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    step = lambda: (a @ b, synchronize(device))  # noqa: E731
    return 2 * n**3 / round_robin({"mm": step}, repeats, clock=clock)["mm"]
