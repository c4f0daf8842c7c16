"""``python -m mlcore.bench video``: MoGA attention and ProMoE on the bouncing-digits video DiT.

1. **Attention cost.** MoGA (sorted, SDPA per group: the kernel's CPU twin) against full SDPA at
   4k–64k tokens (quick tier up to 16k): wall-time ratio, the FLOP fraction Σ nᵢ²/N² of the *real*
   routing, and the share of each query's full-softmax mass inside its group ("mass recall"), all
   on activations of the trained zoo model's first block (bouncing digits on a larger canvas).
2. **Quality.** Full vs MoGA + local vs local-only, each trained from scratch with the same budget:
   held-out rectified-flow loss on a fixed t grid (shared noise), the judge's accuracy on generated
   clips (digit and direction), and the Fréchet classifier distance (FCD, on the judge's features;
   not FVD). The zoo model, trained longer with the three patterns cycled, is evaluated in each mode too.
3. **ProMoE.** Dense vs DiT-MoE (top-2 + shared) vs ProMoE at equal activated FFN parameters on
   one-frame class-conditional generation (static digits), with ProMoE's conditional routing and
   routing contrastive loss ablated; several seeds.

Every finished configuration is cached as JSON under ``bench/cache/video/`` so an interrupted full
run resumes. Speeds are ratios measured in the same run (the machine is shared and noisy).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlcore.bench.common import median_seconds, write_results

CACHE = Path(__file__).resolve().parents[2] / "bench" / "cache" / "video"

TIERS: dict[str, dict[str, Any]] = {
    "quick": {
        "tokens": (4096, 8192, 16384),
        "quality_steps": 150,
        "quality_seeds": (0,),
        "eval_clips": 40,
        "sample_steps": 12,
        "promoe_steps": 150,
        "promoe_seeds": (0,),
        "judge_steps": 300,
    },
    "full": {
        "tokens": (4096, 8192, 16384, 32768, 65536),
        "quality_steps": 1500,
        "quality_seeds": (0, 1, 2),
        "eval_clips": 200,
        "sample_steps": 20,
        "promoe_steps": 1500,
        "promoe_seeds": (0, 1, 2),
        "judge_steps": 1500,
    },
}

PROMOE_CONFIGS: dict[str, dict[str, Any]] = {
    "dense": {"ffn": "dense"},
    "DiT-MoE (top-2 + shared, Switch balance)": {"ffn": "moe"},
    "ProMoE": {"ffn": "promoe"},
    "ProMoE − conditional routing": {"ffn": "promoe", "promoe_conditional": False},
    "ProMoE − contrastive loss": {"ffn": "promoe", "contrastive_weight": 0.0},
}
SMALL = {"dim": 64, "depth": 4, "heads": 4, "ffn_width": 256, "num_groups": 4, "window": (4, 2, 2)}


def _cached(name: str, compute: Any) -> dict[str, Any]:
    path = CACHE / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    result = compute()
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    return result


# ------------------------------------------------------------------------------------ 1. attention


def _zoo_model() -> tuple[Any, bool]:
    import torch

    from mlcore.video.dit import VideoDiT
    from mlcore.video.zoo import CHECKPOINTS

    folder = CHECKPOINTS / "video-dit-digits"
    if (folder / "manifest.json").is_file():
        return VideoDiT.from_pretrained(folder, torch_dtype=torch.float32).eval(), True
    torch.manual_seed(0)
    return VideoDiT(**SMALL, attention="moga").eval(), False


def attention_case(tokens: int) -> dict[str, Any]:
    """One sequence length: activations of the zoo model's first block on a clip with ``tokens`` tokens."""
    import torch
    import torch.nn.functional as F

    from kernels.group_attention import group_attention_torch
    from mlcore.data.video import bouncing_digits
    from mlcore.video.attention import in_group_mass
    from mlcore.video.dit import grid_positions, modulate, sincos

    model, trained = _zoo_model()
    frames = 16
    side = round((tokens / frames) ** 0.5) * 4  # pixels: tokens = frames · (side/4)²
    data = bouncing_digits(1, frames=frames, size=side, split="test", seed=1)
    x0 = torch.from_numpy(data.clips).unsqueeze(1)
    t = torch.tensor([0.5])
    x = 0.5 * x0 + 0.5 * torch.randn(x0.shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        grid = model.token_grid(frames, side, side)
        h = model.embed(model.patchify(x)) + grid_positions(grid, model.config.dim, x.device)
        c = (
            model.time_mlp(sincos(t * 1000.0, model.config.dim))
            + model.digit_embed(torch.from_numpy(data.digits))
            + model.direction_embed(torch.from_numpy(data.directions))
        )
        block = model.blocks[0]
        shift, scale = block.modulation(c).chunk(6, dim=-1)[:2]
        hn = modulate(block.norm1(h), shift, scale)
        attn = block.attn
        q, k, v = attn.qkv(hn).reshape(1, -1, 3, attn.heads, attn.dim // attn.heads).permute(2, 0, 3, 1, 4)
        routing = attn.router(hn.reshape(-1, attn.dim))
        groups = routing.expert_ids[:, 0].reshape(1, -1)
        n = groups.shape[1]
        sizes = torch.bincount(groups[0], minlength=attn.num_groups).double()
        flop_fraction = float((sizes**2).sum() / n**2)
        # Long sequences take seconds per call on a shared CPU: fewer repeats there.
        repeats, warmup = (3, 1) if n <= 4096 else (1, 0)
        full_s = median_seconds(lambda: F.scaled_dot_product_attention(q, k, v), repeats=repeats, warmup=warmup)
        moga_s = median_seconds(lambda: group_attention_torch(q, k, v, groups), repeats=repeats, warmup=warmup)
        # Mass recall on 256 query rows (the full softmax over all keys for every query is O(N²) memory).
        rows = torch.randperm(n, generator=torch.Generator().manual_seed(0))[:256]
        mass = in_group_mass(q[:, :, rows], k, groups[:, rows], key_groups=groups)
        random_groups = torch.randint(0, attn.num_groups, (1, n), generator=torch.Generator().manual_seed(1))
        random_mass = in_group_mass(q[:, :, rows], k, random_groups[:, rows], key_groups=random_groups)
    return {
        "tokens": n,
        "grid": list(grid),
        "groups": attn.num_groups,
        "group_sizes": sizes.long().tolist(),
        "trained_router": trained,
        "full_ms": 1000 * full_s,
        "moga_ms": 1000 * moga_s,
        "time_ratio": moga_s / full_s,
        "flop_fraction": flop_fraction,
        "mass_recall": float(mass.mean()),
        "mass_recall_random_groups": float(random_mass.mean()),
    }


# -------------------------------------------------------------------------------------- 2. quality


def _judge(static: bool, steps: int) -> Any:
    """The zoo judge for clips; a static judge trained here (and cached) for the one-frame study."""
    import torch

    from mlcore.video.classifier import ClipClassifier, train_classifier
    from mlcore.video.zoo import CHECKPOINTS, load_judge

    if not static and (CHECKPOINTS / "video-judge" / "manifest.json").is_file():
        return load_judge(), None
    folder = CACHE / f"judge-{'static' if static else 'clips'}-{steps}"
    if (folder / "config.json").is_file():
        info = json.loads((folder / "judgement.json").read_text())
        return ClipClassifier.from_pretrained(folder, torch_dtype=torch.float32).eval(), info
    frames = 1 if static else 8
    model, result = train_classifier(frames=frames, static=static, steps=steps, seed=0)
    model.save_pretrained(folder)
    info = vars(result)
    (folder / "judgement.json").write_text(json.dumps(info))
    return model.eval(), info


def evaluate(
    model: Any, judge: Any, *, frames: int, static: bool, clips: int, sample_steps: int, attention: str | None
) -> dict[str, Any]:
    import torch

    from mlcore.data.video import DIRECTIONS, NUM_DIGITS, bouncing_digits
    from mlcore.video.classifier import as_batch, clip_features
    from mlcore.video.classifier import judge as run_judge
    from mlcore.video.metrics import frechet_distance
    from mlcore.video.pipeline import generate, heldout_loss

    held = heldout_loss(model, clips=64, frames=frames, static=static, attention=attention)  # type: ignore[arg-type]
    digits = torch.arange(clips) % NUM_DIGITS
    directions = (torch.arange(clips) // NUM_DIGITS) % len(DIRECTIONS)
    started = time.perf_counter()
    samples = torch.cat(
        [
            generate(
                model,
                digits[s : s + 40],
                directions[s : s + 40],
                frames=frames,
                steps=sample_steps,
                guidance=3.0,
                seed=s,
                attention=attention,
            )  # type: ignore[arg-type]
            for s in range(0, clips, 40)
        ]
    )
    sample_seconds = time.perf_counter() - started
    verdict = run_judge(judge, samples, digits, directions)
    real = bouncing_digits(max(clips, 200), frames=frames, split="test", seed=3, static=static)
    fcd = frechet_distance(clip_features(judge, samples), clip_features(judge, as_batch(real.clips)))
    return {
        "heldout_rf_loss": held["mean"],
        "heldout_by_t": {k: v for k, v in held.items() if k != "mean"},
        "accuracy": verdict.accuracy,
        "digit_accuracy": verdict.digit_accuracy,
        "direction_accuracy": verdict.direction_accuracy,
        "fcd": fcd,
        "sample_seconds": sample_seconds,
    }


def train_and_evaluate(
    settings: dict[str, Any], *, steps: int, seed: int, frames: int, static: bool, judge: Any, tier: dict[str, Any]
) -> dict[str, Any]:
    import torch

    from mlcore.video.dit import VideoDiT, activated_ffn_parameters, parameter_count
    from mlcore.video.pipeline import TrainConfig, train

    model_args = {k: v for k, v in settings.items() if k != "contrastive_weight"}
    torch.manual_seed(seed)
    patch = (1, 2, 2) if static else (1, 4, 4)
    window = (1, 4, 4) if static else (4, 2, 2)
    model = VideoDiT(**{**SMALL, "patch_size": patch, "window": window, **model_args})
    config = TrainConfig(
        steps=steps,
        batch_size=16,
        lr=1e-3,
        warmup=min(100, steps // 10),
        frames=frames,
        static=static,
        seed=seed,
        contrastive_weight=settings.get("contrastive_weight", 1.0),
    )
    state = train(model, config)
    result = evaluate(
        model,
        judge,
        frames=frames,
        static=static,
        clips=tier["eval_clips"],
        sample_steps=tier["sample_steps"],
        attention=None,
    )
    return {
        **result,
        "steps": steps,
        "seed": seed,
        "train_cpu_seconds": state.cpu_seconds,
        "final_rf_loss": statistics.fmean(r[1] for r in state.losses[-50:]),
        "parameters": parameter_count(model),
        "activated_ffn_parameters": activated_ffn_parameters(model),
    }


# ------------------------------------------------------------------------------------------ report


@dataclass
class Table:
    head: list[str]
    rows: list[list[str]]

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.head) + " |", "|" + "---|" * len(self.head)]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in self.rows])


