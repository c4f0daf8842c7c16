import io
import re
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest

from mlcore.jobs import InMemoryContext, JobError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare


@pytest.fixture
def kind():
    return get_kind("test-exercise")


def run(kind, raw, files=None, ctx=None):
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, raw, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_a_successful_run_reports_through_every_channel(kind):
    outcome, ctx = run(kind, {"steps": "4", "seed": "5"})
    assert outcome.status == "succeeded"
    assert [round(v, 3) for _, v in ctx.metrics.series["loss"]] == [1.0, 0.5, 0.333, 0.25]
    assert ctx.metrics.scalars["seed"] == 5
    assert ctx.progress_history[-1] == (1.0, "step 4 of 4")
    assert len(ctx.charts["loss"]["data"]["values"]) == 4  # replaced, not appended
    assert set(ctx.artifacts) == {"losses.csv", "summary.json"}
    assert ctx.artifacts["losses.csv"].media_type == "text/csv"
    assert ctx.registrations[0].kind == "text"


def test_a_user_error_fails_with_its_message(kind):
    outcome, _ = run(kind, {"steps": 5, "outcome": "user-error", "fail_at": 2})
    assert outcome.status == "failed"
    assert outcome.error == "Asked to fail at step 2."


def test_a_user_error_carries_no_traceback(kind):
    outcome, _ = run(kind, {"steps": 5, "outcome": "user-error", "fail_at": 2})
    assert outcome.traceback == "" and outcome.reference == ""


def test_an_internal_error_shows_a_reference_and_keeps_the_traceback_for_staff(kind):
    outcome, _ = run(kind, {"steps": 5, "outcome": "crash", "fail_at": 1})
    assert outcome.status == "failed"
    assert re.fullmatch(r"[0-9a-f]{8}", outcome.reference)
    assert outcome.error == (
        f"Internal error (reference {outcome.reference}): the job failed on our side; the staff have the details."
    )
    assert outcome.traceback.startswith(f"Reference {outcome.reference}\nTraceback (most recent call last):")
    assert "crash at step 1" in outcome.traceback and "tests/jobkinds/exercise.py" in outcome.traceback
    assert outcome.detail == "RuntimeError: crash at step 1"


def test_two_internal_errors_get_different_references(kind):
    first, _ = run(kind, {"steps": 2, "outcome": "crash", "fail_at": 0})
    second, _ = run(kind, {"steps": 2, "outcome": "crash", "fail_at": 0})
    assert first.reference != second.reference


def test_a_cancelled_context_ends_the_job_as_cancelled(kind):
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, ctx = run(kind, {"steps": 5}, ctx=ctx)
    assert outcome.status == "cancelled"
    assert ctx.lines == ["cancelled at step 0"]


def test_a_file_of_the_wrong_format_is_refused_before_running(kind, tmp_path):
    png = tmp_path / "notes.txt"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    with pytest.raises(JobError, match="expected txt or csv or json, got a png file"):
        run(kind, {}, {"notes": [png]})


def test_an_oversized_file_is_refused(kind, tmp_path):
    big = tmp_path / "big.txt"
    big.write_text("x" * 1_000_001)
    with pytest.raises(JobError, match="the limit is 1000000"):
        run(kind, {}, {"notes": [big]})


def test_a_text_file_reaches_run(kind, tmp_path):
    notes = tmp_path / "n.txt"
    notes.write_text("hello there")
    _, ctx = run(kind, {"steps": 1}, {"notes": [notes]})
    assert ctx.lines[0] == "notes: hello there"


def test_a_built_in_dataset_reference_resolves_to_a_directory(tmp_path):
    from mlcore.jobs.params import Dataset

    resolver = LocalResolver(cache=tmp_path)
    path = resolver.resolve(Dataset(name="d", accepts=("text",)), "zoo:stdlib-docs")
    assert (path / "documents.jsonl").stat().st_size > 100_000
    with pytest.raises(JobError, match="is a text; this job accepts images"):
        resolver.resolve(Dataset(name="d", accepts=("images",)), "zoo:stdlib-docs")


