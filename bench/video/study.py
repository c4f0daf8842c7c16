"""The video study's runs, each read from the cache or computed once: every part at a tier
(:func:`run`, the report-only path with ``train_missing=False``) and the opt-in longer study."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from bench.common import check_zoo_cache, write_results
from bench.verdicts import as_json as verdict_json
from bench.video.cache import _load_or_compute, _static_judge_info, store
from bench.video.measure import (
    _judge,
    _zoo_model,
    attention_baselines_case,
    attention_case,
    evaluate,
    train_and_evaluate,
    train_long_context,
)
from bench.video.report import long_context_verdicts, report
from bench.video.tiers import (
    EXTENDED_SEEDS,
    EXTENDED_STEPS,
    LONG_CORE_MODES,
    PROMOE_CONFIGS,
    QUALITY_MODES,
    TIERS,
    _promoe_slug,
    long_context_stamp,
    long_context_tokens,
    training_device,
)


def quality_row(
    settings: dict[str, Any], mode: str, seed: int, steps: int, judge: Any, *, compute: bool, device: str
) -> dict[str, Any] | None:
    """One cached quality run: ``mode`` trained from scratch for ``steps`` on 8-frame clips, graded
    by ``judge()`` (called only when the run is missing and ``compute``)."""
    return _load_or_compute(
        f"quality-{mode}-s{seed}-{steps}",
        lambda: train_and_evaluate(
            {"attention": mode}, steps=steps, seed=seed, frames=8, static=False, judge=judge(), tier=settings,
            device=device,
        ),
        compute,
    )  # fmt: skip


def promoe_row(
    settings: dict[str, Any], label: str, seed: int, steps: int, judge: Any, *, compute: bool, device: str
) -> dict[str, Any] | None:
    """One cached ProMoE-study run: configuration ``label`` on one-frame images, graded by ``judge()``."""
    return _load_or_compute(
        f"promoe-{_promoe_slug(label)}-s{seed}-{steps}",
        lambda: train_and_evaluate(
            PROMOE_CONFIGS[label], steps=steps, seed=seed, frames=1, static=True, judge=judge(), tier=settings,
            device=device,
        ),
        compute,
    )  # fmt: skip


def promoe_study(
    settings: dict[str, Any], *, compute: bool = True, device: str | None = None
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any] | None]:
    """Part 3: every ProMoE configuration × seed (cached), with the static judge trained here.
    With ``compute=False`` only cached runs are returned (a configuration with none is left out).
    Missing runs train on :func:`training_device`."""
    device = training_device(device)
    if compute:
        static_judge, static_info = _judge(True, settings["judge_steps"])
    else:
        static_judge, static_info = None, _static_judge_info(settings["judge_steps"])
    promoe: dict[str, list[dict[str, Any]]] = {}
    for label in PROMOE_CONFIGS:
        for seed in settings["promoe_seeds"]:
            row = promoe_row(
                settings, label, seed, settings["promoe_steps"], lambda: static_judge, compute=compute, device=device
            )
            if row is not None:
                promoe.setdefault(label, []).append(row)
    return promoe, static_info


def run(tier: str, results: Path, *, train_missing: bool = True, device: str | None = None) -> None:
    """Run every part (what is cached is read back) and write ``video.md`` / ``video.json``.

    ``train_missing=False`` is the report-only path: nothing is trained, measured or even loaded
    (not the judges, not the zoo model); the report shows what is cached, and lists the ProMoE
    configurations that have no run yet. Missing quality and ProMoE runs train on ``device``
    (default: :func:`training_device`); the attention timings always run on the CPU."""

    import torch

    torch.set_num_threads(1)
    device = training_device(device)
    settings = TIERS[tier]
    # The attention rows measure the zoo DiT's activations; the zoo rows grade it with the zoo judge,
    # which grades every quality row too (the ProMoE rows use a static judge trained in the cache).
    check_zoo_cache(store(), ("video-dit-digits",), "attention-* zoo-*")
    check_zoo_cache(store(), ("video-judge",), "zoo-* quality-*")
    data: dict[str, Any] = {
        "tier": tier,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
    }

    def cached_rows(names_and_computes: list[tuple[str, Any]]) -> list[dict[str, Any]]:
        rows = [_load_or_compute(name, compute, train_missing) for name, compute in names_and_computes]
        return [r for r in rows if r is not None]

    data["attention"] = cached_rows([(f"attention-{n}", lambda n=n: attention_case(n)) for n in settings["tokens"]])
    data["attention_baselines"] = cached_rows(
        [(f"attention-baselines-{n}", lambda n=n: attention_baselines_case(n)) for n in settings["tokens"]]
    )

    # Loaded on first use only, so the report-only path never touches the judge or the zoo model.
    clip_judge = functools.cache(lambda: _judge(False, settings["judge_steps"])[0])
    zoo, trained = _zoo_model() if train_missing else (None, True)
    zoo_rows = {}
    if trained:
        for mode in ("full", "moga", "local"):
            row = _load_or_compute(
                f"zoo-{mode}-{settings['eval_clips']}",
                lambda mode=mode: evaluate(
                    zoo,
                    clip_judge(),
                    frames=8,
                    static=False,
                    clips=settings["eval_clips"],
                    sample_steps=settings["sample_steps"],
                    attention=mode,
                ),
                train_missing,
            )
            if row is not None:
                zoo_rows[mode] = row
    data["zoo"] = zoo_rows

    quality: dict[str, list[dict[str, Any]]] = {}
    for mode in QUALITY_MODES:
        steps = settings["quality_steps"]
        found = (
            quality_row(settings, mode, seed, steps, clip_judge, compute=train_missing, device=device)
            for seed in settings["quality_seeds"]
        )
        rows = [r for r in found if r is not None]
        if rows:
            quality[mode] = rows
    data["quality"] = quality

    data["quality_extended"] = extended_quality(settings, compute=False)
    data["long_context"] = long_context_study(settings, compute=train_missing, device=device)
    data["promoe"], data["static_judge"] = promoe_study(settings, compute=train_missing, device=device)
    data["promoe_extended"] = extended_promoe(settings, compute=False)
    if not (data["attention"] and data["quality"] and data["promoe"]):
        raise RuntimeError(
            f"the {tier} tier has no cached attention, quality or ProMoE runs to report; "
            f"run `python -m bench video --tier {tier}` first"
        )
    # §2d's verdicts in the JSON too (the Markdown has every study's): the figures docs and issues quote.
    data["long_context_verdicts"] = verdict_json(long_context_verdicts(data["long_context"]))
    write_results(results, "video", report(data), data)


def _started(found: dict[int, dict[str, dict[str, Any]]], names: tuple[str, ...]) -> tuple[str, ...]:
    """The contenders with at least one finished seed: one never run (a configuration added after
    the study) is left out of the comparison instead of emptying it."""
    return tuple(n for n in names if any(n in rows for rows in found.values()))


def _complete_seeds(found: dict[int, dict[str, dict[str, Any]]], names: tuple[str, ...]) -> dict[str, Any]:
    """Only the seeds every contender finished: a seed some lack would bias the means (seeds differ in
    difficulty far more than the contenders do)."""
    seeds = [seed for seed, rows in sorted(found.items()) if all(n in rows for n in names)]
    return {n: [found[seed][n] for seed in seeds] for n in names} if seeds else {}


def extended_quality(
    settings: dict[str, Any], *, compute: bool, seeds: tuple[int, ...] = EXTENDED_SEEDS, device: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every quality pattern at EXTENDED_STEPS, seed-major (all patterns of seed 0 first), so an
    interrupted run leaves a balanced comparison; only seeds every pattern finished are returned."""
    device = training_device(device)
    judge = _judge(False, settings["judge_steps"])[0] if compute else None
    found: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in seeds:
        for mode in QUALITY_MODES:
            row = quality_row(settings, mode, seed, EXTENDED_STEPS, lambda: judge, compute=compute, device=device)
            if row is not None:
                found.setdefault(seed, {})[mode] = row
    return _complete_seeds(found, _started(found, QUALITY_MODES))


