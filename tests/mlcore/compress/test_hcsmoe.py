"""HC-SMoE's clustering: scipy's average linkage gives the groups of the original pairwise loop."""

import time

import pytest
import torch
from torch import Tensor

from mlcore.compress.hcsmoe import average_linkage


def pairwise_loop(points: Tensor, clusters: int) -> list[list[int]]:
    """The O(E³) loop average_linkage replaced: merge the pair of groups with the smallest mean distance."""
    distance = torch.cdist(points.double(), points.double())
    groups = [[i] for i in range(len(points))]
    while len(groups) > clusters:
        best, pair = float("inf"), (0, 1)
        for a in range(len(groups)):
            for b in range(a + 1, len(groups)):
                d = distance[groups[a]][:, groups[b]].mean().item()
                if d < best:
                    best, pair = d, (a, b)
        a, b = pair
        groups[a] = sorted(groups[a] + groups[b])
        del groups[b]
    return sorted(groups)


@pytest.mark.parametrize(("experts", "clusters", "seed"), [(8, 3, 0), (16, 12, 1), (24, 6, 2), (32, 24, 3), (40, 1, 4)])
def test_it_finds_the_same_clusters_as_the_pairwise_loop(experts: int, clusters: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    # Continuous random points: exact distance ties have probability zero.
    points = torch.randn(experts, 16, generator=generator, dtype=torch.float64)
    assert average_linkage(points, clusters) == pairwise_loop(points, clusters)


def test_clustered_points_fall_into_their_clusters() -> None:
    generator = torch.Generator().manual_seed(5)
    centres = torch.randn(4, 8, generator=generator) * 100
    points = centres.repeat_interleave(5, dim=0) + torch.randn(20, 8, generator=generator)
    assert average_linkage(points, 4) == [list(range(i, i + 5)) for i in range(0, 20, 5)]


def test_keeping_every_expert_leaves_singletons_and_impossible_counts_are_refused() -> None:
    points = torch.randn(5, 3)
    assert average_linkage(points, 5) == [[0], [1], [2], [3], [4]]
    with pytest.raises(ValueError, match="cannot form 6 clusters"):
        average_linkage(points, 6)


def test_256_experts_cluster_in_under_a_second() -> None:
    points = torch.randn(256, 2048, generator=torch.Generator().manual_seed(6))
    start = time.perf_counter()
    groups = average_linkage(points, 192)
    assert time.perf_counter() - start < 1.0
    assert len(groups) == 192 and sorted(e for g in groups for e in g) == list(range(256))
