"""``moe-planner``: predict what an MoE configuration buys with the Efficiency Leverage law.

Takes the law's constants from a fit to your own runs (a CSV, schema in
:mod:`mlcore.analysis.runs`; an uploaded runs table is always fitted), from the project's bundled
toy-scale fit (``make bench-el``), or as numbers you supply, and reports for a proposed
architecture: EL, the loss-matched dense model,
the compute saving, parameters and bytes per device, and serving with experts offloaded (device
memory, transfer per token and decode speed, from the LRU and SCH hit rates of a
``routing-analysis`` report, :mod:`mlcore.analysis.plan`); with charts of EL against the
activation ratio, the granularity and the compute budget.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.jobs import Bool, Choice, Comparison, File, Float, Int, JobContext, JobError, JobSpec, Metric, Seed
from mlcore.jobs.binding import bind
from mlcore.jobs.spec import InputCheck

if TYPE_CHECKING:
    from mlcore.analysis.el import ELConstants
    from mlcore.analysis.plan import Architecture, Serving

BUNDLED = Path(__file__).resolve().parents[1] / "analysis" / "el_constants.json"
RUNS_HELP = (
    "CSV, one row per training run with columns name, kind (dense|moe), total_params, active_params, experts, "
    "top_k, shared_experts, granularity (2·d_model/d_expert), tokens, flops, loss (held-out nats/token), and an "
    "optional budget label. Needs dense runs at ≥ 2 budgets and MoE runs."
)
#: The parameters of the law (its constants and their fit), of the proposed model and of its serving:
#: each config skips the others' (``bind`` checks that every parameter lands somewhere).
LAW_PARAMS = (
    "constants",
    "a",
    "d",
    "beta",
    "gamma",
    "input",
    "x_max",
    "huber_delta",
    "count_shared",
    "resamples",
    "seed",
)
ARCHITECTURE_PARAMS = ("d_model", "layers", "experts", "top_k", "shared_experts", "d_expert", "tokens")
SERVING_PARAMS = (
    "bytes_per_param",
    "devices",
    "cache_multiple",
    "cache_hit_rate",
    "link_gb_per_s",
    "memory_gb_per_s",
)


USER_CONSTANTS = ("a", "d", "beta", "gamma")
#: ``cache_hit_rate``'s default: the typed rate that a routing report's measured rates replace.
TYPED_HIT_RATE = 0.5


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["top_k"] > p["experts"]:
        errors.append(("top_k", f"Must not exceed the number of experts ({p['experts']})."))
    if p["constants"] == "user" and p["a"] == 0:
        errors.append(("a", "Give the law's constants (a at least) or pick another source of constants."))
    if p["constants"] != "user":
        errors += [
            (name, f"Used only with constants=user (now {p['constants']}); pick user or leave it at 0.")
            for name in USER_CONSTANTS
            if p[name] != 0
        ]
    return errors


def _check_inputs(p: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """An uploaded runs table is fitted: refuse a constants choice that would leave it unread."""
    errors = []
    if "runs" in uploaded and p["constants"] in ("bundled", "user"):
        errors.append(
            (
                "constants",
                f"You uploaded a runs table, but constants={p['constants']} would not read it. Pick auto or "
                "fit-runs to fit the law to your runs, or remove the upload.",
            )
        )
    if "runs" not in uploaded and p["constants"] == "fit-runs":
        errors.append(("runs", "constants=fit-runs fits the law to your runs: upload the runs table."))
    if "routing_report" in uploaded and p["cache_hit_rate"] != TYPED_HIT_RATE:
        errors.append(
            (
                "cache_hit_rate",
                "The routing report's measured hit rates replace the typed one; leave it at "
                f"{TYPED_HIT_RATE:g} or remove the report.",
            )
        )
    return InputCheck(errors=errors)


def _summarize(scalars: Mapping[str, Any]) -> str:
    line = (
        f"Efficiency leverage {scalars['efficiency_leverage']:.2f}×: the MoE reaches the loss of a dense model "
        f"of ≈{scalars['dense_equivalent_params'] / 1e6:.3g}M parameters with "
        f"{scalars['compute_saving']:.0%} less training compute."
    )
    if scalars.get("routing_report_shape_mismatch"):
        line += (
            f" Warning: the routing report is from a model with {scalars['routing_report_experts']:.0f} experts, "
            f"top-{scalars['routing_report_top_k']:.0f}, not the planned shape; its hit rates are only a rough guide."
        )
    return line


spec = JobSpec(
    name="moe-planner",
    metrics=(
        Metric(
            key="efficiency_leverage",
            label="Efficiency leverage",
            unit="×",
            better="higher",
            description="Dense compute an MoE of this shape matches, per unit of its own compute.",
        ),
        Metric(
            key="compute_saving",
            label="Compute saving",
            unit="%",
            better="higher",
            description="Share of training compute saved against the dense model of equal quality.",
        ),
    ),
    comparison=Comparison.none("A plan from a fitted scaling law; its charts hold the candidate shapes."),
    title="Plan an MoE configuration (Efficiency Leverage)",
    summary="Predict an MoE's compute leverage over dense models, its dense equivalent, memory and offload traffic.",
    version=3,
    queue="cpu",
    soft_time_limit=900,
    time_limit=960,
    params=(
        Choice(
            name="constants",
            default="auto",
            options=("auto", "bundled", "fit-runs", "user"),
            help="Law constants: auto fits the runs you upload and otherwise takes the bundled toy-scale fit "
            "(make bench-el); bundled, fit-runs and user (the four numbers below) pick one source.",
        ),
        File(name="runs", formats=("csv", "txt"), max_bytes=20 * 2**20, help=RUNS_HELP),
        Float(name="a", default=0.0, min=-100, max=100, help="User constants: α = a + d·ln C."),
        Float(name="d", default=0.0, min=-10, max=10, help="User constants: compute slope d of α."),
        Float(name="beta", default=0.0, min=-100, max=100, help="User constants: β (ln G term)."),
        Float(name="gamma", default=0.0, min=-100, max=100, help="User constants: γ ((ln G)² term)."),
        Choice(
            name="input",
            default="sparsity",
            options=("sparsity", "activation"),
            help="What the saturating transform acts on: the sparsity 1/A (EL grows as A falls) or A itself.",
        ),
        Bool(name="count_shared", default=False, help="Count shared experts in the activation ratio A."),
        Float(name="x_max", default=1024.0, min=2, max=1e6, help="Saturation point of the transform (sparsity)."),
        Float(name="huber_delta", default=0.05, min=1e-4, max=10, help="Huber threshold on ln EL residuals."),
        Int(name="d_model", default=1024, min=8, max=65536, help="Proposed model width."),
        Int(name="layers", default=16, min=1, max=512, help="Proposed MoE layers."),
        Int(name="experts", default=64, min=1, max=4096, help="Routed experts E."),
        Int(name="top_k", default=4, min=1, max=256, help="Routed experts per token k."),
        Int(name="shared_experts", default=0, min=0, max=64, help="Shared experts."),
        Int(
            name="d_expert", default=512, min=1, max=65536, help="Each expert's hidden width (G = 2·d_model/d_expert)."
        ),
        Float(name="tokens", default=1e11, min=1e3, max=1e15, help="Training tokens."),
        Choice(name="bytes_per_param", default="2", options=("1", "2", "4"), help="Bytes per weight when serving."),
        Int(name="devices", default=1, min=1, max=4096, help="Devices sharing the experts (expert parallelism)."),
        File(
            name="routing_report",
            formats=("json",),
            max_bytes=20 * 2**20,
            help="report.json of a routing-analysis job: its LRU and SCH hit rates at the cache size below give "
            "the offloading traffic (instead of the hit rate typed below). A report from a model with another "
            "expert count or top-k is used with a warning.",
        ),
        Float(
            name="cache_multiple",
            default=2.0,
            min=1,
            max=64,
            help="Experts cached per layer when offloading, as a multiple m of the active experts (m·k).",
        ),
        Float(
            name="cache_hit_rate",
            default=0.5,
            min=0,
            max=1,
            help="Expert-cache hit rate when offloading, if no routing-analysis report is uploaded (a report's "
            "measured rates replace it).",
        ),
        Float(
            name="link_gb_per_s",
            default=25.0,
            min=0.01,
            max=1e5,
            help="Host-to-device bandwidth for expert transfers, GB/s (PCIe 4.0 x16 ≈ 25).",
        ),
        Float(
            name="memory_gb_per_s",
            default=1000.0,
            min=0.01,
            max=1e6,
            help="Device memory bandwidth, GB/s (batch-1 decoding reads every active weight once per token).",
        ),
        Int(name="resamples", default=200, min=0, max=2000, help="Bootstrap resamples for the fit's CIs."),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    guide=(
        "EL > 1 means the MoE reaches a dense model's loss with EL times less training compute; the "
        "'dense equivalent' is the compute-optimal dense model (Chinchilla rule) with that compute. Constants "
        "fitted on toy models must not be extrapolated to large models: the source of the constants is shown "
        "with every prediction. Held-out errors compare the law with simpler baselines on budgets and on (A, G) "
        "configurations left out of the fit; G* is the best granularity (it exists when γ < 0). Upload a "
        "routing-analysis report.json to plan offloading from measured LRU and SCH hit rates.\n\n"
        "**What you can bring.** A runs table (CSV, UTF-8, one row per training run with the columns listed "
        "under Runs) is fitted whenever you upload it (constants auto or fit-runs). A routing-analysis "
        "report.json gives the offloading hit rates; one from a model of another expert count or top-k is "
        "used with a warning here."
    ),
    sample={"constants": "bundled", "d_model": 512, "layers": 8, "experts": 32, "top_k": 4, "d_expert": 256, "seed": 0},
    summarize=_summarize,
)


def _constants(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> tuple[Any, list[float] | None]:
    """The law's constants and the compute range [min, max] of the runs they were fitted on (if known)."""
    from mlcore.analysis.el import ELConstants

    if params["constants"] == "user":
        return _user_constants(params), None
    if params["constants"] == "bundled" or (params["constants"] == "auto" and "runs" not in inputs):
        if not BUNDLED.is_file():
            raise JobError("No bundled fit is installed; run `make bench-el`, or upload runs, or give constants.")
        data = json.loads(BUNDLED.read_text())
        if data["constants"]["input"] != params["input"]:
            raise JobError(f"The bundled fit uses input={data['constants']['input']}; pick that input convention.")
        ctx.log(f"bundled constants: {data['constants']['source']}")
        constants = ELConstants(**{k: v for k, v in data["constants"].items() if k != "best_granularity"})
        return constants, data.get("compute_range")
    if "runs" not in inputs:
        raise JobError("Upload a runs CSV to fit the law, or pick the bundled or your own constants.")
    return _fit_runs(params, Path(inputs["runs"]), ctx)


