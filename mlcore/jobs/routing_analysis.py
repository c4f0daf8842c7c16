"""``routing-analysis``: how well an MoE model suits expert offloading (local routing consistency).

Records the model's routing on evaluation text (a built-in or library text, or an uploaded text
file) or reads a routing trace (uploaded or from the library), and reports
SRP(L), SCH(L, m) and the LRU / LFU / Belady cache hit rates with bootstrap CIs, per-layer
heatmaps, local and global load balance, and a cache-size recommendation with its transfer cost
(:mod:`mlcore.analysis.consistency`; Liang et al., "Not All Models Suit Expert Offloading", ICLR 2026).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.hf.memory import LOAD_MODES
from mlcore.jobs import (
    Choice,
    Comparison,
    Dataset,
    File,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Numbers,
    Seed,
)
from mlcore.jobs.spec import InputCheck

#: The method card's default evaluation, 2,048 samples × 512 tokens, is the most one job records.
MAX_TOKENS = 2048 * 512


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["samples"] * p["seq_len"] > MAX_TOKENS:
        errors.append(("samples", f"samples × sequence length may not exceed {MAX_TOKENS:,} tokens."))
    if any(m < 1 for m in p["multiples"]):
        errors.append(("multiples", "A cache must hold at least the active experts: use multiples ≥ 1."))
    return errors


def _check_inputs(p: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """One source of routing: a model recorded on text, or a trace. Text is read only when a model is
    recorded, so with a trace (or no model) the evaluation text is not built, and an uploaded one is refused."""
    traced = "trace" in uploaded or bool(p["trace_item"])
    errors = []
    if traced and p["model"]:
        errors.append(("model", "Give a model to record or a routing trace, not both; a trace is analysed as it is."))
    if "trace" in uploaded and p["trace_item"]:
        errors.append(("trace_item", "Give one routing trace: upload one or pick one from the library."))
    if traced and "text_file" in uploaded:
        errors.append(("text_file", "A routing trace is analysed as recorded; text is read only to record a model."))
    return InputCheck(errors=errors, unused=frozenset({"dataset"}) if traced or not p["model"] else frozenset())


def _summarize(scalars: Mapping[str, Any]) -> str:
    srp = sorted((int(key.removeprefix("srp_L")), value) for key, value in scalars.items() if key.startswith("srp_L"))
    line = (
        f"A cache of {scalars['recommended_multiple']:g}× the active experts per layer hits "
        f"{scalars['recommended_hit_rate']:.0%} of expert accesses"
    )
    if srp:
        line += f"; SRP falls from {srp[0][1]:.2f} at L = {srp[0][0]} to {srp[-1][1]:.2f} at L = {srp[-1][0]}"
    return line + "."


spec = JobSpec(
    name="routing-analysis",
    metrics=(
        Metric(
            key="recommended_hit_rate",
            label="Cache hit rate",
            unit="%",
            better="higher",
            description="Share of expert loads served from the cache at the recommended size.",
        ),
        Metric(
            key="recommended_multiple",
            label="Recommended cache size",
            unit="×",
            description="Cache size as a multiple of the experts a token uses.",
        ),
    ),
    comparison=Comparison.none("An analysis of one model's routing; its charts compare the cache policies."),
    title="Routing consistency and expert offloading",
    summary="SRP and SCH (local routing consistency), expert-cache hit rates and a cache-size recommendation.",
    version=3,
    queue="gpu",
    soft_time_limit=3600,
    time_limit=3900,
    params=(
        Model(
            name="model",
            accepts=("hf-moe-lm",),
            help="The MoE language model whose routing to record (e.g. zoo:moe-lm-tiny), unless you upload a trace.",
        ),
        Dataset(
            name="dataset",
            accepts=("text",),
            default="zoo:shakespeare",
            replaced_by=("text_file",),
            help="Evaluation text (its test split).",
        ),
        File(
            name="text_file",
            formats=("txt", "jsonl", "json", "csv"),
            max_bytes=200 * 2**20,
            help='Or upload evaluation text: plain UTF-8, JSONL with a "text" field per line, or CSV/TSV with a '
            "text column; it replaces the dataset above.",
        ),
        File(
            name="trace",
            formats=("safetensors",),
            max_bytes=2 * 2**30,
            help="Or upload a MoE Lab routing trace (safetensors, see mlcore/moe/traces.py) recorded elsewhere.",
        ),
        Dataset(
            name="trace_item",
            accepts=("routing-trace",),
            help="Or a routing trace from the team library (every analysis of a model adds the trace it recorded).",
        ),
        Int(name="samples", default=64, min=1, max=8192, help="Evaluation sequences to record."),
        Int(name="seq_len", default=128, min=8, max=8192, help="Tokens per sequence (at most the model's context)."),
        Choice(
            name="load",
            default="auto",
            options=LOAD_MODES,
            help="whole: the model in memory; layer-by-layer: one decoder layer at a time, each read once for "
            "every sequence (for models larger than the worker's memory); auto: whole when it fits.",
        ),
        Numbers(
            name="windows",
            default=[4, 16, 64, 256],
            integer=True,
            min=1,
            max=4096,
            max_count=8,
            help="Segment lengths L for SRP(L) and the SCH look-ahead.",
        ),
        Numbers(
            name="multiples",
            default=[1, 1.5, 2, 3, 4],
            min=1,
            max=64,
            max_count=10,
            help="Cache capacities, as multiples m of the active experts per layer (C = m·k).",
        ),
        Int(name="resamples", default=1000, min=0, max=5000, help="Bootstrap resamples (over sequences) for CIs."),
        Float(
            name="expert_megabytes",
            default=0.0,
            min=0.0,
            max=1e6,
            help="Size of one expert's weights in MiB, for transfer costs of an uploaded trace (0: unknown).",
        ),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    guide=(
        "SRP(L) near 1 means one fixed expert set serves L consecutive tokens: the model suits offloading. "
        "SCH(L, m) is the best hit rate a cache of m×k experts per layer reaches with L tokens of look-ahead; "
        "Belady is the offline optimum and LRU/LFU what an online cache gets. Look for the knee of the hit-rate "
        "curves (often near m = 2). Shaded bands are 95% bootstrap intervals over sequences; a locally "
        "balanced router (high local balance) usually has low SRP.\n\n"
        "**What you can bring.** Either a model to record (a library hf-moe-lm) with evaluation text, a library "
        'text item or an uploaded UTF-8 file (plain text; JSONL with a "text" field per line; CSV/TSV with a '
        "text column; a byte-order mark and Windows line ends are fine), of which the test split (1 block in 20) "
        "is read; or a routing trace recorded elsewhere (a MoE Lab .safetensors trace, uploaded or from the "
        "library), analysed as it is. One source of routing per job: a model and a trace together are refused. "
        "*Try with a sample* records zoo:moe-lm-tiny on zoo:sample-notes, text in the formats users bring: a JSONL "
        "file with a byte-order mark and Windows line ends, and a CSV whose quoted text column holds commas."
    ),
    # The sample reads text as users bring it: a JSONL file (byte-order mark, CRLF) and a CSV of quoted texts.
    sample={"model": "zoo:moe-lm-tiny", "dataset": "zoo:sample-notes", "samples": 32, "resamples": 200, "seed": 0},
    summarize=_summarize,
)


def _load_trace(path: Path) -> Any:
    from mlcore.moe.traces import RoutingTrace, TraceError

    try:
        return RoutingTrace.load(path)
    except TraceError as exc:
        raise JobError(f"The uploaded trace is not a valid routing trace: {exc}.") from None


def _trace_file(path: Path) -> Path:
    """An upload is the file itself; a library item is a folder holding one trace."""
    if path.is_file():
        return path
    traces = sorted(p for p in path.rglob("*.safetensors") if p.is_file())
    if not traces:
        raise JobError("The library item holds no routing trace (a .safetensors file).")
    return traces[0]


def _record_trace(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> tuple[Any, list[int]]:
    """Record the model's routing on the dataset's test split; returns the trace and bytes per expert."""
    import torch
    from transformers import AutoTokenizer

    from mlcore.data.packing import pack_windows
    from mlcore.data.textset import TextDatasetError, load_text_dataset
    from mlcore.hf import adapt, layer_by_layer, load_model
    from mlcore.hf.architectures import HFModelError
    from mlcore.hf.loading import checked_config
    from mlcore.hf.memory import plan_load
    from mlcore.hf.sequential import run_sequentially
    from mlcore.moe.traces import record_routing

    folder = Path(inputs["model"])
    config = checked_config(folder)
    context = int(getattr(config, "max_position_embeddings", params["seq_len"]))
    if params["seq_len"] > context:
        raise JobError(f"Sequence length {params['seq_len']} exceeds the model's context of {context} tokens.")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise JobError("The model has no tokenizer; include tokenizer.json next to config.json, or upload a trace.")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    try:
        data = load_text_dataset(Path(inputs["text_file"] if "text_file" in inputs else inputs["dataset"]))
        windows = pack_windows(
            data.split("test") or data.split("train"),
            lambda text: tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids,
            eos_id=tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0,
            length=params["seq_len"],
            max_windows=params["samples"],
        )
    except (TextDatasetError, ValueError) as exc:
        raise JobError(f"Evaluation text: {exc}.") from None
    ctx.log(f"evaluation text {data.name}: {data.read_from()}")
    if len(windows) < params["samples"]:
        ctx.log(f"the text yields {len(windows)} sequences of {params['seq_len']} tokens, fewer than asked")
    batch = max(1, 8192 // params["seq_len"])
    try:
        mode, needs = plan_load(
            folder, params["load"], device=ctx.device, tokens=windows.numel(), batch_tokens=batch * params["seq_len"]
        )
    except HFModelError as exc:
        raise JobError(str(exc)) from None
    ctx.log(needs.log_line(mode))
    recording = ctx.span(0.0, 0.3, "recording routing")
    if mode == "whole":
        model = load_model(folder, device=ctx.device)
        model.eval()
        with torch.no_grad(), record_routing(model) as recorder:
            for start in range(0, len(windows), batch):
                ids = windows[start : start + batch].to(ctx.device)
                mask = torch.ones_like(ids)
                with recorder.batch(mask):
                    model(input_ids=ids, attention_mask=mask)
                recording.count(start + len(ids), len(windows), "sequence")
        return _finish(params, data.name, recorder, adapt(model))
    batches = [windows[start : start + batch] for start in range(0, len(windows), batch)]
    try:
        with layer_by_layer(folder, device=ctx.device) as model, record_routing(model) as recorder:
            run_sequentially(
                model,
                batches,
                on_layer=lambda done, total: recording.count(done, total, "decoder layer"),
                spill_dir=ctx.workdir,
                checkpoint=_resumable(ctx, model, batches, recorder),
            )
            recorder.close_sequences([params["seq_len"]] * len(windows))
            return _finish(params, data.name, recorder, adapt(model))
    except HFModelError as exc:
        raise JobError(str(exc)) from None


def _resumable(ctx: JobContext, model: Any, batches: list[Any], recorder: Any) -> Any:
    """The pass's progress kept in ``ctx.resume_dir`` after every decoder layer (the routing recorded
    so far with it), so a killed attempt's re-run continues from its last finished layer."""
    import torch

    from mlcore.hf.sequential import PassCheckpoint, batches_key

    if ctx.resume_dir is None:
        return None
    return PassCheckpoint(
        ctx.resume_dir / "routing",
        batches_key(model, batches),
        save_state=lambda path: torch.save(recorder.state_dict(), path),
        load_state=lambda path: recorder.load_state_dict(torch.load(path, weights_only=True)),
        on_resume=lambda done, total: ctx.log(
            f"recording continues from decoder layer {done + 1} of {total}: an earlier attempt finished the rest"
            if done < total
            else "recording: an earlier attempt finished every decoder layer; its routing is reused"
        ),
    )


