"""``python -m bench video``: MoGA attention and ProMoE on the bouncing-digits video DiT.

1. **Attention cost.** MoGA (sorted, SDPA per group: the kernel's CPU twin) against full SDPA at
   4k–64k tokens (quick tier up to 16k): wall-time ratio, the FLOP fraction Σ nᵢ²/N² of the *real*
   routing, and the share of each query's full-softmax mass inside its group ("mass recall"), all
   on activations of the trained zoo model's first block (bouncing digits on a larger canvas).
2. **Quality.** Full vs MoGA + local vs local-only, each trained from scratch with the same budget:
   held-out rectified-flow loss on a fixed t grid (shared noise), the judge's accuracy on generated
   clips (digit and direction), and the Fréchet classifier distance (FCD, on the judge's features;
   not FVD). The zoo model, trained longer with the three patterns cycled, is evaluated in each mode too.
   At 1,024 tokens per clip (16 frames of a 32×32 canvas; §2d) a tiny model of every pattern is trained
   from scratch and scored by its held-out RF loss alone: the length where sparse attention starts to
   matter, which §2b's 128 tokens are not.
3. **ProMoE.** Dense vs DiT-MoE (top-2 + shared) vs EC-DiT (expert choice) vs Race-DiT (Expert
   Race: a global top-k over the token × expert scores) vs ProMoE at equal activated FFN parameters
   on one-frame class-conditional generation (static digits), with ProMoE's conditional routing and
   routing contrastive loss ablated and its identity activation replaced by sigmoid / softmax (the
   card's §3 baselines and ablations); several seeds.

Every finished configuration is a row of ``bench/cache/video.jsonl`` so an interrupted full
run resumes. Speeds are ratios measured in the same run (the machine is shared and noisy).

The training runs of parts 2 and 3 (and their evaluation) can run on a GPU: ``--device cuda``, or
``MOELAB_BENCH_DEVICE=cuda`` for ``python -m bench video`` (its dispatcher passes only the
tier). Part 1 always runs on the CPU, since its times are CPU ratios; the zoo model's evaluation
and the judges stay there too. Each training row records its device. Cache names do not carry
the device: a row computed on one device is read back on the other.

    python -m bench video --tier quick              # run what is missing, write the report
    python -m bench.video run --tier full --device cuda   # the same, training on a GPU
    python -m bench.video extend                    # the 600-step study (§2c, §3b), cached
    python -m bench.video long --tier full          # the 1,024-token quality study (§2d) alone, cached
    python -m bench.video report                    # rewrite the report from the cache only

Modules: ``tiers`` (tiers, configurations, cache names), ``cache`` (the compact cache and the
judges' folder), ``measure`` (attention timings, training and evaluation), ``study`` (each part's
rows, cached, and :func:`run`), ``report`` (``video.md``), ``cli`` (``python -m bench.video``).
"""

from bench.common import DEVICE_ENV
from bench.video.cache import CACHE, store
from bench.video.cli import build_parser, main
from bench.video.measure import (
    attention_baselines_case,
    attention_case,
    evaluate,
    score_flop_fraction,
    train_and_evaluate,
    train_long_context,
)
from bench.video.report import (
    attention_baselines_report,
    claims,
    long_context_section,
    long_context_verdicts,
    promoe_section,
    promoe_verdicts,
    quality_section,
    quality_verdicts,
    report,
)
from bench.video.study import (
    _complete_seeds,
    extended_promoe,
    extended_quality,
    long_context_order,
    long_context_row,
    long_context_study,
    promoe_row,
    promoe_study,
    quality_row,
    report_from_cache,
    run,
)
from bench.video.tiers import (
    EXTENDED_SEEDS,
    EXTENDED_STEPS,
    LONG_CONTEXT,
    PROMOE_CONFIGS,
    QUALITY_MODES,
    TIERS,
    _promoe_slug,
    training_device,
)

__all__ = [
    "CACHE",
    "DEVICE_ENV",
    "EXTENDED_SEEDS",
    "EXTENDED_STEPS",
    "LONG_CONTEXT",
    "PROMOE_CONFIGS",
    "QUALITY_MODES",
    "TIERS",
    "_complete_seeds",
    "_promoe_slug",
    "attention_baselines_case",
    "attention_baselines_report",
    "attention_case",
    "build_parser",
    "claims",
    "evaluate",
    "extended_promoe",
    "extended_quality",
    "long_context_order",
    "long_context_row",
    "long_context_section",
    "long_context_study",
    "long_context_verdicts",
    "main",
    "promoe_row",
    "promoe_section",
    "promoe_study",
    "promoe_verdicts",
    "quality_row",
    "quality_section",
    "quality_verdicts",
    "report",
    "report_from_cache",
    "run",
    "score_flop_fraction",
    "store",
    "train_and_evaluate",
    "train_long_context",
    "training_device",
]
