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
   The neighbours' r_j (``AlignConfig.targets``): ``live`` (the default) recomputes them from the
   routers being tuned at every step, without gradient, so the targets follow the tuned routers;
   ``fixed`` keeps the base model's r_j (what the public script stores), which anchors the routers
   near where they started; ``recomputed`` refreshes them once per epoch.
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
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from mlcore.roma.model import MoEClassifier, MoEClassifierConfig
from mlcore.roma.tasks import MultiTaskSet, as_text, multitask_set
from mlcore.train import warmup_cosine_scheduler

#: ``tfidf-svd-thesaurus`` reads every synonym of a task as one word (built-in digit tasks only).
EMBEDDINGS: tuple[str, ...] = ("tfidf-svd", "hidden-mean", "tfidf-svd-thesaurus")
#: Where the neighbours' routing vectors r_j come from while the routers are tuned (see the docstring).
TARGETS: tuple[str, ...] = ("live", "fixed", "recomputed")
#: Rows per evaluation forward pass.
CHUNK = 256


class Subject(Protocol):
    """What RoMA needs of an MoE model: the tiny :class:`~mlcore.roma.model.MoEClassifier` or an
    adapted Hugging Face MoE LM (:class:`mlcore.roma.hf.HFRoutedLM`). ``data`` is a labelled set
    with ``labels``, ``subset(index)`` and ``texts()``; layer numbers are positions among the MoE
    layers."""

    @property
    def num_moe_layers(self) -> int: ...
    def num_experts(self, layer: int) -> int: ...
    def classify(self, data: Any, override: dict[int, Tensor] | None = None) -> Tensor: ...
    def last_token_probs(self, layers: list[int], batch: int) -> Tensor: ...
    def hidden_mean(self, data: Any) -> Tensor: ...
    def router_parameters(self, layers: list[int]) -> list[nn.Parameter]: ...
    def router_probs(self) -> list[tuple[Tensor, int]]: ...
    def clone(self) -> Any: ...
    def train(self) -> Any: ...
    def eval(self) -> Any: ...


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
    """Train the whole tiny classifier on the multi-task mix (CE + a per-layer Switch balance loss)."""
    torch.manual_seed(seed)
    model = MoEClassifier(config)
    pretrain(
        model,
        model.parameters(),
        steps=steps,
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        balance_weight=balance_weight,
        on_step=on_step,
    )
    return model.eval()


def pretrain(
    subject: Subject,
    params: Any,
    *,
    text: bool = False,
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    balance_weight: float,
    on_step: Callable[[int, float], None] | None = None,
) -> None:
    """Train ``params`` of ``subject`` on fresh batches of the built-in multi-task mix (as prompts
    when ``text``): cross-entropy on the answer plus a per-layer Switch balance loss on the routers."""
    params = list(params)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    schedule = warmup_cosine_scheduler(optimizer, steps=steps, warmup_steps=max(1, int(0.1 * steps)), floor=0.05)
    generator = torch.Generator().manual_seed(50_000 + seed)
    subject.train()
    for step in range(steps):
        data = multitask_set(batch_size, generator)
        logits = subject.classify(as_text(data) if text else data)
        loss = nn.functional.cross_entropy(logits, data.labels.to(logits.device))
        loss = with_router_balance(loss, subject, balance_weight)
        clipped_step(optimizer, schedule, params, loss)
        if on_step is not None:
            on_step(step, loss.item())
    subject.eval()


def with_router_balance(loss: Tensor, subject: Subject, weight: float) -> Tensor:
    """``loss`` plus ``weight`` × the Switch load-balance loss of each MoE layer's routing in the last forward."""
    from mlcore.moe.losses import switch_load_balance_loss
    from mlcore.moe.routers import Routing

    for probs, top_k in subject.router_probs():
        _, ids = torch.topk(probs, top_k, dim=-1)
        routing = Routing(ids, probs, probs, probs, probs.shape[-1])
        loss = loss + weight * switch_load_balance_loss(routing).to(loss.device)
    return loss


