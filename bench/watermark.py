"""``make bench-watermark``: MOLM (ICLR 2026) on the zoo's ``molm-tiny``, against DWT-DCT.

Measured, per the issue's benchmark section:

1. **Targets** — bit accuracy clean ≥ 0.99, ≥ 0.90 under JPEG-50 and a 0.7 resized crop, at PSNR ≥ 32 dB
   against the unwatermarked generator.
2. **The λ trade-off** — the zoo markers fine-tuned for a fixed number of steps at several λ (distortions
   on, fresh keys every step), each point's clean / JPEG-50 / crop-0.7 bit accuracy against its PSNR.
   (Fine-tuned from the zoo operating point rather than trained from scratch per λ: the CPU budget.)
3. **The attack suite** (:func:`mlcore.watermark.robustness.run_suite`) over several seeds (new keys,
   new latents): bit accuracy and TPR at 1 % / 0.1 % FPR with τ calibrated on ≥ 10,000 unwatermarked
   generated images (full tier), the held-out FPR with Clopper–Pearson intervals, averaging removal,
   forgery, a black-box query attack, and invisible-watermark's DWT-DCT on the same attacks.
4. **Verification latency** — W2's ``bench.watermark_latency.section(tier)`` when it exists.

Every finished configuration is a row of ``bench/cache/watermark.jsonl`` (full tier), so an
interrupted run resumes.

``MOELAB_BENCH_DEVICE`` (default ``cpu``; e.g. ``cuda``) moves the models there: generation,
extraction, the regeneration attacks, τ calibration's images and the λ fine-tuning run on it, while
DWT-DCT, the uint8 attacks and the latency section stay on the CPU. Cache names and result formats
do not depend on the device.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import bench_device, check_zoo_cache, full_tier_cache, report_excerpt, write_results, written_at

ROOT = Path(__file__).resolve().parents[1]
CACHE = Store.named("watermark")
TARGETS = {"clean": 0.99, "jpeg-50": 0.90, "crop-0.7": 0.90, "psnr": 32.0}


@dataclass(frozen=True)
class Tier:
    seeds: tuple[int, ...]
    clean: int
    watermarked: int
    keys: int
    averaging: tuple[int, ...]
    query_images: int
    query_budget: int
    baseline_clean: int
    lambdas: tuple[float, ...]
    lambda_steps: int
    lambda_images: int
    attacks: tuple[str, ...] = ()  # empty: all


TIERS = {
    "quick": Tier(
        # Sized to stay under 4 minutes on a shared 2-core CPU (the 2-seed, 1,000-image version took
        # 9): one seed and a 600-image calibration set, so τ at 0.1 % FPR rests on few negatives —
        # the full tier (3 seeds, 10,000 images) is the one to quote.
        seeds=(0,),
        clean=600,
        watermarked=32,
        keys=8,
        averaging=(10,),
        query_images=4,
        query_budget=50,
        baseline_clean=100,
        lambdas=(0.0, 4.0),
        lambda_steps=15,
        lambda_images=64,
    ),
    "full": Tier(
        seeds=(0, 1, 2),
        clean=10_000,
        watermarked=256,
        keys=16,
        averaging=(10, 100, 1000),
        query_images=32,
        query_budget=400,
        baseline_clean=2000,
        lambdas=(0.0, 0.2, 1.0, 4.0, 16.0),
        lambda_steps=120,
        lambda_images=512,
    ),
}


def _cached(cache: Store | None, name: str, compute: Any) -> dict[str, Any]:
    if cache is None:
        return compute()
    return cache.cached(name, compute)


def _bundle() -> Any:
    from mlcore.catalog import materialize
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.zoo.registry import MODELS

    item = next(i for i in MODELS if i.name == "molm-tiny")
    return load_bundle(materialize(item))


def _suite(bundle: Any, tier: Tier, seed: int) -> dict[str, Any]:
    from mlcore.watermark.robustness import SuiteConfig, run_suite

    config = SuiteConfig(
        watermarked=tier.watermarked,
        clean=tier.clean,
        keys=tier.keys,
        attacks=tier.attacks,
        averaging=tier.averaging,
        query_images=tier.query_images,
        query_budget=tier.query_budget,
        baseline_clean=tier.baseline_clean,
        seed=seed,
    )
    result = run_suite(bundle, config, progress=lambda f, s: print(f"  seed {seed}: {f:.0%} {s}", flush=True))
    return {"rows": result.rows, "thresholds": result.thresholds, "fidelity": result.fidelity, "info": result.info}


def _target_point(bundle: Any, markers: Any, extractor: Any, n: int, seed: int) -> dict[str, Any]:
    """Clean, JPEG-50 and crop-0.7 bit accuracy and PSNR of ``markers``/``extractor`` on n sampled images."""
    import numpy as np
    import torch

    from mlcore.watermark import attacks as A
    from mlcore.watermark.calibration import bit_accuracy
    from mlcore.watermark.generator import from_uint8
    from mlcore.watermark.pipeline import Bundle, decode_under_keys, read_bits
    from mlcore.watermark.quality import psnr, ssim

    local = Bundle(generator=bundle.generator, markers=markers, extractor=extractor)
    markers.attach(bundle.generator.vae)
    latents = bundle.generator.sample_latents(n, seed=10_000 + seed, steps=10)
    keys = markers.random_keys(n, torch.Generator().manual_seed(seed)).numpy()
    marked = decode_under_keys(local, latents, torch.from_numpy(keys))
    clean = decode_under_keys(local, latents, None)
    attacks = {a.name: a for a in A.distortions()}
    rng = np.random.default_rng(seed)
    probs = read_bits(extractor, marked)
    point: dict[str, Any] = {"clean": bit_accuracy(probs, keys)}
    # Which routed convolutions the extractor can read: the mean accuracy of each slot's bits.
    per_bit = ((probs > 0.5) == (keys > 0.5)).mean(0)
    point["per_slot"] = [float(v) for v in per_bit.reshape(len(markers.config.slots), -1).mean(1)]
    for name in ("jpeg-50", "crop-0.7"):
        point[name] = bit_accuracy(read_bits(extractor, attacks[name].apply(marked, rng)), keys)
    point["psnr"] = float(psnr(from_uint8(marked), from_uint8(clean)))
    point["ssim"] = float(ssim(from_uint8(marked), from_uint8(clean)))
    return point


def _lambda_point(bundle: Any, lam: float, tier: Tier) -> dict[str, Any]:
    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.markers import Markers
    from mlcore.watermark.train import MolmConfig, train_molm

    # Fresh copies (a deepcopy would also copy the zoo markers' hook handles).
    markers = Markers.from_config(bundle.markers.config)
    markers.load_state_dict(bundle.markers.state_dict())
    extractor = Extractor.from_config(bundle.extractor.config)
    extractor.load_state_dict(bundle.extractor.state_dict())
    markers.requires_grad_(True)
    extractor.requires_grad_(True)
    training = bundle.card.get("training", {})
    config = MolmConfig(
        num_adapters=markers.config.num_adapters,
        rank=markers.config.rank,
        steps=tier.lambda_steps,
        batch_size=training.get("batch_size", 16),
        lam=lam,
        key_only_fraction=0.0,
        ramp_fraction=0.0,
        lr_markers=1e-3,
        lr_extractor=3e-4,
        pool=512,
        eval_images=32,
        eval_every=tier.lambda_steps,
        seed=1,
    )
    started = time.perf_counter()
    train_molm(
        bundle.generator,
        config,
        markers=markers,
        extractor=extractor,
        log=lambda row: None,
        device=bundle.generator.device,
    )
    markers.eval().requires_grad_(False)
    extractor.eval().requires_grad_(False)
    point = _target_point(bundle, markers, extractor, tier.lambda_images, seed=5)
    markers.detach()
    bundle.markers.attach(bundle.generator.vae)  # hand the decoder back to the zoo markers
    return {"lam": lam, "steps": tier.lambda_steps, **point, "seconds": round(time.perf_counter() - started, 1)}


def _pooled(suites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows averaged over seeds: bit accuracy as the mean of seed means, TPR pooled over all images."""
    from mlcore.watermark.calibration import clopper_pearson

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for suite in suites:
        for row in suite["rows"]:
            groups.setdefault((row["method"], row["attack"]), []).append(row)
    pooled = []
    for (method, attack), rows in groups.items():
        n = sum(r["n"] for r in rows)
        out: dict[str, Any] = {
            "method": method,
            "attack": attack,
            "label": rows[0]["label"],
            "family": rows[0]["family"],
            "n": n,
            "seeds": len(rows),
            "bit_accuracy": sum(r["bit_accuracy"] for r in rows) / len(rows),
            "bit_accuracy_range": [min(r["bit_accuracy"] for r in rows), max(r["bit_accuracy"] for r in rows)],
        }
        for fpr in ("0.01", "0.001"):
            hits = round(sum(r[f"tpr_{fpr}"] * r["n"] for r in rows))
            out[f"tpr_{fpr}"] = hits / max(1, n)
            out[f"tpr_{fpr}_ci"] = list(clopper_pearson(hits, n))
        pooled.append(out)
    return pooled


