from dataclasses import replace

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
    live_targets,
    manifold_loss,
    neighbours,
    oracle_accuracy,
    routing_vectors,
    tfidf_svd_embedder,
)
from mlcore.roma.tasks import MARKER_OFFSET, SYNONYMS, multitask_set

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


def test_live_neighbour_targets_are_the_routing_of_the_routers_as_they_are_now(model, data):
    layers = last_layers(model, 1)
    tuned = model.clone()
    success = torch.arange(0, 40, 2)  # bank positions → training rows
    index = torch.tensor([[0, 3, 3], [7, 1, 19]])
    before = live_targets(tuned, data, success, index, layers)
    torch.testing.assert_close(before, routing_vectors(tuned, data, layers)[0][success][index])
    with torch.no_grad():
        tuned.blocks[layers[0]].router.weight.add_(torch.randn_like(tuned.blocks[layers[0]].router.weight))
    after = live_targets(tuned, data, success, index, layers)
    # The targets moved with the routers, and are still exactly the routing those routers give now.
    assert (after - before).abs().max() > 1e-3
    torch.testing.assert_close(after, routing_vectors(tuned, data, layers)[0][success][index])
    assert not after.requires_grad  # anchors: no gradient pulls the successful neighbours


def test_live_targets_start_where_fixed_ones_do_and_then_follow_the_tuned_routers(model):
    train = multitask_set(96, torch.Generator().manual_seed(2))
    emb = torch.randn(96, 8, generator=torch.Generator().manual_seed(3))
    config = AlignConfig(layers=1, epochs=2, batch_size=16, warmup=1, lam=5.0)
    assert config.targets == "live"  # the default: the paper's r_j are the neighbours' routing, now
    live = align_routers(model, train, emb, config)
    fixed = align_routers(model, train, emb, replace(config, targets="fixed"))
    # Step 0: the routers are the base model's, so both targets are the same vectors.
    assert live.regulariser[0] == pytest.approx(fixed.regulariser[0], rel=1e-5)
    # Afterwards the live targets are recomputed from the moved routers: a different loss and model.
    assert max(abs(a - b) for a, b in zip(live.regulariser[1:], fixed.regulariser[1:], strict=True)) > 1e-4
    assert not torch.allclose(live.model.blocks[1].router.weight, fixed.model.blocks[1].router.weight)


def test_an_unknown_neighbour_target_mode_is_refused():
    with pytest.raises(ValueError, match="targets must be one of"):
        AlignConfig(targets="frozen")


def test_the_thesaurus_reads_every_synonym_of_a_task_as_one_word():
    data = multitask_set(300, torch.Generator().manual_seed(4))
    plain, merged = data.texts(), data.texts(thesaurus=True)
    markers = {w for text in plain for w in text.split() if w.startswith("m")}
    tasks = {w for text in merged for w in text.split() if w.startswith("t")}
    assert len(markers) == 4 * SYNONYMS and tasks == {"t0", "t1", "t2", "t3"}
    same = data.subset(torch.tensor([0]))
    other = data.subset(torch.tensor([0]))
    marker = other.tokens >= MARKER_OFFSET
    task, synonym = int(other.tasks[0]), int(other.synonyms[0])
    other.tokens[marker] = MARKER_OFFSET + task * SYNONYMS + (synonym + 1) % SYNONYMS  # the next synonym
    embed = tfidf_svd_embedder(data, dims=8, thesaurus=True)
    assert other.texts() != same.texts()
    torch.testing.assert_close(embed(other), embed(same))  # another synonym of the same task: the same point
