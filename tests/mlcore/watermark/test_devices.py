"""Training and benchmarking on an explicit device: CPU runs unchanged, wall budgets, checkpoints, the CLI.

The test machine has no GPU, so these name the CPU explicitly: the path a ``--device cuda`` run takes
(modules moved, randomness drawn on the CPU, checkpoints written from CPU tensors) with the CPU as
the device.
"""

import json
import math
import time

import numpy as np
import pytest
import torch

from bench import watermark as bench
from mlcore.watermark import attacks as A
from mlcore.watermark.generator import load_generator
from mlcore.watermark.pipeline import load_bundle
from mlcore.watermark.pretrain import LoopConfig, WallBudgetSpent, train_unet, train_vae
from mlcore.watermark.robustness import _InputsTo
from mlcore.watermark.train import MolmConfig, train_molm
from mlcore.zoo import molm
from tests.mlcore.watermark.tiny import TINY_UNET, TINY_VAE, write_bundle, write_generator

TINY_MOLM = dict(
    num_adapters=16, rank=2, steps=4, batch_size=4, pool=16, eval_images=8, eval_every=2, checkpoint_every=2,
    key_only_fraction=0.0, ramp_fraction=0.5, shift_scale=0.5, linear_readout=True,
)  # fmt: skip


def _quiet(row):
    return None


def _rows(history):
    return [{k: v for k, v in row.items() if k != "seconds"} for row in history]


@pytest.fixture(scope="module")
def generator_dir(tmp_path_factory):
    return write_generator(tmp_path_factory.mktemp("generator"), unet=False)


@pytest.fixture(scope="module")
def default_run(generator_dir):
    return train_molm(load_generator(generator_dir), MolmConfig(**TINY_MOLM), log=_quiet)


