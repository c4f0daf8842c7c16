"""Bounded memory at real widths: a checkpoint read whole against one read layer by layer.

Random-weight checkpoints at the widths of real MoE models are written tensor by tensor into
safetensors shards (:func:`write_random_checkpoint`: one shard in memory at a time, never
committed; the full tier refuses up front with less than 32 GB of free disk). Each configuration
then records routing on the same calibration windows in two ways, each stage in a process of its
own so that its peak RSS (``ru_maxrss``, mapped pages included) is its own:

- ``whole``: ``mlcore.hf.load_model`` (the checkpoint in memory, its own dtype), one plain forward
  per batch with the adapter's routing capture: the floor for speed, and what memory costs today;
- ``sequential``: ``layer_by_layer`` + ``run_sequentially`` (:mod:`mlcore.hf.sequential`): each
  decoder layer read once for all batches, activations carried between layers.

The table reports peak RSS against the checkpoint's size, calibration tokens/s of the sequential
pass against the plain forward measured in the same run, and whether both recorded the same
routing (top-k ids of every token in every MoE layer). Tiers: ``quick`` writes OLMoE-1B-7B's
width with 6 decoder layers (5.3 GB in bf16), 16 × 128 tokens; ``full`` adds the 16-layer
OLMoE-1B-7B (~7B parameters, 14 GB) and 4 layers of Qwen3-30B-A3B's width (128 experts, top-8) with
its embedding and head, with 32 × 512 tokens (a routing pass; compress-moe's 128 × 512-token
calibration is for when it streams). Finished stages are cached in
``bench/cache/scale.jsonl`` (an interrupted run resumes per stage); the checkpoints themselves live
under ``bench/cache/scale/`` and are rewritten only when missing.

Two more stages run ``compress-moe`` itself through the job runner, ``load=whole`` and
``load=layer-by-layer`` (MoNE at ratio 0.25), with its peak RSS, seconds, perplexities (equal in
both modes) and the sizes of what it writes against the issue's size goal.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cache import ROOT, Store
from bench.common import machine, stamp, write_results

CACHE = Store.named("scale")
CHECKPOINTS = ROOT / "scale"
SHARD_BYTES = 1 << 30
FULL_TIER_FREE_DISK = 32 * 2**30


@dataclass(frozen=True)
class ScaleConfig:
    name: str
    title: str
    config: dict[str, Any]
    windows: int
    seq_len: int
    batch: int

    @property
    def key(self) -> str:
        return f"{self.name}_{self.windows}x{self.seq_len}_{stamp(self.config, 8)}"


_OLMOE = {
    "model_type": "olmoe",
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "vocab_size": 50304,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
_QWEN3_30B = {
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "torch_dtype": "bfloat16",
}

TIERS: dict[str, tuple[ScaleConfig, ...]] = {
    "quick": (ScaleConfig("olmoe-6l", "OLMoE-1B-7B width, 6 layers", {**_OLMOE, "num_hidden_layers": 6}, 16, 128, 4),),
    "full": (
        ScaleConfig("olmoe-6l", "OLMoE-1B-7B width, 6 layers", {**_OLMOE, "num_hidden_layers": 6}, 16, 128, 4),
        ScaleConfig("olmoe-16l", "OLMoE-1B-7B (16 layers)", {**_OLMOE, "num_hidden_layers": 16}, 32, 512, 8),
        ScaleConfig(
            "qwen3-30b-4l", "Qwen3-30B-A3B width, 4 layers", {**_QWEN3_30B, "num_hidden_layers": 4}, 32, 512, 8
        ),
    ),
}
STAGES = ("whole", "sequential", "compress-whole", "compress-layer-by-layer")


def write_random_checkpoint(config: dict[str, Any], folder: Path, *, seed: int = 0) -> int:
    """A random-weight checkpoint of ``config`` in its dtype, written shard by shard (at most one
    shard of :data:`SHARD_BYTES` in memory); returns the bytes written. Linear weights are
    N(0, 0.02²), norms 1, so activations stay finite through every layer."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    hf_config = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=getattr(torch, config["torch_dtype"]))
    generator = torch.Generator().manual_seed(seed)
    shard: dict[str, Any] = {}
    shard_bytes = total = 0
    for name, meta in model.state_dict().items():
        nbytes = meta.numel() * meta.element_size()
        if shard and shard_bytes + nbytes > SHARD_BYTES:
            _flush(shard, folder, save_file)
            shard_bytes = 0
        if name.endswith("norm.weight") or "layernorm" in name:
            tensor = torch.ones(meta.shape, dtype=meta.dtype)
        else:
            tensor = (torch.randn(meta.shape, generator=generator) * 0.02).to(meta.dtype)
        shard[name] = tensor
        shard_bytes += nbytes
        total += nbytes
    _flush(shard, folder, save_file)
    index: dict[str, str] = {}
    for file in sorted(folder.glob("model-*.safetensors")):
        from safetensors import safe_open

        with safe_open(file, framework="pt") as shard:
            index.update(dict.fromkeys(shard.keys(), file.name))
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1)
    )
    hf_config.save_pretrained(folder)
    _copy_tokenizer(folder)
    return total


