import json
import subprocess
import sys


def moelab(*args, check=True):
    return subprocess.run([sys.executable, "-m", "mlcore.jobs.cli", *args], capture_output=True, text=True, check=check)


def test_kinds_lists_every_parameter_as_json():
    kinds = json.loads(moelab("kinds", "--json").stdout)
    exercise = next(k for k in kinds if k["name"] == "test-exercise")
    assert [p["name"] for p in exercise["params"]][:2] == ["steps", "step_seconds"]


def test_run_writes_metrics_charts_artifacts_and_log(tmp_path):
    out = tmp_path / "out"
    moelab("run", "test-exercise", "--set", "steps=3", "--set", "seed=7", "--out", str(out))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["scalars"]["seed"] == 7
    assert len(metrics["series"]["loss"]) == 3
    assert json.loads((out / "charts" / "loss.json").read_text())["mark"] == "line"
    assert (out / "artifacts" / "losses.csv").read_text().startswith("step,loss")
    assert "step 2: loss 0.3333" in (out / "log.txt").read_text()
    provenance = json.loads((out / "job.json").read_text())["provenance"]
    assert provenance["seed"] == 7 and "torch" in provenance["packages"]


def test_run_exits_non_zero_with_the_error_on_failure(tmp_path):
    result = moelab(
        "run",
        "test-exercise",
        "--set",
        "outcome=user-error",
        "--set",
        "fail_at=1",
        "--out",
        str(tmp_path),
        check=False,
    )
    assert result.returncode == 1
    assert "Asked to fail at step 1." in result.stderr


def test_run_reports_bad_parameters_by_name(tmp_path):
    result = moelab("run", "test-exercise", "--set", "steps=0", "--out", str(tmp_path), check=False)
    assert result.returncode == 2
    assert "steps: Must be at least 1." in result.stderr


def test_run_prints_an_internal_errors_exception_on_the_users_own_machine(tmp_path):
    args = ["run", "test-exercise", "--set", "outcome=crash", "--set", "fail_at=1", "--out", str(tmp_path)]
    result = moelab(*args, check=False)
    assert result.returncode == 1
    assert "moelab: failed: Internal error: RuntimeError: crash at step 1 (run with -v for the traceback)" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    outcome = json.loads((tmp_path / "outcome.json").read_text())
    assert outcome == {"status": "failed", "error": "Internal error: RuntimeError: crash at step 1"}
    verbose = moelab(*args, "-v", check=False)
    assert "Traceback (most recent call last)" in verbose.stderr and "exercise.py" in verbose.stderr


def test_submit_shows_the_apis_detail_but_never_another_error_page():
    from mlcore.jobs.cli import _detail

    body = b'{"detail": [{"field": "steps", "message": "Must be at least 1."}]}'
    assert _detail(body) == ": steps: Must be at least 1."
    assert _detail(b'{"detail": "Not allowed."}') == ": Not allowed."
    assert _detail(b"<html>Traceback (most recent call last): File /srv/app.py</html>") == ""
