import numpy as np
import pytest

from mlcore.data.graphs import generate_motif_graphs
from mlcore.graph.pipeline import METHODS, TrainConfig, build_model, roc_auc, train_method


def test_roc_auc_follows_the_rank_definition():
    truth = np.array([0, 0, 1, 1, -1])
    assert roc_auc(np.array([0.1, 0.2, 0.8, 0.9, 0.0]), truth) == 1.0
    assert roc_auc(np.array([0.9, 0.8, 0.2, 0.1, 5.0]), truth) == 0.0
    assert roc_auc(np.array([0.5, 0.5, 0.5, 0.5, 0.5]), truth) == 0.5
    assert roc_auc(np.array([0.1, 0.6, 0.6, 0.9, 0.0]), truth) == pytest.approx(0.875)
    assert roc_auc(np.ones(3), np.array([1, 1, -1])) is None


def test_the_temperature_anneals_from_five_to_a_tenth():
    config = TrainConfig(epochs=11)
    assert config.temperature(0) == pytest.approx(5.0) and config.temperature(10) == pytest.approx(0.1)
    assert config.warmup_epochs == 4


def test_every_method_builds():
    assert {type(build_model(m, TrainConfig(hidden=8), 3)).__name__ for m in METHODS} == {
        "ERM",
        "GSATLite",
        "SubgraphMoE",
    }
    with pytest.raises(ValueError, match="unknown method"):
        build_model("mixup", TrainConfig(), 3)


def test_erm_learns_the_motifs_of_clean_graphs_and_selects_after_the_warm_up():
    graphs = generate_motif_graphs(n_graphs=240, label_noise=0.0, edge_noise=0.0, seed=0)
    result = train_method("erm", graphs, TrainConfig(epochs=10, hidden=32, batch_size=16, lr=3e-3, seed=0))
    assert result.splits["train"].accuracy > 0.5  # chance is 1/3
    assert result.splits["train"].ceiling == 1.0
    assert result.best_epoch >= TrainConfig(epochs=10).warmup_epochs
    assert len(result.history) == 10 and result.history[0]["loss"] > result.history[-1]["loss"]


def test_a_cancelled_run_stops_between_epochs():
    graphs = generate_motif_graphs(n_graphs=60, seed=0)
    calls = []
    result = train_method(
        "erm", graphs, TrainConfig(epochs=5, hidden=8), cancelled=lambda: bool(calls.append(1)) or len(calls) > 2
    )
    assert len(result.history) == 2


def test_the_free_gate_ablation_is_the_full_method_without_the_gates_own_losses():
    from torch_geometric.data import Batch

    from mlcore.graph.pipeline import to_data

    graphs = generate_motif_graphs(n_graphs=60, seed=0)
    batch = Batch.from_data_list([to_data(g) for g in graphs.graphs[:8]])
    full, free = (build_model(m, TrainConfig(hidden=8, gate_weight=0.1), 3) for m in ("disco", "disco-free-gate"))
    assert free.config.gate == "entmax" and free.config.diversity == full.config.diversity
    assert full.config.gate_weight == 0.1 and free.config.gate_weight == 0.0
    for model, weight in ((full, 0.1), (free, 0.0)):
        total, parts = model.loss(model(batch), batch)
        rest = parts["ce"] + 5.0 * parts["budget"] + 1.0 * parts["diversity"]
        gate = weight * (parts["gate_kl"] + 0.5 * parts["balance"])
        assert total.item() == pytest.approx(rest + gate, rel=1e-5)


def test_erm_takes_its_dropout_from_the_config_and_evaluation_counts_each_predicted_class():
    from mlcore.graph.pipeline import evaluate, to_data

    assert build_model("erm", TrainConfig(hidden=8, dropout=0.5), 3).encoder.dropout == 0.5
    assert build_model("erm", TrainConfig(hidden=8), 3).encoder.dropout == 0.0
    graphs = generate_motif_graphs(n_graphs=60, seed=0)
    model = build_model("erm", TrainConfig(hidden=8), 3)
    metrics = evaluate(model, [to_data(g) for g in graphs.graphs], batch_size=16, motifs=3, experts=None)
    assert len(metrics.predicted) == 3 and sum(metrics.predicted) == metrics.graphs == 60
