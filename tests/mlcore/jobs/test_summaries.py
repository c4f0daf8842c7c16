"""The one-line result summary at the top of a finished job's page (``JobSpec.summarize``).

Each kind's scalars below use the exact metric names its ``run`` records with ``ctx.metric(name, value)``
(no ``step``), so a renamed metric makes its sentence disappear here before it does on the page.
"""

from __future__ import annotations

from typing import Any

import pytest

from mlcore.jobs.registry import KIND_MODULES, all_kinds, get_kind

SCALARS: dict[str, dict[str, Any]] = {
    "watermark-train": {"bit_accuracy": 0.975, "psnr": 32.14, "ssim": 0.9412, "num_bits": 48.0, "final_loss_key": 0.08},
    "watermark-generate": {
        "self_check_bit_accuracy": 0.99,
        "min_bits_matched": 44.0,
        "psnr": 33.52,
        "ssim": 0.9523,
        "images": 16.0,
    },
    "watermark-robustness": {
        "psnr": 31.2,
        "ssim": 0.95,
        "molm_none_bit_accuracy": 0.99,
        "molm_none_tpr_0.001": 0.98,
        "molm_jpeg-50_bit_accuracy": 0.91,
        "molm_jpeg-50_tpr_0.001": 0.8,
        "molm_noise-0.05_bit_accuracy": 0.612,
        "molm_noise-0.05_tpr_0.001": 0.3,
        # A forgery's bit accuracy is the forger's success, not an attack on the mark: it must not be "worst".
        "molm_forge-10_bit_accuracy": 0.2,
        "molm_forge-10_tpr_0.001": 0.0,
        "dwtdct_none_bit_accuracy": 0.97,
        "dwtdct_noise-0.05_bit_accuracy": 0.503,
        "dwtdct_noise-0.05_tpr_0.001": 0.0,
    },
    "watermark-verify": {
        "images": 16,
        "detected": 12,
        "inconclusive": 1,
        "not_detected": 3,
        "detected_fraction": 0.75,
        "mean_bits_matched": 40.25,
        "keys_searched": 3,
        "detect_bits": 38.0,
    },
    "video-generate": {
        "seconds_total": 4.21,
        "seconds_per_step": 0.2134,
        "tokens_per_clip": 512,
        "flop_fraction": 0.4,
        "recognised": 0.667,
        "digit_recognised": 1.0,
        "direction_recognised": 0.667,
    },
    "video-train": {
        "final_rf_loss": 0.398,
        "heldout_rf_loss": 0.4123,
        "parameters": 1234567,
        "activated_ffn_parameters": 340000,
        "cpu_seconds": 120.4,
        "flop_fraction_layer0": 0.4,
        "flop_fraction_layer1": 0.42,
    },
    "lora-moe-finetune": {
        "accuracy": 0.912,
        "mean_active_experts": 2.3,
        "zero_expert_rate": 0.0,
        "at_most_two_rate": 0.8,
        "trainable_parameters": 12288.0,
        "seconds": 50.0,
        "accuracy_d2": 0.99,
        "accuracy_d8": 0.72,
        "mean_lambda": 0.5,
    },
    "router-align": {
        "successful_train_samples": 300.0,
        "iid_accuracy_base": 0.8,
        "iid_accuracy_roma": 0.85,
        "shifted_accuracy_base": 0.70,
        "shifted_accuracy_ce_only": 0.72,
        "shifted_accuracy_roma": 0.78,
        "shifted_accuracy_c3po_lite": 0.75,
        "shifted_accuracy_oracle": 0.88,
        "shifted_gap_closed_ce_only": 0.111,
        "shifted_gap_closed_roma": 0.444,
        "shifted_gap_closed_c3po_lite": 0.278,
        "shifted_knn_overlap_roma": 0.3,
    },
    "pointcloud-segment": {
        "points": 1234567.0,
        "voxels": 50000.0,
        "chunks": 3.0,
        "grid_m": 0.1,
        "read_seconds": 1.0,
        "segment_seconds": 12.3,
        "points_per_second": 100371.3,
        "count_ground": 555555.0,
        "count_building": 679012.0,
        "accuracy_vs_file_labels": 0.85,
        "miou_vs_file_labels": 0.6234,
    },
    "pointcloud-train": {
        "parameters": 120000.0,
        "active_parameters": 40000.0,
        "train_seconds": 95.2,
        "final_loss": 0.5,
        "seen_miou": 0.5523,
        "zero_shot_miou": 0.3101,
        "miou_indoor": 0.5,
    },
    "graph-ood": {
        "erm/ood_test_accuracy": 0.65,
        "gsat/ood_test_accuracy": 0.678,
        "disco/ood_test_accuracy": 0.712,
        "disco/ood_val_accuracy": 0.7,
        "disco/ood_test_mask_auc": 0.8,
        "disco/gate_nonzero": 2.1,
        "ood_test_ceiling": 0.95,
    },
}

