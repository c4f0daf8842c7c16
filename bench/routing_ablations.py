"""Toy ablations of local routing consistency (Liang et al., ICLR 2026, toy-model study; method card §4).

Toy Qwen2-MoE language models (4 layers, 16 experts, top-2, d = 128, as in the MoNE card) that differ
from one control in exactly one factor:

- the auxiliary balance-loss coefficient (0, 0.01 = control, 0.1);
- a shared expert (``shared_expert_intermediate_size``) on or off;
- a dense first layer (``mlp_only_layers=[0]``) or MoE in every layer.

Each variant trains with the zoo's resumable trainer (:func:`mlcore.zoo.lm.train`, per-layer Switch
balance loss) on a short fixed budget, is exported as a loadable checkpoint, and is evaluated by
the ``routing-analysis`` job kind on two text domains: SRP(L), LRU/LFU/SCH/Belady hit rates,
local and global balance, bootstrap CIs. Checkpoints and results live under one cache folder per
variant, so an interrupted run resumes and a finished one is only read back.

Expected (the paper): a stronger balance loss lowers SRP; a shared expert lowers consistency;
hit-rate curves bend near m ≈ 2. Toy effects may be small; they are reported as measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from bench.cache import Store
from mlcore.zoo.recipes import LMRecipe, get_recipe

#: The ``routing-analysis`` parameters every variant is evaluated with (per text domain).
EVALUATION: dict[str, Any] = {
    "samples": 64,
    "seq_len": 128,
    "windows": "4,16,64",
    "multiples": "1,2,4",
    "resamples": 500,
    "seed": 0,
}
DOMAINS: tuple[str, ...] = ("shakespeare", "stdlib-docs")
#: The paper's direction for SRP against the control (+1 higher, −1 lower); no claim for a dense first layer.
EXPECTED_SRP_SIGN: dict[str, int] = {"balance-0": +1, "balance-0.1": -1, "shared-expert": -1}
#: The recipe fields the control takes from the zoo's moe-lm-tiny.
SHAPE = ("hidden_size", "num_layers", "num_heads", "num_experts", "top_k", "expert_ffn", "context", "vocab_size")


@dataclass(frozen=True, kw_only=True)
class VariantRecipe(LMRecipe):
    """A Qwen2-MoE recipe with the two architectural factors of the ablation."""

    architecture: str = "qwen2_moe"
    #: Width of the always-on shared expert; 0 = none (the module then has no weights).
    shared_expert_ffn: int = 0
    #: Layers with a dense MLP (width top_k × expert_ffn, the routed experts' active width) instead of MoE.
    dense_layers: tuple[int, ...] = ()

    def hf_config(self) -> Any:
        from transformers import Qwen2MoeConfig

        return Qwen2MoeConfig(
            **self.common_config(),
            intermediate_size=self.top_k * self.expert_ffn,
            moe_intermediate_size=self.expert_ffn,
            shared_expert_intermediate_size=self.shared_expert_ffn,
            decoder_sparse_step=1,
            mlp_only_layers=list(self.dense_layers),
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "dense_layers": list(self.dense_layers)}


#: The zoo model's shape (moe-lm-tiny: 4 layers, 16 experts, top-2, d = 128) on a short budget: 500 steps
#: of batch 16 take about 3 minutes on one CPU thread.
CONTROL = VariantRecipe(
    **{f.name: getattr(get_recipe("moe-lm-tiny"), f.name) for f in fields(LMRecipe) if f.name in SHAPE},
    name="control",
    title="Toy Qwen2-MoE, balance loss 0.01, no shared expert, MoE in every layer",
    steps=500,
    batch_size=16,
    warmup=30,
    balance_coef=0.01,
    checkpoint_every=50,
    sources=("shakespeare", "stdlib-docs"),
)


def variants(base: VariantRecipe = CONTROL) -> dict[str, VariantRecipe]:
    """The control and its one-factor changes, keyed by name (the cache folder's name)."""
    changed = (
        replace(base, name="balance-0", title="balance loss 0", balance_coef=0.0),
        replace(base, name="balance-0.1", title="balance loss 0.1", balance_coef=0.1),
        replace(base, name="shared-expert", title="plus a shared expert", shared_expert_ffn=base.expert_ffn),
        replace(base, name="dense-first", title="dense first layer", dense_layers=(0,)),
    )
    return {base.name: base, **{v.name: v for v in changed}}


def _claim_workdir(recipe: VariantRecipe, work: Path) -> None:
    """Resume only the same recipe: a longer run may continue a shorter one, anything else may not."""
    stamp = work / "recipe.json"
    mine = {k: v for k, v in recipe.describe().items() if k != "steps"}
    if stamp.is_file() and json.loads(stamp.read_text()) != mine:
        raise ValueError(f"{work} holds a run of a different {recipe.name!r} recipe; delete that folder to retrain")
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(mine))


