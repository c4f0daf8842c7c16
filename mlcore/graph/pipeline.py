"""Train and evaluate a graph classifier on a :class:`~mlcore.data.graphs.GraphSet` (card §4).

One procedure for every method, so only the model differs: Adam, fixed epochs, the Gumbel
temperature annealed geometrically from 5 to 0.1, the mixture's gate uniform for the first 40% of
epochs. Model selection follows GOOD: the epoch with the best ``ood_val`` accuracy (``id_val``
when there is no ``ood_val``), chosen among epochs after the warm-up for every method alike.
Reported per split: accuracy, the label-noise ceiling, edge-mask ROC AUC against the ground truth,
the gate's non-zero weights per graph and the expert × motif usage matrix.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from mlcore.data.graphs import GraphSample, GraphSet, label_ceiling
from mlcore.graph.models import ERM, GSATLite, MoEConfig, SubgraphMoE

METHODS: tuple[str, ...] = ("erm", "gsat", "moe-softmax", "moe-diversity", "disco", "disco-free-gate")
METHOD_TITLES: dict[str, str] = {
    "erm": "ERM (GIN)",
    "gsat": "GSAT-lite",
    "moe-softmax": "MoE, softmax gate, no diversity",
    "moe-diversity": "MoE, softmax gate + diversity",
    "disco": "Full method (entmax gate + diversity + budget)",
    "disco-free-gate": "Full method without the gate's KL-to-oracle and balance losses (ablation)",
}


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    batch_size: int = 64
    lr: float = 1e-3
    hidden: int = 64
    layers: int = 3
    experts: int = 4
    diversity: float = 1.0
    budget: float = 5.0
    keep_ratio: float = 0.55
    alpha: float = 1.38
    gate_weight: float = 0.1
    warmup_fraction: float = 0.4
    tau_start: float = 5.0
    tau_end: float = 0.1
    gsat_r: float = 0.7
    #: Dropout after each of ERM's GIN layers (an axis of the benchmark's ERM tuning grid; GOOD uses 0.5).
    dropout: float = 0.0
    seed: int = 0

    def temperature(self, epoch: int) -> float:
        if self.epochs == 1:
            return self.tau_end
        return self.tau_start * (self.tau_end / self.tau_start) ** (epoch / (self.epochs - 1))

    @property
    def warmup_epochs(self) -> int:
        return min(self.epochs - 1, math.floor(self.warmup_fraction * self.epochs))


def build_model(method: str, config: TrainConfig, classes: int) -> nn.Module:
    hidden, layers = config.hidden, config.layers
    if method == "erm":
        return ERM(classes, hidden, layers, dropout=config.dropout)
    if method == "gsat":
        return GSATLite(classes, hidden, layers, r=config.gsat_r)
    moe = {
        "moe-softmax": MoEConfig(config.experts, "softmax", diversity=0.0, budget=config.budget),
        "moe-diversity": MoEConfig(config.experts, "softmax", diversity=config.diversity, budget=config.budget),
        "disco": MoEConfig(config.experts, "entmax", config.alpha, diversity=config.diversity, budget=config.budget),
    }
    # The ablation drops the gate's own losses: KL(w ‖ softmax(−CE/T)) rewards the gate's entropy and
    # the balance term rewards equal use, and together they kept the entmax gate dense in our runs.
    moe["disco-free-gate"] = moe["disco"]
    if method not in moe:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    gate_weight = 0.0 if method == "disco-free-gate" else config.gate_weight
    cfg = MoEConfig(**{**asdict(moe[method]), "keep_ratio": config.keep_ratio, "gate_weight": gate_weight})
    return SubgraphMoE(classes, hidden, layers, cfg)


def to_data(g: GraphSample) -> Data:
    """Both directions of every undirected edge; ground truth −1 where the file has none."""
    edges = torch.as_tensor(g.edges, dtype=torch.long).reshape(-1, 2).t()
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    gt = (
        torch.as_tensor(g.edge_mask, dtype=torch.long) if g.edge_mask is not None else torch.full((edges.shape[1],), -1)
    )
    return Data(
        x=torch.ones(g.nodes, 1),
        edge_index=edge_index,
        y=torch.tensor([g.label]),
        edge_gt=torch.cat([gt, gt]),
        motif=torch.tensor([g.motif if g.motif is not None else -1]),
        num_nodes=g.nodes,
    )


@dataclass
class SplitMetrics:
    accuracy: float
    graphs: int
    ceiling: float | None = None
    mask_auc: float | None = None
    gate_nonzero: float | None = None
    #: usage[k][m]: mean gate weight of expert k on graphs made with motif m (None if no motifs).
    usage: list[list[float]] | None = None
    #: predicted[c]: how many graphs the model assigns to class c (shows a collapse onto one class).
    predicted: list[int] | None = None


@dataclass
class MethodResult:
    method: str
    splits: dict[str, SplitMetrics]
    best_epoch: int
    history: list[dict[str, float]] = field(default_factory=list)
    seconds: float = 0.0
    parameters: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "splits": {k: asdict(v) for k, v in self.splits.items()},
            "best_epoch": self.best_epoch,
            "history": self.history,
            "seconds": self.seconds,
            "parameters": self.parameters,
        }


def roc_auc(scores: np.ndarray, truth: np.ndarray) -> float | None:
    """ROC AUC by the Mann-Whitney statistic, ties counted half; edges with unknown truth (−1) skipped.

    (U − n₊(n₊ + 1)/2) / (n₊·n₋) with U the positives' rank sum under average ranks for ties.
    """
    known = truth >= 0
    scores, truth = scores[known].astype(np.float64), truth[known]
    positives = int((truth == 1).sum())
    negatives = len(truth) - positives
    if positives == 0 or negatives == 0:
        return None
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    # Average the ranks within groups of equal scores.
    _, inverse, counts = np.unique(scores, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    ranks = (sums / counts)[inverse]
    u = ranks[truth == 1].sum() - positives * (positives + 1) / 2
    return float(u / (positives * negatives))


@torch.no_grad()
def evaluate(
    model: nn.Module, graphs: list[Data], *, batch_size: int, motifs: int, experts: int | None
) -> SplitMetrics:
    model.eval()
    correct = total = 0
    predicted: torch.Tensor | None = None
    scores: list[np.ndarray] = []
    truth: list[np.ndarray] = []
    gates: list[torch.Tensor] = []
    motif_ids: list[torch.Tensor] = []
    device = next(model.parameters()).device
    for batch in DataLoader(graphs, batch_size=batch_size):
        batch = batch.to(device)
        out = model(batch)
        guess = out.logits.argmax(-1)
        correct += int((guess == batch.y).sum())
        total += batch.num_graphs
        counts = torch.bincount(guess.cpu(), minlength=out.logits.shape[-1])
        predicted = counts if predicted is None else predicted + counts
        if out.edge_score is not None:
            scores.append(out.edge_score.cpu().numpy())
            truth.append(batch.edge_gt.cpu().numpy())
        if out.gate is not None:
            gates.append(out.gate.cpu())
            motif_ids.append(batch.motif.cpu())
    metrics = SplitMetrics(
        accuracy=correct / max(total, 1),
        graphs=total,
        predicted=predicted.tolist() if predicted is not None else None,
    )
    if scores:
        metrics.mask_auc = roc_auc(np.concatenate(scores), np.concatenate(truth))
    if gates and experts:
        w, motif = torch.cat(gates), torch.cat(motif_ids)
        metrics.gate_nonzero = float((w > 0).sum(-1).float().mean())
        if motifs and (motif >= 0).any():
            metrics.usage = [
                [float(w[motif == m, k].mean()) if (motif == m).any() else 0.0 for m in range(motifs)]
                for k in range(experts)
            ]
    return metrics


def train_method(
    method: str,
    graphset: GraphSet,
    config: TrainConfig,
    *,
    on_epoch: Callable[[int, dict[str, float]], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
    device: torch.device | str = "cpu",
) -> MethodResult:
    """Train ``method`` on the ``train`` split, select on ``ood_val``, evaluate every split."""
    start = time.perf_counter()
    torch.manual_seed(config.seed)
    np.random.seed(config.seed)
    data = {split: [to_data(g) for g in graphset.split(split)] for split in graphset.splits()}
    if not data.get("train"):
        raise ValueError("the graph set has no train split")
    select_on = "ood_val" if data.get("ood_val") else "id_val" if data.get("id_val") else "train"
    model = build_model(method, config, graphset.num_classes).to(device)
    experts = config.experts if isinstance(model, SubgraphMoE) else None
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr)
    loader = DataLoader(
        data["train"], batch_size=config.batch_size, shuffle=True, generator=torch.Generator().manual_seed(config.seed)
    )
    history: list[dict[str, float]] = []
    best: tuple[float, int, dict[str, Any]] | None = None
    motifs = len(graphset.motifs)
    for epoch in range(config.epochs):
        if cancelled is not None and cancelled():
            break
        model.train()
        if isinstance(model, SubgraphMoE):
            model.tau = config.temperature(epoch)
            model.uniform_gate = epoch < config.warmup_epochs
        sums: dict[str, float] = {}
        batches = 0
        for batch in loader:
            if batch.num_graphs < 2:
                continue  # batch norm needs two graphs; a lone leftover graph is skipped
            batch = batch.to(device)
            out = model(batch)
            loss, parts = model.loss(out, batch)
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            for key, value in {"loss": loss.item(), **parts}.items():
                sums[key] = sums.get(key, 0.0) + value
            batches += 1
        val = evaluate(model, data[select_on], batch_size=256, motifs=motifs, experts=experts)
        row = {
            "epoch": epoch,
            **{k: v / max(batches, 1) for k, v in sums.items()},
            f"{select_on}_accuracy": val.accuracy,
        }
        history.append(row)
        if on_epoch is not None:
            on_epoch(epoch, row)
        if epoch >= config.warmup_epochs and (best is None or val.accuracy > best[0]):
            best = (val.accuracy, epoch, {k: v.detach().clone() for k, v in model.state_dict().items()})
    best_epoch = -1
    if best is not None:
        model.load_state_dict(best[2])
        best_epoch = best[1]
    if isinstance(model, SubgraphMoE):
        model.uniform_gate = False
        model.tau = config.tau_end
    splits = {}
    for split, graphs in data.items():
        metrics = evaluate(model, graphs, batch_size=256, motifs=motifs, experts=experts)
        metrics.ceiling = label_ceiling(graphset.split(split))
        splits[split] = metrics
    return MethodResult(
        method=method,
        splits=splits,
        best_epoch=best_epoch,
        history=history,
        seconds=time.perf_counter() - start,
        parameters=sum(p.numel() for p in model.parameters()),
    )
