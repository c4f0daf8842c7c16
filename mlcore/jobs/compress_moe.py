"""``compress-moe``: prune (or merge) the experts of an MoE language model with MoNE or a baseline.

Calibrates once on the chosen text, then for every (ratio, method) pair builds the compressed
model, and reports perplexity on every built-in source's held-out text, the zero-shot cloze
suite, sizes before/after and per-layer charts. The first method at the first ratio is saved as
a checkpoint that ``mlcore.hf.load_model`` reloads (novices included) and offered to the library;
with novices it also ships their code for ``trust_remote_code=True`` and refuses a plain stock load,
and a second checkpoint with the novices deleted (another model, evaluated too) serves in any tool.

Models larger than memory (``load``: auto, whole, layer-by-layer; ``mlcore.hf.memory`` decides
from the safetensors headers): calibration runs the sequential pass (each decoder layer read once,
``mlcore.hf.sequential``), every variant is written layer by layer from the source checkpoint
(``mlcore.compress.streamed``) and evaluated streamed from what was written, and all but the saved
variant are deleted after their evaluation. NAEE and HC-SMoE read every expert's weights at once
and are refused in that mode.

Progress: calibration fills its stretch of the bar batch by batch; the evaluations (the original
model, then every variant) share the rest equally and fill it window by window and cloze item by
item, so the page says "evaluating mone at ratio 0.25: shakespeare perplexity, window 64 of 256".
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from mlcore.hf.memory import LOAD_MODES
from mlcore.jobs import (
    Choice,
    Comparison,
    Dataset,
    File,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Multi,
    Numbers,
    Seed,
)
from mlcore.jobs.spec import InputCheck

METHOD_OPTIONS = ("mone", "mone-zero", "mone-delete", "random", "frequency", "rs", "ean", "reap", "naee", "hc-smoe")
MAX_CALIBRATION_TOKENS = 2_000_000
#: Stretches of the progress bar: calibration, then the evaluations (original model and variants).
CALIBRATION_SPAN = (0.02, 0.15)
EVALUATION_SPAN = (0.17, 0.97)
#: The share of a NAEE variant's stretch that its enumeration takes (the other methods plan in a blink).
NAEE_PLAN_SHARE = 0.3
#: Methods that read every expert's weights at once (NAEE's enumeration, HC-SMoE's merging).
WHOLE_ONLY = ("naee", "hc-smoe")


def _validate(params: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if params["samples"] * params["seq_len"] > MAX_CALIBRATION_TOKENS:
        errors.append(("samples", f"samples × sequence length may not exceed {MAX_CALIBRATION_TOKENS} tokens."))
    if any(r >= 1 for r in params["ratios"]):
        errors.append(("ratios", "A ratio of 1 would prune every expert; use ratios below 1."))
    return errors


def _check_inputs(params: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """One model to compress: a library one or an upload, never both (one would be ignored)."""
    if "checkpoint" in uploaded and params["model"]:
        return InputCheck(errors=[("model", "Give either a model or an uploaded checkpoint, not both.")])
    return InputCheck()


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Pruned 25% of experts with mone: −24% memory, +3.1% perplexity; beat frequency by 1.9 points"."""
    base_ppl = scalars["original/ppl_mean"]
    base_bytes = scalars["original/bytes_effective"]
    # Only the variants' own rows ("mone@0.25/delta_ppl"), not their exports ("mone@0.25/stock_export/…").
    variants = sorted(
        (scalars[key], key.rsplit("/", 1)[0])
        for key in scalars
        if key.endswith("/delta_ppl") and key.count("/") == 1 and "@" in key
    )
    if not variants:
        return ""
    best_delta, best = variants[0]
    method, ratio = best.split("@")
    memory = scalars[f"{best}/bytes_effective"] / base_bytes - 1
    line = (
        f"Pruned {float(ratio):.0%} of experts with {method}: {memory:+.0%} memory, "
        f"{best_delta / base_ppl:+.1%} perplexity"
    )
    rivals = [(d, name) for d, name in variants[1:] if name.endswith(f"@{ratio}")]
    if rivals:
        delta, rival = rivals[0]
        line += f"; beat {rival.split('@')[0]} by {delta - best_delta:.2f} perplexity points"
    return line + "."


