"""Where MoNE's pruned experts still get traffic: the top-k gate mass on novices per test source.

MoNE keeps the router and turns each pruned expert into a novice (its mean output on the
calibration tokens). A token routed to a novice gets that constant instead of an expert's answer,
so the share of the top-k gate weight that lands on novices is the share of the layer's output
that no longer depends on the token. Calibrating on one source and testing on another measures
how much of the other domain's traffic goes to experts chosen as unimportant on the first.

For each zoo model, calibration source, calibration seed and pruning ratio (64 calibration
sequences, as ``compress``'s base setting), the MoNE-compressed model runs the same held-out
windows as ``compress`` (128 windows of 128 tokens per source) and records, per MoE layer, the
gate mass on novices over all (token, slot) pairs; the table averages the layers. Rows are cached in
``bench/cache/compress-traffic.jsonl``; ``python -m bench.compress_traffic`` runs what is missing
and writes ``bench/results/compress-traffic.md`` with a chart.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from bench.cache import Store

CACHE = Store.named("compress-traffic")
RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("moe-lm-tiny", "moe-lm-olmoe")
CALIBRATION = ("shakespeare", "stdlib-source")
RATIOS = (0.25, 0.5)
SEEDS = (0, 1, 2)
SAMPLES = 64
EVAL_WINDOWS = 128


def _key(model: str, source: str, seed: int, ratio: float) -> str:
    return f"{model}_{source}_{SAMPLES}_{seed}_{ratio:g}_ev{EVAL_WINDOWS}"


def measure(run_missing: bool = True) -> list[dict[str, Any]]:
    rows = []
    for model_name in MODELS:
        todo = [
            (s, seed, r)
            for s in CALIBRATION
            for seed in SEEDS
            for r in RATIOS
            if CACHE.get(_key(model_name, s, seed, r)) is None
        ]
        if todo and run_missing:
            _measure_model(model_name, todo)
        rows += [
            found
            for s in CALIBRATION
            for seed in SEEDS
            for r in RATIOS
            if (found := CACHE.get(_key(model_name, s, seed, r))) is not None
        ]
    return rows


def _measure_model(model_name: str, todo: list[tuple[str, int, float]]) -> None:
    import torch

    from bench.compress import calibration_windows
    from mlcore.catalog import materialize
    from mlcore.compress.calibrate import calibrate
    from mlcore.compress.methods import compressed_copy, make_plan
    from mlcore.compress.plan import experts_to_keep
    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.hf import adapt, load_model
    from mlcore.zoo.registry import MODELS as ZOO
    from mlcore.zoo.tokenizer import load_hf_tokenizer

    torch.set_num_threads(1)
    folder = materialize({item.name: item for item in ZOO}[model_name])
    model, tokenizer = load_model(folder), load_hf_tokenizer(folder)
    heldout = prepare_heldout(tokenizer, TEXT_SOURCES, length=128, windows=EVAL_WINDOWS, cloze_items=0)
    adapter = adapt(model)
    num_experts, top_k = adapter.layers[0].num_experts, adapter.layers[0].top_k
    calibrations: dict[tuple[str, int], Any] = {}
    for source, seed, ratio in todo:
        started = time.perf_counter()
        if (source, seed) not in calibrations:
            windows = calibration_windows(tokenizer, source, SAMPLES, seed)
            calibrations[(source, seed)] = calibrate(adapter, windows, batch_size=32, seed=seed)
        keep = experts_to_keep(num_experts, top_k, ratio=ratio)
        plan = make_plan("mone", adapter, calibrations[(source, seed)], keep, scope="layer", seed=seed)
        compressed, compressed_adapter = compressed_copy(model, plan)
        novices = {layer: set(experts) for layer, experts in plan.pruned(num_experts).items()}
        row: dict[str, Any] = {"model": model_name, "source": source, "seed": seed, "ratio": ratio, "keep": keep}
        row["novice_mass"] = {}
        for test_source, windows in heldout.windows.items():
            mass: dict[int, list[float]] = {}

            def on_routing(
                layer: int,
                ids: Any,
                weights: Any,
                _logits: Any,
                mass: dict[int, list[float]] = mass,
                novices: dict[int, set[int]] = novices,
            ) -> None:
                on_novice = torch.zeros_like(ids, dtype=torch.bool)
                for expert in novices.get(layer, ()):
                    on_novice |= ids == expert
                total = mass.setdefault(layer, [0.0, 0.0])
                total[0] += float(weights.float()[on_novice].sum())
                total[1] += float(weights.float().sum())

            with torch.no_grad(), compressed_adapter.capture_routing(on_routing):
                for start in range(0, len(windows), 32):
                    compressed(input_ids=windows[start : start + 32])
            row["novice_mass"][test_source] = {str(layer): m[0] / m[1] for layer, m in sorted(mass.items())}
        row["seconds"] = time.perf_counter() - started
        CACHE.put(_key(model_name, source, seed, ratio), row)
        print(json.dumps({k: v for k, v in row.items() if k != "novice_mass"}), flush=True)


def layer_mean(row: dict[str, Any], test_source: str) -> float:
    return statistics.fmean(row["novice_mass"][test_source].values())


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, ratio, calibration source and test source: the layer-averaged novice gate mass,
    mean and range over calibration seeds, and the per-layer range of the seed means."""
    out = []
    keys = sorted({(r["model"], r["ratio"], r["source"]) for r in rows})
    for model, ratio, source in keys:
        mine = [r for r in rows if (r["model"], r["ratio"], r["source"]) == (model, ratio, source)]
        for test_source in mine[0]["novice_mass"]:
            values = [layer_mean(r, test_source) for r in mine]
            layers = sorted(mine[0]["novice_mass"][test_source], key=int)
            per_layer = [statistics.fmean(r["novice_mass"][test_source][layer] for r in mine) for layer in layers]
            out.append(
                {
                    "model": model,
                    "ratio": ratio,
                    "calibration": source,
                    "test": test_source,
                    "in_domain": test_source == source,
                    "seeds": len(values),
                    "mass": statistics.fmean(values),
                    "mass_min": min(values),
                    "mass_max": max(values),
                    "layer_min": min(per_layer),
                    "layer_max": max(per_layer),
                }
            )
    return out


