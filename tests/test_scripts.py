"""Every shell script the Makefile, the GPU session and the docs point at at least parses: a
script that fails `bash -n` fails only when someone needs it (after a GPU session, say)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), *ROOT.glob("bench/*.sh"), ROOT / ".ci" / "run"])


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_script_parses(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr


def test_a_script_that_does_not_parse_is_caught(tmp_path: Path) -> None:
    broken = tmp_path / "broken.sh"
    broken.write_text('from="${1:?usage: the tool\'s folder}"\n')
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True, timeout=30).returncode != 0