def _mean_sd(values: list[float], fmt: str = ".4f") -> str:
    if len(values) == 1:
        return format(values[0], fmt)
    return f"{statistics.fmean(values):{fmt}} ± {statistics.stdev(values):{fmt}}"


def promoe_study(settings: dict[str, Any]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any] | None]:
    """Part 3: every ProMoE configuration × seed (cached), with the static judge trained here."""
    static_judge, static_info = _judge(True, settings["judge_steps"])
    promoe: dict[str, list[dict[str, Any]]] = {}
    for label, config in PROMOE_CONFIGS.items():
        for seed in settings["promoe_seeds"]:
            slug = label.split(" ")[0].lower() + (
                "-nocond" if "conditional" in label else "-norcl" if "contrastive" in label else ""
            )
            name = f"promoe-{slug}-s{seed}-{settings['promoe_steps']}"
            promoe.setdefault(label, []).append(
                _cached(
                    name,
                    lambda config=config, seed=seed: train_and_evaluate(
                        config,
                        steps=settings["promoe_steps"],
                        seed=seed,
                        frames=1,
                        static=True,
                        judge=static_judge,
                        tier=settings,
                    ),
                )
            )
    return promoe, static_info


def run(tier: str, results: Path) -> None:
    import torch

    torch.set_num_threads(1)
    settings = TIERS[tier]
    data: dict[str, Any] = {
        "tier": tier,
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()},
    }

    attention_rows = [_cached(f"attention-{n}", lambda n=n: attention_case(n)) for n in settings["tokens"]]
    data["attention"] = attention_rows

    judge, _ = _judge(False, settings["judge_steps"])
    zoo, trained = _zoo_model()
    zoo_rows = {}
    if trained:
        for mode in ("full", "moga", "local"):
            zoo_rows[mode] = _cached(
                f"zoo-{mode}-{settings['eval_clips']}",
                lambda mode=mode: evaluate(
                    zoo,
                    judge,
                    frames=8,
                    static=False,
                    clips=settings["eval_clips"],
                    sample_steps=settings["sample_steps"],
                    attention=mode,
                ),
            )
    data["zoo"] = zoo_rows

    quality: dict[str, list[dict[str, Any]]] = {}
    for mode in ("full", "moga", "local"):
        for seed in settings["quality_seeds"]:
            name = f"quality-{mode}-s{seed}-{settings['quality_steps']}"
            quality.setdefault(mode, []).append(
                _cached(
                    name,
                    lambda mode=mode, seed=seed: train_and_evaluate(
                        {"attention": mode},
                        steps=settings["quality_steps"],
                        seed=seed,
                        frames=8,
                        static=False,
                        judge=judge,
                        tier=settings,
                    ),
                )
            )
    data["quality"] = quality

    data["promoe"], data["static_judge"] = promoe_study(settings)
    write_results(results, "video", report(data), data)