def train_variant(recipe: VariantRecipe, folder: Path, *, log: Any = print) -> Path:
    """Train (resuming from ``folder/work``) and export to ``folder/model``; a finished export is reused."""
    from mlcore.zoo.lm import export, train

    target = folder / "model"
    manifest = target / "manifest.json"
    if manifest.is_file() and json.loads(manifest.read_text())["recipe"] == recipe.describe():
        return target
    _claim_workdir(recipe, folder / "work")
    model, tokenizer = train(recipe, folder / "work", log=log)
    return export(
        model,
        tokenizer,
        recipe,
        target,
        workdir=folder / "work",
        command=f"python -m bench analysis --tier full  # variant {recipe.name}",
        metrics={},
    )


def evaluate(model_dir: Path, domain: str, evaluation: dict[str, Any] = EVALUATION) -> dict[str, Any]:
    """The ``routing-analysis`` report of one checkpoint on one text domain (its test split)."""
    from mlcore.jobs import InMemoryContext
    from mlcore.jobs.references import LocalResolver
    from mlcore.jobs.registry import get_kind
    from mlcore.jobs.runner import execute, prepare

    kind = get_kind("routing-analysis")
    ctx = InMemoryContext()
    raw = {"model": str(model_dir), "dataset": f"zoo:{domain}", **evaluation}
    params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    if outcome.status != "succeeded":
        raise RuntimeError(f"routing-analysis of {model_dir} on {domain} failed: {outcome.error}")
    return json.loads(Path(ctx.artifacts["report.json"].path).read_text())


def final_loss(folder: Path) -> float:
    """The last logged training cross-entropy (one batch, nats per token)."""
    lines = (folder / "work" / "train_log.jsonl").read_text().splitlines()
    return float(json.loads(lines[-1])["ce"])


def run_variant(
    recipe: VariantRecipe,
    cache: Path,
    *,
    domains: tuple[str, ...] = DOMAINS,
    evaluation: dict[str, Any] = EVALUATION,
    log: Any = print,
) -> dict[str, Any]:
    """Train or load one variant and evaluate it. Its checkpoint stays in ``cache/NAME`` (gitignored);
    the result is a row ``NAME/result`` of ``cache``'s compact file (``cache.jsonl`` beside it)."""
    folder = cache / recipe.name
    store, row = Store(cache.with_suffix(".jsonl")), f"{recipe.name}/result"
    key = {"recipe": recipe.describe(), "evaluation": evaluation, "domains": list(domains)}
    cached = store.get(row)
    if cached is not None and cached["key"] == key:
        return cached
    model_dir = train_variant(recipe, folder, log=log)
    result = {
        "key": key,
        "name": recipe.name,
        "title": recipe.title,
        "train_ce": final_loss(folder),
        "reports": {domain: evaluate(model_dir, domain, evaluation) for domain in domains},
    }
    return store.put(row, result)


def run_all(cache: Path, *, log: Any = print) -> list[dict[str, Any]]:
    """Every variant, one at a time (the control first, so a partial run still has its reference)."""
    return [run_variant(recipe, cache, log=log) for recipe in variants().values()]
