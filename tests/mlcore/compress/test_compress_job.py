import json
import shutil
import zipfile

import pytest

from mlcore.hf import load_model
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.jobs.spec import JobError

FAST = {"samples": 8, "seq_len": 32, "eval_windows": 8, "cloze_items": 4, "seed": 0}


def run(raw, files=None):
    kind = get_kind("compress-moe")
    ctx = InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_compresses_a_tiny_model_end_to_end(tiny_lm, calibration_file):
    outcome, ctx = run(
        {"model": str(tiny_lm), "methods": "mone,frequency,naee", "ratios": "0.25,0.5"},
        {"calibration_file": [calibration_file]},
    )
    assert outcome.status == "succeeded", outcome.traceback
    assert {"checkpoint", "report.json", "report.csv"} <= set(ctx.artifacts)
    report = json.loads((ctx.artifacts["report.json"].path).read_text())
    assert [(r["method"], r["ratio"]) for r in report["compressed"]] == [
        (m, r) for r in (0.25, 0.5) for m in ("mone", "frequency", "naee")
    ]
    first = report["compressed"][0]
    assert first["parameters_effective"] < report["original"]["parameters_effective"]
    assert set(ctx.charts) >= {"frequency", "variance", "score", "pruned-map-mone-0.25", "ppl-vs-ratio"}
    # The saved checkpoint is the first method at the first ratio, and it reloads with its novices.
    checkpoint = ctx.artifacts["checkpoint"].path
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["moelab_compression"]["method"] == "mone"
    assert len(config["moelab_compression"]["novices"]["0"]) == 2
    from mlcore.hf import adapt

    assert len(adapt(load_model(checkpoint)).novices[0]) == 2
    assert ctx.registrations[0].kind == "hf-moe-lm"
    assert ctx.metrics.scalars["original/ppl_mean"] > 1


def test_it_calibrates_on_a_built_in_corpus_and_keeps_a_given_count(tiny_lm):
    raw = {"model": str(tiny_lm), "dataset": "zoo:stdlib-docs", "methods": "reap", "cloze_items": 0, "keep": 6}
    outcome, ctx = run(raw)
    assert outcome.status == "succeeded", outcome.traceback
    assert any("stdlib-docs" in line for line in ctx.lines)
    row = json.loads(ctx.artifacts["report.json"].path.read_text())["compressed"][0]
    assert (row["keep"], row["ratio"]) == (6, 0.25)


def _failure(raw, files=None):
    try:
        outcome, ctx = run(raw, files)
    except JobError as exc:  # refused while preparing inputs
        return str(exc), None
    assert outcome.status == "failed"
    assert not ctx.artifacts and not ctx.registrations
    return outcome.error, ctx


def test_a_directory_that_is_not_an_moe_model_is_refused(tmp_path, tiny_lm):
    from transformers import LlamaConfig

    config = LlamaConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    config.save_pretrained(tmp_path)
    error, _ = _failure({"model": str(tmp_path)})
    assert "not a supported" in error or "llama" in error


def test_a_checkpoint_with_pickle_files_only_is_refused(tmp_path, tiny_lm):
    shutil.copy(tiny_lm / "config.json", tmp_path / "config.json")
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really")
    error, _ = _failure({"model": str(tmp_path)})
    assert "pickle" in error and "safetensors" in error


