"""Any kind's form comes from its spec: every parameter type has a widget, and a POST turns back
into the raw values the spec's ``clean`` takes."""

from __future__ import annotations

from django.http import QueryDict

from mlcore.jobs import Bool, Choice, Dataset, File, Float, Int, JobSpec, Key, Model, Multi, Numbers, Seed, Text
from mlcore.jobs.references import builtin_items
from webapp.jobs.forms import SpecForm

SPEC = JobSpec(
    name="every-type",
    title="Every parameter type",
    summary="For the form tests.",
    version=1,
    queue="cpu",
    params=(
        Int(name="steps", default=10, min=1, max=100),
        Float(name="lr", default=0.001, min=0.0),
        Bool(name="amp", default=True),
        Choice(name="method", default="mone", options=("mone", "reap")),
        Multi(name="methods", default=("mone",), options=("mone", "reap", "random")),
        Numbers(name="ratios", default=(0.25, 0.5), min=0, max=1),
        Text(name="prompt", default="", max_length=200, multiline=True),
        Seed(name="seed"),
        Dataset(name="corpus", accepts=("text",), required=True),
        Model(name="model", accepts=("no-such-item-kind",)),
        Key(name="key"),
        File(name="trace", formats=("json", "zip"), max_bytes=5 * 2**20, multiple=True),
    ),
)


def widgets(form: SpecForm) -> dict[str, str]:
    return {view.name: view.widget for view in form.fields}


def test_each_parameter_type_gets_its_widget() -> None:
    assert widgets(SpecForm(SPEC)) == {
        "steps": "number",
        "lr": "number",
        "amp": "checkbox",
        "method": "select",
        "methods": "multi",
        "ratios": "text",
        "prompt": "textarea",
        "seed": "number",
        "corpus": "select",
        "model": "text",
        "key": "text",
        "trace": "file",
    }


def test_defaults_are_shown_as_a_person_would_type_them() -> None:
    values = {view.name: view.value for view in SpecForm(SPEC).fields}
    assert values["steps"] == 10 and values["amp"] is True and values["methods"] == ["mone"]
    assert values["ratios"] == "0.25,0.5" and values["seed"] == ""


def test_dataset_pickers_list_the_built_in_items_the_parameter_accepts() -> None:
    corpus = next(view for view in SpecForm(SPEC).fields if view.name == "corpus")
    text_items = {name for name, item in builtin_items().items() if item.kind == "text"}
    assert {value.removeprefix("zoo:") for value, _ in corpus.options} == text_items
    assert corpus.constraints == "takes a text corpus"


def test_a_model_picker_without_matching_items_falls_back_to_a_reference_field() -> None:
    model = next(view for view in SpecForm(SPEC).fields if view.name == "model")
    assert model.options == [] and model.attrs["placeholder"] == "library:ID"


def test_file_inputs_carry_formats_and_size_caps() -> None:
    trace = next(view for view in SpecForm(SPEC).fields if view.name == "trace")
    assert trace.attrs == {"accept": ".json,.zip", "multiple": True}
    assert "json, zip" in trace.constraints and "5.0\xa0MB" in trace.constraints


def test_a_post_becomes_values_the_spec_accepts() -> None:
    data = QueryDict(mutable=True)
    data.update({"steps": "12", "lr": "0.01", "method": "reap", "ratios": "0.5", "prompt": "hi", "seed": ""})
    data.setlist("methods", ["reap", "mone"])
    data["corpus"] = "zoo:stdlib-docs"
    form = SpecForm(SPEC, data=data)
    raw = form.raw_params()
    assert raw["amp"] == "false"  # an unticked checkbox is absent from a POST, and means "no"
    assert "trace" not in raw
    cleaned = SPEC.clean(raw)
    assert cleaned["steps"] == 12 and cleaned["methods"] == ["mone", "reap"] and cleaned["ratios"] == [0.5]
    assert cleaned["amp"] is False and isinstance(cleaned["seed"], int)


def test_errors_land_on_their_fields_and_the_rest_above_the_form() -> None:
    form = SpecForm(SPEC, data=QueryDict("steps=0"))
    form.add_errors([("steps", "Must be at least 1."), ("__all__", "Needs 80 GB."), ("ghost", "Unknown parameter.")])
    steps = next(view for view in form.fields if view.name == "steps")
    assert steps.errors == ["Must be at least 1."] and steps.value == "0"
    assert form.non_field_errors == ["Needs 80 GB.", "ghost: Unknown parameter."]
    assert form.error_count == 3


def test_the_field_template_draws_every_widget() -> None:
    from django.template.loader import render_to_string

    html = {
        view.name: render_to_string("jobs/includes/param_field.html", {"field": view}) for view in SpecForm(SPEC).fields
    }
    assert 'type="checkbox" id="param-amp" name="amp" value="true" checked' in html["amp"]
    assert html["methods"].count('type="checkbox" name="methods"') == 3 and 'value="mone" checked' in html["methods"]
    assert "<textarea" in html["prompt"] and 'maxlength="200"' in html["prompt"]
    assert 'step="any"' in html["lr"] and 'min="0.0"' in html["lr"]
    assert '<option value="zoo:stdlib-docs"' in html["corpus"] and 'class="required"' in html["corpus"]
    assert 'type="file"' in html["trace"] and " multiple" in html["trace"]