def extended_promoe(
    settings: dict[str, Any], *, compute: bool, seeds: tuple[int, ...] = EXTENDED_SEEDS, device: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every ProMoE configuration at EXTENDED_STEPS, seed-major."""
    device = training_device(device)
    judge = _judge(True, settings["judge_steps"])[0] if compute else None
    found: dict[int, dict[str, dict[str, Any]]] = {}
    for seed in seeds:
        for label in PROMOE_CONFIGS:
            row = promoe_row(settings, label, seed, EXTENDED_STEPS, lambda: judge, compute=compute, device=device)
            if row is not None:
                found.setdefault(seed, {})[label] = row
    return _complete_seeds(found, _started(found, tuple(PROMOE_CONFIGS)))


def long_context_row(
    settings: dict[str, Any], mode: str, seed: int, *, compute: bool, device: str
) -> dict[str, Any] | None:
    """One cached run of §2d: ``mode`` trained from scratch at 1,024 tokens per clip."""
    steps = settings["long_steps"]
    return _load_or_compute(
        f"long-{long_context_tokens()}-{long_context_stamp()}-{mode}-s{seed}-{steps}",
        lambda: train_long_context(
            mode, steps=steps, seed=seed, heldout_clips=settings["long_heldout_clips"], device=device
        ),
        compute,
    )


def long_context_order(modes: tuple[str, ...], seeds: tuple[int, ...]) -> list[tuple[str, int]]:
    """The runs of §2d in the order they train: full, MoGA + local and local for every seed first, then
    the other baselines, each seed-major, so a study cut short still answers the card's main comparison."""
    core = [m for m in modes if m in LONG_CORE_MODES]
    rest = [m for m in modes if m not in LONG_CORE_MODES]
    return [(mode, seed) for group in (core, rest) for seed in seeds for mode in group]


def long_context_study(
    settings: dict[str, Any], *, compute: bool, device: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """§2d: every pattern of the tier's ``long_modes`` × seed at 1,024 tokens, cached; with
    ``compute=False`` only what is cached (a pattern with no run is left out)."""
    device = training_device(device)
    found: dict[str, list[dict[str, Any]]] = {}
    for mode, seed in long_context_order(tuple(settings["long_modes"]), tuple(settings["long_seeds"])):
        row = long_context_row(settings, mode, seed, compute=compute, device=device)
        if row is not None:
            found.setdefault(mode, []).append(row)
    # Table order: the tier's pattern order, whatever order the runs trained in.
    return {m: sorted(found[m], key=lambda r: r["seed"]) for m in settings["long_modes"] if m in found}


def report_from_cache(results: Path) -> None:
    """``python -m bench video --report``: rebuild ``video.md`` from the full tier's cache; nothing is
    trained, measured or loaded."""
    run("full", results, train_missing=False)
