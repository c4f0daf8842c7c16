"""The benchmark scripts' logic on tiny shapes (their numbers only mean something at full size)."""

from __future__ import annotations

import pytest
import torch

from bench import kernels_cpu as bench_cpu
from bench import kernels_gpu as bench_gpu


def test_balanced_groups_differ_in_size_by_at_most_one() -> None:
    sizes = torch.bincount(bench_cpu.balanced_groups(1001, 8)[0])
    assert sizes.numel() == 8 and int(sizes.max() - sizes.min()) <= 1


def test_the_group_attention_table_reports_the_flop_fraction_of_each_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bench_cpu.TIERS, "quick", {"cases": [(256, 4), (300, 8)], "repeats": 1})
    table, data = bench_cpu.group_attention_table("quick")
    assert [(row["tokens"], row["groups"]) for row in data["rows"]] == [(256, 4), (300, 8)]
    assert data["rows"][0]["flop_fraction"] == pytest.approx(1 / 4)
    assert all(row["speedup"] > 0 for row in data["rows"])
    assert table.count("\n| 256 | 4 |") == 1


def test_the_table_rejects_an_unknown_tier() -> None:
    with pytest.raises(ValueError, match="tier must be one of"):
        bench_cpu.group_attention_table("huge")


def test_the_gpu_benchmark_dry_run_checks_every_kernel_against_its_twin(
    triton_interpreted: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_gpu.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "all kernels match their twins" in out
    assert out.count("| triton fused |") == 2 and out.count("| triton group attention |") == 2