SCALARS["compress-moe"] = {
    "original/ppl_mean": 20.0,
    "original/bytes_effective": 4_000_000.0,
    "mone@0.25/delta_ppl": 0.6,
    "mone@0.25/bytes_effective": 3_100_000.0,
    "frequency@0.25/delta_ppl": 1.0,
    "frequency@0.25/bytes_effective": 3_100_000.0,
    "mone@0.5/delta_ppl": 2.4,
    "mone@0.5/bytes_effective": 2_200_000.0,
    # The stock export of a variant is a row of its own; it must not be read as a variant "mone@0.25/stock_export".
    "mone@0.25/stock_export/delta_ppl": 0.1,
    "mone@0.25/stock_export/bytes_effective": 3_000_000.0,
}

SENTENCES: dict[str, str] = {
    "compress-moe": "Pruned 25% of experts with mone: -22% memory, +3.0% perplexity; beat frequency by 0.40 perplexity "
    "points.",
    "watermark-train": "Trained 48-bit keys: held-out bit accuracy 97.5% on fresh keys, PSNR 32.1 dB and SSIM 0.941 "
    "against the frozen decoder.",
    "watermark-generate": "Generated 16 watermarked images: self-check bit accuracy 99.0% "
    "(worst image 44 bits matched), PSNR 33.5 dB and SSIM 0.952 against the unmarked decode.",
    "watermark-robustness": "MOLM, clean: bit accuracy 0.990, TPR 98% at 0.1% FPR; worst attack noise-0.05: 0.612 "
    "(DWT-DCT 0.503); fidelity PSNR 31.2 dB.",
    "watermark-verify": "Watermark detected in 12 of 16 images (75%, threshold 38 bits); 1 inconclusive, "
    "3 not detected; 40.2 bits matched on average over 3 key(s) searched.",
    "video-generate": "Sampled in 4.2 s (0.21 s per step, 512 tokens per clip); the judge recognises 67% of clips "
    "(digit 100%, direction 67%); MoGA computes 40% of full attention's score FLOPs.",
    "video-train": "Held-out rectified-flow loss 0.412 (training 0.398) after 120 CPU-seconds; 1,234,567 parameters, "
    "340,000 FFN parameters active per token; MoGA computes 41% of full attention's score FLOPs.",
    "lora-moe-finetune": "Held-out accuracy 91.2% (hardest level d=8: 72.0%) with 12,288 trainable parameters; "
    "2.30 experts active per token and projection, 0.0% with none.",
    "router-align": "On shifted data RoMA reaches 78.0% accuracy (base 70.0%, oracle 88.0%), closing 44% of the oracle "
    "gap against CE-only's 11% and C3PO-lite's 28%.",
    "pointcloud-segment": "Segmented 1,234,567 points in 12.3 s (100,371 points/s); largest class building (55%); "
    "mIoU 0.623 against the file's labels (accuracy 85.0%).",
    "pointcloud-train": "Validation mIoU 0.552 on the training datasets, 0.310 zero-shot; 120,000 parameters "
    "(40,000 active per point), trained in 95 s.",
    "graph-ood": "disco: OOD test accuracy 71.2% (ceiling 95.0%); beat the best baseline, gsat, by 3.4 points.",
}


