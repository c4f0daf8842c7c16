"""Settings come from the environment: production mode passes Django's deployment checks, and a
refused request is logged as one line."""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

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


# -- refused requests are logged as one line ---------------------------------------------------------


def _refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name in ("django.request", "django.security.csrf")]


def _assert_one_line(record: logging.LogRecord) -> str:
    # Formatted as a handler would: no traceback appended, no second line.
    line = logging.Formatter().format(record)
    assert record.exc_info is None and "Traceback" not in line and "\n" not in line
    return line


@pytest.mark.django_db
def test_a_permission_denied_is_logged_as_one_line_with_method_path_user_and_reason(
    caplog: pytest.LogCaptureFixture, team, viewer
) -> None:
    client = Client()
    client.force_login(viewer)
    with caplog.at_level(logging.WARNING):
        response = client.get(f"/t/{team.slug}/submit/")
    assert response.status_code == 403
    [record] = _refusals(caplog)
    line = _assert_one_line(record)
    assert (
        line == f"403 GET /t/{team.slug}/submit/ user={viewer.pk} reason=Viewers cannot change anything in this team."
    )


@pytest.mark.django_db
def test_a_csrf_failure_is_logged_as_one_line_with_its_reason(caplog: pytest.LogCaptureFixture, member) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    with caplog.at_level(logging.WARNING):
        response = client.post("/account/tokens/", {"name": "laptop"})
    assert response.status_code == 403
    [record] = _refusals(caplog)
    line = _assert_one_line(record)
    assert line.startswith(f"403 POST /account/tokens/ user={member.pk} reason=CSRF cookie not set")


@pytest.mark.django_db
def test_a_refusal_cannot_write_a_second_log_line_through_its_path(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        Client(enforce_csrf_checks=True).post("/account/tokens/%0Aforged%20line")
    [record] = _refusals(caplog)
    line = _assert_one_line(record)
    assert "/account/tokens/\\x0aforged line user=anonymous" in line


def test_a_server_error_keeps_its_traceback() -> None:
    from webapp.security import ClientErrorOneLine

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord(
            "django.request", logging.ERROR, __file__, 1, "Internal Server Error: %s", ("/x",), sys.exc_info()
        )
    record.status_code = 500
    assert ClientErrorOneLine().filter(record) and record.exc_info is not None
    assert "Traceback" in logging.Formatter().format(record)
