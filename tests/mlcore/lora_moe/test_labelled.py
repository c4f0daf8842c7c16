"""The uploaded labelled-task format shared by lora-moe-finetune and router-align."""

import json

import pytest

from mlcore.lora_moe.labelled import LabelledDataError, load_labelled
from mlcore.lora_moe.tasks import LEVEL_OFFSET, PAD, digit_batches


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_it_reads_jsonl_and_csv_into_the_same_table(tmp_path):
    rows = [
        {"text": f"{i}{i}", "label": ["odd", "even"][i % 2], "split": "test" if i < 3 else "train"} for i in range(12)
    ]
    a = load_labelled(_jsonl(tmp_path / "a.jsonl", rows))
    csv = "text,label,split\n" + "".join(f"{r['text']},{r['label']},{r['split']}\n" for r in rows)
    (tmp_path / "b.csv").write_text(csv)
    b = load_labelled(tmp_path / "b.csv")
    assert a == b
    assert a.classes == ("even", "odd") and a.rows("test") == [0, 1, 2]
    assert a.labels[:3] == (1, 0, 1)  # odd, even, odd


def test_without_a_split_column_rows_are_split_by_a_stable_hash(tmp_path):
    rows = [{"text": f"example {i}", "label": str(i % 3)} for i in range(200)]
    first = load_labelled(_jsonl(tmp_path / "a.jsonl", rows))
    again = load_labelled(_jsonl(tmp_path / "b.jsonl", rows))
    assert first.splits == again.splits
    assert 20 < len(first.rows("test")) < 60


def test_a_csv_text_with_a_comma_is_read_when_quoted(tmp_path):
    (tmp_path / "q.csv").write_text('text,label\n"1,2",a\n' + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(30)))
    assert load_labelled(tmp_path / "q.csv").texts[0] == "1,2"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "the file is empty"),
        ('{"text": "1", "label": "a"}\n{"text": "2"\n', "line 2: not valid JSON"),
        ('{"text": "1", "label": "a"}\n{"text": "2", "label": null}\n', "line 2: label is missing"),
        ('{"text": "1", "label": "a", "weight": 2}\n', "unknown field(s) weight"),
        ('{"text": "", "label": "a"}\n', "line 1: text is empty"),
        ('{"text": "1", "label": "a", "split": "dev"}\n', "split must be 'train' or 'test'"),
        ("words,label\n1,a\n", "lacks text and label"),
        ("text,label\n1,a,extra\n", "line 2: 3 cells for 2 columns"),
        ("".join(f'{{"text": "{i}", "label": "a"}}\n' for i in range(20)), "at least two labels"),
        ('{"text": "1", "label": "a", "split": "train"}\n{"text": "2", "label": "b", "split": "test"}\n', "1 training"),
    ],
)
def test_it_refuses_bad_files_naming_the_line_and_the_fix(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(LabelledDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_labelled(path)


def test_it_refuses_a_file_that_is_not_utf8(tmp_path):
    (tmp_path / "x.csv").write_bytes(b"text,label\n\xff\xfe,a\n")
    with pytest.raises(LabelledDataError, match="not UTF-8"):
        load_labelled(tmp_path / "x.csv")


def test_digit_texts_become_level_tokens_and_padded_digits(tmp_path):
    rows = [{"text": "1 2 3", "label": "x"}, {"text": "98765432", "label": "y", "group": "5"}]
    rows += [{"text": str(i), "label": "xy"[i % 2], "group": "1"} for i in range(10)]
    for r in rows[:1]:
        r["group"] = "3"
    rows[0]["split"], rows[1]["split"] = "test", "test"
    for r in rows[2:]:
        r["split"] = "train"
    data = load_labelled(_jsonl(tmp_path / "d.jsonl", rows))
    train, test = digit_batches(data)
    assert test.tokens[0].tolist()[:5] == [LEVEL_OFFSET + 3, 21, 22, 23, PAD]
    assert test.levels.tolist() == [3, 5] and test.targets.tolist() == [0, 1]
    assert len(train.targets) == 10


def test_the_tiny_encoder_refuses_free_text_and_levels_out_of_range(tmp_path):
    rows = [{"text": "hello", "label": "a"}] + [{"text": str(i), "label": "ab"[i % 2]} for i in range(20)]
    with pytest.raises(LabelledDataError, match="row 1: the tiny encoder reads up to 8 digits"):
        digit_batches(load_labelled(_jsonl(tmp_path / "t.jsonl", rows)))
    rows = [{"text": str(i), "label": "ab"[i % 2], "group": "9"} for i in range(20)]
    with pytest.raises(LabelledDataError, match="group must be a level between 1 and 8"):
        digit_batches(load_labelled(_jsonl(tmp_path / "g.jsonl", rows)))