def _finish(params: dict[str, Any], source: str, recorder: Any, adapter: Any) -> tuple[Any, list[int]]:
    """The recorded trace and the bytes of one expert per MoE layer (shapes suffice: a streamed
    model's experts are on the meta device)."""
    from mlcore.moe.traces import TraceMetadata

    trace = recorder.to_trace(TraceMetadata(model=str(params["model"]), source=f"{source} (test split)"))
    expert_bytes = [
        sum(p.numel() * p.element_size() for p in info.experts.parameters()) // info.num_experts
        for info in adapter.layers
    ]
    return trace, expert_bytes


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.analysis.consistency import analyse, recommend
    from mlcore.analysis.routing import from_trace

    ctx.progress(0.0, "reading the routing")
    recorded = False
    if "trace" in inputs or "trace_item" in inputs:
        trace = _load_trace(_trace_file(Path(inputs.get("trace") or inputs["trace_item"])))
        megabytes = params["expert_megabytes"]
        expert_bytes = [int(megabytes * 2**20)] * trace.num_layers if megabytes > 0 else None
    elif "model" in inputs:
        trace, expert_bytes = _record_trace(params, inputs, ctx)
        recorded = True
        if params["expert_megabytes"] > 0:
            expert_bytes = [int(params["expert_megabytes"] * 2**20)] * trace.num_layers
    else:
        raise JobError("Pick a model (e.g. zoo:moe-lm-tiny), a library trace or upload a routing trace.")
    routings = from_trace(trace)
    longest = int(trace.sequence_lengths.max())
    windows = [w for w in params["windows"] if w <= longest]
    if not windows:
        raise JobError(f"Every window length exceeds the longest sequence ({longest} tokens); choose smaller ones.")
    if len(windows) < len(params["windows"]):
        ctx.log(f"skipping window lengths longer than the longest sequence ({longest} tokens)")
    meta = trace.metadata
    ctx.log(
        f"{trace.num_tokens} tokens in {len(trace.sequence_lengths)} sequences, {trace.num_layers} MoE layers, "
        f"experts {sorted(set(meta.num_experts))}, top-k {sorted(set(meta.top_k))}, "
        f"shared {sorted(set(meta.shared_experts))}"
    )
    trace_path = ctx.workdir / "routing_trace.safetensors"
    trace.save(trace_path)
    ctx.artifact("routing_trace.safetensors", trace_path, "application/octet-stream")
    if recorded:  # a trace read from an upload or the library is already someone's input
        ctx.register(
            "routing-trace",
            trace_path,
            {"name": f"routing of {meta.model} on {meta.source}", "model": meta.model, "tokens": trace.num_tokens},
        )

    def on_step(fraction: float, stage: str) -> None:
        ctx.raise_if_cancelled()
        ctx.progress(0.3 + 0.65 * fraction, stage)

    report = analyse(
        routings,
        list(meta.layers),
        windows=windows,
        multiples=sorted(params["multiples"]),
        resamples=params["resamples"],
        seed=params["seed"],
        on_step=on_step,
    )
    advice = recommend(report, expert_bytes)
    ctx.log(advice.sentence())
    _log_one_cache(ctx, report, advice.multiple)
    _publish(ctx, report, advice)
    ctx.progress(1.0, "done")
    return {"recommended_multiple": advice.multiple, "hit_rate": advice.hit_rate}