def clipped_step(optimizer: torch.optim.Optimizer, schedule: Any, params: list[Tensor], loss: Tensor) -> None:
    """One optimiser step on ``loss`` with the gradient norm clipped to 1, then the schedule's step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    schedule.step()


# -- embeddings, routing vectors and neighbours ------------------------------------------------
def tfidf_svd_embedder(
    train: Any, dims: int = 16, seed: int = 0, *, thesaurus: bool = False
) -> Callable[[Any], Tensor]:
    """TF-IDF over the example's words (unigrams and bigrams), reduced by truncated SVD; fitted on
    the training split and applied to any split. ``thesaurus``: the synonyms of a task read as one
    word, the offline stand-in for the paper's sentence encoder, which knows that "final" and
    "last" ask the same thing (built-in digit task sets only)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    def texts(data: Any) -> list[str]:
        if not thesaurus:
            return data.texts()
        if not isinstance(data, MultiTaskSet):
            raise ValueError("the tfidf-svd-thesaurus embedding reads only the built-in digit task sets")
        return data.texts(thesaurus=True)

    vectorizer = TfidfVectorizer(token_pattern=r"\S+", ngram_range=(1, 2))
    matrix = vectorizer.fit_transform(texts(train))
    svd = TruncatedSVD(n_components=min(dims, matrix.shape[1] - 1), random_state=seed).fit(matrix)

    def embed(data: Any) -> Tensor:
        return torch.tensor(svd.transform(vectorizer.transform(texts(data))), dtype=torch.float32)

    return embed


def hidden_mean_embedder(model: Subject) -> Callable[[Any], Tensor]:
    """The frozen base model's mean-pooled final hidden states."""
    frozen = model.clone().eval()

    def embed(data: Any) -> Tensor:
        with torch.no_grad():
            return torch.cat([frozen.hidden_mean(part) for part in _chunks(data)])

    return embed


def _chunks(data: Any, size: int = CHUNK) -> list[Any]:
    """``data`` in pieces of ``size`` rows, so evaluation of a large set stays within memory."""
    return [data.subset(torch.arange(start, min(start + size, len(data)))) for start in range(0, len(data), size)]


def routing_vectors(model: Subject, data: Any, layers: list[int]) -> tuple[Tensor, Tensor]:
    """(r [N, L·E], correct [N] bool) without gradient."""
    rs, correct = [], []
    with torch.no_grad():
        for part in _chunks(data):
            logits = model.classify(part)
            rs.append(model.last_token_probs(layers, len(part)))
            correct.append(logits.argmax(-1).cpu() == part.labels)
    return torch.cat(rs), torch.cat(correct)


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

    k = min(k, len(a) - 1)  # a small uploaded test split has fewer rows than k
    ia, ib = knn(a), knn(b)
    hits = (ia.unsqueeze(-1) == ib.unsqueeze(-2)).any(-1).float()
    return float(hits.mean())


def accuracy(model: Subject, data: Any, override: dict[int, Tensor] | None = None) -> float:
    hits = 0
    with torch.no_grad():
        for start in range(0, len(data), CHUNK):
            rows = torch.arange(start, min(start + CHUNK, len(data)))
            part = {layer: p[rows] for layer, p in override.items()} if override else None
            hits += int((model.classify(data.subset(rows), part).argmax(-1).cpu() == data.labels[rows]).sum())
    return hits / len(data)


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
    #: The neighbours' r_j: ``live`` from the routers being tuned, at every step (no gradient);
    #: ``fixed`` from the base model; ``recomputed`` from the tuned routers once per epoch.
    targets: str = "live"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.targets not in TARGETS:
            raise ValueError(f"targets must be one of {TARGETS}, got {self.targets!r}")


@dataclass
class AlignResult:
    model: Any  #: the tuned copy (a Subject)
    ce: list[float] = field(default_factory=list)
    regulariser: list[float] = field(default_factory=list)
    successful: int = 0


