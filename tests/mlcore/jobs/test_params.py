import pytest

from mlcore.jobs import Bool, Choice, Dataset, Float, Int, Multi, Numbers, ParamError, Text


def test_an_int_accepts_form_strings_and_json_numbers():
    p = Int(name="steps", min=1, max=10)
    assert p.clean("7") == 7
    assert p.clean(7) == 7


@pytest.mark.parametrize("raw", ["7.5", 7.5, "seven", True, None, "11", 0])
def test_an_int_rejects_fractions_words_booleans_and_out_of_bounds_values(raw):
    with pytest.raises(ParamError):
        Int(name="steps", min=1, max=10).clean(raw)


@pytest.mark.parametrize("raw", ["nan", "inf", float("nan"), "-inf"])
def test_a_float_rejects_non_finite_values(raw):
    with pytest.raises(ParamError, match="finite"):
        Float(name="lr").clean(raw)


def test_a_bool_reads_checkbox_and_cli_spellings():
    p = Bool(name="amp")
    assert p.clean("true") is True and p.clean("on") is True and p.clean(False) is False
    with pytest.raises(ParamError):
        p.clean("maybe")


def test_a_choice_names_the_options_when_it_rejects_a_value():
    with pytest.raises(ParamError, match="mone, reap"):
        Choice(name="method", options=("mone", "reap")).clean("magic")


def test_a_multi_keeps_the_spec_order_and_drops_repeats():
    p = Multi(name="methods", options=("mone", "reap", "random"))
    assert p.clean("random,mone,random") == ["mone", "random"]
    assert p.clean(["reap"]) == ["reap"]


def test_numbers_parse_a_comma_list_within_bounds():
    p = Numbers(name="ratios", min=0, max=1)
    assert p.clean("0.25, 0.5") == [0.25, 0.5]
    with pytest.raises(ParamError):
        p.clean("0.25,1.5")


def test_text_is_capped_and_refuses_nul_bytes():
    p = Text(name="prompt", max_length=5)
    assert p.clean("  abc ") == "abc"
    with pytest.raises(ParamError):
        p.clean("abcdef")
    with pytest.raises(ParamError):
        p.clean("a\x00b")


def test_a_reference_describes_what_it_accepts():
    p = Dataset(name="calibration", accepts=("text",))
    assert p.clean(" zoo:stdlib-docs ") == "zoo:stdlib-docs"
    assert p.describe()["accepts"] == ["text"]
    assert "text" in p.json_schema()["description"]


def test_a_model_or_dataset_reads_a_bare_number_as_a_library_id():
    p = Dataset(name="calibration", accepts=("text",))
    assert p.clean(12) == "library:12" and p.clean(" 12 ") == "library:12"
    assert p.clean("²") == "²"  # a unicode digit is no id: the resolver refuses it by name