def report(data: dict[str, Any]) -> str:
    tier = data["tier"]
    lines = [f"# Video: MoGA attention and ProMoE on bouncing digits ({tier} tier)", ""]
    att = data["attention"]
    trained = all(r["trained_router"] for r in att)
    router = "trained router" if trained else "UNTRAINED router: the zoo model was missing"
    lines += [
        "## 1. Attention cost: MoGA (twin: sort, SDPA per group) vs full SDPA, CPU, 1 thread",
        "",
        f"Activations of the zoo model's first block ({router}), "
        "bouncing digits on a larger canvas (16 frames), M = 4 groups, 4 heads × 16 dims. Mass recall: the share of a "
        "query's full-softmax mass inside its own group (256 sampled queries); a random partition gives ≈ 1/M.",
        "",
        Table(
            [
                "tokens",
                "group sizes",
                "full ms",
                "MoGA ms",
                "time ratio",
                "FLOP fraction Σnᵢ²/N²",
                "mass recall",
                "mass recall, random groups",
            ],
            [
                [
                    str(r["tokens"]),
                    "/".join(map(str, r["group_sizes"])),
                    f"{r['full_ms']:.0f}",
                    f"{r['moga_ms']:.0f}",
                    f"{r['time_ratio']:.2f}",
                    f"{r['flop_fraction']:.3f}",
                    f"{r['mass_recall']:.3f}",
                    f"{r['mass_recall_random_groups']:.3f}",
                ]
                for r in att
            ],
        ).markdown(),
        "",
    ]
    if data["zoo"]:
        lines += [
            "## 2a. The zoo model (trained with the three patterns cycled) evaluated in each mode",
            "",
            Table(
                ["attention", "held-out RF loss", "judge: both right", "digit", "direction", "FCD (judge features)"],
                [
                    [
                        m,
                        f"{r['heldout_rf_loss']:.4f}",
                        f"{r['accuracy']:.3f}",
                        f"{r['digit_accuracy']:.3f}",
                        f"{r['direction_accuracy']:.3f}",
                        f"{r['fcd']:.2f}",
                    ]
                    for m, r in data["zoo"].items()
                ],
            ).markdown(),
            "",
        ]
    q = data["quality"]
    steps = next(iter(q.values()))[0]["steps"]
    lines += [
        f"## 2b. Quality, each pattern trained from scratch ({steps} steps, batch 16, seeds: {len(q['full'])})",
        "",
        Table(
            ["attention", "held-out RF loss", "judge: both right", "digit", "direction", "FCD", "train CPU s"],
            [
                [
                    m,
                    _mean_sd([r["heldout_rf_loss"] for r in rs]),
                    _mean_sd([r["accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["digit_accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["direction_accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["fcd"] for r in rs], ".2f"),
                    f"{statistics.fmean(r['train_cpu_seconds'] for r in rs):.0f}",
                ]
                for m, rs in q.items()
            ],
        ).markdown(),
        "",
    ]
    p = data["promoe"]
    first = next(iter(p.values()))[0]
    info = data.get("static_judge") or {}
    lines += [
        f"## 3. ProMoE: one-frame class-conditional generation ({first['steps']} steps, seeds: {len(p['dense'])})",
        "",
        "Equal activated FFN parameters per conditional token (dense 4d; DiT-MoE 2 experts × d + shared 2d; "
        "ProMoE 1 expert × 2d + shared 2d). "
        f"Static judge held-out accuracy: {info.get('digit_accuracy', float('nan')):.3f}.",
        "",
        Table(
            ["FFN", "activated FFN params", "total params", "held-out RF loss", "judge accuracy", "FCD"],
            [
                [
                    label,
                    str(rs[0]["activated_ffn_parameters"]),
                    str(rs[0]["parameters"]),
                    _mean_sd([r["heldout_rf_loss"] for r in rs]),
                    _mean_sd([r["accuracy"] for r in rs], ".3f"),
                    _mean_sd([r["fcd"] for r in rs], ".2f"),
                ]
                for label, rs in p.items()
            ],
        ).markdown(),
        "",
        "## Claims",
        "",
    ]
    lines += claims(data)
    return "\n".join(lines)


def _yes(holds: bool) -> str:
    return "**yes**" if holds else "**no**"


def claims(data: dict[str, Any]) -> list[str]:
    out = []
    att = data["attention"]
    biggest = att[-1]
    out.append(
        f"- MoGA cheaper than full attention at long context: at {biggest['tokens']} tokens the twin takes "
        f"{biggest['time_ratio']:.2f}× full SDPA's time for a FLOP fraction of {biggest['flop_fraction']:.2f} "
        f"({_yes(biggest['time_ratio'] < 1)}; the paper: 1.7× faster end to end, 71% sparsity)."
    )
    recall, random_recall = biggest["mass_recall"], biggest["mass_recall_random_groups"]
    out.append(
        f"- The learned router keeps more softmax mass in-group than a random partition: {recall:.3f} vs "
        f"{random_recall:.3f} ({_yes(recall > random_recall)})."
    )
    q = data["quality"]
    loss = {m: statistics.fmean(r["heldout_rf_loss"] for r in rs) for m, rs in q.items()}
    out.append(
        f"- MoGA + local ≈ full and better than local-only (held-out RF loss): full {loss['full']:.4f}, "
        f"MoGA {loss['moga']:.4f}, local {loss['local']:.4f} → MoGA within 5% of full: "
        f"{_yes(loss['moga'] <= 1.05 * loss['full'])}; "
        f"MoGA below local: {'**yes**' if loss['moga'] < loss['local'] else '**no**'}."
    )
    p = data["promoe"]
    ploss = {k: statistics.fmean(r["heldout_rf_loss"] for r in rs) for k, rs in p.items()}
    dense, moe, pro = ploss["dense"], ploss["DiT-MoE (top-2 + shared, Switch balance)"], ploss["ProMoE"]
    out.append(
        f"- ProMoE beats dense and DiT-MoE at equal activated parameters (held-out RF loss): dense {dense:.4f}, "
        f"DiT-MoE "
        f"{moe:.4f}, ProMoE {pro:.4f} → {'**yes**' if pro < min(dense, moe) else '**no**'}."
    )
    out.append(
        f"- Ablations: without conditional routing {ploss['ProMoE − conditional routing']:.4f}, "
        f"without the contrastive "
        f"loss {ploss['ProMoE − contrastive loss']:.4f} (the paper: each removal hurts)."
    )
    if data["tier"] == "quick":
        out.append(
            "- Quick tier: a few hundred steps on a shared 2-core CPU; models this young are far from converged, so "
            "the quality and ProMoE rows are a smoke test, not evidence. Run `--tier full` for the study."
        )
    return out