def last_layers(model: Subject, count: int) -> list[int]:
    total = model.num_moe_layers
    if not 1 <= count <= total:
        raise ValueError(f"layers must be between 1 and the model's {total} MoE layers, got {count}")
    return list(range(total - count, total))


def align_routers(
    base: Subject,
    train: Any,
    embeddings: Tensor,
    config: AlignConfig,
    *,
    on_step: Callable[[int, float, float], None] | None = None,
) -> AlignResult:
    """RoMA (λ > 0) or CE-only router tuning (λ = 0) on a copy of ``base``."""
    torch.manual_seed(config.seed)
    model = base.clone()
    layers = last_layers(model, config.layers)
    params = model.router_parameters(layers)
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
            if config.targets == "live" and config.lam > 0:
                neighbour_r = live_targets(model, train, success, index[batch], layers)
            else:
                neighbour_r = targets[index[batch]]
            logits = model.classify(train.subset(batch))
            ce = nn.functional.cross_entropy(logits, train.labels[batch].to(logits.device))
            r = model.last_token_probs(layers, len(batch))  # live: the regulariser's gradient reaches W_g
            reg = manifold_loss(r, neighbour_r.to(r.device), weights[batch])
            lam = config.lam * min(1.0, (step + 1) / max(1, config.warmup))
            loss = ce.to(reg.device) + lam * reg
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


def live_targets(model: Subject, train: Any, success: Tensor, index: Tensor, layers: list[int]) -> Tensor:
    """The neighbours' routing vectors under the routers as they are now: r_j for each bank
    position in ``index`` [B, k] (positions in S, whose training rows are ``success``), [B, k, D].

    Computed without gradient: the successful neighbours are the anchors a sample is pulled to,
    and a gradient through r_j would also pull them toward the sample. Each distinct neighbour is
    run once (a batch's neighbourhoods overlap)."""
    unique, inverse = torch.unique(index, return_inverse=True)
    with torch.no_grad():
        model.classify(train.subset(success[unique]))
        r = model.last_token_probs(layers, len(unique))
    return r[inverse.to(r.device)]