def test_unpacking_refuses_a_zip_slip(tmp_path):
    from mlcore.sniff import unpack

    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("../outside.txt", "gotcha")
    with pytest.raises(JobError, match="outside the archive"):
        unpack(archive, tmp_path / "out")
    assert not (tmp_path / "outside.txt").exists()


def test_unpacking_refuses_a_symlink_in_a_tar(tmp_path):
    from mlcore.sniff import unpack

    archive = tmp_path / "link.tar"
    with tarfile.open(archive, "w") as tf:
        info = tarfile.TarInfo("etc")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc"
        tf.addfile(info)
    with pytest.raises(JobError, match="link"):
        unpack(archive, tmp_path / "out")


def test_unpacking_refuses_a_decompression_bomb(tmp_path):
    from mlcore.sniff import unpack

    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * (64 * 2**20))
    with pytest.raises(JobError, match="decompression bomb"):
        unpack(archive, tmp_path / "out")


def test_a_corrupt_zip_gets_a_clear_error(tmp_path):
    from mlcore.sniff import unpack

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("a.txt", "a" * 1000)
    archive = tmp_path / "cut.zip"
    archive.write_bytes(buf.getvalue()[:-30])
    with pytest.raises(JobError, match="corrupt zip"):
        unpack(archive, tmp_path / "out")


def test_sniffing_reads_content_not_names(tmp_path):
    from mlcore.sniff import sniff

    cases = {
        "a.png": b"\x89PNG\r\n\x1a\n....",
        "a.txt": b"ply\nformat ascii 1.0\n",
        "b.bin": b'{"a": 1}',
        "c.jpg": b"step,loss\n0,1\n",
    }
    found = {}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        found[name] = sniff(path)
    assert found == {"a.png": "png", "a.txt": "ply", "b.bin": "json", "c.jpg": "csv"}
    assert Path(tmp_path / "a.png").exists()


def test_a_built_item_is_rebuilt_when_its_stamp_changes(tmp_path, monkeypatch):
    import mlcore.catalog as catalog

    stamp = tmp_path / "manifest.json"
    stamp.write_text("v1")
    monkeypatch.setattr(catalog, "_ROOT", tmp_path)
    builds = []
    monkeypatch.setattr("mlcore.data.text.build_stdlib_docs", lambda target: builds.append(target))
    item = catalog.BuiltinItem(
        name="x",
        kind="text",
        title="",
        description="",
        builder="mlcore.data.text:build_stdlib_docs",
        stamp="manifest.json",
    )
    catalog.materialize(item, tmp_path / "cache")
    catalog.materialize(item, tmp_path / "cache")
    assert len(builds) == 1
    stamp.write_text("v2")
    catalog.materialize(item, tmp_path / "cache")
    assert len(builds) == 2


def test_a_message_naming_a_workers_temporary_folder_is_scrubbed():
    from mlcore.jobs.runner import scrub_paths

    folder = f"{tempfile.gettempdir()}/moelab-job-42-x1y2/work/inputs/notes/0"
    message = f"Notes (a.txt): cannot read {folder}/a.txt: bad line 3."
    assert scrub_paths(message) == "Notes (a.txt): cannot read …/a.txt: bad line 3."
    assert scrub_paths(f"in {tempfile.gettempdir()}.") == "in …."


def test_scrubbing_covers_the_checkout_the_python_installation_and_extra_roots(tmp_path):
    import sysconfig

    from mlcore.jobs.runner import scrub_paths

    checkout = Path(__file__).resolve().parents[3]
    site = sysconfig.get_paths()["purelib"]
    message = (
        f'File "{checkout}/mlcore/jobs/runner.py", line 3; {site}/transformers/modeling_utils.py; '
        f"'{tmp_path}/media/inputs/x.zip'; /srv/media/y.bin"
    )
    scrubbed = scrub_paths(message, extra_roots=["/srv/media"])
    assert scrubbed == "File \"…/runner.py\", line 3; …/modeling_utils.py; '…/x.zip'; …/y.bin"


def test_scrubbing_leaves_relative_paths_and_look_alike_folders():
    from mlcore.jobs.runner import scrub_paths

    message = "model/weights.safetensors and /tmpdata/x and ./a/b are the user's own names."
    assert scrub_paths(message) == message