def _flush(shard: dict[str, Any], folder: Path, save_file: Any) -> None:
    if shard:
        number = len(list(folder.glob("model-*.safetensors"))) + 1
        save_file(shard, folder / f"model-{number:05d}.safetensors", metadata={"format": "pt"})
        shard.clear()


def _copy_tokenizer(folder: Path) -> None:
    """The zoo's byte-level tokenizer (its ids fit any of these embeddings)."""
    source = Path(__file__).resolve().parents[1] / "mlcore" / "zoo" / "checkpoints" / "moe-lm-olmoe"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, folder / name)


def _windows(spec: ScaleConfig) -> Any:
    import torch

    return torch.randint(3, 2000, (spec.windows, spec.seq_len), generator=torch.Generator().manual_seed(0))


def run_stage(stage: str, folder: Path, spec: ScaleConfig) -> dict[str, Any]:
    """One stage in this process (``python -m bench.scale stage ...`` runs it in a fresh one)."""
    if stage.startswith("compress-"):
        return _compress_stage(stage.removeprefix("compress-"), folder, spec)
    import torch

    from mlcore.hf import adapt, layer_by_layer, load_model
    from mlcore.hf.sequential import run_sequentially

    windows = _windows(spec)
    batches = [windows[i : i + spec.batch] for i in range(0, len(windows), spec.batch)]
    routed: dict[tuple[int, int], Any] = {}
    current = [0]

    def record(layer: int, ids: Any, gates: Any, _: Any) -> None:
        routed[(layer, current[0])] = ids.to(torch.int16).clone()

    started = time.perf_counter()
    if stage == "whole":
        model = load_model(folder)
        loaded = time.perf_counter()
        with torch.inference_mode(), adapt(model).capture_routing(record):
            for b, ids in enumerate(batches):
                current[0] = b
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
    else:
        with layer_by_layer(folder) as model:
            loaded = time.perf_counter()
            with adapt(model).capture_routing(record):
                run_sequentially(model, batches, before_batch=lambda b: current.__setitem__(0, b))
    done = time.perf_counter()
    torch.save(routed, folder.parent / f"{folder.name}.{stage}.routing.pt")
    return {
        "stage": stage,
        "load_s": loaded - started,
        "pass_s": done - loaded,
        "tokens": int(windows.numel()),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def _compress_stage(load: str, folder: Path, spec: ScaleConfig) -> dict[str, Any]:
    """compress-moe itself (MoNE at ratio 0.25, the spec's calibration, 8 held-out windows per source,
    no cloze), through the job runner as a worker runs it."""
    from mlcore.jobs import InMemoryContext
    from mlcore.jobs.references import LocalResolver
    from mlcore.jobs.registry import get_kind
    from mlcore.jobs.runner import execute, prepare

    kind = get_kind("compress-moe")
    raw = {
        "model": str(folder),
        "dataset": "zoo:shakespeare",
        "samples": spec.windows,
        "seq_len": spec.seq_len,
        "ratios": "0.25",
        "methods": "mone",
        "eval_windows": 8,
        "cloze_items": 0,
        "load": load,
        "seed": 0,
    }
    ctx = InMemoryContext()
    started = time.perf_counter()
    params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    seconds = time.perf_counter() - started
    if outcome.status != "succeeded":
        raise SystemExit(f"compress-moe ({load}) {outcome.status}: {outcome.error}")
    scalars = ctx.metrics.scalars
    sizes = {
        name: sum(p.stat().st_size for p in ctx.artifacts[name].path.glob("*.safetensors"))
        for name in ("checkpoint", "checkpoint-stock")
        if name in ctx.artifacts
    }
    shutil.rmtree(ctx.workdir, ignore_errors=True)
    return {
        "stage": f"compress-{load}",
        "seconds": seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "original_ppl": scalars["original/ppl_mean"],
        "mone_ppl": scalars["mone@0.25/ppl_mean"],
        "stock_export_ppl": scalars.get("mone@0.25/stock_export/ppl_mean"),
        "checkpoint_bytes": sizes.get("checkpoint", 0),
        "stock_export_bytes": sizes.get("checkpoint-stock", 0),
        "log": [line for line in ctx.lines if line.startswith(("loading", "calibrated"))],
    }


def _bound_bytes(folder: Path, ratio: float = 0.25) -> int:
    """The issue's size goal for a 25% MoNE output: non-expert bytes, kept experts' bytes and one
    hidden vector per novice (from the checkpoint's headers)."""
    from mlcore.hf.checkpoint import stored_tensors
    from mlcore.hf.families import EXPERT_COUNT_FIELDS

    config = json.loads((folder / "config.json").read_text())
    experts = next(int(config[f]) for f in EXPERT_COUNT_FIELDS if isinstance(config.get(f), int) and config[f] > 1)
    hidden = int(config["hidden_size"])
    tensors = list(stored_tensors(folder))
    expert_bytes = sum(t.nbytes for t in tensors if ".mlp.experts." in t.name)
    other = sum(t.nbytes for t in tensors) - expert_bytes
    pruned = round(ratio * experts)
    novices = pruned * int(config["num_hidden_layers"]) * hidden * 2
    return int(other + expert_bytes * (experts - pruned) / experts + novices)


def _same_routing(folder: Path) -> bool:
    import torch

    whole = torch.load(folder.parent / f"{folder.name}.whole.routing.pt", weights_only=True)
    sequential = torch.load(folder.parent / f"{folder.name}.sequential.routing.pt", weights_only=True)
    return whole.keys() == sequential.keys() and all(torch.equal(whole[k], sequential[k]) for k in whole)


def measure(tier: str, *, compute: bool = True) -> list[dict[str, Any]]:
    """One row per configuration of the tier; stages missing from the cache run first (``compute``)
    or leave their configuration out."""
    rows = []
    for spec in TIERS[tier]:
        folder = CHECKPOINTS / spec.key
        results = {stage: CACHE.get(f"{spec.key}/{stage}") for stage in STAGES}
        if not compute and any(r is None for r in results.values()):
            continue
        if any(r is None for r in results.values()):
            if not (folder / "model.safetensors.index.json").is_file():
                _check_disk(tier)
                shutil.rmtree(folder, ignore_errors=True)
                print(f"writing {spec.title} to {folder}", flush=True)
                write_random_checkpoint(spec.config, folder)
            for stage in STAGES:
                if results[stage] is None:
                    print(f"{spec.title}: {stage}", flush=True)
                    done = subprocess.run(
                        [sys.executable, "-m", "bench.scale", "stage", stage, str(folder), spec.name, tier],
                        capture_output=True,
                        text=True,
                    )
                    if done.returncode == 0:
                        results[stage] = json.loads(done.stdout.strip().splitlines()[-1])
                    else:
                        # A stage killed for memory is a result too (what the mode could not do here).
                        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                        killed = done.returncode < 0 or done.returncode == 137
                        results[stage] = {"stage": stage, "failed": "killed (out of memory)" if killed else last}
                    CACHE.put(f"{spec.key}/{stage}", results[stage])
            # Compared only when both passes' routing is on disk (a resumed run may have rerun one).
            recorded = [folder.parent / f"{folder.name}.{stage}.routing.pt" for stage in ("whole", "sequential")]
            if all(path.is_file() for path in recorded):
                CACHE.put(f"{spec.key}/same_routing", _same_routing(folder))
        size = sum(p.stat().st_size for p in folder.glob("model-*.safetensors")) if folder.is_dir() else 0
        size = size or CACHE.get(f"{spec.key}/size") or 0
        CACHE.put(f"{spec.key}/size", size)
        if folder.is_dir():
            CACHE.put(f"{spec.key}/bound", _bound_bytes(folder))
        whole, sequential = results["whole"], results["sequential"]
        compress = {load: results[f"compress-{load}"] for load in ("whole", "layer-by-layer")}
        rows.append(
            {
                "compress": compress,
                "bound_bytes": CACHE.get(f"{spec.key}/bound") or 0,
                "config": spec.name,
                "title": spec.title,
                "checkpoint_bytes": size,
                "tokens": whole["tokens"],
                "whole_peak_rss": whole["peak_rss_bytes"],
                "sequential_peak_rss": sequential["peak_rss_bytes"],
                "whole_tokens_per_s": whole["tokens"] / whole["pass_s"],
                "sequential_tokens_per_s": sequential["tokens"] / sequential["pass_s"],
                "speed_ratio": whole["pass_s"] / sequential["pass_s"],
                "whole_load_s": whole["load_s"],
                "same_routing": bool(CACHE.get(f"{spec.key}/same_routing")),
            }
        )
    return rows


def _check_disk(tier: str) -> None:
    CHECKPOINTS.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(CHECKPOINTS).free
    needed = FULL_TIER_FREE_DISK if tier == "full" else 4 * 2**30
    if free < needed:
        raise SystemExit(
            f"bench scale: {free / 2**30:.1f} GB free under {CHECKPOINTS}, the {tier} tier needs "
            f"{needed / 2**30:.0f} GB for its random checkpoints; free some disk and rerun (it resumes)."
        )


def _gb(n: float) -> str:
    return f"{n / 2**30:.2f} GB"


def report(rows: list[dict[str, Any]], tier: str) -> str:
    lines = [
        "# Scale: a checkpoint read whole against one read layer by layer",
        "",
        "Generated by `python -m bench scale --tier " + tier + "` (`make bench-scale`, `FULL=1` for the full "
        "tier); random weights at real widths in bfloat16, routing recorded on the same windows both ways, each "
        "stage in its own process. Peak RSS is `ru_maxrss` (mapped pages included).",
        "",
        "| configuration | checkpoint | tokens | peak RSS whole | peak RSS sequential | sequential / checkpoint "
        "| tokens/s whole | tokens/s sequential | sequential speed (× whole) | same routing |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['title']} | {_gb(r['checkpoint_bytes'])} | {r['tokens']} | {_gb(r['whole_peak_rss'])} | "
            f"{_gb(r['sequential_peak_rss'])} | {r['sequential_peak_rss'] / max(r['checkpoint_bytes'], 1):.2f} | "
            f"{r['whole_tokens_per_s']:.0f} | {r['sequential_tokens_per_s']:.0f} | {r['speed_ratio']:.2f} | "
            f"{'yes' if r['same_routing'] else 'NO'} |"
        )
    lines += [
        "",
        "## compress-moe (MoNE, ratio 0.25) whole and layer by layer",
        "",
        "The job itself through the runner, each mode in its own process: calibration as in the table above, 8 "
        "held-out windows per source, no cloze. *goal bound*: non-expert bytes + kept experts + one vector per "
        "novice (the issue's size goal, before its 1%).",
        "",
        "| configuration | load | peak RSS | RSS / checkpoint | seconds | original ppl | MoNE ppl | stock export ppl "
        "| MoNE checkpoint | stock export | goal bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for load, c in r["compress"].items():
            if "failed" in c:
                lines.append(f"| {r['title']} | {load} | {c['failed']} |" + " |" * 8)
                continue
            lines.append(
                f"| {r['title']} | {load} | {_gb(c['peak_rss_bytes'])} | "
                f"{c['peak_rss_bytes'] / max(r['checkpoint_bytes'], 1):.2f} | {c['seconds']:.0f} | "
                f"{c['original_ppl']:.1f} | {c['mone_ppl']:.1f} | {c['stock_export_ppl'] or float('nan'):.1f} | "
                f"{_gb(c['checkpoint_bytes'])} | {_gb(c['stock_export_bytes'])} | {_gb(r['bound_bytes'])} |"
            )
    lines += [
        "",
        "A *MoNE checkpoint* measured before 2026-12-05 kept the pruned experts' tensors (zeroed), the input's "
        "size; since then a layer with novices stores only its kept experts and the novices (the sidecar lists "
        "which slot holds which expert), within the goal bound plus 1% "
        "(tests/mlcore/hf/test_compact_checkpoint.py); rows cached before that show the old size until "
        "`make bench-scale` runs again (at 2026-12-05: the rows loaded whole). The OLMoE layer-by-layer rows "
        "of 2026-12-05 ran at the lowest CPU priority beside other studies and the test suite: their seconds "
        "(466 and 3103; 88 and 458 on a quieter machine before) measure that load, not the pass. Random "
        "weights make the perplexities meaningless as quality: they show that both modes compute the same "
        "numbers.",
        "",
        "The issue's goals (a 14 GB model compressed with peak RSS under 6 GB, calibration within 1.5× of a plain "
        "forward) are judged on the full tier's 16-layer OLMoE rows (`make bench-scale FULL=1`).",
        "",
    ]
    return "\n".join(lines)


def run(tier: str, results: Path) -> None:
    rows = measure(tier)
    write_results(results, "scale", report(rows, tier), {"tier": tier, "machine": machine(), "rows": rows})


def report_from_cache(results: Path) -> None:
    """The full tier's report from the cached stages (``python -m bench scale --report``); runs nothing."""
    rows = measure("full", compute=False)
    write_results(results, "scale", report(rows, "full"), {"tier": "full", "machine": machine(), "rows": rows})


def main() -> None:
    if len(sys.argv) >= 6 and sys.argv[1] == "stage":
        stage, folder, name, tier = sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5]
        spec = next(s for s in TIERS[tier] if s.name == name)
        print(json.dumps(run_stage(stage, folder, spec)))
        return
    raise SystemExit("usage: python -m bench scale --tier quick|full")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