def c3po_lite(
    model: Subject,
    test: Any,
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
    return accuracy(model, test, split_layers(model, mixed, layers))


def split_layers(model: Subject, r: Tensor, layers: list[int]) -> dict[int, Tensor]:
    """A concatenated routing vector [N, L·E] back into layer → [N, E]."""
    sizes = [model.num_experts(layer) for layer in layers]
    return dict(zip(layers, r.split(sizes, dim=-1), strict=True))


def oracle_accuracy(model: Subject, test: Any, layers: list[int], steps: int = 30, lr: float = 0.3) -> float:
    """Per-sample oracle: optimise each test sample's own last-layer routing logits on its own
    label with a few Adam steps (a chunk of samples at once; their losses are independent), then
    score. A sample counts as solved if any step's routing answers it: the best per-sample routing."""
    model = model.clone()
    model.router_parameters([])  # everything frozen: only the routing logits z move
    model.eval()
    solved = []
    for part in _chunks(test):
        start = torch.log(routing_vectors(model, part, layers)[0].clamp_min(1e-20))
        z = nn.Parameter(start.clone())  # [n, L·E]
        optimizer = torch.optim.Adam([z], lr=lr)
        hit = torch.zeros(len(part), dtype=torch.bool)
        for _ in range(steps + 1):
            override = {layer: torch.softmax(zl, -1) for layer, zl in split_layers(model, z, layers).items()}
            logits = model.classify(part, override)
            hit |= (logits.argmax(-1).cpu() == part.labels).detach()
            loss = nn.functional.cross_entropy(logits, part.labels.to(logits.device), reduction="sum")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        solved.append(hit)
    return float(torch.cat(solved).float().mean())


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
    #: Other neighbour-target modes to run as labelled ablations (``roma_<mode>`` rows), e.g. ("fixed",).
    target_ablations: tuple[str, ...] = ()


def embedder(name: str, base: Subject, train: Any, seed: int) -> Callable[[Any], Tensor]:
    """The task-embedding function ``name`` (one of :data:`EMBEDDINGS`), fitted on ``train``."""
    if name == "hidden-mean":
        return hidden_mean_embedder(base)
    if name in ("tfidf-svd", "tfidf-svd-thesaurus"):
        return tfidf_svd_embedder(train, seed=seed, thesaurus=name.endswith("thesaurus"))
    raise ValueError(f"embedding must be one of {EMBEDDINGS}, got {name!r}")


def gap_closed(acc: float, base: float, oracle: float) -> float:
    return (acc - base) / (oracle - base) if oracle - base > 1e-9 else 0.0


def builtin_sets(config: StudyConfig, *, shifted_length: int, text: bool = False) -> tuple[Any, dict[str, Any]]:
    """The built-in multi-task set: a training split, an i.i.d. test split and a shifted one
    (inputs of ``shifted_length`` digits); as prompts for a language model when ``text``."""
    generator = torch.Generator().manual_seed(70_000 + config.seed)
    train = multitask_set(config.train_examples, generator)
    splits = {
        "iid": multitask_set(config.test_examples, generator),
        "shifted": multitask_set(config.test_examples, generator, length=shifted_length),
    }
    if text:
        return as_text(train), {name: as_text(data) for name, data in splits.items()}
    return train, splits


def run_study(
    base: Subject,
    train: Any,
    splits: dict[str, Any],
    config: StudyConfig,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Base, CE-only, RoMA, C3PO-lite and the oracle, tuned on ``train`` and scored on each of
    ``splits``; RoMA with each of ``config.target_ablations``' neighbour targets too (``roma_<mode>``)."""
    unknown = set(config.target_ablations) - set(TARGETS)
    if unknown:
        raise ValueError(f"target ablations must be among {TARGETS}, got {sorted(unknown)}")
    embed = embedder(config.embedding, base, train, config.seed)
    train_emb = embed(train)
    layers = last_layers(base, config.align.layers)
    a = config.align
    log(f"{len(train)} training samples; tuning the routers of MoE layers {layers}")
    roma = align_routers(base, train, train_emb, a)
    ce_only = align_routers(base, train, train_emb, AlignConfig(**{**vars(a), "lam": 0.0}))
    tuned = {"ce_only": ce_only.model, "roma": roma.model}
    for mode in config.target_ablations:
        tuned[f"roma_{mode}"] = align_routers(base, train, train_emb, AlignConfig(**{**vars(a), "targets": mode})).model
    bank_r, correct = routing_vectors(base, train, layers)
    out: dict[str, Any] = {
        "successful": roma.successful,
        "layers": layers,
        "regulariser": roma.regulariser,
        "targets": a.targets,
    }
    for name, data in splits.items():
        emb = embed(data)
        acc = {"base": accuracy(base, data)} | {method: accuracy(model, data) for method, model in tuned.items()}
        acc["c3po_lite"] = c3po_lite(base, data, emb, train_emb[correct], bank_r[correct], layers, a.k, a.sigma)
        acc["oracle"] = oracle_accuracy(base, data, layers, steps=config.oracle_steps)
        overlap = {
            method: knn_overlap(emb, routing_vectors(model, data, layers)[0], config.overlap_k)
            for method, model in {"base": base, **tuned}.items()
        }
        gap = {m: gap_closed(acc[m], acc["base"], acc["oracle"]) for m in (*tuned, "c3po_lite")}
        out[name] = {"accuracy": acc, "gap_closed": gap, "knn_overlap": overlap, "examples": len(data)}
        log(f"{name}: " + ", ".join(f"{m} {v:.3f}" for m, v in acc.items()))
    out["models"] = {"roma": roma.model, "ce_only": ce_only.model}
    return out