def markdown_table(entries: list[dict[str, Any]]) -> list[str]:
    lines = [
        "| model | pruned | calibration | test source | domain | novice gate mass (mean over layers; seed range) | "
        "per-layer range |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(
            f"| {e['model']} | {e['ratio']:.0%} | {e['calibration']} | {e['test']} | "
            f"{'in' if e['in_domain'] else 'cross'} | {e['mass']:.1%} ({e['mass_min']:.1%}–{e['mass_max']:.1%}) | "
            f"{e['layer_min']:.1%}–{e['layer_max']:.1%} |"
        )
    return lines


def chart_png(entries: list[dict[str, Any]], path: Path) -> None:
    import vl_convert

    from mlcore import charts

    rows = [
        {
            "calibration → test": f"{e['calibration']} → {e['test']}",
            "novice gate mass": e["mass"],
            "panel": f"{e['model']}, {e['ratio']:.0%} pruned",
            "domain": "in-domain" if e["in_domain"] else "cross-domain",
        }
        for e in entries
    ]
    spec = charts.bar_chart(
        "MoNE: top-k gate mass on novices per test source (mean over layers and 3 calibration seeds)",
        rows,
        x="calibration → test",
        y="novice gate mass",
        x_title=None,
        y_title="share of top-k gate mass on novices",
        color="domain",
        color_title="test domain",
    )
    spec.pop("title")
    spec = {
        "$schema": spec["$schema"],
        "title": "MoNE: top-k gate mass on novices per test source (mean over layers and calibration seeds)",
        "data": spec["data"],
        "facet": {"field": "panel", "type": "nominal", "title": None},
        "columns": 2,
        "spec": {"mark": "bar", "encoding": spec["encoding"], "width": 220, "height": 160},
    }
    path.write_bytes(vl_convert.vegalite_to_png(vl_spec=spec, scale=2))


def report(results: Path = RESULTS) -> tuple[list[str], list[dict[str, Any]]]:
    """The section (and its chart, written beside it) from the cache; nothing is measured."""
    entries = summary(measure(run_missing=False))
    if not entries:
        return [], []
    chart = results / "compress-traffic.png"
    chart_png(entries, chart)
    lines = [
        "## Cross-domain novice traffic (a limitation to know before calibrating)",
        "",
        f"MoNE compressed each zoo model from {SAMPLES} calibration sequences of one source (seeds "
        f"{', '.join(map(str, SEEDS))}); the share of the top-k gate weight that lands on novices, on the same "
        f"held-out windows ({EVAL_WINDOWS} × 128 tokens per source), averaged over MoE layers. A novice returns "
        "a constant, so this share of the layer's routed output no longer depends on the token. "
        "Code: `bench/compress_traffic.py`.",
        "",
        *markdown_table(entries),
        "",
        f"![Novice gate mass per test source]({chart.name})",
        "",
    ]
    findings = []
    for model in sorted({e["model"] for e in entries}):
        for ratio in sorted({e["ratio"] for e in entries}):
            mine = [e for e in entries if e["model"] == model and e["ratio"] == ratio]
            inside = [e["mass"] for e in mine if e["in_domain"]]
            outside = [e["mass"] for e in mine if not e["in_domain"]]
            if inside and outside:
                findings.append(
                    f"- {model}, {ratio:.0%} pruned: novices carry {min(inside):.0%}–{max(inside):.0%} of the gate "
                    f"mass on the calibration source and {min(outside):.0%}–{max(outside):.0%} on the other sources."
                )
    lines += [
        "Reading: the novices are the experts the calibration source uses least; another domain's tokens keep "
        "routing to them, so a model calibrated on one domain and used on another loses more than the "
        "in-domain figures show. Calibrate on data like the model's use (the paper calibrates on a general "
        "corpus).",
        "",
        *findings,
    ]
    return lines, entries


def main() -> int:
    started = time.perf_counter()
    measure(run_missing=True)
    lines, entries = report(RESULTS)
    body = "# MoNE: novice gate mass per test source\n\n" + "\n".join(lines[2:])
    body += f"\n\nThis run {time.perf_counter() - started:.0f} s.\n"
    from bench.common import write_results

    write_results(RESULTS, "compress-traffic", body, {"entries": entries})
    print(body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
