"""``data-mixture``: find a data mixture for a target text with FastMix, then confirm it.

Two problems:

- ``texts``: sources are built-in texts and/or uploaded files (one source each), optionally with a
  source of random bytes whose weight must fall (a check that the search works); a byte-level MLP proxy;
- ``stdlib-subcorpora`` (the card's Tier B): five sub-corpora of the Python standard library (code,
  docstrings, comments, tests, licence) and a target that is a *known* mix of their held-out text
  (``target_mix``), so the job can say how far the found w is from the right answer; a character-level
  transformer proxy.

The proxy trains on the w-weighted loss while FastMix updates w from the target's validation gradient;
the found mixture then trains a fresh model against uniform sampling (and, on Tier B, the target mix)
for the same budget (the mixture is only as good as the model it trains). Charts: weight trajectories,
target bits per byte, final mixture.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import bar_chart, step_lines
from mlcore.jobs import (
    Bool,
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
    Multi,
    Numbers,
    Seed,
)
from mlcore.jobs.binding import bind
from mlcore.jobs.spec import InputCheck

if TYPE_CHECKING:
    from mlcore.datamix.fastmix import FastMixConfig

BUILTIN_SOURCES = ("shakespeare", "stdlib-docs", "stdlib-source")
#: Text uploads as :mod:`mlcore.sniff` names them; :mod:`mlcore.data.textset` reads each by its structure.
TEXT_FORMATS = ("txt", "jsonl", "json", "csv")
MAX_SOURCE_CHARS = 2_000_000  # per source: enough for a byte-level proxy, bounded memory
#: mlcore.datamix.stdlib_subcorpora's SUBCORPORA and TARGET_MIX, spelt out because specs must not import torch.
SUBCORPORA = ("code", "docstrings", "comments", "tests", "licence")
TARGET_MIX = (0.5, 0.3, 0.2, 0.0, 0.0)
#: Parameters that pick the problem and the proxy, or drive the confirmation: not FastMix's own.
PROBLEM_PARAMS = (
    "problem",
    "target_mix",
    "sources",
    "noise_source",
    "target",
    "context",
    "width",
    "confirm_steps",
    "seed",
)


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    errors = []
    if p["interval"] > p["steps"]:
        errors.append(("interval", "Must not exceed the steps, or the mixture is never updated."))
    if p["problem"] == "stdlib-subcorpora" and (len(p["target_mix"]) != len(SUBCORPORA) or sum(p["target_mix"]) <= 0):
        errors.append(("target_mix", f"Give {len(SUBCORPORA)} weights ({', '.join(SUBCORPORA)}), not all zero."))
    return errors


def _check_inputs(p: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    """stdlib-subcorpora mixes its own five sub-corpora: text uploads would be ignored, so they are
    refused, and the target text is not read (nor built)."""
    if p["problem"] != "stdlib-subcorpora":
        return InputCheck()
    errors = [
        (name, "stdlib-subcorpora mixes the standard library's own sub-corpora; pick problem=texts to use your files.")
        for name in ("source_files", "target_file")
        if name in uploaded
    ]
    return InputCheck(errors=errors, unused=frozenset({"target"}))


def _summarize(scalars: Mapping[str, Any]) -> str:
    weights = sorted(
        ((v, k.removeprefix("final_w/")) for k, v in scalars.items() if k.startswith("final_w/")), reverse=True
    )
    if not weights:
        return ""
    line = "Found mixture: " + ", ".join(f"{name} {w:.2f}" for w, name in weights)
    if "distance_to_target" in scalars:
        line += f" ({scalars['distance_to_target']:.2f} from the target mix in total variation)"
    if "confirm_bpb_found" in scalars:
        line += (
            f"; a fresh model scores {scalars['confirm_bpb_found']:.3f} bits per byte on it against "
            f"{scalars['confirm_bpb_uniform']:.3f} on the uniform mixture"
        )
    return line + "."


spec = JobSpec(
    name="data-mixture",
    metrics=(
        Metric(
            key="confirm_bpb_found",
            label="Bits per byte, found mixture",
            better="lower",
            description="Validation bits per byte of a model trained on the mixture the search found.",
        ),
        Metric(
            key="confirm_bpb_uniform",
            label="Bits per byte, uniform mixture",
            better="lower",
            description="The same with every source weighted equally (the baseline).",
        ),
    ),
    comparison=Comparison.none("The found mixture against the uniform one: both appear in the metrics."),
    title="Find a data mixture (FastMix)",
    summary="Learn per-source mixture weights for a target text by training one proxy, then confirm them.",
    version=2,
    queue="gpu",
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 300,
    params=(
        Choice(
            name="problem",
            default="texts",
            options=("texts", "stdlib-subcorpora"),
            help="texts: the sources and target below, byte-level MLP proxy. stdlib-subcorpora: five parts of the "
            "Python standard library (code, docstrings, comments, tests, licence) with a known target mix, "
            "character-level transformer proxy; the source and target fields are then unused.",
        ),
        Numbers(
            name="target_mix",
            default=list(TARGET_MIX),
            min=0.0,
            max=1000.0,
            max_count=len(SUBCORPORA),
            help="stdlib-subcorpora only: the target's weights of code, docstrings, comments, tests, licence.",
        ),
        Multi(
            name="sources",
            default=list(BUILTIN_SOURCES),
            options=BUILTIN_SOURCES,
            help="Built-in text sources; untick them all to mix only your own files.",
        ),
        File(
            name="source_files",
            formats=TEXT_FORMATS,
            multiple=True,
            max_files=16,
            max_bytes=200 * 2**20,
            help='More sources: one file each, plain UTF-8, JSONL with a "text" field per line, or CSV/TSV with a '
            "text column.",
        ),
        Bool(name="noise_source", default=True, help="Add a source of random bytes; its weight should fall."),
        Dataset(
            name="target",
            accepts=("text",),
            default="zoo:stdlib-docs",
            replaced_by=("target_file",),
            help="Target text (its test split).",
        ),
        File(
            name="target_file",
            formats=TEXT_FORMATS,
            max_bytes=200 * 2**20,
            help="Or upload the target text (same formats as the sources); it replaces the target above.",
        ),
        Int(name="context", default=16, min=2, max=256, help="Proxy context in bytes."),
        Int(name="width", default=128, min=8, max=4096, help="Proxy hidden width."),
        Int(name="steps", default=300, min=1, max=100_000, help="Inner steps of the search."),
        Int(name="batch_per_source", default=16, min=1, max=4096, help="Windows per source per step."),
        Float(name="lr", default=3e-3, min=1e-6, max=1.0, help="Inner AdamW learning rate η."),
        Float(
            name="lr_z",
            default=0.1,
            min=0.0,
            max=10.0,
            help="Outer learning rate (the reference's 0.01 barely moves w).",
        ),
        Int(name="interval", default=10, min=1, max=10_000, help="Inner steps between outer updates (T)."),
        Bool(name="full_gradients", default=False, help="Hypergradient over all parameters, not just the head."),
        Int(name="confirm_steps", default=300, min=0, max=100_000, help="Steps of each confirmation run (0 skips)."),
        Seed(name="seed"),
    ),
    validate=_validate,
    check_inputs=_check_inputs,
    guide=(
        "The weight chart shows how FastMix moved each source's share; a random-bytes source should fall. The "
        "confirmation trains fresh models on the found mixture and on uniform sampling: lower target bits per "
        "byte is better. If the two tie, the search found nothing the uniform mixture lacks.\n\n"
        "**What you can bring** (problem texts): up to 16 source files, one source each, and a target file "
        '(or a library text item as the target). Each is UTF-8: plain text; JSONL with a "text" field per line; '
        "or CSV/TSV with a text column (a table without one is read as plain text). A byte-order mark and Windows "
        "line ends are fine. Untick every built-in source to mix only your own files (from the command line: "
        "--set sources=). An uploaded target replaces the target dataset; the stdlib-subcorpora problem refuses "
        "uploads, as it mixes its own sub-corpora."
    ),
    sample={"sources": ["shakespeare", "stdlib-source"], "steps": 60, "confirm_steps": 60, "seed": 0},
    summarize=_summarize,
)


def _read(path: Path) -> tuple[str, list[str], list[str]]:
    from mlcore.data.textset import TextDatasetError, load_text_dataset

    try:
        data = load_text_dataset(path)
    except TextDatasetError as exc:
        raise JobError(f"{path.name}: {exc}.") from None
    return data.name, data.split("train"), data.split("test") + data.split("calibration")


def _sources(params: dict[str, Any], inputs: dict[str, Any]) -> dict[str, str]:
    import random

    from mlcore.data.textset import source_splits

    texts = {name: "\n".join(blocks) for name, blocks in source_splits(tuple(params["sources"]), "train").items()}
    for path in inputs.get("source_files", []):
        _, train, test = _read(Path(path))
        name = Path(path).stem
        texts[name if name not in texts else f"{name}-{len(texts)}"] = "\n".join(train + test)
    if params["noise_source"]:
        rng = random.Random(params["seed"])
        texts["random-bytes"] = "".join(chr(rng.randrange(32, 127)) for _ in range(200_000))
    if len(texts) < 2:
        raise JobError("A mixture needs at least two sources; pick built-in sources, upload files or add noise.")
    return {name: text[:MAX_SOURCE_CHARS] for name, text in texts.items()}


def _problem(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> tuple[Any, dict[str, float] | None]:
    """The mixture problem, and the target mix where it is known (``stdlib-subcorpora``)."""
    if params["problem"] == "stdlib-subcorpora":
        from mlcore.datamix.stdlib_subcorpora import stdlib_problem

        total = sum(params["target_mix"])
        target = {name: w / total for name, w in zip(SUBCORPORA, params["target_mix"], strict=True)}
        problem = stdlib_problem(target=target, context=params["context"], width=params["width"], seed=params["seed"])
        mix = ", ".join(f"{name} {w:.2f}" for name, w in target.items())
        ctx.log(f"{problem.k} standard-library sub-corpora; target: their held-out text mixed as {mix}")
        return problem, target

    from mlcore.datamix.sources import text_problem

    sources = _sources(params, inputs)
    if "target_file" in inputs:
        target_name, _, target_blocks = _read(Path(inputs["target_file"]))
    elif "target" in inputs:
        target_name, _, target_blocks = _read(Path(inputs["target"]))
    else:
        raise JobError("Pick a target dataset or upload a target text.")
    try:
        problem = text_problem(
            sources, "\n".join(target_blocks), context=params["context"], width=params["width"], seed=params["seed"]
        )
    except ValueError as exc:
        raise JobError(f"{exc}; use longer texts or a shorter context.") from None
    ctx.log(f"{problem.k} sources ({', '.join(problem.sources)}); target {target_name} (test split)")
    return problem, None


def _search_config(params: dict[str, Any]) -> FastMixConfig:
    from mlcore.datamix.fastmix import FastMixConfig

    return bind(FastMixConfig, params, skip=PROBLEM_PARAMS)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.datamix.fastmix import fastmix
    from mlcore.datamix.problem import train_on_mixture
    from mlcore.datamix.stdlib_subcorpora import distance_to

    ctx.progress(0.0, "reading the sources")
    problem, target = _problem(params, inputs, ctx)
    problem.device = ctx.device
    torch.manual_seed(params["seed"])
    config = _search_config(params)
    bits = 1 / math.log(2)

    def on_outer(step: int, result: Any) -> None:
        ctx.raise_if_cancelled()
        ctx.metric("search_val_bpb", result.val_loss[-1][1] * bits, step=step)
        for name, w in zip(problem.sources, result.weights[-1][1], strict=True):
            ctx.metric(f"w/{name}", w, step=step)
        if target is not None:
            ctx.metric("distance_to_target", distance_to(result.weights[-1][1], target), step=step)
        ctx.progress(0.05 + 0.5 * step / params["steps"], f"search step {step} of {params['steps']}")

    result = fastmix(problem, config, seed=params["seed"], on_outer=on_outer)
    trajectory = [
        {"step": step, "weight": w, "source": name}
        for step, weights in result.weights
        for name, w in zip(problem.sources, weights, strict=True)
    ]
    ctx.chart(
        "weights",
        step_lines(
            "Mixture weights during the search", trajectory, "weight", "w", color="source", x_title="Inner step"
        ),
    )
    curve = [{"step": s, "bpb": v * bits} for s, v in result.val_loss]
    ctx.chart(
        "search_val",
        step_lines("Proxy's target loss during the search", curve, "bpb", "Bits per byte", x_title="Inner step"),
    )
    final = dict(zip(problem.sources, result.final, strict=True))
    ctx.chart(
        "mixture",
        bar_chart(
            "Found mixture",
            [{"source": n, "weight": w} for n, w in final.items()],
            x="source",
            y="weight",
            x_title="Source",
            y_title="w",
            keep_order=False,
        ),
    )
    metrics: dict[str, Any] = {f"final_w/{name}": w for name, w in final.items()}
    metrics["search_cost_examples"] = result.cost_examples
    if target is not None:
        metrics["distance_to_target"] = distance_to(result.final, target)
    ctx.log("found mixture: " + ", ".join(f"{n} {w:.3f}" for n, w in final.items()))

    if params["confirm_steps"]:
        runs = {}
        mixtures = {"found": result.final, "uniform": [1.0 / problem.k] * problem.k}
        if target is not None:  # the known answer: how much the search left on the table
            mixtures["target"] = list(target.values())
        for i, (label, weights) in enumerate(mixtures.items()):
            ctx.raise_if_cancelled()
            ctx.progress(0.6 + 0.35 * i / len(mixtures), f"confirmation: training on the {label} mixture")
            _, scores = train_on_mixture(
                problem,
                weights,
                steps=params["confirm_steps"],
                batch_size=params["batch_per_source"] * problem.k,
                lr=params["lr"],
                seed=params["seed"] + 1,
            )
            runs[label] = scores["val_loss"] * bits
            metrics[f"confirm_bpb_{label}"] = runs[label]
        metrics["confirm_bpb_gain"] = runs["uniform"] - runs["found"]
        rows = [{"mixture": k, "bpb": v} for k, v in runs.items()]
        ctx.chart(
            "confirmation",
            bar_chart(
                "Fresh model on each mixture",
                rows,
                x="mixture",
                y="bpb",
                x_title="Mixture",
                y_title="Target bits per byte",
                keep_order=False,
            ),
        )
        ctx.log(f"confirmation: found {runs['found']:.4f} vs uniform {runs['uniform']:.4f} bits per byte")
    for key, value in metrics.items():
        ctx.metric(key, value)
    report = ctx.workdir / "mixture.json"
    report.write_text(
        json.dumps(
            {"mixture": final, "trajectory": result.weights, "config": vars(config), "metrics": metrics}, indent=1
        )
    )
    ctx.artifact("mixture.json", report, "application/json")
    ctx.progress(1.0, "done")
    return metrics
