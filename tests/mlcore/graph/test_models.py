import pytest
import torch
from torch_geometric.data import Batch

from mlcore.data.graphs import generate_motif_graphs
from mlcore.graph.layers import GroupedGINConv, WeightedGINConv, weighted_mean_pool
from mlcore.graph.losses import bernoulli_kl, diversity_loss, gate_oracle_kl, load_balance_loss
from mlcore.graph.models import ERM, GSATLite, MoEConfig, SubgraphMoE
from mlcore.graph.pipeline import to_data


@pytest.fixture(scope="module")
def batch():
    graphs = generate_motif_graphs(variant="heterogeneous", n_graphs=24, seed=0).graphs[:8]
    return Batch.from_data_list([to_data(g) for g in graphs])


def test_a_zero_weight_edge_is_the_same_as_no_edge():
    torch.manual_seed(0)
    conv = WeightedGINConv(4, 8).eval()
    x = torch.randn(3, 4)
    both = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    weighted = conv(x, both, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    torch.testing.assert_close(weighted, conv(x, both[:, :2]))


def test_grouped_experts_compute_what_separate_gin_layers_would():
    torch.manual_seed(0)
    grouped = GroupedGINConv(3, 4, 8).eval()
    x, edges = torch.randn(5, 3, 4), torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    weights = torch.rand(4, 3)
    out = grouped(x, edges, weights)
    for k in range(3):
        single = WeightedGINConv(4, 8).eval()
        with torch.no_grad():
            single.eps.copy_(grouped.eps[k])
            single.mlp[0].weight.copy_(grouped.lin1.weight[k].t())
            single.mlp[0].bias.copy_(grouped.lin1.bias[k])
            single.mlp[3].weight.copy_(grouped.lin2.weight[k].t())
            single.mlp[3].bias.copy_(grouped.lin2.bias[k])
            norm = grouped.norm.norm
            for name in ("weight", "bias", "running_mean", "running_var"):
                getattr(single.mlp[1], name).copy_(getattr(norm, name)[k * 8 : (k + 1) * 8])
        torch.testing.assert_close(out[:, k], single(x[:, k], edges, weights[:, k]))


def test_pooling_averages_only_the_kept_nodes():
    h = torch.tensor([[1.0], [3.0], [100.0], [5.0]])
    pooled = weighted_mean_pool(h, torch.tensor([0, 0, 0, 1]), torch.tensor([1.0, 1.0, 0.0, 0.0]), 2)
    assert pooled.squeeze(-1).tolist() == [2.0, 0.0]


def test_the_entmax_gate_gives_exact_zeros_and_weights_that_sum_to_one(batch):
    torch.manual_seed(0)
    model = SubgraphMoE(3, hidden=16, config=MoEConfig(experts=4)).eval()
    with torch.no_grad():
        model.gate[-1].weight.mul_(200)  # large gate logits: entmax must cut experts off entirely
    out = model(batch)
    assert (out.gate == 0).any()
    torch.testing.assert_close(out.gate.sum(-1), torch.ones(batch.num_graphs))
    assert out.logits.shape == (8, 3) and out.edge_score.shape == (batch.edge_index.shape[1],)


def test_a_softmax_gate_never_gives_zeros(batch):
    model = SubgraphMoE(3, hidden=16, config=MoEConfig(experts=4, gate="softmax")).eval()
    assert (model(batch).gate > 0).all()


def test_both_directions_of_an_edge_get_the_same_score(batch):
    for model in (GSATLite(3, hidden=16), SubgraphMoE(3, hidden=16)):
        score = model.eval()(batch).edge_score
        # to_data lists a graph's edges forward, then reversed; the first graph's come first.
        n = batch.get_example(0).edge_index.shape[1] // 2
        torch.testing.assert_close(score[:n], score[n : 2 * n])


def test_every_loss_term_reaches_the_parameters_it_should(batch):
    torch.manual_seed(0)
    model = SubgraphMoE(3, hidden=16).train()
    out = model(batch)
    loss, parts = model.loss(out, batch)
    loss.backward()
    assert {"ce", "budget", "diversity", "gate_kl", "balance"} <= set(parts)
    for module in (model.selector, model.scorer_in, model.experts, model.heads, model.gate):
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in module.parameters())


def test_during_warm_up_the_gate_is_uniform_and_has_no_loss(batch):
    model = SubgraphMoE(3, hidden=16).train()
    model.uniform_gate = True
    out = model(batch)
    torch.testing.assert_close(out.gate, torch.full((8, 4), 0.25))
    assert "gate_kl" not in model.loss(out, batch)[1]


def test_erm_has_no_edge_scores(batch):
    assert ERM(3, hidden=16).eval()(batch).edge_score is None


def test_identical_masks_are_penalised_and_uncorrelated_ones_are_not():
    graph = torch.zeros(8, dtype=torch.long)
    a = torch.tensor([1.0, 1, 0, 0, 1, 1, 0, 0])
    b = torch.tensor([1.0, 0, 1, 0, 1, 0, 1, 0])  # uncorrelated with a
    assert diversity_loss(torch.stack([a, a], 1), graph, 1).item() == pytest.approx(0.9)
    assert diversity_loss(torch.stack([a, b], 1), graph, 1).item() == pytest.approx(0.0, abs=1e-6)
    assert diversity_loss(torch.stack([a, 1 - a], 1), graph, 1).item() == pytest.approx(0.9)


def test_the_gate_kl_is_finite_with_zero_weights_and_zero_at_the_oracle():
    ce = torch.tensor([[0.1, 2.0, 3.0]])
    oracle = torch.softmax(-ce / 0.75, -1)
    assert gate_oracle_kl(oracle, ce).item() == pytest.approx(0.0, abs=1e-6)
    assert torch.isfinite(gate_oracle_kl(torch.tensor([[1.0, 0.0, 0.0]]), ce))


def test_balance_is_zero_for_even_use_and_positive_for_collapse():
    assert load_balance_loss(torch.full((4, 2), 0.5)).item() == pytest.approx(0.0)
    assert load_balance_loss(torch.tensor([[1.0, 0.0], [1.0, 0.0]])).item() == pytest.approx(1.0)


def test_the_information_loss_vanishes_at_the_prior():
    assert bernoulli_kl(torch.full((5,), 0.7), 0.7).item() == pytest.approx(0.0, abs=1e-6)
    assert bernoulli_kl(torch.full((5,), 0.1), 0.7).item() > 0.5