def test_an_explicit_cpu_device_reproduces_the_default_molm_losses_exactly(generator_dir, default_run):
    explicit = train_molm(load_generator(generator_dir), MolmConfig(**TINY_MOLM), log=_quiet, device="cpu")
    assert _rows(explicit.history) == _rows(default_run.history)
    assert explicit.metrics == default_run.metrics
    for a, b in zip(explicit.markers.state_dict().values(), default_run.markers.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert explicit.markers.device.type == explicit.extractor.device.type == "cpu"


def test_bf16_autocast_is_opt_in_and_keeps_float32_weights(generator_dir, default_run):
    run = train_molm(load_generator(generator_dir), MolmConfig(**TINY_MOLM), log=_quiet, device="cpu", bf16=True)
    assert all(math.isfinite(row["loss_key"]) and math.isfinite(row["loss_imp"]) for row in run.history)
    assert _rows(run.history) != _rows(default_run.history)  # autocast really ran in bf16
    assert all(p.dtype == torch.float32 for p in [*run.markers.parameters(), *run.extractor.parameters()])


def test_a_zero_wall_budget_stops_molm_at_once_without_losing_its_checkpoint(generator_dir, tmp_path):
    work = tmp_path / "molm-state"
    train_molm(load_generator(generator_dir), MolmConfig(**{**TINY_MOLM, "steps": 2}), workdir=work, log=_quiet)
    saved = (work / "state.pt").read_bytes()
    longer = MolmConfig(**TINY_MOLM)
    rows = []
    with pytest.raises(WallBudgetSpent) as spent:
        train_molm(
            load_generator(generator_dir),
            longer,
            workdir=work,
            log=rows.append,
            device="cpu",
            deadline=time.perf_counter(),
        )
    assert (spent.value.stage, spent.value.step, spent.value.steps) == ("molm", 2, 4)
    assert rows == [] and (work / "state.pt").read_bytes() == saved
    resumed = train_molm(load_generator(generator_dir), longer, workdir=work, log=_quiet, device="cpu")
    assert [row["step"] for row in resumed.history] == [2, 4]


def test_vae_checkpoints_hold_cpu_tensors_and_resume_on_an_explicit_device(tmp_path):
    from diffusers import AutoencoderKL

    config = LoopConfig(steps=2, batch_size=4, warmup=1, log_every=2, checkpoint_every=1)
    torch.manual_seed(0)
    train_vae(AutoencoderKL(**TINY_VAE), tmp_path, config, log=_quiet, device="cpu")
    state = torch.load(tmp_path / "state.pt", map_location="cpu", weights_only=False)
    tensors = [*state["model"].values()]
    tensors += [v for s in state["optimizer"]["state"].values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert state["step"] == 2 and tensors and all(t.device.type == "cpu" for t in tensors)
    rows = []
    torch.manual_seed(1)
    vae = train_vae(
        AutoencoderKL(**TINY_VAE), tmp_path, LoopConfig(**{**config.__dict__, "steps": 4}), log=rows.append,
        device=torch.device("cpu"),
    )  # fmt: skip
    assert [row["step"] for row in rows] == [4]
    assert torch.load(tmp_path / "state.pt", map_location="cpu", weights_only=False)["step"] == 4
    assert vae.config.scaling_factor > 0


def test_a_zero_wall_budget_stops_the_unet_before_its_first_step_and_writes_nothing(tmp_path):
    from diffusers import UNet2DModel

    with pytest.raises(WallBudgetSpent) as spent:
        train_unet(
            UNet2DModel(**TINY_UNET), torch.randn(8, 4, 8, 8), 1.0, tmp_path, LoopConfig(steps=3, batch_size=2),
            log=_quiet, device="cpu", deadline=time.perf_counter(),
        )  # fmt: skip
    assert (spent.value.stage, spent.value.step) == ("unet", 0)
    assert not (tmp_path / "state.pt").exists()


def test_the_zoo_cli_parses_the_device_the_budget_and_the_molm_overrides():
    args = molm.parse_args(
        ["train", "--device", "cuda", "--wall-minutes", "8.5", "--steps", "20000", "--batch-size", "64", "--bf16"]
    )
    assert (args.device, args.wall_minutes, args.bf16) == ("cuda", 8.5, True)
    recipe = molm.recipe_for(args)
    assert (recipe.molm["steps"], recipe.molm["batch_size"]) == (20000, 64)
    assert recipe.molm["lam"] == molm.RECIPE.molm["lam"] and recipe.vae_steps == molm.RECIPE.vae_steps
    assert molm.command_for(recipe) == "python -m mlcore.zoo.molm train --steps 20000 --batch-size 64"
    defaults = molm.parse_args(["train"])
    assert (defaults.device, defaults.wall_minutes, defaults.steps, defaults.bf16) == ("cpu", None, None, False)
    assert molm.recipe_for(defaults) is molm.RECIPE
    assert molm.command_for(molm.RECIPE) == molm.COMMAND
    for bad in (["--steps", "0"], ["--wall-minutes", "-1"]):
        with pytest.raises(SystemExit):
            molm.parse_args(["train", *bad])


def test_the_zoo_cli_exits_3_on_a_spent_budget_and_logs_device_and_wall_seconds(tmp_path, capsys):
    threads = str(torch.get_num_threads())  # main() sets the thread count: leave this process's as it is
    code = molm.main(
        ["train", "--stage", "vae", "--workdir", str(tmp_path), "--wall-minutes", "0", "--threads", threads]
    )
    assert code == molm.EXIT_OUT_OF_TIME
    last = json.loads((tmp_path / "train_log.jsonl").read_text().splitlines()[-1])
    assert last["stage"] == "vae" and last["stopped"] == "wall budget" and last["step"] == 0
    assert last["device"] == "cpu" and last["wall_seconds"] >= 0
    assert "same command continues" in capsys.readouterr().err
    assert not (tmp_path / "vae").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch has CUDA")
def test_a_cuda_device_without_cuda_is_refused_with_a_message(tmp_path, capsys, monkeypatch):
    assert molm.main(["train", "--device", "cuda", "--workdir", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    monkeypatch.setenv("MOELAB_BENCH_DEVICE", "cuda")
    with pytest.raises(ValueError, match="no CUDA device"):
        bench.bench_device()


def test_the_benchmark_device_comes_from_moelab_bench_device(monkeypatch):
    monkeypatch.delenv("MOELAB_BENCH_DEVICE", raising=False)
    assert bench.bench_device() == torch.device("cpu")
    monkeypatch.setenv("MOELAB_BENCH_DEVICE", "cpu")
    assert bench.bench_device() == torch.device("cpu")
    monkeypatch.setenv("MOELAB_BENCH_DEVICE", "abacus")
    with pytest.raises(ValueError, match="not a torch device"):
        bench.bench_device()


def test_a_bundle_on_an_explicit_device_generates_and_regenerates_as_on_the_default_one(tmp_path):
    from mlcore.watermark.pipeline import decode_under_keys, read_bits

    folder = write_bundle(tmp_path / "bundle")
    default, explicit = load_bundle(folder, need_unet=True), load_bundle(folder, need_unet=True, device="cpu")
    assert explicit.generator.device.type == "cpu"
    latents = explicit.generator.sample_latents(4, seed=0, steps=2)
    assert torch.equal(latents, default.generator.sample_latents(4, seed=0, steps=2))
    keys = explicit.markers.random_keys(4, torch.Generator().manual_seed(0))
    marked = decode_under_keys(explicit, latents, keys)
    assert np.array_equal(marked, decode_under_keys(default, latents, keys))
    assert np.array_equal(read_bits(explicit.extractor, marked), read_bits(default.extractor, marked))
    # The view the suite gives the regeneration attacks on an accelerator: same images, inputs moved.
    view = _InputsTo(explicit.generator.vae, torch.device("cpu"), ("encode", "decode"))
    assert view.config.sample_size == 16
    rng = np.random.default_rng(0)
    own = A.regeneration(explicit.generator.vae, name="own", label="own")
    assert np.array_equal(A.regeneration(view, name="v", label="v").apply(marked, rng), own.apply(marked, rng))