def _fit_runs(params: dict[str, Any], path: Path, ctx: JobContext) -> Any:
    from mlcore.analysis.el import fit_law, log_leverage
    from mlcore.analysis.el_holdout import arrays, holdout_scores
    from mlcore.analysis.runs import RunsError, measured_leverage, read_runs
    from mlcore.charts import scatter

    try:
        runs = read_runs(path)
        law, leverages = measured_leverage(runs)
    except (RunsError, ValueError) as exc:
        raise JobError(f"Runs table: {exc}.") from None
    ctx.log(f"{len(runs)} runs; dense law L(C) = {law.B:.4g}·C^-{law.b:.4g}; {len(leverages)} MoE runs kept")
    ctx.progress(0.2, "fitting the law")
    A, G, C, EL = arrays(leverages, count_shared=params["count_shared"])
    options = {"delta": params["huber_delta"], "x_max": params["x_max"], "input": params["input"]}
    try:
        fit = fit_law(
            A, G, C, EL, resamples=params["resamples"], seed=params["seed"], source=f"fitted on {path.name}", **options
        )
    except ValueError as exc:
        raise JobError(f"Runs table: {exc}.") from None
    for name, (low, high) in fit.intervals.items():
        ctx.metric(f"fit/{name}", getattr(fit.constants, name))
        ctx.log(f"{name} = {getattr(fit.constants, name):.4g}  (95% CI {low:.4g} … {high:.4g})")
    holdout: dict[str, list[dict[str, Any]]] = {}
    for by, label in (("budget", "budgets"), ("configuration", "configurations (A, G)")):
        ctx.raise_if_cancelled()
        try:
            scores = holdout_scores(leverages, by=by, count_shared=params["count_shared"], fit_options=options)
        except ValueError as exc:
            ctx.log(f"no held-out {label} check: {exc}")  # the fit itself stands; only its check is missing
            continue
        holdout[by] = [vars(s) for s in scores]
        for s in scores:
            ctx.metric(f"holdout-{by}/{s.variant}/rmse_log_el", s.rmse_log_el)
            picked = f", best G picked {s.best_g_hits}/{s.best_g_groups}" if by == "budget" else ""
            ctx.log(
                f"held-out {label}, {s.variant}: RMSE ln EL {s.rmse_log_el:.4f}, "
                f"mean |EL error| {s.mean_abs_pct_error:.1%}{picked}"
            )
    predicted = log_leverage(A, G, C, fit.constants)
    rows = [
        {"run": x.run.name, "observed EL": float(x.el), "predicted EL": math.exp(float(p)), "budget": x.budget}
        for x, p in zip(leverages, predicted)
    ]
    ctx.chart(
        "fit",
        scatter(
            "Fitted law vs observed leverage",
            rows,
            x="observed EL",
            y="predicted EL",
            label="budget",
            x_title="Observed EL (dense compute / MoE compute)",
            y_title="Predicted EL",
        ),
    )
    (ctx.workdir / "fit.json").write_text(
        json.dumps({"fit": fit.to_json(), "dense_law": vars(law), "holdout": holdout}, indent=1)
    )
    ctx.artifact("fit.json", ctx.workdir / "fit.json", "application/json")
    return fit.constants, [float(C.min()), float(C.max())]


