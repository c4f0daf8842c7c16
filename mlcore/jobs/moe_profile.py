"""``moe-profile``: time one MoE layer's forward + backward on a worker, against a per-expert loop.

Builds :class:`mlcore.moe.MoELayer` at the requested size, runs the same routing through the
layer (the fused expert kernel: Triton on CUDA, its PyTorch twin on CPU) and through a per-expert
Python loop, and reports ms per step, tokens/s, the speed-up and the fraction of the device's
measured fp32 matmul peak, with a timing chart, an expert-load chart and a CSV table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart
from mlcore.jobs import Choice, Comparison, Estimate, Int, JobContext, JobSpec, Metric, Seed

if TYPE_CHECKING:
    from mlcore.moe.layer import Activation

ACTIVATIONS: dict[str, tuple[Activation, bool]] = {
    "swiglu": ("silu", True),
    "geglu": ("gelu", True),
    "reglu": ("relu", True),
    "gelu": ("gelu", False),
    "relu": ("relu", False),
}
ROUTERS = ("topk-softmax", "topk-sigmoid", "sparsemax", "prototype")


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    if p["top_k"] > p["experts"]:
        return [("top_k", f"Must not exceed the number of experts ({p['experts']}).")]
    return []


def _estimate(p: dict[str, Any]) -> Estimate:
    rows = 2 * p["intermediate"] if ACTIVATIONS[p["activation"]][1] else p["intermediate"]
    width = p["hidden"] * (rows + p["intermediate"])
    slots = p["tokens"] * (p["experts"] if p["router"] == "sparsemax" else p["top_k"])
    weights = (p["experts"] + p["shared_experts"]) * width * 4 * 2  # parameters and their gradients
    # Saved activations per (token, expert) pair: the gathered input, both projections, the output.
    activations = slots * (2 * p["hidden"] + rows + p["intermediate"]) * 4 * 2
    return Estimate(memory_bytes=weights + activations + p["tokens"] * p["hidden"] * 4 * 4)


def _summarize(scalars: Mapping[str, Any]) -> str:
    return (
        f"MoE layer: {scalars['moe_layer_ms']:.1f} ms per forward + backward step, "
        f"{scalars['speedup_vs_loop']:.2f}× the per-expert loop, {scalars['fraction_of_peak']:.0%} of the matmul peak."
    )


spec = JobSpec(
    name="moe-profile",
    metrics=(
        Metric(
            key="moe_layer_ms",
            label="MoE layer step",
            unit="ms",
            better="lower",
            description="Wall-clock time of one forward and backward pass of the fused MoE layer.",
        ),
        Metric(
            key="loop_ms",
            label="Per-expert loop step",
            unit="ms",
            better="lower",
            description="The same step written as a Python loop over experts (the reference).",
        ),
        Metric(
            key="speedup_vs_loop",
            label="Speed-up over the loop",
            unit="×",
            better="higher",
            description="Loop time divided by the MoE layer's time.",
        ),
        Metric(
            key="fraction_of_peak",
            label="Share of peak",
            unit="%",
            better="higher",
            description="Achieved FLOP/s as a share of the device's measured peak.",
        ),
    ),
    comparison=Comparison.none("One layer is timed against its own per-expert loop; both appear in the metrics."),
    title="Profile an MoE layer",
    summary="Profile an MoE layer on your workers' hardware: forward + backward against a per-expert loop.",
    version=1,
    queue="gpu",
    soft_time_limit=1800,
    time_limit=1900,
    params=(
        Int(name="hidden", default=512, min=8, max=16384, help="Model width H."),
        Int(name="intermediate", default=1024, min=8, max=65536, help="Each expert's hidden width I."),
        Int(name="experts", default=64, min=1, max=1024, help="Routed experts E."),
        Int(name="top_k", default=2, min=1, max=64, help="Experts per token (the sparsemax router picks its own)."),
        Int(name="tokens", default=4096, min=1, max=1_048_576, help="Tokens per step."),
        Choice(name="activation", default="swiglu", options=tuple(ACTIVATIONS), help="Expert MLP."),
        Int(name="shared_experts", default=0, min=0, max=16, help="Shared experts that see every token."),
        Choice(
            name="router",
            default="topk-softmax",
            options=ROUTERS,
            help="Top-k softmax (renormalised), top-k sigmoid, LD-MoLE sparsemax, or ProMoE prototype cosine.",
        ),
        Int(name="repeats", default=5, min=1, max=100, help="Timed steps per implementation (median reported)."),
        Seed(name="seed"),
    ),
    validate=_validate,
    estimate=_estimate,
    guide=(
        "speedup_vs_loop > 1 means the fused layer beats a per-expert Python loop with the same routing. "
        "fraction_of_peak compares the layer's matmul FLOP rate with a plain fp32 matmul on the same device; "
        "a skewed expert-load chart means fewer, larger expert GEMMs."
    ),
    sample={"hidden": 128, "intermediate": 256, "experts": 8, "top_k": 2, "tokens": 512, "repeats": 3, "seed": 0},
    summarize=_summarize,
)


def _build_layer(p: dict[str, Any], device: Any) -> Any:
    from mlcore.moe import LambdaNet, MoELayer, PrototypeRouter, SparsemaxRouter, TopKSigmoidRouter, TopKSoftmaxRouter

    h, e, k = p["hidden"], p["experts"], p["top_k"]
    routers = {
        "topk-softmax": lambda: TopKSoftmaxRouter(h, e, k, device=device),
        "topk-sigmoid": lambda: TopKSigmoidRouter(h, e, k, device=device),
        "sparsemax": lambda: SparsemaxRouter(h, e, LambdaNet([h], device=device), device=device),
        "prototype": lambda: PrototypeRouter(h, e, k, unconditional=False, device=device),
    }
    activation, gated = ACTIVATIONS[p["activation"]]
    return MoELayer(
        h,
        p["intermediate"],
        router=routers[p["router"]](),
        activation=activation,
        gated=gated,
        num_shared_experts=p["shared_experts"],
        device=device,
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.moe.profile import layer_flops, loop_forward, matmul_peak, round_robin, train_step

    device = ctx.device
    torch.manual_seed(params["seed"])
    ctx.progress(0.02, "building the layer")
    layer = _build_layer(params, device)
    x = torch.randn(params["tokens"], params["hidden"], device=device, requires_grad=True)
    probe = torch.randn_like(x)
    with torch.no_grad():
        routing = layer.router(x)
    slots = routing.expert_ids.numel()
    load = routing.expert_counts().tolist()
    ctx.log(f"MoELayer({layer.extra_repr()}), router {layer.router.kind}: {slots} (token, expert) slots on {device}")

    repeats = params["repeats"]

    def after_round(i: int) -> None:
        ctx.raise_if_cancelled()
        ctx.progress(0.1 + 0.8 * i / repeats, "warm-up done" if i == 0 else f"round {i} of {repeats}")

    steps = {"moe_layer": train_step(layer, x, probe), "loop": train_step(lambda t: loop_forward(layer, t), x, probe)}
    seconds = round_robin(steps, repeats, after_round=after_round)
    ctx.progress(0.92, "measuring the matmul peak")
    peak = matmul_peak(device)

    flops = layer_flops(layer, params["tokens"], slots)
    results = {
        "moe_layer_ms": 1e3 * seconds["moe_layer"],
        "loop_ms": 1e3 * seconds["loop"],
        "speedup_vs_loop": seconds["loop"] / seconds["moe_layer"],
        "tokens_per_s": params["tokens"] / seconds["moe_layer"],
        "loop_tokens_per_s": params["tokens"] / seconds["loop"],
        "fraction_of_peak": flops / seconds["moe_layer"] / peak,
        "peak_gflops": peak / 1e9,
        "slots_per_token": slots / params["tokens"],  # computed, including sparsemax's padding
        "experts_per_token": sum(load) / params["tokens"],  # active
    }
    for name, value in results.items():
        ctx.metric(name, value)
    ctx.log(
        f"MoELayer {results['moe_layer_ms']:.1f} ms, loop {results['loop_ms']:.1f} ms "
        f"({results['speedup_vs_loop']:.2f}×), {results['fraction_of_peak']:.1%} "
        f"of {results['peak_gflops']:.0f} GFLOP/s"
    )

    timing = [
        {"implementation": "MoELayer (fused)", "ms": results["moe_layer_ms"]},
        {"implementation": "per-expert loop", "ms": results["loop_ms"]},
    ]
    ctx.chart(
        "timing",
        bar_chart("Forward + backward, ms per step", timing, x="implementation", y="ms", x_title="", y_title="ms"),
    )
    experts = [{"expert": str(e), "slots": n} for e, n in enumerate(load)]
    ctx.chart(
        "expert_load",
        bar_chart("Tokens routed to each expert", experts, x="expert", y="slots", x_title="Expert", y_title="Tokens"),
    )

    table = ctx.workdir / "moe_profile.csv"
    table.write_text(
        "implementation,ms_per_step,tokens_per_s,speedup_vs_loop\n"
        f"moe_layer,{results['moe_layer_ms']:.4f},{results['tokens_per_s']:.1f},{results['speedup_vs_loop']:.4f}\n"
        f"loop,{results['loop_ms']:.4f},{results['loop_tokens_per_s']:.1f},1.0000\n"
    )
    ctx.artifact("moe_profile.csv", table, "text/csv")
    ctx.progress(1.0, "done")
    return results
