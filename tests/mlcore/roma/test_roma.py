import pytest
import torch

from mlcore.roma.model import MoEClassifier, MoEClassifierConfig
from mlcore.roma.roma import (
    AlignConfig,
    accuracy,
    align_routers,
    c3po_lite,
    gap_closed,
    knn_overlap,
    last_layers,
    manifold_loss,
    neighbours,
    oracle_accuracy,
    routing_vectors,
    tfidf_svd_embedder,
)
from mlcore.roma.tasks import MARKER_OFFSET, multitask_set

SMALL = MoEClassifierConfig(hidden=16, layers=2, heads=2, experts=4, top_k=2, expert_ffn=16)


@pytest.fixture(scope="module")
def model() -> MoEClassifier:
    torch.manual_seed(0)
    return MoEClassifier(SMALL).eval()


@pytest.fixture(scope="module")
def data():
    return multitask_set(64, torch.Generator().manual_seed(1))


def test_the_task_marker_appears_once_at_varying_positions(data):
    is_marker = data.tokens >= MARKER_OFFSET
    assert is_marker.sum(1).eq(1).all()
    assert len(set(is_marker.float().argmax(1).tolist())) > 3


def test_the_regulariser_has_a_gradient_on_the_live_routers_and_changes_between_steps(model, data):
    layers = last_layers(model, 1)
    clone = model.clone()
    clone(data.tokens[:8])
    r = clone.last_token_probs(layers, 8)
    targets = torch.softmax(torch.randn(8, 3, r.shape[-1]), -1)
    manifold_loss(r, targets, torch.full((8, 3), 1 / 3)).backward()
    grad = clone.blocks[layers[0]].router.weight.grad
    assert grad is not None and grad.abs().sum() > 0

    train = multitask_set(96, torch.Generator().manual_seed(2))
    emb = torch.randn(96, 8)
    result = align_routers(model, train, emb, AlignConfig(layers=1, epochs=1, batch_size=16, warmup=1, lam=5.0))
    assert len(set(round(v, 6) for v in result.regulariser)) > 1
    assert not torch.equal(result.model.blocks[1].router.weight, model.blocks[1].router.weight)
    # Only the chosen routers train; everything else stays the base model's.
    assert torch.equal(result.model.blocks[0].router.weight, model.blocks[0].router.weight)
    assert torch.equal(result.model.head.weight, model.head.weight)


def test_neighbours_skip_the_sample_itself_and_their_weights_sum_to_one():
    bank = torch.randn(10, 4)
    index, weights = neighbours(bank, bank, 3, 0.4, exclude=torch.arange(10))
    assert not (index == torch.arange(10)[:, None]).any()
    torch.testing.assert_close(weights.sum(-1), torch.ones(10))
    assert (weights[:, :-1] >= weights[:, 1:] - 1e-6).all()  # nearer neighbours weigh more


def test_knn_overlap_is_one_for_the_same_space_and_low_for_unrelated_spaces():
    a = torch.randn(200, 6, generator=torch.Generator().manual_seed(0))
    assert knn_overlap(a, a, 5) == 1.0
    assert knn_overlap(a, torch.randn(200, 6, generator=torch.Generator().manual_seed(1)), 5) < 0.2


def test_c3po_lite_replaces_the_last_token_routing_of_the_chosen_layers(model, data):
    layers = last_layers(model, 1)
    bank_r, _ = routing_vectors(model, data, layers)
    emb = torch.randn(len(data), 5)
    with torch.no_grad():
        model(data.tokens, {layers[0]: bank_r.roll(1, 0)})
        probs = model.blocks[layers[0]].router.probs.view(len(data), -1, SMALL.experts)[:, -1]
    torch.testing.assert_close(probs, bank_r.roll(1, 0))
    assert 0.0 <= c3po_lite(model, data, emb, emb, bank_r, layers, 3, 0.4) <= 1.0


def test_the_oracle_is_at_least_as_accurate_as_the_base_model(model, data):
    layers = last_layers(model, 2)
    assert oracle_accuracy(model, data, layers, steps=5) >= accuracy(model, data)


def test_the_gap_fraction_and_bad_layer_counts():
    assert gap_closed(0.8, 0.7, 0.9) == pytest.approx(0.5)
    assert gap_closed(0.8, 0.8, 0.8) == 0.0
    with pytest.raises(ValueError, match="layers must be between 1 and the model's 2"):
        last_layers(MoEClassifier(SMALL), 3)


def test_the_tfidf_embedder_gives_fixed_width_vectors_for_any_split(data):
    embed = tfidf_svd_embedder(data, dims=8)
    assert embed(data).shape == (64, 8)
    assert embed(multitask_set(5, torch.Generator().manual_seed(3), length=10)).shape == (5, 8)
