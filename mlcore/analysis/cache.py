"""Expert-cache simulation: replay routing through a per-layer cache of experts in fast memory
(Liang et al., "Not All Models Suit Expert Offloading", ICLR 2026, §3.2 and §5).

Each sequence starts with an empty cache of capacity C = round(m·k) ≥ k experts. At token t every
expert of its top-k set is an access: a hit if cached, else a miss that loads it, evicting (when
the cache is full) one cached expert that token t does not use. The victim is chosen by

- ``lru``:    the least recently used (recency counts accesses, slot by slot, so it never ties);
- ``lfu``:    the fewest uses so far in the sequence (ties: least recently used);
- ``belady``: the one whose next use is furthest away (the offline optimum; ties: LRU);
- ``sch``:    the least used in the next L tokens (ties: LRU). Its hit rate is SCH(L, m),
  Segment Cache best Hit rate.

The reference code computes every capacity in one stack-style pass, valid only for stack
algorithms, which bounded look-ahead eviction is not known to be; this module runs one plain
simulation per capacity instead (numba-compiled; about 10⁷ events a second per policy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlcore.analysis.routing import LayerRouting

POLICIES: tuple[str, ...] = ("lru", "lfu", "belady", "sch")
_CODES = {name: code for code, name in enumerate(POLICIES)}


def capacity_for(multiple: float, top_k: int) -> int:
    """C = m·k experts, rounded, never below k (a token's whole top-k set must fit)."""
    return max(top_k, round(multiple * top_k))


_kernels: tuple | None = None


def _compiled() -> tuple:
    """Compile the kernels on first use (cached on disk by numba), so importing stays cheap."""
    global _kernels
    if _kernels is None:
        import numba

        jit = numba.njit(cache=True, nogil=True)

        @jit
        def next_uses(ids: np.ndarray, starts: np.ndarray, num_experts: int) -> np.ndarray:
            """[N, k]: the next token of the same sequence that uses each slot's expert, else a large number."""
            n, k = ids.shape
            out = np.full((n, k), np.int64(1) << 40)
            seen = np.empty(num_experts, dtype=np.int64)
            for s in range(len(starts) - 1):
                seen[:] = np.int64(1) << 40
                for t in range(starts[s + 1] - 1, starts[s] - 1, -1):
                    for j in range(k):
                        e = ids[t, j]
                        if e >= 0:
                            out[t, j] = seen[e]
                    for j in range(k):
                        e = ids[t, j]
                        if e >= 0:
                            seen[e] = t
            return out

        @jit
        def simulate(
            ids: np.ndarray,
            starts: np.ndarray,
            num_experts: int,
            capacity: int,
            policy: int,
            lookahead: int,
            upcoming: np.ndarray,
        ) -> np.ndarray:
            """[S] hits per sequence for one policy and capacity."""
            n, k = ids.shape
            hits = np.zeros(len(starts) - 1, dtype=np.int64)
            cached = np.empty(capacity, dtype=np.int64)
            in_cache = np.zeros(num_experts, dtype=np.bool_)
            last = np.zeros(num_experts, dtype=np.int64)
            uses = np.zeros(num_experts, dtype=np.int64)
            future = np.zeros(num_experts, dtype=np.int64)
            next_use = np.zeros(num_experts, dtype=np.int64)
            current = np.full(num_experts, -1, dtype=np.int64)
            scale = np.int64(n * k + 2)
            for s in range(len(starts) - 1):
                begin, end = starts[s], starts[s + 1]
                in_cache[:] = False
                uses[:] = 0
                future[:] = 0
                current[:] = -1
                size = 0
                if policy == 3:  # the look-ahead window holds tokens t+1 .. t+L
                    for u in range(begin + 1, min(end, begin + 1 + lookahead)):
                        for j in range(k):
                            if ids[u, j] >= 0:
                                future[ids[u, j]] += 1
                for t in range(begin, end):
                    if policy == 3 and t > begin:
                        for j in range(k):  # token t leaves the window, token t+L enters it
                            if ids[t, j] >= 0:
                                future[ids[t, j]] -= 1
                        if t + lookahead < end:
                            for j in range(k):
                                if ids[t + lookahead, j] >= 0:
                                    future[ids[t + lookahead, j]] += 1
                    for j in range(k):
                        if ids[t, j] >= 0:
                            current[ids[t, j]] = t
                    for j in range(k):
                        e = ids[t, j]
                        if e < 0:
                            continue
                        if in_cache[e]:
                            hits[s] += 1
                        elif size < capacity:
                            cached[size] = e
                            size += 1
                            in_cache[e] = True
                        else:
                            victim, best = -1, np.int64(1) << 62
                            for i in range(capacity):
                                c = cached[i]
                                if current[c] == t:
                                    continue
                                recency = last[c] + 1
                                if policy == 0:
                                    key = recency
                                elif policy == 1:
                                    key = uses[c] * scale + recency
                                elif policy == 2:
                                    key = -next_use[c] * scale + recency
                                else:
                                    key = future[c] * scale + recency
                                if key < best:
                                    best, victim = key, i
                            in_cache[cached[victim]] = False
                            cached[victim] = e
                            in_cache[e] = True
                        last[e] = t * k + j  # access order, so recency never ties
                        uses[e] += 1
                        if policy == 2:
                            next_use[e] = upcoming[t, j]
            return hits

        _kernels = (next_uses, simulate)
    return _kernels


@dataclass(frozen=True)
class CacheResult:
    policy: str
    multiple: float
    capacity: int
    hits: np.ndarray  # [S] per sequence
    accesses: np.ndarray  # [S] per sequence

    @property
    def hit_rate(self) -> float:
        return float(self.hits.sum() / max(1, self.accesses.sum()))


def accesses_per_sequence(routing: LayerRouting) -> np.ndarray:
    active = (routing.expert_ids >= 0).sum(axis=1)
    return np.add.reduceat(active, routing.starts[:-1]).astype(np.int64)


def simulate(routing: LayerRouting, policy: str, multiples: list[float], *, lookahead: int = 16) -> list[CacheResult]:
    """Hit counts of one policy at each capacity m·k (``lookahead`` L is used by ``sch`` only)."""
    if policy not in _CODES:
        raise ValueError(f"unknown cache policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if lookahead < 1:
        raise ValueError(f"the SCH look-ahead must be at least 1 token, got {lookahead}")
    next_uses, kernel = _compiled()
    ids = np.ascontiguousarray(routing.expert_ids, dtype=np.int64)
    starts = routing.starts
    upcoming = next_uses(ids, starts, routing.num_experts) if policy == "belady" else np.zeros((1, 1), np.int64)
    accesses = accesses_per_sequence(routing)
    results = []
    for m in multiples:
        capacity = capacity_for(m, routing.top_k)
        hits = kernel(ids, starts, routing.num_experts, capacity, _CODES[policy], lookahead, upcoming)
        results.append(CacheResult(policy, m, capacity, hits, accesses))
    return results


def compulsory_misses(routing: LayerRouting) -> int:
    """Misses no cache avoids: each sequence's first use of every expert it uses."""
    total = 0
    for a, b in zip(routing.starts[:-1], routing.starts[1:]):
        ids = routing.expert_ids[a:b]
        total += len(np.unique(ids[ids >= 0]))
    return total
