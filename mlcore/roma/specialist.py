"""A base MoE whose routing is mis-specialised for the test distribution: the headroom setting of
the RoMA study (card section 4, with the room its claim needs).

RoMA's premise (card section 1) is that pretrained routers are 10–20 points below per-sample
oracle routing: the experts can answer, the routers send the input to the wrong ones. The tiny
classifier pre-trained end to end (:func:`mlcore.roma.roma.pretrain_moe`) leaves 2–5 points,
because its errors are mostly the experts' (the hard ``sum-ends`` task), not the routers'. This
module builds a base whose errors are the routers':

1. **Task-routed pre-training** (as DEMix or Task-MoE train with domain labels): in the last L MoE
   layers every example's last token is routed to its task's pair of experts
   (:func:`task_experts`), so those experts become specialists in the task; everything else trains
   with its own routing.
2. **Routers taught a stale assignment for one phrasing.** At the same time the last L routers
   learn, from the routing alone, to send each example to its task's experts, except that the
   examples marked with the ``stale_synonyms`` (one of the three marker synonyms per task) are
   taught the *next* task's experts, as if the routers had been distilled from an earlier model
   that routed that phrasing there. The answer path trained the right specialists on every
   phrasing, so the mis-routing is the routers' alone. The routers' target is label-smoothed, so
   their probabilities stay soft (as a pretrained LLM's are), not saturated at 0 and 1/k.
3. **Test distribution:** all three phrasings, uniformly. A third of the inputs go to the wrong
   specialists and are answered for the wrong task; per-sample routing (the oracle) can still pick
   the right pair, and the hidden state tells the phrasings apart, so router tuning could learn to.

The embedding that finds a sample's successful neighbours must know that the stale phrasing asks
the same thing as the other two: the paper's sentence encoder knows that "final" means "last"; the
offline stand-in is TF-IDF + SVD with the synonyms of a task read as one word
(``tfidf-svd-thesaurus`` in :mod:`mlcore.roma.roma`). The base model's own hidden states are the
other embedding: they follow its routing, so they place a stale-phrased input among the next task's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from mlcore.roma.model import MoEClassifier, MoEClassifierConfig
from mlcore.roma.roma import clipped_step, with_router_balance
from mlcore.roma.tasks import SYNONYMS, MultiTaskSet, multitask_set
from mlcore.train import warmup_cosine_scheduler

#: Four tasks every specialist answers exactly from the digits (no hard task: the base's errors
#: should be the routers').
SPECIALIST_TASKS: tuple[str, ...] = ("first", "last", "max", "min")


@dataclass(frozen=True)
class SpecialistConfig:
    tasks: tuple[str, ...] = SPECIALIST_TASKS
    #: Task-routed MoE layers: the last this-many (the routers RoMA then tunes).
    routed_layers: int = 2
    #: The marker synonyms the routers are taught on; the others exist only at test and tuning time.
    router_synonyms: tuple[int, ...] = (0, 1, 2)
    #: Of those, the synonyms the routers are taught a stale assignment for: the experts of the
    #: next task ((t + 1) mod T), as if distilled from an earlier model that routed them there.
    stale_synonyms: tuple[int, ...] = (2,)
    steps: int = 600
    batch_size: int = 64
    lr: float = 3e-3
    #: Weight of the routers' cross-entropy toward their task's experts.
    router_weight: float = 1.0
    #: Share of the routers' target spread over all experts (label smoothing): keeps their
    #: probabilities soft, as a pretrained LLM's are, instead of saturated at 0 and 1/k, where no
    #: loss on the probabilities could move them.
    router_smoothing: float = 0.4
    balance_weight: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.router_synonyms or not set(self.router_synonyms) <= set(range(SYNONYMS)):
            raise ValueError(f"router_synonyms must be among 0…{SYNONYMS - 1}, got {self.router_synonyms}")
        if not set(self.stale_synonyms) <= set(self.router_synonyms):
            raise ValueError(f"stale_synonyms must be among the router_synonyms, got {self.stale_synonyms}")
        if not set(self.router_synonyms) - set(self.stale_synonyms):
            raise ValueError("the routers must be taught the right experts for at least one synonym")

    @property
    def variant(self) -> str:
        """``stale2`` (routers taught the wrong experts for synonym 2), ``untaught12`` (routers never
        taught synonyms 1 and 2), both, or ``exact``: for names and cache keys."""
        parts = []
        if self.stale_synonyms:
            parts.append("stale" + "".join(map(str, self.stale_synonyms)))
        untaught = sorted(set(range(SYNONYMS)) - set(self.router_synonyms))
        if untaught:
            parts.append("untaught" + "".join(map(str, untaught)))
        return "-".join(parts) or "exact"


def task_experts(tasks: int, experts: int, top_k: int) -> Tensor:
    """[tasks, experts] routing distribution of each task: uniform over its own block of ``top_k``
    experts (task t owns experts t·k … t·k + k − 1)."""
    if tasks * top_k > experts:
        raise ValueError(f"{tasks} tasks need {tasks * top_k} experts at top-{top_k}; the model has {experts}")
    table = torch.zeros(tasks, experts)
    for t in range(tasks):
        table[t, t * top_k : (t + 1) * top_k] = 1.0 / top_k
    return table


def pretrain_specialists(
    model_config: MoEClassifierConfig,
    config: SpecialistConfig,
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> MoEClassifier:
    """Train the whole classifier with task-routed last layers and routers taught on part of the
    phrasing (module docstring). Each step: the answer loss under task routing, plus the routers'
    cross-entropy toward their task's experts on the examples phrased with ``router_synonyms``
    (a second forward, with the routers' own routing), plus a Switch balance loss."""

    torch.manual_seed(config.seed)
    model = MoEClassifier(model_config)
    layers = list(range(model_config.layers - config.routed_layers, model_config.layers))
    table = task_experts(len(config.tasks), model_config.experts, model_config.top_k)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.01)
    steps = config.steps
    schedule = warmup_cosine_scheduler(optimizer, steps=steps, warmup_steps=max(1, steps // 10), floor=0.05)
    generator = torch.Generator().manual_seed(60_000 + config.seed)
    allowed = torch.tensor(config.router_synonyms)
    stale_synonyms = torch.tensor(config.stale_synonyms, dtype=torch.int64)
    model.train()
    for step in range(steps):
        data = multitask_set(config.batch_size, generator, tasks=config.tasks)
        routed = {layer: table[data.tasks] for layer in layers}
        logits = model.classify(data, routed)
        loss = nn.functional.cross_entropy(logits, data.labels)
        loss = with_router_balance(loss, model, config.balance_weight)
        taught = torch.isin(data.synonyms, allowed)
        if taught.any():
            rows = torch.nonzero(taught)[:, 0]
            # A stale synonym's routing target is the next task's experts; the answer path above still
            # trained the right specialists on it, so the mis-routing is the routers' alone.
            stale = torch.isin(data.synonyms[rows], stale_synonyms)
            goal = torch.where(stale, (data.tasks[rows] + 1) % len(config.tasks), data.tasks[rows])
            target = (1 - config.router_smoothing) * table[goal] + config.router_smoothing / model_config.experts
            loss = loss + config.router_weight * router_loss(model, data.subset(rows), layers, target)
        clipped_step(optimizer, schedule, params, loss)
        if on_step is not None:
            on_step(step, loss.item())
    return model.eval()


def router_loss(model: MoEClassifier, data: MultiTaskSet, layers: list[int], target: Tensor) -> Tensor:
    """Cross-entropy of the last token's routing in ``layers`` against ``target`` [N, E] (each row
    a task's experts), under the routers' own routing."""
    model.classify(data)
    r = model.last_token_probs(layers, len(data)).view(len(data), len(layers), -1)
    return -(target.unsqueeze(1) * torch.log(r.clamp_min(1e-9))).sum(-1).mean()


def routed_to_task(model: MoEClassifier, data: MultiTaskSet, layers: list[int], tasks: int) -> Tensor:
    """[N] bool: in every layer of ``layers`` the last token's top-k experts are its task's own."""
    table = task_experts(tasks, model.config.experts, model.config.top_k)
    with torch.no_grad():
        model.classify(data)
        r = model.last_token_probs(layers, len(data)).view(len(data), len(layers), -1)
    chosen = torch.zeros_like(r).scatter(-1, r.topk(model.config.top_k, dim=-1).indices, 1.0)
    return ((chosen > 0) == (table[data.tasks].unsqueeze(1) > 0)).all(-1).all(-1)


def specialist_sets(
    config: SpecialistConfig, train_examples: int, test_examples: int, seed: int, *, shifted_length: int
) -> tuple[MultiTaskSet, dict[str, MultiTaskSet]]:
    """The router-tuning split and the i.i.d. and shifted (``shifted_length`` digits) test splits,
    every phrasing equally likely: the distribution the routers were not taught for."""
    generator = torch.Generator().manual_seed(80_000 + seed)
    train = multitask_set(train_examples, generator, tasks=config.tasks)
    splits = {
        "iid": multitask_set(test_examples, generator, tasks=config.tasks),
        "shifted": multitask_set(test_examples, generator, length=shifted_length, tasks=config.tasks),
    }
    return train, splits


def base_diagnostics(model: MoEClassifier, data: MultiTaskSet, config: SpecialistConfig) -> dict[str, list[dict]]:
    """How mis-specialised ``model`` is on ``data``, per marker synonym: whether the routers were
    taught on it, the share routed to its task's experts in every task-routed layer, and the accuracy."""
    total = model.num_moe_layers
    routed = routed_to_task(model, data, list(range(total - config.routed_layers, total)), len(config.tasks))
    with torch.no_grad():
        correct = model.classify(data).argmax(-1) == data.labels
    rows = []
    for synonym in range(SYNONYMS):
        mask = data.synonyms == synonym
        rows.append(
            {
                "synonym": synonym,
                "taught": synonym in config.router_synonyms,
                "stale": synonym in config.stale_synonyms,
                "examples": int(mask.sum()),
                "routed": float(routed[mask].float().mean()) if mask.any() else float("nan"),
                "accuracy": float(correct[mask].float().mean()) if mask.any() else float("nan"),
            }
        )
    return {"per_synonym": rows}
