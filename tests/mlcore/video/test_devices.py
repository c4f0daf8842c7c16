"""Device plumbing of the video pipeline, zoo and benchmark, exercised on the CPU (the CI machine has
no GPU): an explicit device must change nothing there, and the budgets and resumes must hold."""

import json
from dataclasses import asdict

import pytest
import torch

from mlcore.video.classifier import ClipClassifier
from mlcore.video.pipeline import TrainConfig, TrainState, load_state, make_optimiser, save_state, train
from mlcore.zoo.video import CHECKPOINTS, VideoDiTRecipe, build_parser, train_dit

TINY_RECIPE_MODEL = {
    "patch_size": (1, 4, 4),
    "dim": 16,
    "depth": 1,
    "heads": 2,
    "ffn_width": 32,
    "attention": "moga",
    "num_groups": 2,
    "window": (4, 2, 2),
}


def tiny_recipe(steps: int) -> VideoDiTRecipe:
    """The zoo recipe shrunk to seconds: a one-block DiT, one graded clip per class, two sampling steps."""
    return VideoDiTRecipe(
        model=TINY_RECIPE_MODEL,
        steps=steps,
        batch_size=2,
        warmup=1,
        checkpoint_every=1,
        eval_clips_per_class=1,
        eval_steps=2,
    )


needs_judge = pytest.mark.skipif(
    not (CHECKPOINTS / "video-judge" / "manifest.json").is_file(), reason="the zoo judge is not committed yet"
)


def test_an_explicit_cpu_device_trains_to_the_same_losses_as_none(tiny_dit):
    config = TrainConfig(steps=2, batch_size=4, frames=2, size=8, attention_modes=("moga", "full"))
    implicit = train(tiny_dit(attention="moga"), config)
    explicit_model = tiny_dit(attention="moga").to(torch.device("cpu"))
    explicit = train(explicit_model, config)
    # bf16 autocast is CUDA-only: on the CPU the flag must leave the run bit-identical.
    flagged = train(tiny_dit(attention="moga").to("cpu"), TrainConfig(**{**asdict(config), "autocast_bf16": True}))
    assert implicit.losses == explicit.losses == flagged.losses
    assert implicit.wall_seconds > 0 and implicit.cpu_seconds > 0


def test_a_state_resumed_with_a_map_location_continues_exactly(tiny_dit, tmp_path):
    config = TrainConfig(steps=4, batch_size=4, frames=2, size=8)
    straight = tiny_dit()
    straight_state = train(straight, config)

    first = tiny_dit()
    optimiser = make_optimiser(first, config)
    state = train(first, config, optimiser=optimiser, should_stop=lambda s: s.step >= 2)
    save_state(tmp_path / "state.pt", first, optimiser, state, config)
    again = tiny_dit().to("cpu")
    optimiser = make_optimiser(again, config)
    state = load_state(tmp_path / "state.pt", again, optimiser, map_location=torch.device("cpu"))
    assert state.step == 2 and state.wall_seconds > 0
    state = train(again, config, state=state, optimiser=optimiser)
    assert state.losses == straight_state.losses
    for a, b in zip(straight.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_a_state_written_before_wall_seconds_existed_still_resumes(tiny_dit, tmp_path):
    config = TrainConfig(steps=2, batch_size=4, frames=2, size=8)
    model = tiny_dit()
    optimiser = make_optimiser(model, config)
    state = train(model, config, optimiser=optimiser)
    old = asdict(state)
    del old["wall_seconds"]
    torch.save(
        {"model": model.state_dict(), "optimiser": optimiser.state_dict(), "ema": None, "state": old}, tmp_path / "s.pt"
    )
    resumed = load_state(tmp_path / "s.pt", tiny_dit(), make_optimiser(tiny_dit(), config))
    assert resumed == TrainState(step=2, losses=state.losses, cpu_seconds=state.cpu_seconds)


def test_the_judge_grades_and_embeds_clips_on_its_own_device():
    from mlcore.data.video import bouncing_digits
    from mlcore.video.classifier import as_batch, clip_features, judge

    torch.manual_seed(0)
    model = ClipClassifier(width=8).to("cpu")
    data = bouncing_digits(6, seed=0)
    verdict = judge(model, as_batch(data.clips), torch.from_numpy(data.digits), torch.from_numpy(data.directions))
    assert 0.0 <= verdict.accuracy <= 1.0
    features = clip_features(model, as_batch(data.clips))
    assert features.shape == (6, 8) and features.dtype.name == "float64"


def test_the_zoo_train_cli_parses_a_device_and_a_wall_clock_budget():
    args = build_parser().parse_args(["train", "video-dit-digits", "--device", "cuda", "--wall-minutes", "9.5"])
    assert (args.device, args.wall_minutes, args.cpu_minutes) == ("cuda", 9.5, None)
    defaults = build_parser().parse_args(["train", "video-judge"])
    assert (defaults.device, defaults.wall_minutes) == ("cpu", None)


@needs_judge
def test_a_zero_wall_budget_exports_the_untrained_state_without_a_step(tmp_path):
    metrics = train_dit(tiny_recipe(steps=5), tmp_path / "out", tmp_path / "work", wall_minutes=0, device="cpu")
    assert metrics["steps"] == 0 and metrics["device"] == "cpu"
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["metrics"]["steps"] == 0
    weights = next((tmp_path / "out").glob("*.safetensors"))
    assert weights.stat().st_size > 0
    assert (tmp_path / "work" / "state.pt").is_file()


@needs_judge
def test_the_zoo_dit_resumes_its_saved_state_and_logs_wall_seconds_and_device(tmp_path):
    work = tmp_path / "work"
    first = train_dit(tiny_recipe(steps=2), tmp_path / "a", work, device="cpu")
    resumed = train_dit(tiny_recipe(steps=3), tmp_path / "b", work, wall_minutes=5, device="cpu")
    assert (first["steps"], resumed["steps"]) == (2, 3)
    log = [json.loads(line) for line in (tmp_path / "b" / "train_log.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == [1, 2, 3]
    assert all(entry["device"] == "cpu" and entry["wall_seconds"] >= 0 for entry in log)
    # The export is float16 on the CPU whatever the device it trained on.
    from mlcore.zoo.video import load_dit

    assert load_dit(tmp_path / "b").device.type == "cpu"


def test_the_benchmark_device_comes_from_the_argument_then_the_environment_then_the_cpu(monkeypatch):
    from bench.video import DEVICE_ENV, build_parser, training_device

    monkeypatch.delenv(DEVICE_ENV, raising=False)
    assert training_device() == "cpu"
    monkeypatch.setenv(DEVICE_ENV, "not-a-device")
    with pytest.raises(ValueError, match="not a torch device"):
        training_device()
    assert training_device("cpu") == "cpu"  # the argument wins over the environment
    args = build_parser().parse_args(["run", "--tier", "full", "--device", "cuda"])
    assert (args.command, args.tier, args.device) == ("run", "full", "cuda")


def test_a_benchmark_training_row_records_its_device():
    from bench.video import train_and_evaluate

    torch.manual_seed(0)
    judge = ClipClassifier(width=8, static=True)
    tier = {"eval_clips": 4, "sample_steps": 2}
    row = train_and_evaluate(
        {"ffn": "dense"}, steps=2, seed=0, frames=1, static=True, judge=judge, tier=tier, device="cpu"
    )
    assert row["device"] == "cpu" and row["steps"] == 2
    assert row["train_wall_seconds"] > 0 and row["train_cpu_seconds"] > 0
