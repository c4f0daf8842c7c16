"""RoMA: Routing Manifold Alignment (Li, Li and Zhou, ICLR 2026), its baselines and metrics.

Method (card section 2):

1. Successful set S: training samples the base model answers correctly, each with a task
   embedding e_j and a routing vector r_j (last-token router probabilities of the last L MoE
   layers, concatenated).
2. Neighbours: for each sample i its k nearest members of S by cosine similarity of
   embeddings (i itself excluded), weighted W_ij = exp(−(1 − cos_ij)² / 2σ²), normalised.
3. Loss: L = CE + λ(t)·Σ_j W_ij‖r_i − r_j‖², λ ramped linearly to its value over a warm-up.
   r_i comes from the LIVE routers in the forward pass: the public script reads stored
   routing weights instead, so its regulariser has no gradient (card, "Do this instead").
4. Only the router weights of the last L layers train.

Baselines: the base model; CE-only router tuning (λ = 0, same parameters and schedule);
C3PO-lite (test time: replace the last-L-layer routing of a test sample by the kernel-weighted
mean of its successful neighbours' r_j); the oracle (per test sample, optimise its own routing on
its own label; an upper bound, not a method). Fraction of the oracle gap closed:
(acc − acc_base)/(acc_oracle − acc_base).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from mlcore.lora.pipeline import warmup_cosine
from mlcore.routing.model import MoEClassifier, MoEClassifierConfig
from mlcore.routing.tasks import MultiTaskSet, multitask_set

EMBEDDINGS: tuple[str, ...] = ("tfidf-svd", "hidden-mean")


# -- pre-training the base MoE -----------------------------------------------------------------
def pretrain_moe(
    config: MoEClassifierConfig,
    *,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    balance_weight: float = 0.01,
    on_step: Callable[[int, float], None] | None = None,
) -> MoEClassifier:
    """Train the whole classifier on the multi-task mix (CE + a per-layer Switch balance loss)."""
    from mlcore.moe.losses import switch_load_balance_loss
    from mlcore.moe.routers import Routing

    torch.manual_seed(seed)
    model = MoEClassifier(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    schedule = warmup_cosine(optimizer, steps)
    generator = torch.Generator().manual_seed(50_000 + seed)
    model.train()
    for step in range(steps):
        data = multitask_set(batch_size, generator)
        loss = nn.functional.cross_entropy(model(data.tokens), data.labels)
        for block in model.blocks:
            probs = block.router.probs
            assert probs is not None
            _, ids = torch.topk(probs, config.top_k, dim=-1)
            loss = loss + balance_weight * switch_load_balance_loss(Routing(ids, probs, probs, probs, config.experts))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if on_step is not None:
            on_step(step, loss.item())
    return model.eval()


# -- embeddings, routing vectors and neighbours ------------------------------------------------
def tfidf_svd_embedder(train: MultiTaskSet, dims: int = 16, seed: int = 0) -> Callable[[MultiTaskSet], Tensor]:
    """TF-IDF over the example's words (unigrams and bigrams), reduced by truncated SVD; fitted on
    the training split and applied to any split."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(token_pattern=r"\S+", ngram_range=(1, 2))
    matrix = vectorizer.fit_transform(train.texts())
    svd = TruncatedSVD(n_components=min(dims, matrix.shape[1] - 1), random_state=seed).fit(matrix)

    def embed(data: MultiTaskSet) -> Tensor:
        return torch.tensor(svd.transform(vectorizer.transform(data.texts())), dtype=torch.float32)

    return embed


def hidden_mean_embedder(model: MoEClassifier) -> Callable[[MultiTaskSet], Tensor]:
    """The frozen base model's mean-pooled final hidden states."""
    frozen = model.clone().eval()

    def embed(data: MultiTaskSet) -> Tensor:
        with torch.no_grad():
            return frozen.hidden_states(data.tokens).mean(1)

    return embed


def routing_vectors(model: MoEClassifier, data: MultiTaskSet, layers: list[int]) -> tuple[Tensor, Tensor]:
    """(r [N, L·E], correct [N] bool) without gradient."""
    with torch.no_grad():
        logits = model(data.tokens)
        return model.last_token_probs(layers, len(data)), logits.argmax(-1) == data.labels