def test_a_checkpoint_whose_shapes_do_not_match_its_config_is_refused(tmp_path, tiny_lm):
    shutil.copytree(tiny_lm, tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    config["moe_intermediate_size"] = 20
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    error, _ = _failure({"model": str(tmp_path / "model")})
    assert "do not match" in error


def test_an_empty_calibration_file_is_refused(tmp_path, tiny_lm):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    error, _ = _failure({"model": str(tiny_lm)}, {"calibration_file": [empty]})
    assert "empty" in error
    blank = tmp_path / "blank.txt"
    blank.write_text("   \n \n")
    error, _ = _failure({"model": str(tiny_lm)}, {"calibration_file": [blank]})
    assert "Calibration data" in error and "0 characters" in error


def test_a_ratio_that_would_prune_every_expert_is_refused(tiny_lm):
    error, _ = _failure({"model": str(tiny_lm), "ratios": "0.99"})
    assert "prune every expert" in error
    error, _ = _failure({"model": str(tiny_lm), "keep": 1})
    assert "top_k" in error


def test_an_archive_with_path_traversal_is_refused(tmp_path, tiny_lm):
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(tiny_lm / "config.json", "config.json")
        zf.writestr("../../escaped.txt", "gotcha")
    error, _ = _failure({"model": str(tiny_lm)}, {"checkpoint": [archive]})
    assert "outside the archive" in error
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_an_uploaded_archive_of_a_checkpoint_is_compressed(tmp_path, tiny_lm):
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in tiny_lm.iterdir():
            zf.write(path, f"tiny/{path.name}")
    outcome, _ctx = run({"methods": "frequency", "cloze_items": 0, "eval_windows": 8}, {"checkpoint": [archive]})
    assert outcome.status == "succeeded", outcome.traceback


@pytest.mark.parametrize("ratios", ["1", "0,1.5"])
def test_ratios_of_one_or_more_fail_validation(ratios, tiny_lm):
    with pytest.raises(JobError):
        run({"model": str(tiny_lm), "ratios": ratios})


def test_naee_on_too_many_experts_is_refused_before_any_artifact(tmp_path):
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config
    from mlcore.zoo.tokenizer import save_hf_tokenizer, train_bpe

    save_hf_tokenizer(train_bpe(["some text " * 50], vocab_size=280), tmp_path, model_max_length=64)
    config = tiny_config("qwen3_moe", num_experts=32, vocab_size=300, max_position_embeddings=64, eos_token_id=0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    error, _ = _failure({"model": str(tmp_path), "methods": "mone,naee", "ratios": "0.5"})
    assert "C(32, 16)" in error


def test_a_cancelled_job_stops_during_calibration(tiny_lm):
    kind = get_kind("compress-moe")
    ctx = InMemoryContext()
    params, inputs = prepare(kind, {**FAST, "model": str(tiny_lm)}, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    ctx.cancel()
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "cancelled"
    assert not ctx.artifacts


def test_mone_outputs_load_right_in_stock_transformers_or_refuse_loudly(tiny_lm):
    import torch
    from transformers import AutoModelForCausalLM

    outcome, ctx = run({"model": str(tiny_lm), "methods": "mone", "ratios": "0.25", "cloze_items": 0})
    assert outcome.status == "succeeded", outcome.traceback
    ids = torch.randint(3, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    checkpoint, export = ctx.artifacts["checkpoint"].path, ctx.artifacts["checkpoint-stock"].path
    with pytest.raises(ValueError, match="custom code"):
        AutoModelForCausalLM.from_pretrained(checkpoint)
    with torch.no_grad():
        ours = load_model(checkpoint)(ids).logits
        remote = AutoModelForCausalLM.from_pretrained(checkpoint, trust_remote_code=True, dtype=torch.float32)
        torch.testing.assert_close(remote.eval()(ids).logits, ours, rtol=0, atol=1e-5)
        stock = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32).eval()
        torch.testing.assert_close(stock(ids).logits, load_model(export)(ids).logits, rtol=0, atol=1e-5)
    assert stock.config.num_experts == 6
    for folder in (checkpoint, export):
        assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= {p.name for p in folder.iterdir()}
    row = json.loads(ctx.artifacts["report.json"].path.read_text())["compressed"][0]
    assert row["stock_export_ppl_mean"] > 1 and row["stock_export_ppl_mean"] != row["ppl_mean"]


def test_a_checkpoint_without_a_tokenizer_is_refused_before_its_weights_load(tmp_path, tiny_lm):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(tiny_lm / "config.json", folder / "config.json")
    (folder / "model.safetensors").write_bytes(b"")  # never read: the tokenizer check comes first
    message, _ = _failure({"model": str(folder)})
    assert "has no tokenizer" in message


def test_layer_by_layer_it_reports_and_saves_what_the_whole_model_gives(tiny_lm, calibration_file):
    import torch

    raw = {"model": str(tiny_lm), "methods": "mone,frequency", "ratios": "0.25"}
    results = {}
    for load in ("whole", "layer-by-layer"):
        outcome, ctx = run({**raw, "load": load}, {"calibration_file": [calibration_file]})
        assert outcome.status == "succeeded", outcome.traceback
        assert any(line.startswith(f"loading {load}:") for line in ctx.lines)
        results[load] = ctx
    whole, streamed = results["whole"].metrics.scalars, results["layer-by-layer"].metrics.scalars
    variants = ("original", "mone@0.25", "frequency@0.25", "mone@0.25/stock_export")
    for name in (f"{variant}/ppl_mean" for variant in variants):
        assert streamed[name] == pytest.approx(whole[name], rel=1e-5), name
    assert streamed["mone@0.25/bytes_effective"] == whole["mone@0.25/bytes_effective"]
    ids = torch.randint(3, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    for artifact in ("checkpoint", "checkpoint-stock"):
        logits = [
            load_model(results[load].artifacts[artifact].path)(ids, use_cache=False).logits
            for load in ("whole", "layer-by-layer")
        ]
        torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=1e-5)
    # Only the saved variant and its stock export stay on disk.
    assert sorted(p.name for p in results["layer-by-layer"].workdir.glob("variant-*")) == []


def test_layer_by_layer_it_refuses_methods_that_need_every_experts_weights(tiny_lm, calibration_file):
    outcome, _ = run(
        {"model": str(tiny_lm), "methods": "mone,hc-smoe", "load": "layer-by-layer"},
        {"calibration_file": [calibration_file]},
    )
    assert outcome.status == "failed" and "hc-smoe need every expert's weights" in outcome.error


def test_the_report_shows_novice_gate_mass_per_source_and_what_calibration_covered(tiny_lm):
    raw = {"model": str(tiny_lm), "dataset": "zoo:shakespeare", "methods": "mone,frequency", "ratios": "0.5"}
    outcome, ctx = run(raw)
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    shares = {k: v for k, v in scalars.items() if k.startswith("mone@0.5/novice_mass_")}
    assert set(shares) == {f"mone@0.5/novice_mass_{s}" for s in ("shakespeare", "stdlib-docs", "stdlib-source")}
    assert all(0 < v < 1 for v in shares.values())
    assert not any(k.startswith("frequency@0.5/novice_mass") for k in scalars)  # deletion leaves no novices
    assert "novice-mass-mone@0.5" in ctx.charts
    assert any(line.startswith("calibration covers shakespeare only") for line in ctx.lines)
    row = json.loads(ctx.artifacts["report.json"].path.read_text())["compressed"][0]
    assert row["novice_mass"]["shakespeare"] == pytest.approx(scalars["mone@0.5/novice_mass_shakespeare"])


def test_novice_traffic_counts_gate_mass_on_novices_per_source_and_warns_when_high():
    import torch

    from mlcore.compress.report import NoviceTraffic
    from mlcore.jobs.compress_moe import _report_traffic

    traffic = NoviceTraffic({0: [2, 3]})
    ids, gates = torch.tensor([[0, 2], [3, 1]]), torch.tensor([[0.6, 0.4], [0.5, 0.5]])
    traffic.start("prose")
    traffic.on_routing(0, ids, gates, None)
    traffic.on_routing(1, ids, gates, None)  # a layer without novices adds nothing
    traffic.start("code")
    traffic.on_routing(0, ids, torch.tensor([[0.9, 0.1], [0.1, 0.9]]), None)
    traffic.start(None)  # the cloze suite: not a source
    traffic.on_routing(0, ids, gates, None)
    assert traffic.shares() == pytest.approx({"prose": 0.45, "code": 0.1})
    ctx = InMemoryContext()
    _report_traffic(ctx, traffic.shares(), "code", "mone@0.25")
    (warning,) = [line for line in ctx.lines if line.startswith("warning:")]
    assert "prose 45%" in warning and "code" not in warning.split(":")[2]


@pytest.mark.parametrize("load", ["whole", "layer-by-layer"])
def test_a_float16_checkpoint_is_compressed_into_float16_holding_what_was_evaluated(tiny_lm, tmp_path, load):
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    half = tmp_path / "half"
    model = AutoModelForCausalLM.from_pretrained(tiny_lm, dtype=torch.float16)
    # Experts whose outputs matter (the random ones answer ~1e-4), so a novice vector's last bits show in the logits.
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.experts.down_proj.mul_(200)
    model.save_pretrained(half)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tiny_lm / name, half / name)
    outcome, ctx = run({"model": str(half), "dataset": "zoo:stdlib-docs", "methods": "mone", "load": load})
    assert outcome.status == "succeeded", outcome.traceback
    checkpoint = ctx.artifacts["checkpoint"].path
    dtypes = set()
    for file in [*checkpoint.glob("model*.safetensors"), checkpoint / "moelab_experts.safetensors"]:
        with safe_open(file, framework="pt") as shard:
            dtypes |= {str(shard.get_slice(name).get_dtype()) for name in shard.keys()}  # noqa: SIM118
    assert {"F16", "I64", "BOOL"} >= dtypes and "F16" in dtypes
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "float16"
    source_bytes = sum(p.stat().st_size for p in half.glob("*.safetensors"))
    assert sum(p.stat().st_size for p in checkpoint.glob("model*.safetensors")) <= source_bytes * 1.01
    assert any("stored in float16" in line for line in ctx.lines)
    # The sizes the report gives are the files' tensors: float16, not the float32 the job computed in.
    scalars = ctx.metrics.scalars
    assert scalars["original/bytes_stored"] == _tensor_bytes(half)
    assert scalars["mone@0.25/stock_export/bytes_stored"] == _tensor_bytes(ctx.artifacts["checkpoint-stock"].path)
    # The file holds the model the report evaluated: the held-out perplexity recomputed from it is the
    # reported one (the novice vectors were made float16-exact before the evaluation).
    from mlcore.data.registry import TEXT_SOURCES
    from mlcore.eval.heldout import prepare_heldout
    from mlcore.zoo.tokenizer import load_hf_tokenizer

    tokenizer = load_hf_tokenizer(checkpoint)
    heldout = prepare_heldout(tokenizer, TEXT_SOURCES, length=64, windows=FAST["eval_windows"], cloze_items=0)
    reloaded = load_model(checkpoint)
    assert next(reloaded.parameters()).dtype == torch.float32
    recomputed = heldout.evaluate(reloaded, tokenizer)["ppl_mean"]
    assert recomputed == ctx.metrics.scalars["mone@0.25/ppl_mean"]  # the same model: the same bits


def _tensor_bytes(folder):
    """The bytes of the tensors a checkpoint's safetensors files hold (their headers' offsets)."""
    from mlcore.hf.checkpoint import weight_files
    from mlcore.uploads import safetensors_header

    return sum(
        entry["data_offsets"][1] - entry["data_offsets"][0]
        for file in weight_files(folder)
        for name, entry in safetensors_header(file).items()
        if name != "__metadata__"
    )


def test_a_rounded_plan_holds_float16_exact_novices_and_merged_weights():
    import torch

    from mlcore.compress.plan import CompressionPlan, rounded

    vector = torch.tensor([0.1, 1 / 3, 2.0e-5])
    plan = CompressionPlan(
        "mone", keep={0: [0]}, novices={0: {1: vector}}, merged_weights={0: {0: (vector.clone(), vector.clone())}}
    )
    exact = rounded(plan, torch.float16)
    for tensor in (exact.novices[0][1], *exact.merged_weights[0][0]):
        assert tensor.dtype == torch.float32 and torch.equal(tensor, tensor.half().float())
        assert not torch.equal(tensor, vector)  # 1/3 is not a float16 number
    assert rounded(plan, torch.float32) is plan


class _DiesAfterFirstLayer(InMemoryContext):
    """A worker that dies once calibration has finished its first decoder layer."""

    def _on_progress(self) -> None:
        super()._on_progress()
        if self.stage.endswith("decoder layer 1 of 2"):
            raise SystemExit("killed")


def test_a_re_run_after_a_killed_attempt_continues_calibration_from_its_last_finished_layer(
    tiny_lm, calibration_file, tmp_path
):
    kind = get_kind("compress-moe")
    raw = {**FAST, "model": str(tiny_lm), "methods": "mone", "ratios": "0.25", "load": "layer-by-layer"}
    files = {"calibration_file": [calibration_file]}

    def attempt(ctx, resume_dir):
        ctx.resume_dir = resume_dir
        params, inputs = prepare(kind, raw, files, resolver=LocalResolver(), workdir=ctx.workdir)
        return execute(kind, params, inputs, ctx, passthrough=(SystemExit,))

    with pytest.raises(SystemExit):
        attempt(_DiesAfterFirstLayer(), tmp_path / "resume")
    resumed = InMemoryContext()
    assert attempt(resumed, tmp_path / "resume").status == "succeeded"
    assert "calibration continues from decoder layer 2 of 2: an earlier attempt finished the rest" in resumed.lines
    fresh = InMemoryContext()
    assert attempt(fresh, None).status == "succeeded"
    assert not any("continues from" in line for line in fresh.lines)
    for name in ("original/ppl_mean", "mone@0.25/ppl_mean"):
        assert resumed.metrics.scalars[name] == fresh.metrics.scalars[name], name
