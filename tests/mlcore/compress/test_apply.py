import torch

from mlcore.compress.calibrate import calibrate
from mlcore.compress.methods import compressed_copy, make_plan
from mlcore.hf import adapt, load_model


def _windows(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, vocab, (6, 24), generator=torch.Generator().manual_seed(seed))


def test_a_novice_outputs_its_mean_output_scaled_by_its_gate(tiny_lm):
    model = load_model(tiny_lm)
    calibration = calibrate(adapt(model), _windows(300), batch_size=3)
    plan = make_plan("mone", adapt(model), calibration, 6, scope="layer")
    _compressed, adapter = compressed_copy(model, plan)
    info = adapter.layers[0]
    novice = next(iter(plan.novices[info.index]))
    hidden = torch.randn(5, info.hidden)
    index = torch.full((5, 1), novice)
    gates = torch.rand(5, 1)
    with torch.no_grad():
        out = info.experts(hidden, index, gates)
    expected = gates * plan.novices[info.index][novice][None]
    torch.testing.assert_close(out, expected)
    # The router is untouched: every expert keeps its row.
    assert info.router.weight.shape[0] == 8


def test_a_compressed_checkpoint_reloads_with_the_same_outputs(tiny_lm, tmp_path):
    model = load_model(tiny_lm)
    calibration = calibrate(adapt(model), _windows(300), batch_size=3)
    windows = _windows(300, seed=5)
    for method in ("mone", "reap"):
        compressed, adapter = compressed_copy(model, make_plan(method, adapt(model), calibration, 5, scope="layer"))
        adapter.save(tmp_path / method)
        reloaded = load_model(tmp_path / method)
        with torch.no_grad():
            torch.testing.assert_close(reloaded(input_ids=windows).logits, compressed(input_ids=windows).logits)
    assert [info.num_experts for info in adapt(load_model(tmp_path / "reap")).layers] == [5, 5]
    assert sorted(adapt(load_model(tmp_path / "mone")).novices[0]) == sorted(
        make_plan("mone", adapt(model), calibration, 5, scope="layer").novices[0]
    )