def neighbours(
    query: Tensor, bank: Tensor, k: int, sigma: float, *, exclude: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The k nearest bank rows of each query row by cosine similarity, and their normalised
    Gaussian-kernel weights W = exp(−(1 − cos)² / 2σ²). ``exclude`` [Nq] holds, for each query,
    a bank index to skip (the sample itself), or −1."""
    cos = nn.functional.normalize(query, dim=-1) @ nn.functional.normalize(bank, dim=-1).T
    if exclude is not None:
        rows = torch.nonzero(exclude >= 0).squeeze(-1)
        cos[rows, exclude[rows]] = -2.0
    k = min(k, bank.shape[0] - (1 if exclude is not None else 0))
    sim, index = cos.topk(k, dim=-1)
    weights = torch.exp(-((1 - sim) ** 2) / (2 * sigma**2))
    return index, weights / weights.sum(-1, keepdim=True).clamp_min(1e-12)


def manifold_loss(r: Tensor, targets: Tensor, weights: Tensor) -> Tensor:
    """Σ_j W_ij‖r_i − r_j‖², averaged over the batch; r [B, D], targets [B, k, D], weights [B, k]."""
    return (weights * (r.unsqueeze(1) - targets).square().sum(-1)).sum(-1).mean()


def knn_overlap(a: Tensor, b: Tensor, k: int = 10) -> float:
    """Mean share of each row's k nearest neighbours (cosine) in space a also among its k nearest in b."""

    def knn(x: Tensor) -> Tensor:
        cos = nn.functional.normalize(x, dim=-1) @ nn.functional.normalize(x, dim=-1).T
        cos.fill_diagonal_(-2.0)
        return cos.topk(k, dim=-1).indices

    ia, ib = knn(a), knn(b)
    hits = (ia.unsqueeze(-1) == ib.unsqueeze(-2)).any(-1).float()
    return float(hits.mean())


def accuracy(model: MoEClassifier, data: MultiTaskSet, override: dict[int, Tensor] | None = None) -> float:
    with torch.no_grad():
        return float((model(data.tokens, override).argmax(-1) == data.labels).float().mean())


# -- router alignment --------------------------------------------------------------------------
@dataclass(frozen=True)
class AlignConfig:
    layers: int = 2  #: tune the routers of the last this-many MoE layers
    k: int = 5
    sigma: float = 0.4
    lam: float = 0.8  #: 0 gives CE-only router tuning
    warmup: int = 50  #: steps over which λ ramps linearly from 0
    epochs: int = 3
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.01
    #: ``fixed``: neighbours' r_j from the base model; ``recomputed``: refreshed each epoch.
    targets: str = "fixed"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.targets not in ("fixed", "recomputed"):
            raise ValueError(f"targets must be 'fixed' or 'recomputed', got {self.targets!r}")


@dataclass
class AlignResult:
    model: MoEClassifier
    ce: list[float] = field(default_factory=list)
    regulariser: list[float] = field(default_factory=list)
    successful: int = 0


def last_layers(model: MoEClassifier, count: int) -> list[int]:
    total = len(model.blocks)
    if not 1 <= count <= total:
        raise ValueError(f"layers must be between 1 and the model's {total} MoE layers, got {count}")
    return list(range(total - count, total))


def router_parameters(model: MoEClassifier, layers: list[int]) -> list[nn.Parameter]:
    """Freeze everything, then unfreeze only the router weights of ``layers``."""
    model.requires_grad_(False)
    params = [model.blocks[i].router.weight for i in layers]
    for p in params:
        p.requires_grad_(True)
    return params


def align_routers(
    base: MoEClassifier,
    train: MultiTaskSet,
    embeddings: Tensor,
    config: AlignConfig,
    *,
    on_step: Callable[[int, float, float], None] | None = None,
) -> AlignResult:
    """RoMA (λ > 0) or CE-only router tuning (λ = 0) on a copy of ``base``."""
    torch.manual_seed(config.seed)
    model = base.clone()
    layers = last_layers(model, config.layers)
    params = router_parameters(model, layers)
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    r_all, correct = routing_vectors(model, train, layers)
    success = torch.nonzero(correct).squeeze(-1)
    result = AlignResult(model, successful=len(success))
    if len(success) < 2 and config.lam > 0:
        raise ValueError("fewer than two training samples are answered correctly; RoMA needs successful neighbours")
    # Each sample's neighbours in S, itself excluded (its position in S, or −1 if it is not in S).
    position_in_s = torch.full((len(train),), -1, dtype=torch.int64)
    position_in_s[success] = torch.arange(len(success))
    index, weights = neighbours(embeddings, embeddings[success], config.k, config.sigma, exclude=position_in_s)
    targets = r_all[success]
    generator = torch.Generator().manual_seed(config.seed)
    step = 0
    for _epoch in range(config.epochs):
        if config.targets == "recomputed" and _epoch > 0:
            model.eval()
            targets = routing_vectors(model, train, layers)[0][success]
        model.train()
        order = torch.randperm(len(train), generator=generator)
        for start in range(0, len(train), config.batch_size):
            batch = order[start : start + config.batch_size]
            logits = model(train.tokens[batch])
            ce = nn.functional.cross_entropy(logits, train.labels[batch])
            r = model.last_token_probs(layers, len(batch))  # live: the regulariser's gradient reaches W_g
            reg = manifold_loss(r, targets[index[batch]], weights[batch])
            lam = config.lam * min(1.0, (step + 1) / max(1, config.warmup))
            loss = ce + lam * reg
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            result.ce.append(ce.item())
            result.regulariser.append(reg.item())
            if on_step is not None:
                on_step(step, ce.item(), reg.item())
            step += 1
    model.eval()
    return result


def c3po_lite(
    model: MoEClassifier,
    test: MultiTaskSet,
    test_embeddings: Tensor,
    bank_embeddings: Tensor,
    bank_routing: Tensor,
    layers: list[int],
    k: int,
    sigma: float,
) -> float:
    """Test-time neighbour mixing: the last-layer routing of each test sample becomes the
    kernel-weighted mean of its k successful neighbours' routing vectors. No training."""
    index, weights = neighbours(test_embeddings, bank_embeddings, k, sigma)
    mixed = (weights.unsqueeze(-1) * bank_routing[index]).sum(1)  # [N, L·E]
    experts = model.config.experts
    override = {layer: mixed[:, i * experts : (i + 1) * experts] for i, layer in enumerate(layers)}
    return accuracy(model, test, override)


def oracle_accuracy(
    model: MoEClassifier, test: MultiTaskSet, layers: list[int], steps: int = 30, lr: float = 0.3
) -> float:
    """Per-sample oracle: optimise each test sample's own last-layer routing logits on its own
    label with a few Adam steps (all samples at once; their losses are independent), then score.
    A sample counts as solved if any step's routing answers it: the best per-sample routing."""
    model = model.clone().requires_grad_(False).eval()
    with torch.no_grad():
        model(test.tokens)
        start = [
            torch.log(model.blocks[i].router.probs.view(len(test), -1, model.config.experts)[:, -1]) for i in layers
        ]
    z = nn.Parameter(torch.stack(start, 1).clone())  # [N, L, E]
    optimizer = torch.optim.Adam([z], lr=lr)
    solved = torch.zeros(len(test), dtype=torch.bool)
    for _ in range(steps + 1):
        override = {layer: torch.softmax(z[:, i], -1) for i, layer in enumerate(layers)}
        logits = model(test.tokens, override)
        solved |= (logits.argmax(-1) == test.labels).detach()
        loss = nn.functional.cross_entropy(logits, test.labels, reduction="sum")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return float(solved.float().mean())


# -- the whole study ---------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyConfig:
    train_examples: int = 1500
    test_examples: int = 600
    embedding: str = "tfidf-svd"
    align: AlignConfig = AlignConfig()
    oracle_steps: int = 30
    overlap_k: int = 10
    seed: int = 0


def gap_closed(acc: float, base: float, oracle: float) -> float:
    return (acc - base) / (oracle - base) if oracle - base > 1e-9 else 0.0


def run_study(
    base: MoEClassifier, config: StudyConfig, *, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Base, CE-only, RoMA, C3PO-lite and the oracle on an i.i.d. and a shifted (longer inputs) test split."""
    if config.embedding not in EMBEDDINGS:
        raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {config.embedding!r}")
    generator = torch.Generator().manual_seed(70_000 + config.seed)
    train = multitask_set(config.train_examples, generator)
    splits = {
        "iid": multitask_set(config.test_examples, generator),
        "shifted": multitask_set(config.test_examples, generator, length=base.config.max_length - 1),
    }
    embed = (
        tfidf_svd_embedder(train, seed=config.seed) if config.embedding == "tfidf-svd" else hidden_mean_embedder(base)
    )
    train_emb = embed(train)
    layers = last_layers(base, config.align.layers)
    a = config.align
    log(f"{len(train)} training samples; tuning the routers of layers {layers}")
    roma = align_routers(base, train, train_emb, a)
    ce_only = align_routers(base, train, train_emb, AlignConfig(**{**vars(a), "lam": 0.0}))
    bank_r, correct = routing_vectors(base, train, layers)
    out: dict[str, Any] = {"successful": roma.successful, "layers": layers, "regulariser": roma.regulariser}
    for name, data in splits.items():
        emb = embed(data)
        acc = {
            "base": accuracy(base, data),
            "ce_only": accuracy(ce_only.model, data),
            "roma": accuracy(roma.model, data),
            "c3po_lite": c3po_lite(base, data, emb, train_emb[correct], bank_r[correct], layers, a.k, a.sigma),
            "oracle": oracle_accuracy(base, data, layers, steps=config.oracle_steps),
        }
        overlap = {
            "base": knn_overlap(emb, routing_vectors(base, data, layers)[0], config.overlap_k),
            "roma": knn_overlap(emb, routing_vectors(roma.model, data, layers)[0], config.overlap_k),
            "ce_only": knn_overlap(emb, routing_vectors(ce_only.model, data, layers)[0], config.overlap_k),
        }
        gap = {m: gap_closed(acc[m], acc["base"], acc["oracle"]) for m in ("ce_only", "roma", "c3po_lite")}
        out[name] = {"accuracy": acc, "gap_closed": gap, "knn_overlap": overlap}
        log(f"{name}: " + ", ".join(f"{m} {v:.3f}" for m, v in acc.items()))
    out["models"] = {"roma": roma.model, "ce_only": ce_only.model}
    return out