def _per_second(gigabytes_per_second: float) -> float:
    return gigabytes_per_second * 1e9


def _user_constants(params: dict[str, Any]) -> ELConstants:
    from mlcore.analysis.el import ELConstants

    fit_options = ("constants", "huber_delta", "count_shared", "resamples", "seed")
    return bind(ELConstants, params, skip=(*ARCHITECTURE_PARAMS, *SERVING_PARAMS, *fit_options), source="user-supplied")


def _architecture(params: dict[str, Any]) -> Architecture:
    from mlcore.analysis.plan import Architecture

    return bind(Architecture, params, skip=(*LAW_PARAMS, *SERVING_PARAMS))


def _serving(params: dict[str, Any], curves: dict[str, Any] | None) -> Serving:
    """How the model is served; a routing-analysis report's measured hit rates replace the typed one."""
    from mlcore.analysis.plan import Serving, rate_at

    m = params["cache_multiple"]
    return bind(
        Serving,
        params,
        rename={"link_gb_per_s": "link_bytes_per_s", "memory_gb_per_s": "memory_bytes_per_s"},
        convert={"bytes_per_param": int, "link_gb_per_s": _per_second, "memory_gb_per_s": _per_second},
        skip=(*LAW_PARAMS, *ARCHITECTURE_PARAMS, "cache_hit_rate"),
        hit_rate=rate_at(curves["lru"], m) if curves else params["cache_hit_rate"],
        sch_hit_rate=rate_at(curves["sch"], m) if curves else None,
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.analysis.plan import plan

    ctx.progress(0.0, "loading constants")
    curves = _routing_curves(params, inputs, ctx)  # before the fit, so a bad report fails at once
    if "routing_report" in inputs:
        _check_report_shape(params, Path(inputs["routing_report"]), ctx)
    constants, fitted_range = _constants(params, inputs, ctx)
    arch = _architecture(params)
    ctx.raise_if_cancelled()
    ctx.progress(0.8, "planning")
    serving = _serving(params, curves)
    result = plan(arch, constants, serving, count_shared=params["count_shared"])
    for name, value in result.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            ctx.metric(name, value)
    ctx.log(
        f"A = {result['activation_ratio']:.4g}, G = {result['granularity']:.3g}, C = {result['training_flops']:.3g} "
        f"FLOPs → EL {result['efficiency_leverage']:.3g} ({constants.source}); loss-matched dense model "
        f"≈ {result['dense_equivalent_params'] / 1e6:.3g}M parameters, compute saving {result['compute_saving']:.1%}"
    )
    if "best_granularity_d_expert" in result:
        ctx.log(
            f"the law's best granularity G* = {result['best_granularity']:.3g}: experts of width "
            f"{result['best_granularity_d_expert']:.4g} give EL {result['efficiency_leverage_at_best_granularity']:.3g}"
        )
    ctx.log(
        f"offloading with {result['cached_experts_per_layer']} experts cached per layer "
        f"({result['offload_device_bytes'] / 2**30:.3g} GiB on the device): hit rate "
        f"{result['offload_hit_rate']:.1%}, {result['offload_bytes_per_token'] / 2**20:.3g} MiB moved per token, "
        f"decode ≈ {result['decode_tokens_per_s_offloaded']:.3g} tokens/s "
        f"(all experts resident: {result['decode_tokens_per_s_resident']:.3g})"
    )
    if fitted_range is not None:
        _warn_if_extrapolating(ctx, result["training_flops"], fitted_range)
    _sweep_charts(ctx, arch, constants, params["count_shared"])
    if curves:
        _offload_chart(ctx, arch, serving, curves)
    (ctx.workdir / "plan.json").write_text(json.dumps({"plan": result, "constants": constants.to_json()}, indent=1))
    ctx.artifact("plan.json", ctx.workdir / "plan.json", "application/json")
    ctx.progress(1.0, "done")
    return {"efficiency_leverage": result["efficiency_leverage"]}


def _routing_curves(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any] | None:
    """The model-level hit-rate curves of an uploaded routing-analysis report, or ``None``."""
    if "routing_report" not in inputs:
        return None
    from mlcore.analysis.plan import ReportError, rate_at, report_hit_rates

    path = Path(inputs["routing_report"])
    try:
        curves, look = report_hit_rates(json.loads(path.read_text(encoding="utf-8")))
        for policy in ("lru", "sch"):
            rate_at(curves[policy], params["cache_multiple"])
    except (ReportError, ValueError) as exc:
        raise JobError(f"Routing report: {exc}.") from None
    ctx.log(f"offloading hit rates from {path.name}: LRU expected, SCH(L = {look}) as the look-ahead bound")
    return curves


def _check_report_shape(params: dict[str, Any], path: Path, ctx: JobContext) -> None:
    """Hit rates depend on the expert count and top-k they were measured at: a report from another shape
    is still the best measurement a user has, so it is used, with a warning in the log, a metric and the summary."""
    report = json.loads(path.read_text(encoding="utf-8"))
    experts, top_k = (
        sorted({int(v) for v in report.get(key) or [] if isinstance(v, int | float)})
        for key in ("num_experts", "top_k")
    )
    if not experts or not top_k:
        ctx.log(f"WARNING: {path.name} does not say its model's expert count and top-k; its shape is unchecked")
        return
    ctx.metric("routing_report_experts", experts[0])
    ctx.metric("routing_report_top_k", top_k[0])
    mismatch = experts != [params["experts"]] or top_k != [params["top_k"]]
    ctx.metric("routing_report_shape_mismatch", float(mismatch))
    if mismatch:
        ctx.log(
            f"WARNING: {path.name} measured a model with {'/'.join(map(str, experts))} experts, top-"
            f"{'/'.join(map(str, top_k))}, but the plan has {params['experts']} experts, top-{params['top_k']}: "
            "hit rates at a cache multiple m change with both, so treat the offloading figures as a rough guide."
        )


def _offload_chart(ctx: JobContext, arch: Any, serving: Any, curves: dict[str, Any]) -> None:
    """Transfer per token against cache size, for each policy the routing report measured."""
    from mlcore.charts import line_chart

    expert_bytes = arch.expert_params * serving.bytes_per_param
    rows = [
        {"m": m, "MiB per token": arch.misses_per_token(rate) * expert_bytes / 2**20, "policy": policy.upper()}
        for policy, curve in curves.items()
        for m, rate in curve
    ]
    ctx.chart(
        "offload-traffic",
        line_chart(
            "Expert transfer per token vs cache size (hit rates from the routing report)",
            rows,
            x="m",
            y="MiB per token",
            color="policy",
            x_title="Experts cached per layer (× active experts)",
            y_title="Expert weights moved per token (MiB)",
        ),
    )


def _warn_if_extrapolating(ctx: JobContext, compute: float, fitted_range: list[float]) -> None:
    """A law fitted on one compute range says little far outside it; the paper fits up to 10²² FLOPs."""
    low, high = fitted_range
    beyond = math.log10(compute / high) if compute > high else math.log10(low / compute) if compute < low else 0.0
    ctx.metric("orders_of_magnitude_outside_fit", beyond)
    if beyond > 0.5:
        ctx.log(
            f"WARNING: C = {compute:.3g} FLOPs lies {beyond:.1f} orders of magnitude outside the compute of the runs "
            f"the constants were fitted on ({low:.3g}–{high:.3g} FLOPs): treat EL as an extrapolation."
        )


def _sweep_charts(ctx: JobContext, arch: Any, constants: Any, count_shared: bool) -> None:
    import numpy as np

    from mlcore.analysis.el import leverage
    from mlcore.charts import line_chart

    A, G, C = arch.activation(count_shared=count_shared), arch.granularity, arch.compute
    label = f"constants: {constants.source}"
    ratios = np.array([1, 1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128])
    rows = [
        {"A": float(a), "EL": float(e), "granularity": f"G = {g:g}"}
        for g in sorted({1.0, 4.0, 8.0, 16.0, round(G, 3)})
        for a, e in zip(ratios, leverage(ratios, g, C, constants))
    ]
    ctx.chart(
        "el-vs-activation",
        line_chart(
            f"EL vs activation ratio at C = {C:.3g} FLOPs ({label})",
            rows,
            x="A",
            y="EL",
            color="granularity",
            x_title="Activation ratio A (log scale)",
            y_title="Efficiency leverage (×)",
            x_log=True,
        ),
    )
    grid = np.array([1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64])
    rows = [
        {"G": float(g), "EL": float(e), "series": f"A = {A:.3g}"} for g, e in zip(grid, leverage(A, grid, C, constants))
    ]
    ctx.chart(
        "el-vs-granularity",
        line_chart(
            f"EL vs granularity at A = {A:.3g} ({label})",
            rows,
            x="G",
            y="EL",
            color="series",
            x_title="Granularity G = 2·d_model/d_expert (log scale)",
            y_title="Efficiency leverage (×)",
            x_log=True,
        ),
    )
    budgets = C * np.logspace(-3, 3, 13)
    rows = [
        {"C": float(c), "EL": float(e), "series": f"A = {A:.3g}, G = {G:.3g}"}
        for c, e in zip(budgets, leverage(A, G, budgets, constants))
    ]
    ctx.chart(
        "el-vs-compute",
        line_chart(
            f"EL vs training compute ({label})",
            rows,
            x="C",
            y="EL",
            color="series",
            x_title="Training compute C (FLOPs, log scale)",
            y_title="Efficiency leverage (×)",
            x_log=True,
        ),
    )
