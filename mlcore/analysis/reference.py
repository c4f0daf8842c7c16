"""Plain-Python reference implementations, written from the definitions: slow, obviously right, and
used to check the fast ones (tests) and as the baseline of their benchmark."""

from __future__ import annotations

import numpy as np

from mlcore.analysis.routing import LayerRouting


def _key(
    policy: str, c: int, t: int, tokens: list[list[int]], last: dict[int, int], uses: dict[int, int], lookahead: int
) -> tuple[int, int]:
    """The eviction key (smallest goes), recomputed from scratch by scanning the sequence."""
    if policy == "lru":
        return (0, last[c])
    if policy == "lfu":
        return (uses[c], last[c])
    if policy == "belady":
        later = [u for u in range(t + 1, len(tokens)) if c in tokens[u]]
        return (-(later[0] if later else 10**9), last[c])
    ahead = sum(c in tokens[u] for u in range(t + 1, min(len(tokens), t + 1 + lookahead)))
    return (ahead, last[c])


def brute_force_hits(routing: LayerRouting, policy: str, capacity: int, lookahead: int) -> int:
    hits = 0
    for a, b in zip(routing.starts[:-1].tolist(), routing.starts[1:].tolist()):
        tokens = [[int(e) for e in row if e >= 0] for row in routing.expert_ids[a:b]]
        cache: list[int] = []
        last: dict[int, int] = {}
        uses: dict[int, int] = {}
        clock = 0
        for t, chosen in enumerate(tokens):
            for e in chosen:
                clock += 1
                if e in cache:
                    hits += 1
                else:
                    if len(cache) == capacity:
                        candidates = [c for c in cache if c not in chosen]
                        victim = min(candidates, key=lambda c: _key(policy, c, t, tokens, last, uses, lookahead))
                        cache.remove(victim)
                    cache.append(e)
                last[e] = clock
                uses[e] = uses.get(e, 0) + 1
    return hits


def brute_force_srp(routings: LayerRouting | list[LayerRouting], window: int) -> float:
    """max over θ of F1(θ), looping over windows and experts; for several layers, TP, Pred and Act
    are summed over the layers at one shared θ (the model-level SRP)."""
    layers = routings if isinstance(routings, list) else [routings]
    best = 0.0
    for theta in range(1, window + 1):
        tp = pred = act = 0
        for routing in layers:
            for a, b in zip(routing.starts[:-1].tolist(), routing.starts[1:].tolist()):
                for w in range(a, b - window + 1):
                    block = routing.expert_ids[w : w + window]
                    counts = np.bincount(block[block >= 0], minlength=routing.num_experts)
                    chosen = counts >= theta
                    tp += int(counts[chosen].sum())
                    pred += window * int(chosen.sum())
                    act += int(counts.sum())
        if act:
            best = max(best, 2 * tp / (pred + act))
    return best
