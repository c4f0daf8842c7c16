"""Settings come from the environment: production mode passes Django's deployment checks."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from webapp.env import env_bool, env_int, env_str

ROOT = Path(__file__).resolve().parents[2]


def test_manage_py_check_deploy_passes_with_production_settings() -> None:
    env = {
        **os.environ,
        "MOELAB_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "moelab.example.org",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_mode_refuses_to_start_without_a_secret_key() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECRET_KEY")}
    result = subprocess.run(
        [sys.executable, "-c", "import webapp.settings"],
        cwd=ROOT,
        env={**env, "MOELAB_ENV": "production"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "Set SECRET_KEY" in result.stderr


def test_env_helpers_read_typed_values_and_secret_files(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MOELAB_T_FLAG", "yes")
    monkeypatch.setenv("MOELAB_T_COUNT", "12")
    (tmp_path / "secret").write_text("from-a-file\n")
    monkeypatch.setenv("MOELAB_T_SECRET_FILE", str(tmp_path / "secret"))
    assert env_bool("MOELAB_T_FLAG") is True and env_bool("MOELAB_T_MISSING", True) is True
    assert env_int("MOELAB_T_COUNT", 1) == 12 and env_int("MOELAB_T_MISSING", 3) == 3
    assert env_str("MOELAB_T_SECRET") == "from-a-file"
    monkeypatch.setenv("MOELAB_T_COUNT", "twelve")
    with pytest.raises(ValueError, match="whole number"):
        env_int("MOELAB_T_COUNT", 1)