def _log_one_cache(ctx: JobContext, report: Any, multiple: float) -> None:
    """The method card's model level beside the per-layer caches: one cache shared by every layer."""
    from mlcore.analysis.consistency import ONE_CACHE

    if ONE_CACHE not in report.hit_rates:
        return
    look = report.local_balance_window
    rates = {
        (scope, h.policy): h
        for scope in ("model", ONE_CACHE)
        for h in report.hit_rates[scope]
        if h.multiple == multiple and h.window in (0, look)
    }
    shared = rates[(ONE_CACHE, "lru")].capacity
    sampled = f", every {report.one_cache_stride}th sequence" if report.one_cache_stride > 1 else ""
    ctx.log(
        f"one cache of {shared} experts shared by all layers (the card's model level{sampled}): "
        f"LRU {rates[(ONE_CACHE, 'lru')].rate:.1%}, SCH(L = {look}) {rates[(ONE_CACHE, 'sch')].rate:.1%}; "
        f"per-layer caches of {multiple:g}× their active experts: LRU {rates[('model', 'lru')].rate:.1%}, "
        f"SCH {rates[('model', 'sch')].rate:.1%}"
    )


def _publish(ctx: JobContext, report: Any, advice: Any) -> None:
    from mlcore.charts import heatmap, line_chart, scatter

    for r in report.srp["model"]:
        ctx.metric(f"srp_L{r.window}", r.srp)
    for h in report.hit_rates["model"]:
        suffix = f"_L{h.window}" if h.policy == "sch" else ""
        ctx.metric(f"{h.policy}{suffix}_m{h.multiple:g}", h.rate)
    ctx.metric("recommended_multiple", advice.multiple)
    ctx.metric("recommended_hit_rate", advice.hit_rate)
    if advice.transfer_bytes_per_token is not None:
        ctx.metric("transfer_bytes_per_token", advice.transfer_bytes_per_token)

    srp_rows = [
        {"scope": scope, "L": r.window, "SRP": r.srp, "low": r.ci_low, "high": r.ci_high, "theta": r.theta}
        for scope, results in report.srp.items()
        for r in results
    ]
    ctx.chart(
        "srp",
        line_chart(
            "SRP(L): how well one expert set serves a segment",
            srp_rows,
            x="L",
            y="SRP",
            color="scope",
            x_title="Segment length L (tokens)",
            y_title="SRP (F1, 0–1)",
            x_log=True,
            band=("low", "high"),
        ),
    )
    model_rates = report.hit_rates["model"]
    rate_rows = [
        {
            "policy": h.policy.upper() + (f" L={h.window}" if h.policy == "sch" else ""),
            "m": h.multiple,
            "hit_rate": h.rate,
            "low": h.ci_low,
            "high": h.ci_high,
        }
        for h in model_rates
    ]
    ctx.chart(
        "hit-rates",
        line_chart(
            "Expert-cache hit rate vs capacity (all layers)",
            rate_rows,
            x="m",
            y="hit_rate",
            color="policy",
            x_title="Cache capacity m (× active experts per layer)",
            y_title="Hit rate (fraction of expert accesses)",
            band=("low", "high"),
        ),
    )
    layer_srp = [
        {"layer": scope.removeprefix("layer "), "L": r.window, "SRP": r.srp}
        for scope, results in report.srp.items()
        if scope.startswith("layer ")
        for r in results
    ]
    ctx.chart(
        "srp-per-layer",
        heatmap(
            "SRP per layer and segment length",
            layer_srp,
            x="L",
            y="layer",
            value="SRP",
            x_title="Segment length L (tokens)",
            y_title="Layer",
            value_title="SRP",
        ),
    )
    look = report.local_balance_window  # the median segment length: SCH heatmap and balance use the same L
    layer_sch = [
        {"layer": scope.removeprefix("layer "), "m": h.multiple, "SCH": h.rate}
        for scope, rates in report.hit_rates.items()
        if scope.startswith("layer ")
        for h in rates
        if h.policy == "sch" and h.window == look
    ]
    ctx.chart(
        "sch-per-layer",
        heatmap(
            f"SCH(L={look}, m) per layer",
            layer_sch,
            x="m",
            y="layer",
            value="SCH",
            x_title="Cache capacity m (× active experts)",
            y_title="Layer",
            value_title="Hit rate",
        ),
    )
    srp_at = {scope: next((r.srp for r in results if r.window == look), None) for scope, results in report.srp.items()}
    balance_rows = [
        {"layer": scope, "local_balance": value, "SRP": srp_at[scope]} for scope, value in report.local_balance.items()
    ]
    ctx.chart(
        "consistency-vs-balance",
        scatter(
            f"Consistency vs local load balance (L = {look})",
            balance_rows,
            x="local_balance",
            y="SRP",
            label="layer",
            x_title=f"Local load balance over {look}-token windows (normalised entropy, 0–1)",
            y_title=f"SRP({look})",
        ),
    )
    (ctx.workdir / "report.json").write_text(
        json.dumps({**report.to_json(), "recommendation": {**vars(advice), "sentence": advice.sentence()}}, indent=1)
    )
    ctx.artifact("report.json", ctx.workdir / "report.json", "application/json")
    lines = ["scope,policy,L,m,capacity,hit_rate,ci_low,ci_high"]
    lines += [
        f"{scope},{h.policy},{h.window},{h.multiple:g},{h.capacity},{h.rate:.6f},{h.ci_low:.6f},{h.ci_high:.6f}"
        for scope, rates in report.hit_rates.items()
        for h in rates
    ]
    (ctx.workdir / "hit_rates.csv").write_text("\n".join(lines) + "\n")
    ctx.artifact("hit_rates.csv", ctx.workdir / "hit_rates.csv", "text/csv")
    lines = ["scope,L,srp,theta,ci_low,ci_high"]
    lines += [f"{r['scope']},{r['L']},{r['SRP']:.6f},{r['theta']},{r['low']:.6f},{r['high']:.6f}" for r in srp_rows]
    (ctx.workdir / "srp.csv").write_text("\n".join(lines) + "\n")
    ctx.artifact("srp.csv", ctx.workdir / "srp.csv", "text/csv")