def _fmt_ci(value: float, ci: list[float]) -> str:
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _markdown(
    tier_name: str,
    tier: Tier,
    card: dict[str, Any],
    suites: list[dict[str, Any]],
    pooled: list[dict[str, Any]],
    curve: list[dict[str, Any]],
    operating: dict[str, float],
    latency: str | None,
) -> str:
    lines = [f"# MOLM watermarking benchmark ({tier_name} tier)", ""]
    recipe = card.get("recipe", {})
    lines += [
        "Generator: the zoo's `molm-tiny` — AutoencoderKL (32×32 RGB ↔ 4×8×8 latents) + latent UNet2DModel (DDIM, "
        "10 steps), trained on crops of the offline scikit-image / scikit-learn photos; "
        f"MOLM markers: P = {card.get('P')} LoRA adapters (rank {card.get('rank')}) on each of the decoder's "
        f"{len(card.get('slots', []))} ResNet convolutions → **{card.get('num_bits')}-bit keys**; "
        "a 6-layer CNN extractor. "
        f"Training budget: VAE {recipe.get('vae_steps')} steps, UNet {recipe.get('unet_steps')}, MOLM "
        f"{card.get('training', {}).get('steps')} steps of {card.get('training', {}).get('batch_size')} (λ → "
        f"{card.get('training', {}).get('lam')}) on a shared 2-core CPU. Seeds: {', '.join(map(str, tier.seeds))} "
        f"(new keys and latents each); {tier.keys} keys, {tier.watermarked} watermarked images per attack per seed, "
        f"τ calibrated on {tier.clean:,} unwatermarked generated images × {tier.keys} keys per seed.",
        "",
        "## Targets",
        "",
        "| metric | target | measured (zoo operating point) | met |",
        "|---|---|---|---|",
    ]
    for name, label in (
        ("clean", "bit accuracy, clean"),
        ("jpeg-50", "bit accuracy, JPEG-50"),
        ("crop-0.7", "bit accuracy, resized crop 0.7"),
    ):
        lines.append(
            f"| {label} | ≥ {TARGETS[name]:.2f} | {operating[name]:.3f} | "
            f"{'yes' if operating[name] >= TARGETS[name] else '**no**'} |"
        )
    lines.append(
        f"| PSNR vs unwatermarked | ≥ {TARGETS['psnr']:.0f} dB | {operating['psnr']:.1f} dB | "
        f"{'yes' if operating['psnr'] >= TARGETS['psnr'] else '**no**'} |"
    )
    if operating.get("per_slot"):
        slots = [name.removeprefix("decoder.") for name in card.get("slots", [])]
        cells = ", ".join(f"{n} {v:.2f}" for n, v in zip(slots, operating["per_slot"], strict=False))
        lines += ["", f"Clean bit accuracy per routed convolution (its {card.get('bits_per_symbol')} bits): {cells}."]
    lines += [
        "",
        "## λ trade-off (bit accuracy vs PSNR)",
        "",
        f"Each λ: the zoo markers and extractor fine-tuned {tier.lambda_steps} steps at that λ (all distortions on), "
        f"then measured on {tier.lambda_images} sampled images with fresh keys.",
        "",
        "| λ | PSNR (dB) | SSIM | clean | JPEG-50 | crop-0.7 | meets all targets |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in [{"lam": "zoo", **operating}, *curve]:
        ok = all(p[k] >= TARGETS[k] for k in ("clean", "jpeg-50", "crop-0.7")) and p["psnr"] >= TARGETS["psnr"]
        lam = p["lam"] if isinstance(p["lam"], str) else f"{p['lam']:g}"
        lines.append(
            f"| {lam} | {p['psnr']:.1f} | {p['ssim']:.3f} | {p['clean']:.3f} | {p['jpeg-50']:.3f} | "
            f"{p['crop-0.7']:.3f} | {'yes' if ok else 'no'} |"
        )
    if not any(
        all(p[k] >= TARGETS[k] for k in ("clean", "jpeg-50", "crop-0.7")) and p["psnr"] >= TARGETS["psnr"]
        for p in [operating, *curve]
    ):
        lines += ["", "**No λ meets the targets** at this scale and training budget."]
    lines += [
        "",
        "## False-positive calibration",
        "",
        "| FPR target | τ (bits of " + str(card.get("num_bits")) + ") | binomial τ | FPR on calibration set | "
        "held-out FPR [95 % CI] (τ from the other half) | worst single key | negatives per seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for suite in suites:
        for name in ("0.01", "0.001"):
            t = suite["thresholds"][name]
            lines.append(
                f"| {float(name):.1%} (seed {suites.index(suite)}) | {t['tau']} | {t['binomial_tau']} | "
                f"{t['fpr']:.5f} | "
                f"{_fmt_ci(t['heldout_fpr'], t['heldout_fpr_ci'])} | {t['worst_key_fpr']:.4f} | {t['negatives']:,} |"
            )
    lines += [
        "",
        "## Attacks (pooled over seeds; TPR with 95 % Clopper–Pearson intervals)",
        "",
        "| attack | method | bit accuracy (seed range) | TPR @ 1 % FPR | TPR @ 0.1 % FPR |",
        "|---|---|---|---|---|",
    ]
    order: dict[str, int] = {}
    for row in pooled:  # first appearance: the suite's own order (clean, distortions, regeneration, ...)
        order.setdefault(row["attack"], len(order))
    for row in sorted(pooled, key=lambda r: (order[r["attack"]], r["method"] != "MOLM")):
        rng = row["bit_accuracy_range"]
        note = " (forger's success: lower is better)" if row["family"] == "forgery" else ""
        lines.append(
            f"| {row['label']}{note} | {row['method']} | {row['bit_accuracy']:.3f} ({rng[0]:.3f}–{rng[1]:.3f}) | "
            f"{_fmt_ci(row['tpr_0.01'], row['tpr_0.01_ci'])} | {_fmt_ci(row['tpr_0.001'], row['tpr_0.001_ci'])} |"
        )
    fidelity = suites[0]["fidelity"]
    lines += [
        "",
        f"Fidelity (seed 0): MOLM PSNR {fidelity['psnr']:.1f} dB, SSIM {fidelity['ssim']:.3f} at 32×32; "
        f"DWT-DCT PSNR {fidelity.get('dwtdct_psnr_at_256', float('nan')):.1f} dB at 256×256 "
        "(it refuses smaller images, "
        "so it is embedded in bicubic 256×256 upscales and attacked there).",
    ]
    fails = [
        r
        for r in pooled
        if r["method"] == "MOLM" and r["family"] not in ("clean", "forgery") and r["bit_accuracy"] < 0.8
    ]
    if fails:
        lines += [
            "",
            "**Where MOLM fails here (bit accuracy < 0.8):** "
            + ", ".join(f"{r['attack']} ({r['bit_accuracy']:.2f})" for r in fails)
            + ".",
        ]
    if latency and latency.lstrip().startswith("## "):
        lines += ["", latency.strip()]  # the section brings its own heading
    else:
        lines += ["", "## Verification latency", "", latency or "_The latency section is not available._"]
    return "\n".join(lines)


#: The paper's bit accuracies on SD-1.5 / MS-COCO (card §1, to check against the paper; the attack strengths
#: are not given there), matched to this study's nearest attack.
PAPER_BIT_ACCURACY = {"none": 0.98, "crop-0.7": 0.91, "rotate-15": 0.84, "resize-0.5": 0.90, "jpeg-50": 0.89}
#: A bit accuracy within 0.02 of the paper's counts as reaching it; the MDE must resolve that tolerance.
LEVEL_TOLERANCE = 0.02


def claims(suites: list[dict[str, Any]]) -> list[Any]:
    """Per attack, MOLM's bit accuracy per seed against the paper's level less the tolerance (the card's own
    offline setting is this study, so no scale caveat; the paper's attack strengths are a guess)."""
    from bench.verdicts import Claim, judge

    out = []
    for attack, level in PAPER_BIT_ACCURACY.items():
        values = [
            r["bit_accuracy"]
            for suite in suites
            for r in suite["rows"]
            if r["method"] == "MOLM" and r["attack"] == attack
        ]
        if not values:
            continue
        claim = Claim(
            f"MOLM's bit accuracy under `{attack}` reaches the paper's {level:.2f}",
            "bit accuracy",
            LEVEL_TOLERANCE,
            f"card §1: {level:.2f} on SD-1.5 (tolerance {LEVEL_TOLERANCE})",
        )
        seconds = statistics.fmean(suite["info"]["seconds"] for suite in suites) if suites else None
        out.append(
            judge(
                claim,
                ("MOLM", values),
                (f"paper − {LEVEL_TOLERANCE}", [level - LEVEL_TOLERANCE] * len(values)),
                seconds_per_run=seconds,
                runs_per_seed=1,
            )
        )
    return out


def report_from_cache(results: Path) -> None:
    """``python -m bench watermark --report``: ``watermark.md`` from the cached full-tier rows, keeping the
    latency section the last run wrote (it is measured live); nothing runs."""
    spec = TIERS["full"]
    operating = CACHE.get("operating-point")
    suites = [CACHE.get(f"suite-seed{s}-c{spec.clean}-w{spec.watermarked}") for s in spec.seeds]
    curve = [CACHE.get(f"lambda-{lam:g}-steps{spec.lambda_steps}") for lam in spec.lambdas]
    if operating is None or any(x is None for x in [*suites, *curve]):
        raise RuntimeError("the full tier is not completely cached: run `python -m bench watermark --tier full`")
    previous = json.loads((results / "watermark.json").read_text())
    latency_md = latency_section(newest_latency(results))
    pooled = _pooled(suites)
    markdown = _markdown("full", spec, previous["card"], suites, pooled, curve, operating, latency_md)
    data = {**previous, "pooled": pooled, "suites": suites, "lambda_curve": curve, "operating_point": operating}
    _write(results, markdown, data, suites)


def newest_latency(results: Path) -> str:
    """The report whose latency section is the newest measurement: ``watermark.md``, or
    ``watermark-latency.md`` when ``python -m bench watermark-latency`` wrote it since."""
    own, alone = results / "watermark.json", results / "watermark-latency.json"
    newer = alone.is_file() and written_at(alone) > written_at(own)
    return (results / ("watermark-latency.md" if newer else "watermark.md")).read_text()


def latency_section(markdown: str) -> str | None:
    """The "## Verification latency" section of a written report, up to the next section or the run's
    total time (the sections after it are recomputed: keeping them would repeat them)."""
    if "## Verification latency" not in markdown:
        return None
    section = markdown[markdown.index("## Verification latency") :]
    ends = [
        i for i in (section.find("\n## ", 1), section.find("\n\nTotal benchmark time"), section.find("\n_Written "))
    ]
    return section[: min((i for i in ends if i >= 0), default=len(section))].rstrip()


def embed_section(results: Path) -> list[str]:
    """The embed path's tables on photos at their own size (``python -m bench watermark-embed``), as that
    study last wrote them in ``results``: its main section and its forgery table, a heading level down,
    and after them the forgery study's (``python -m bench watermark-forgery``: the photo markers read and
    forged each way, two levels down; issue #23 asks for them in this report)."""
    kept = report_excerpt(
        results / "watermark-embed.md",
        (
            None,
            "Does the reader find the secret phase",
            "Where the portal's phase search lands",
            "Forgery by averaging",
        ),
    )
    if not kept:
        return []
    aligned = report_excerpt(
        results / "watermark-forgery.md",
        (None, "How well each reads", "Forgery", "The forger who holds the markers"),
        shift=2,
    )
    if aligned:
        aligned = [
            "",
            "### The photo markers each way: folded per-tile keys, per-tile keys and the secret phase, read and forged",
            "",
            f"Copied from bench/results/watermark-forgery.md (`python -m bench watermark-forgery --tier full`, "
            f"written {written_at(results / 'watermark-forgery.json')}).",
            *aligned,
        ]
    return [
        "",
        "## Watermarking the user's own photos (issue #23)",
        "",
        f"Copied from bench/results/watermark-embed.md (`python -m bench watermark-embed --tier full`, written "
        f"{written_at(results / 'watermark-embed.json')}), which also has each learned method seed by seed.",
        *kept,
        *aligned,
    ]


def _write(results: Path, markdown: str, data: dict[str, Any], suites: list[dict[str, Any]]) -> None:
    from bench import verdicts as rule

    found = claims(suites)
    markdown += "\n\n" + "\n".join(rule.section("Verdicts on the paper's levels (computed from intervals)", found))
    markdown += (
        "\n\nPairs: the seeds' suites (new keys and latents each) against the paper's level less the tolerance; "
        "no ceiling applies to a level claim, so the headroom column is empty."
    )
    embed = embed_section(results)
    if embed:
        markdown += "\n" + "\n".join(embed)
    data = {**data, "verdicts": rule.as_json(found)}
    results.mkdir(parents=True, exist_ok=True)
    write_results(results, "watermark", markdown, data)
    print(markdown)


def run(tier: str, results: Path) -> None:
    spec = TIERS[tier]
    cache = full_tier_cache(CACHE, tier)
    if cache is not None:  # every row measures the zoo's MOLM model
        check_zoo_cache(cache, ("molm",), "operating-point suite-* lambda-*")
    started = time.perf_counter()
    bundle = _bundle().to(bench_device())
    card = bundle.card
    operating = _cached(
        cache,
        "operating-point",
        lambda: _target_point(bundle, bundle.markers, bundle.extractor, spec.lambda_images, seed=5),
    )
    suites = [
        _cached(cache, f"suite-seed{s}-c{spec.clean}-w{spec.watermarked}", lambda s=s: _suite(bundle, spec, s))
        for s in spec.seeds
    ]
    curve = [
        _cached(cache, f"lambda-{lam:g}-steps{spec.lambda_steps}", lambda lam=lam: _lambda_point(bundle, lam, spec))
        for lam in spec.lambdas
    ]
    latency_md, latency_data = None, None
    try:
        from bench.watermark_latency import section

        latency_md, latency_data = section(tier)
    except ImportError:
        pass
    except Exception as exc:  # W2's section starts a portal and a worker; its failure must not lose ours
        latency_md, latency_data = f"_The latency section failed: {type(exc).__name__}: {exc}_", {"error": str(exc)}
    pooled = _pooled(suites)
    markdown = _markdown(tier, spec, card, suites, pooled, curve, operating, latency_md)
    markdown += f"\n\nTotal benchmark time: {time.perf_counter() - started:.0f} s."
    data = {
        "tier": tier,
        "config": asdict(spec),
        "targets": TARGETS,
        "operating_point": operating,
        "lambda_curve": curve,
        "pooled": pooled,
        "suites": suites,
        "card": {k: v for k, v in card.items() if k != "history"},
        "latency": latency_data,
    }
    _write(results, markdown, data, suites)