spec = JobSpec(
    name="compress-moe",
    metrics=(
        Metric(
            key="{variant}/ppl_mean",
            label="Perplexity",
            better="lower",
            description="Geometric mean of held-out perplexity over the built-in text sources.",
        ),
        Metric(
            key="{variant}/acc",
            label="Cloze accuracy",
            unit="%",
            better="higher",
            proportion=True,
            n=lambda p: p.get("cloze_items", 0) * 3,
            description="Share of zero-shot cloze items answered right, over the three text sources.",
        ),
        Metric(
            key="{variant}/bytes_effective",
            label="Memory",
            unit="MB",
            better="lower",
            description="Bytes serving needs: a novice costs one vector instead of its expert's weights.",
        ),
        Metric(
            key="{variant}/parameters_effective",
            label="Parameters",
            better="lower",
            description="Parameters serving needs (novices counted as one vector each).",
        ),
        Metric(
            key="{variant}/delta_ppl",
            label="Δ perplexity",
            better="lower",
            description="Perplexity minus the original model's.",
        ),
    ),
    comparison=Comparison(
        baseline="original",
        metrics=("{variant}/ppl_mean", "{variant}/acc", "{variant}/bytes_effective"),
        chart="ppl-vs-ratio",
    ),
    title="Compress an MoE model (MoNE and baselines)",
    summary="Prune or merge experts from calibration statistics; compare perplexity and zero-shot accuracy.",
    version=1,
    queue="gpu",
    soft_time_limit=3 * 3600,
    time_limit=3 * 3600 + 300,
    params=(
        Model(
            name="model",
            accepts=("hf-moe-lm",),
            help="The MoE model to compress (e.g. zoo:moe-lm-tiny), unless you upload a checkpoint below.",
        ),
        File(
            name="checkpoint",
            formats=("zip", "tar"),
            max_bytes=20 * 2**30,
            help="Or upload a Hugging Face checkpoint (safetensors + config + tokenizer) as a zip or tar archive.",
        ),
        Dataset(
            name="dataset",
            accepts=("text",),
            default="zoo:shakespeare",
            replaced_by=("calibration_file",),
            help="Calibration text.",
        ),
        File(
            name="calibration_file",
            formats=("txt", "jsonl", "json", "csv"),
            max_bytes=200 * 2**20,
            help='Or upload calibration text: plain UTF-8, JSONL with a "text" field per line, or CSV/TSV with a '
            "text column; it replaces the calibration text above.",
        ),
        Int(name="samples", default=64, min=1, max=4096, help="Calibration sequences."),
        Int(name="seq_len", default=128, min=16, max=4096, help="Tokens per calibration sequence."),
        Numbers(name="ratios", default=[0.25], min=0.0, max=0.99, max_count=8, help="Fractions of experts to prune."),
        Int(name="keep", default=0, min=0, max=1024, help="Experts to keep per layer (overrides ratios when > 0)."),
        Choice(
            name="scope", default="layer", options=("layer", "global"), help="Rank experts per layer or model-wide."
        ),
        Multi(name="methods", default=["mone"], options=METHOD_OPTIONS, min_count=1, help="The first is saved."),
        Choice(
            name="load",
            default="auto",
            options=LOAD_MODES,
            help="whole: the model in memory; layer-by-layer: one decoder layer at a time (calibration reads each "
            "layer once, every compressed model is written layer by layer), for models larger than the worker's "
            "memory; auto: whole when it fits. NAEE and HC-SMoE need every expert's weights: whole only.",
        ),
        Int(name="eval_windows", default=256, min=8, max=4096, help="Held-out sequences per source."),
        Int(name="cloze_items", default=100, min=0, max=2000, help="Cloze items per source (0 skips the suite)."),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    guide=(
        "Lower Δ perplexity and a smaller cloze accuracy drop are better. 'effective' sizes count a novice as "
        "one vector; the pruned map shows which experts each method kept, turned into novices, merged or deleted."
    ),
    sample={
        "model": "zoo:moe-lm-tiny",
        "dataset": "zoo:shakespeare",
        "samples": 16,
        # Two ratios, so the page draws quality against ratio and the comparison has a trend.
        "ratios": [0.25, 0.5],
        "methods": ["mone", "frequency"],
        "eval_windows": 32,
        "cloze_items": 20,
        "seed": 0,
    },
    summarize=_summarize,
)


def _model_dir(inputs: dict[str, Any]) -> Path:
    """The directory holding config.json: the uploaded archive's (possibly one level down) or the reference's."""
    if "checkpoint" in inputs:
        root = Path(inputs["checkpoint"])
        candidates = [root, *sorted(p.parent for p in root.glob("*/config.json"))]
        for folder in candidates:
            if (folder / "config.json").is_file():
                return folder
        raise JobError("The uploaded archive holds no config.json; upload a Hugging Face checkpoint directory.")
    if "model" not in inputs:
        raise JobError("Pick a model (e.g. zoo:moe-lm-tiny) or upload a checkpoint archive.")
    return Path(inputs["model"])


def _tokenizer(folder: Path) -> Any:
    """The checkpoint's tokenizer, after the config and tokenizer checks (no weight is read)."""
    from transformers import AutoTokenizer

    from mlcore.hf.loading import checked_config

    checked_config(folder, need_tokenizer=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    if tokenizer.eos_token_id is None:
        raise JobError("The tokenizer has no end-of-text token; set eos_token in tokenizer_config.json.")
    return tokenizer


def _load(folder: Path, device: Any, mode: str, stack: ExitStack) -> Any:
    """The model, whole in memory or streamed layer by layer (open until ``stack`` closes)."""
    from mlcore.hf import adapt, layer_by_layer, load_model
    from mlcore.hf.architectures import HFModelError

    try:
        # Loads in the checkpoint's own dtype.
        if mode == "whole":
            model = load_model(folder, device=device, need_tokenizer=True)
        else:
            model = stack.enter_context(layer_by_layer(folder, device=device))
    except HFModelError:
        raise
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise JobError(f"Could not load the checkpoint: its weights do not match its config ({first[:300]}).") from None
    adapter = adapt(model)
    if adapter.masks or adapter.novices:
        raise JobError("This model is already compressed (it has masked or novice experts); start from the original.")
    return model


def _calibration_texts(inputs: dict[str, Any]) -> tuple[str, list[str]]:
    from mlcore.data.textset import TextDatasetError, load_text_dataset

    try:
        if "calibration_file" in inputs:
            data = load_text_dataset(Path(inputs["calibration_file"]))
            # An upload is calibration text as a whole: use every block, not only a 5% split.
            return data.name, [block for split in ("train", "calibration", "test") for block in data.split(split)]
        data = load_text_dataset(Path(inputs["dataset"]))
        return data.name, data.split("calibration") or data.split("train")
    except TextDatasetError as exc:
        raise JobError(f"Calibration data: {exc}.") from None


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.data.packing import pack_windows

    # Everything that can refuse the job happens before the first artifact, so a bad input leaves nothing.
    ctx.progress(0.0, "checking the model")
    source = _model_dir(inputs)
    tokenizer = _tokenizer(source)
    source_name, texts = _calibration_texts(inputs)

    def encode(text: str) -> list[int]:
        return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids

    try:
        windows = pack_windows(
            texts, encode, eos_id=tokenizer.eos_token_id, length=params["seq_len"], max_windows=params["samples"]
        )
    except ValueError as exc:
        raise JobError(f"Calibration data: {exc}.") from None
    if len(windows) < params["samples"]:
        ctx.log(f"calibration text yields {len(windows)} sequences of {params['seq_len']} tokens, fewer than asked")
    batch_size = max(1, 4096 // params["seq_len"])
    mode = _load_mode(params, source, ctx, tokens=windows.numel(), batch_tokens=batch_size * params["seq_len"])
    with ExitStack() as stack:
        ctx.progress(0.01, "loading the model" if mode == "whole" else "reading the model's embeddings and head")
        model = _load(source, ctx.device, mode, stack)
        return _compress(params, ctx, source, tokenizer, model, mode, windows, source_name, batch_size)


def _load_mode(params: dict[str, Any], source: Path, ctx: JobContext, *, tokens: int, batch_tokens: int) -> str:
    """Whole or layer by layer (see ``mlcore.hf.memory``), refused when neither fits or when a
    method needs what streaming cannot give."""
    from mlcore.hf.architectures import HFModelError
    from mlcore.hf.memory import plan_load

    try:
        # Whole, the job holds the model and one compressed copy at a time (the stock export edits that copy).
        mode, needs = plan_load(
            source, params["load"], device=ctx.device, tokens=tokens, batch_tokens=batch_tokens, whole_copies=2
        )
    except HFModelError as exc:
        raise JobError(str(exc)) from None
    ctx.log(needs.log_line(mode))
    whole_only = [m for m in params["methods"] if m in WHOLE_ONLY]
    if mode == "layer-by-layer" and whole_only:
        raise JobError(
            f"{', '.join(whole_only)} need every expert's weights in memory at once, which loading layer by layer "
            "does not give; drop them, or choose load 'whole' on a worker with enough memory."
        )
    return mode


def _compress(
    params: dict[str, Any],
    ctx: JobContext,
    source: Path,
    tokenizer: Any,
    model: Any,
    mode: str,
    windows: Any,
    source_name: str,
    batch_size: int,
) -> dict[str, Any]:
    import torch

    from mlcore.compress.calibrate import calibrate
    from mlcore.compress.methods import NEEDS_LAYER_INPUTS, compressed_copy, make_plan
    from mlcore.compress.naee import CALIBRATION_ROWS
    from mlcore.compress.plan import experts_to_keep, rounded
    from mlcore.compress.report import NoviceTraffic, sizes
    from mlcore.compress.streamed import write_compressed
    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.hf import adapt, layer_by_layer
    from mlcore.hf.loading import stored_dtype as stored_dtype_of

    streamed = mode == "layer-by-layer"
    stored_dtype = stored_dtype_of(source)
    # Sizes count what the files hold: a float16 checkpoint is computed in float32 but written in float16.
    counted_as = stored_dtype if stored_dtype == torch.float16 else None
    adapter = adapt(model)
    num_experts, top_k = adapter.layers[0].num_experts, adapter.layers[0].top_k
    if params["keep"]:
        keep = experts_to_keep(num_experts, top_k, keep=params["keep"])
        keeps = {round(1 - keep / num_experts, 4): keep}
    else:
        keeps = {r: experts_to_keep(num_experts, top_k, ratio=r) for r in params["ratios"]}
    ratios = list(keeps)
    if "naee" in params["methods"]:
        from mlcore.compress.naee import check_enumerable

        for keep in keeps.values():
            check_enumerable(num_experts, keep)
    length = min(int(getattr(model.config, "max_position_embeddings", 128)), 128)

    calibrating = ctx.span(*CALIBRATION_SPAN, "calibrating")
    calibrating(0.0, f"{len(windows)} sequences")
    calibration = calibrate(
        adapter,
        windows,
        batch_size=batch_size,
        keep_inputs=CALIBRATION_ROWS if any(m in NEEDS_LAYER_INPUTS for m in params["methods"]) else 0,
        seed=params["seed"],
        on_batch=lambda done, total: calibrating.count(-(-done // batch_size), -(-total // batch_size), "batch"),
        sequential=streamed,
        on_layer=lambda done, total: calibrating.count(done, total, "decoder layer"),
        spill_dir=ctx.workdir,
        # Layer by layer, a 14 GB model calibrates for many minutes: a killed attempt's re-run continues.
        checkpoint_dir=ctx.resume_dir / "calibration" if streamed and ctx.resume_dir is not None else None,
        on_resume=lambda done, total: ctx.log(
            f"calibration continues from decoder layer {done + 1} of {total}: an earlier attempt finished the rest"
            if done < total
            else "calibration: an earlier attempt finished every decoder layer; its statistics are reused"
        ),
    )
    ctx.log(f"calibrated on {calibration.tokens} tokens of {source_name} ({len(windows)} sequences)")
    _log_coverage(ctx, calibration, source_name)
    _expert_charts(ctx, calibration)

    ctx.progress(CALIBRATION_SPAN[1], "preparing the held-out evaluation")
    heldout = prepare_heldout(
        tokenizer, TEXT_SOURCES, length=length, windows=params["eval_windows"], cloze_items=params["cloze_items"]
    )
    jobs = [(r, m) for r in ratios for m in params["methods"]]
    # Every evaluation runs the same held-out set, so the original and each variant get an equal stretch.
    start, end = EVALUATION_SPAN
    share = (end - start) / (len(jobs) + 1)
    evaluating = ctx.span(start, start + share, "evaluating the original model")
    if streamed:
        ctx.log("evaluation reads the checkpoint layer by layer once per batch of held-out windows")
    baseline = {
        **heldout.evaluate(model, tokenizer, on_progress=evaluating),
        **sizes(model, adapter, stored_as=counted_as),
    }
    _metrics(ctx, "original", baseline)
    rows: list[dict[str, Any]] = []
    saved: Path | None = None
    for done, (ratio, method) in enumerate(jobs):
        ctx.raise_if_cancelled()
        variant = ctx.span(start + share * (done + 1), start + share * (done + 2), f"{method} at ratio {ratio:g}")
        planned = NAEE_PLAN_SHARE if method == "naee" else 0.0
        planning = variant.part(0.0, planned, f"{method} at ratio {ratio:g}: choosing experts")
        planning(0.0)
        plan = make_plan(
            method,
            adapter,
            calibration,
            keeps[ratio],
            scope=params["scope"],
            seed=params["seed"],
            on_layer=functools.partial(planning.count, noun="layer"),
        )
        # A float16 checkpoint is computed in float32 and stored back in float16: evaluate what the file holds.
        plan = rounded(plan, stored_dtype)
        fields = _compression_fields(plan, params, ratio, keeps[ratio])
        with ExitStack() as variant_stack:
            if streamed:
                written = ctx.workdir / f"variant-{done}"
                variant(planned, "writing the compressed model layer by layer")
                write_compressed(source, plan, written, config_fields=fields)
                compressed = variant_stack.enter_context(layer_by_layer(written, device=ctx.device))
                compressed_adapter = adapt(compressed)
            else:
                compressed, compressed_adapter = compressed_copy(model, plan)
            # The first variant with novices is evaluated twice (with them, and as the stock export without).
            evaluated = planned + (1 - planned) / (2 if saved is None and plan.novices else 1)
            evaluating = variant.part(planned, evaluated, f"evaluating {method} at ratio {ratio:g}")
            traffic = NoviceTraffic(plan.pruned(num_experts)) if plan.novices else None
            if traffic is not None:
                variant_stack.enter_context(compressed_adapter.capture_routing(traffic.on_routing))
            result = _evaluate_variant(
                compressed,
                compressed_adapter,
                heldout,
                tokenizer,
                baseline,
                evaluating,
                before_source=None if traffic is None else traffic.start,
                stored_as=counted_as,
            )
        row = {"method": method, "ratio": ratio, "keep": keeps[ratio], **_flat(result)}
        rows.append(row)
        _metrics(ctx, f"{method}@{ratio:g}", result)
        ctx.log(
            f"{method} ratio {ratio:g}: mean ppl {result['ppl_mean']:.3f} (Δ {result['delta_ppl']:+.3f}), "
            f"cloze acc {result.get('acc', float('nan')):.3f}"
        )
        ctx.chart(f"pruned-map-{method}-{ratio:g}", _pruned_map(plan, num_experts, method, ratio))
        if traffic is not None:
            row["novice_mass"] = _report_traffic(ctx, traffic.shares(), source_name, f"{method}@{ratio:g}")
        if saved is None:
            variant(evaluated, "saving the checkpoint")
            if streamed:
                saved = _publish(ctx, written, tokenizer, source, plan, ratio, keeps[ratio])
            else:
                compressed.config.moelab_compression = fields["moelab_compression"]
                compressed_adapter.save(ctx.workdir / "compressed")
                saved = _publish(ctx, ctx.workdir / "compressed", tokenizer, source, plan, ratio, keeps[ratio])
            if plan.novices:
                label = f"evaluating {method} at ratio {ratio:g} without novices"
                exported = _stock_export(
                    ctx, source, plan, compressed_adapter, tokenizer, streamed, f"{method}@{ratio:g}"
                )
                if exported is not None:
                    with exported as (export_model, export_adapter):
                        exporting = variant.part(evaluated, 1.0, label)
                        result = _evaluate_variant(
                            export_model, export_adapter, heldout, tokenizer, baseline, exporting, stored_as=counted_as
                        )
                    _metrics(ctx, f"{method}@{ratio:g}/stock_export", result)
                    row.update({f"stock_export_{k}": v for k, v in _flat(result).items() if not isinstance(v, dict)})
                    ctx.log(
                        f"{method} ratio {ratio:g}, novices deleted (the stock export): mean ppl "
                        f"{result['ppl_mean']:.3f} (Δ {result['delta_ppl']:+.3f})"
                    )
        elif streamed:
            shutil.rmtree(written, ignore_errors=True)
        del compressed
    ctx.progress(end, "writing the report")
    _report(ctx, baseline, rows, params, source_name)
    if len(ratios) > 1:
        from mlcore.compress.report import quality_vs_ratio

        ctx.chart("ppl-vs-ratio", quality_vs_ratio(rows, "ppl_mean", "Mean held-out perplexity"))
        if params["cloze_items"]:
            ctx.chart("acc-vs-ratio", quality_vs_ratio(rows, "acc", "Cloze accuracy"))
    ctx.progress(1.0, "done")
    return {"rows": len(rows)}


def _log_coverage(ctx: JobContext, calibration: Any, source_name: str) -> None:
    """Which evaluation sources the calibration text is, and the experts it never reached (their
    statistics, and a novice's constant, rest on no token)."""
    from mlcore.data.registry import TEXT_SOURCES

    others = [name for name in TEXT_SOURCES if name != source_name]
    if source_name in TEXT_SOURCES:
        ctx.log(
            f"calibration covers {source_name} only of the evaluation sources; {', '.join(others)} are other "
            "domains, where pruned experts may carry more traffic (see the novice gate mass per source)"
        )
    else:
        ctx.log(f"calibration text {source_name} is none of the evaluation sources ({', '.join(TEXT_SOURCES)})")
    unrouted = int((calibration.statistics.count == 0).sum())
    if unrouted:
        ctx.log(
            f"warning: {unrouted} (layer, expert) pairs received no calibration token; their scores and novice "
            "vectors rest on nothing: calibrate on more, or more varied, text"
        )
    ctx.metric("calibration/unrouted_experts", unrouted)


def _report_traffic(ctx: JobContext, shares: dict[str, float], source_name: str, label: str) -> dict[str, float]:
    """The novice gate mass per evaluation source as metrics and a chart, with a warning where it is high."""
    from mlcore.compress.report import HIGH_NOVICE_MASS, novice_traffic_chart

    for source, share in shares.items():
        ctx.metric(f"{label}/novice_mass_{source}", share)
    ctx.chart(f"novice-mass-{label}", novice_traffic_chart(shares, source_name, label))
    high = {source: share for source, share in shares.items() if share > HIGH_NOVICE_MASS}
    if high:
        listed = ", ".join(f"{source} {share:.0%}" for source, share in high.items())
        ctx.log(
            f"warning: {label} routes much of some sources' top-k gate mass to novices (constants): {listed}. Those "
            "tokens lose the pruned experts' answers; calibrate on text like the model's use (a mix of its domains)."
        )
    return shares


def _evaluate_variant(
    model: Any,
    adapter: Any,
    heldout: Any,
    tokenizer: Any,
    baseline: dict[str, Any],
    on_progress: Callable[[float, str], Any],
    *,
    before_source: Callable[[str | None], Any] | None = None,
    stored_as: Any = None,
) -> dict[str, Any]:
    from mlcore.compress.report import sizes

    evaluated = heldout.evaluate(model, tokenizer, on_progress=on_progress, before_source=before_source)
    result = {**evaluated, **sizes(model, adapter, stored_as=stored_as)}
    result["delta_ppl"] = result["ppl_mean"] - baseline["ppl_mean"]
    if "acc" in baseline:
        result["delta_acc"] = result["acc"] - baseline["acc"]
    return result


def _flat(result: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in result.items() if not isinstance(v, dict)}
    flat.update({f"ppl_{name}": v for name, v in result["perplexity"].items()})
    flat.update({f"acc_{name}": v["acc"] for name, v in result.get("cloze", {}).items()})
    return flat


def _metrics(ctx: JobContext, prefix: str, result: dict[str, Any]) -> None:
    for name, value in _flat(result).items():
        if isinstance(value, int | float):
            ctx.metric(f"{prefix}/{name}", value)


def _expert_charts(ctx: JobContext, calibration: Any) -> None:
    from mlcore.compress.mone import mone_scores, phi_freq, phi_var
    from mlcore.compress.report import expert_rows, heatmap

    layers = calibration.layers
    ctx.chart(
        "frequency",
        heatmap("Gate-weighted frequency φ_freq", expert_rows(layers, phi_freq(calibration), "phi_freq"), "phi_freq"),
    )
    ctx.chart(
        "variance",
        heatmap("Output spread φ_var = ‖σ‖₂", expert_rows(layers, phi_var(calibration), "phi_var"), "phi_var"),
    )
    ctx.chart(
        "score", heatmap("MoNE score s = φ_var·φ_freq", expert_rows(layers, mone_scores(calibration), "score"), "score")
    )


def _pruned_map(plan: Any, num_experts: int, method: str, ratio: float) -> dict[str, Any]:
    from mlcore.compress.report import heatmap, pruned_map_rows

    return heatmap(f"Pruned map: {method}, ratio {ratio:g}", pruned_map_rows(plan, num_experts), "state")


def _written(ctx: JobContext, source: Path, folder: Path, tokenizer: Any) -> None:
    """Tokenizer and companions beside the weights, and the weights in the source's own dtypes."""
    from mlcore.hf.checkpoint import copy_companions, store_in_source_dtypes

    tokenizer.save_pretrained(folder)
    copy_companions(source, folder)
    dtype = store_in_source_dtypes(source, folder)
    if dtype is not None:
        ctx.log(f"{folder.name}: stored in {dtype}, as the source checkpoint")


def _compression_fields(plan: Any, params: dict[str, Any], ratio: float, keep: int) -> dict[str, Any]:
    """What serving code reads from the config: which experts are novices (the sidecar holds their vectors)."""
    return {
        "moelab_compression": {
            "method": plan.method,
            "ratio": ratio,
            "keep_per_layer": keep,
            "scope": params["scope"],
            "novices": {str(layer): sorted(v) for layer, v in plan.novices.items()},
            "kept": {str(layer): sorted(v) for layer, v in plan.keep.items()},
        }
    }


def _publish(ctx: JobContext, written: Path, tokenizer: Any, source: Path, plan: Any, ratio: float, keep: int) -> Path:
    """The written checkpoint, with tokenizer and companions, as the job's artifact and library item."""

    folder = ctx.workdir / "compressed"
    if written != folder:
        written.rename(folder)
    _written(ctx, source, folder, tokenizer)
    ctx.artifact("checkpoint", folder)
    ctx.register(
        "hf-moe-lm",
        folder,
        {"title": f"{plan.method} at ratio {ratio:g}", "method": plan.method, "ratio": ratio, "keep_per_layer": keep},
    )
    return folder


def _stock_export(
    ctx: JobContext, source: Path, plan: Any, adapter: Any, tokenizer: Any, streamed: bool, label: str
) -> Any:
    """The checkpoint with the novices deleted (see ``MoEAdapter.save_without_novices``), written and
    offered as ``checkpoint-stock``; a context giving (model, adapter) to evaluate it, or ``None``
    with a log line saying why it cannot exist for this model."""
    from mlcore.compress.plan import CompressionPlan
    from mlcore.compress.streamed import write_compressed
    from mlcore.hf import adapt, layer_by_layer
    from mlcore.hf.architectures import HFModelError
    from mlcore.hf.checkpoint import SIDECAR

    folder = ctx.workdir / "compressed-stock"
    try:
        if streamed:
            write_compressed(source, CompressionPlan(plan.method, keep=plan.keep), folder)
            if (folder / SIDECAR).exists():
                shutil.rmtree(folder)
                raise HFModelError(
                    "with group-limited routing, deleted experts can only be masked, and this router has no "
                    "per-expert selection term to carry the mask in a stock checkpoint"
                )
            exported = None
        else:
            # The model with novices is saved and evaluated: export from it in place, not from a copy.
            exported = adapter.save_without_novices(folder, in_place=True)
    except HFModelError as exc:
        ctx.log(f"no stock export for {label}: {exc}")
        return None
    _written(ctx, source, folder, tokenizer)
    ctx.artifact("checkpoint-stock", folder)

    @contextmanager
    def opened() -> Iterator[tuple[Any, Any]]:
        if exported is not None:
            yield exported.model, exported
            return
        with layer_by_layer(folder, device=ctx.device) as model:
            yield model, adapt(model)

    return opened()


def _report(
    ctx: JobContext, baseline: dict[str, Any], rows: list[dict[str, Any]], params: dict[str, Any], source: str
) -> None:
    report = {
        "calibration": {"source": source, "samples": params["samples"], "seq_len": params["seq_len"]},
        "scope": params["scope"],
        "original": _flat(baseline),
        "compressed": rows,
        "variance_norm": "std (‖σ‖₂)",
    }
    (ctx.workdir / "report.json").write_text(json.dumps(report, indent=1, default=float))
    ctx.artifact("report.json", ctx.workdir / "report.json", "application/json")
    columns = [
        "method",
        "ratio",
        "keep",
        "ppl_mean",
        "delta_ppl",
        "acc",
        "delta_acc",
        "parameters_effective",
        "bytes_effective",
    ]

    def cell(row: dict[str, Any], column: str) -> str:
        value = row.get(column, "")
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    lines = [",".join(columns)]
    lines += [",".join(cell(row, c) for c in columns) for row in [{**_flat(baseline), "method": "original"}, *rows]]
    (ctx.workdir / "report.csv").write_text("\n".join(lines) + "\n")
    ctx.artifact("report.csv", ctx.workdir / "report.csv", "text/csv")
