import numpy as np
import pytest
import torch

from mlcore.jobs.spec import JobCancelled
from mlcore.video.metrics import frechet_distance
from mlcore.video.pipeline import (
    TrainConfig,
    generate,
    heldout_loss,
    load_state,
    make_ema,
    make_optimiser,
    save_state,
    train,
)


def test_a_few_rectified_flow_steps_lower_the_held_out_loss(tiny_dit):
    model = tiny_dit(dim=32, ffn_width=64, attention="moga")
    config = TrainConfig(steps=40, batch_size=8, lr=3e-3, warmup=5, frames=4, size=8)
    before = heldout_loss(model, clips=16, frames=4, size=8)["mean"]
    state = train(model, config)
    after = heldout_loss(model, clips=16, frames=4, size=8)["mean"]
    assert state.step == 40 and len(state.losses) == 40
    assert after < 0.8 * before


def test_training_resumes_from_a_saved_state_exactly(tiny_dit, tmp_path):
    config = TrainConfig(steps=6, batch_size=4, frames=2, size=8)
    straight = tiny_dit()
    train(straight, config)

    resumed = tiny_dit()
    optimiser = make_optimiser(resumed, config)
    state = train(resumed, config, optimiser=optimiser, should_stop=lambda s: s.step >= 3)
    save_state(tmp_path / "state.pt", resumed, optimiser, state, config)
    again = tiny_dit()
    optimiser = make_optimiser(again, config)
    state = load_state(tmp_path / "state.pt", again, optimiser)
    train(again, config, state=state, optimiser=optimiser)
    for a, b in zip(straight.parameters(), again.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_moving_average_of_the_weights_trails_them_and_resumes_exactly(tiny_dit, tmp_path):
    config = TrainConfig(steps=6, batch_size=4, frames=2, size=8, ema=0.5)
    assert make_ema(tiny_dit(), TrainConfig(batch_size=4)) is None
    straight = tiny_dit()
    start = [p.detach().clone() for p in straight.parameters()]
    ema = make_ema(straight, config)
    train(straight, config, ema=ema)
    moved = [
        (a, s, p) for a, s, p in zip(ema.module.parameters(), start, straight.parameters()) if not torch.equal(s, p)
    ]
    # Every weight training moved has an average that is neither where it started nor where it ended.
    assert moved and all(not torch.equal(a, s) and not torch.equal(a, p) for a, s, p in moved)

    resumed = tiny_dit()
    optimiser, resumed_ema = make_optimiser(resumed, config), make_ema(resumed, config)
    state = train(resumed, config, optimiser=optimiser, ema=resumed_ema, should_stop=lambda s: s.step >= 3)
    save_state(tmp_path / "state.pt", resumed, optimiser, state, config, resumed_ema)
    again = tiny_dit()
    optimiser, again_ema = make_optimiser(again, config), make_ema(again, config)
    state = load_state(tmp_path / "state.pt", again, optimiser, again_ema)
    train(again, config, state=state, optimiser=optimiser, ema=again_ema)
    for a, b in zip(ema.module.parameters(), again_ema.module.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    with pytest.raises(ValueError, match="no moving average"):
        save_state(tmp_path / "plain.pt", again, optimiser, state, config)
        load_state(tmp_path / "plain.pt", tiny_dit(), make_optimiser(tiny_dit(), config), make_ema(tiny_dit(), config))


def test_sampling_is_deterministic_per_seed_and_guidance_changes_it(tiny_dit):
    model = tiny_dit()
    for parameter in model.parameters():  # past adaLN-Zero's start, so the condition matters
        torch.nn.init.normal_(parameter, std=0.1)
    labels = torch.tensor([1, 2]), torch.tensor([0, 3])
    a = generate(model, *labels, frames=2, size=8, steps=3, seed=4)
    b = generate(model, *labels, frames=2, size=8, steps=3, seed=4)
    c = generate(model, *labels, frames=2, size=8, steps=3, seed=4, guidance=1.0)
    assert a.shape == (2, 1, 2, 8, 8) and torch.equal(a, b) and not torch.equal(a, c)
    assert a.min() >= -1 and a.max() <= 1


def test_sampling_in_chunks_seeds_each_chunk_by_its_first_label(tiny_dit):
    from mlcore.video.pipeline import generate_in_chunks

    model = tiny_dit()
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.1)
    digits, directions = torch.tensor([1, 2, 3]), torch.tensor([0, 3, 1])
    options = {"frames": 2, "size": 8, "steps": 3}
    chunked = generate_in_chunks(model, digits, directions, chunk=2, seed=5, **options)
    by_hand = torch.cat(
        [
            generate(model, digits[:2], directions[:2], seed=5, **options),
            generate(model, digits[2:], directions[2:], seed=7, **options),
        ]
    )
    assert torch.equal(chunked, by_hand)


def test_a_cancel_stops_sampling_within_one_step(tiny_dit):
    calls = []

    def on_step(i, total):
        calls.append(i)
        if i == 2:
            raise JobCancelled()

    with pytest.raises(JobCancelled):
        generate(tiny_dit(), torch.tensor([1]), torch.tensor([0]), frames=2, size=8, steps=10, on_step=on_step)
    assert calls == [0, 1, 2]


def test_frechet_distance_is_zero_for_one_set_and_matches_the_closed_form_for_gaussians():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4000, 2))
    b = rng.normal(size=(4000, 2)) * 2 + np.array([3.0, 0.0])
    assert frechet_distance(a, a) == pytest.approx(0, abs=1e-6)
    # N(0, I) vs N(μ, 4I): |μ|² + tr(I + 4I − 2·2I) = 9 + 2
    assert frechet_distance(a, b) == pytest.approx(11.0, rel=0.05)
    with pytest.raises(ValueError, match="same d"):
        frechet_distance(a, b[:, :1])
