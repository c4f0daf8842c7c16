"""``python -m bench``: the studies it lists, and the platform benchmark it runs by name with Django set up."""

import importlib
import subprocess
import sys

from bench import BENCHMARKS, DJANGO_BENCHMARKS


def test_make_bench_lists_the_studies_but_not_the_platform_benchmark_which_needs_its_own_database() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "bench", "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert listed == list(BENCHMARKS)
    assert "platform" in DJANGO_BENCHMARKS and "platform" not in listed


def test_every_platform_benchmark_module_writes_its_results_through_run() -> None:
    # Imported the way python -m bench imports it: after django.setup() (pytest-django has run it).
    for module in DJANGO_BENCHMARKS.values():
        assert callable(importlib.import_module(module).run), module


def test_an_unknown_benchmark_is_refused_with_the_known_names() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "no-such-study"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "platform" in done.stderr and "routing" in done.stderr


#: The studies that judge a paper's claims: each rebuilds its report from the committed cache.
CLAIM_STUDIES = (
    "compress",
    "compress-seeds",
    "compress-reference",
    "analysis",
    "el",
    "distill",
    "mixture",
    "routing",
    "graph",
    "watermark",
    "video",
    "pointcloud",
)


def test_every_study_with_a_verdict_has_a_report_only_path() -> None:
    for name in CLAIM_STUDIES:
        assert callable(importlib.import_module(BENCHMARKS[name]).report_from_cache), name


def test_report_only_is_refused_for_a_study_without_one(tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "core", "--report", "--results", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no report-only path" in done.stderr
    assert not any(tmp_path.iterdir())  # nothing was measured or written


def test_a_quick_tier_never_replaces_a_full_studys_report(tmp_path) -> None:
    from bench.common import write_results

    write_results(tmp_path, "study", "# full\n", {"tier": "full", "verdict": "reproduced"})
    write_results(tmp_path, "study", "# quick\n", {"tier": {"name": "quick", "seeds": 1}})
    assert (tmp_path / "study.md").read_text().startswith("# full")
    assert (tmp_path / "quick" / "study.md").read_text().startswith("# quick")
    write_results(tmp_path, "study", "# full again\n", {"tier": "full"})
    assert (tmp_path / "study.md").read_text().startswith("# full again")


def test_a_quick_tier_writes_in_place_where_no_larger_report_stands(tmp_path) -> None:
    from bench.common import write_results

    write_results(tmp_path, "study", "# quick\n", {"tier": "quick"})
    write_results(tmp_path, "study", "# quick again\n", {"tier": "quick"})
    assert (tmp_path / "study.md").read_text().startswith("# quick again") and not (tmp_path / "quick").exists()
