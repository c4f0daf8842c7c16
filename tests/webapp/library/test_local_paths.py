"""``moelab run`` takes a local path where the platform takes a library item, and says clearly
that ``library:ID`` exists only on the platform."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def moelab(*args: str) -> subprocess.CompletedProcess[str]:
    # The library_kinds fixture put the test-only consumer kind in the environment this inherits.
    return subprocess.run(
        [sys.executable, "-m", "mlcore.jobs.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120
    )


def test_moelab_run_takes_a_local_folder_as_a_dataset(tmp_path: Path) -> None:
    corpus = tmp_path / "my corpus"
    corpus.mkdir()
    (corpus / "notes.txt").write_text("experts\n\nrouters\ngates\n")
    out = tmp_path / "out"
    result = moelab("run", "test-library-consumer", "--set", f"corpus={corpus}", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "artifacts" / "summary.txt").read_text() == "notes.txt 3\n"
    registered = json.loads((out / "registered.json").read_text())
    assert [(r["kind"], r["card"]["name"]) for r in registered] == [("text", "summary of the inputs")]


def test_moelab_run_refuses_a_library_id_and_a_missing_path(tmp_path: Path) -> None:
    result = moelab("run", "test-library-consumer", "--set", "corpus=library:7", "--out", str(tmp_path / "a"))
    assert result.returncode != 0
    assert "library items are available only through the web platform" in result.stderr + result.stdout
    result = moelab("run", "test-library-consumer", "--set", "corpus=/no/such/corpus", "--out", str(tmp_path / "b"))
    assert result.returncode != 0
    assert "neither a built-in item nor an existing path" in result.stderr + result.stdout