@pytest.mark.parametrize("kind", sorted(SENTENCES))
def test_each_kind_turns_its_recorded_scalars_into_its_sentence(kind: str) -> None:
    assert get_kind(kind).spec.summary_line(SCALARS[kind]) == SENTENCES[kind]


@pytest.mark.parametrize("kind", sorted(SENTENCES))
def test_a_kind_without_its_headline_metrics_gives_no_summary(kind: str) -> None:
    spec = get_kind(kind).spec
    assert spec.summary_line({}) == ""
    # An unfinished run has only some scalars, and a diverged one stores null (JSON has no NaN).
    assert spec.summary_line({"unrelated": 1.0}) == ""
    assert spec.summary_line(dict.fromkeys(SCALARS[kind])) == ""


def test_summarize_itself_writes_each_sentence_rather_than_summary_line_hiding_an_error() -> None:
    # summary_line swallows errors; the sentence for full scalars must come from summarize itself.
    for kind, scalars in SCALARS.items():
        summarize = get_kind(kind).spec.summarize
        assert summarize is not None
        assert summarize(scalars) == SENTENCES[kind]


def test_optional_parts_are_left_out_when_their_metrics_were_not_recorded() -> None:
    video = {
        k: v
        for k, v in SCALARS["video-generate"].items()
        if k in ("seconds_total", "seconds_per_step", "tokens_per_clip")
    }
    assert (
        get_kind("video-generate").spec.summary_line(video)
        == "Sampled in 4.2 s (0.21 s per step, 512 tokens per clip)."
    )
    verify = {**SCALARS["watermark-verify"], "detect_bits": None}
    assert "threshold" not in get_kind("watermark-verify").spec.summary_line(verify)
    robust = {k: v for k, v in SCALARS["watermark-robustness"].items() if not k.startswith("dwtdct_")}
    assert get_kind("watermark-robustness").spec.summary_line(robust) == (
        "MOLM, clean: bit accuracy 0.990, TPR 98% at 0.1% FPR; worst attack noise-0.05: 0.612; fidelity PSNR 31.2 dB."
    )
    segment = {k: v for k, v in SCALARS["pointcloud-segment"].items() if "file_labels" not in k}
    assert get_kind("pointcloud-segment").spec.summary_line(segment).endswith("largest class building (55%).")
    overflowed = {**segment, "nonfinite_voxel_share": 0.031}
    assert "3.1% of voxels overflowed" in get_kind("pointcloud-segment").spec.summary_line(overflowed)


def test_graph_ood_says_when_the_method_trails_a_baseline_and_leads_with_the_best_when_disco_did_not_run() -> None:
    spec = get_kind("graph-ood").spec
    behind = {**SCALARS["graph-ood"], "gsat/ood_test_accuracy": 0.75}
    assert spec.summary_line(behind).endswith("trailed the best baseline, gsat, by 3.8 points.")
    baselines = {"erm/ood_test_accuracy": 0.65, "gsat/ood_test_accuracy": 0.678}
    assert (
        spec.summary_line(baselines) == "gsat: OOD test accuracy 67.8%; beat the best other method, erm, by 2.8 points."
    )


def test_graph_ood_calls_a_tie_a_tie() -> None:
    tied = {**SCALARS["graph-ood"], "gsat/ood_test_accuracy": 0.712}
    assert get_kind("graph-ood").spec.summary_line(tied).endswith("; level with the best baseline, gsat.")


def test_router_align_falls_back_to_the_iid_split_when_no_shifted_split_was_scored() -> None:
    iid = {k.replace("shifted_", "iid_"): v for k, v in SCALARS["router-align"].items() if not k.startswith("iid_")}
    assert get_kind("router-align").spec.summary_line(iid).startswith("On iid data RoMA reaches 78.0% accuracy")


def test_every_registered_kind_has_a_summary_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # Test-only kinds arrive through MOELAB_EXTRA_KINDS; the shipped ones are KIND_MODULES.
    monkeypatch.delenv("MOELAB_EXTRA_KINDS", raising=False)
    kinds = all_kinds()
    assert {k.module.__name__ for k in kinds} == set(KIND_MODULES)
    missing = [k.name for k in kinds if k.spec.summarize is None]
    assert not missing, f"these job kinds have no summarize: {missing}"
