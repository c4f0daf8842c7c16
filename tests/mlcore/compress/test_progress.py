"""compress-moe fills its bar inside its long stages: calibration batch by batch, every evaluation
window by window, and the page's stage text says which batch or window it is on."""

from __future__ import annotations

import torch

from mlcore.compress.calibrate import calibrate
from mlcore.compress.methods import make_plan
from mlcore.hf import adapt, load_model
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare


def test_calibration_reports_every_batch_with_the_sequences_done(tiny_lm) -> None:
    heard: list[tuple[int, int]] = []
    windows = torch.randint(1, 300, (7, 16), generator=torch.Generator().manual_seed(0))
    calibrate(adapt(load_model(tiny_lm)), windows, batch_size=3, on_batch=lambda *args: heard.append(args))
    assert heard == [(3, 7), (6, 7), (7, 7)]


def test_naee_reports_each_layer_it_enumerates(tiny_lm) -> None:
    model = load_model(tiny_lm)
    windows = torch.randint(1, 300, (4, 16), generator=torch.Generator().manual_seed(0))
    calibration = calibrate(adapt(model), windows, batch_size=2, keep_inputs=32)
    heard: list[tuple[int, int]] = []
    make_plan("naee", adapt(model), calibration, 6, scope="layer", on_layer=lambda *args: heard.append(args))
    assert heard == [(1, 2), (2, 2)]


def test_a_compression_job_says_which_batch_and_window_it_is_on_and_never_goes_back(tiny_lm, calibration_file) -> None:
    kind = get_kind("compress-moe")
    ctx = InMemoryContext()
    raw = {
        "model": str(tiny_lm),
        "methods": "mone,naee",
        "ratios": "0.25",
        "samples": 16,
        "seq_len": 512,  # 8 sequences a batch: two calibration batches
        "eval_windows": 8,
        "cloze_items": 4,
    }
    params, inputs = prepare(
        kind, raw, {"calibration_file": [calibration_file]}, resolver=LocalResolver(), workdir=ctx.workdir
    )
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    fractions = [fraction for fraction, _ in ctx.progress_history]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    stages = [stage for _, stage in ctx.progress_history]
    assert "calibrating: batch 1 of 2" in stages and "calibrating: batch 2 of 2" in stages
    assert any(s.startswith("evaluating the original model: shakespeare perplexity, window ") for s in stages)
    assert any(s.startswith("evaluating mone at ratio 0.25: stdlib-docs cloze, item ") for s in stages)
    assert "naee at ratio 0.25: choosing experts: layer 2 of 2" in stages
    assert any(s.startswith("evaluating mone at ratio 0.25 without novices: ") for s in stages)
    # Inner reports move the bar: many distinct values, not a handful of jumps between stages.
    assert len(set(fractions)) > 20
