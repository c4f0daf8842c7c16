import pytest

from mlcore.jobs import Choice, Int, JobSpec, Seed, ValidationError
from mlcore.jobs.params import SEED_MAX


def make_spec(**kw):
    return JobSpec(
        name="demo",
        title="Demo",
        summary="",
        version=2,
        queue="cpu",
        params=(
            Int(name="steps", default=3, min=1, max=10),
            Choice(name="method", options=("a", "b"), required=True),
            Seed(name="seed"),
        ),
        **kw,
    )


def test_it_fills_defaults_and_draws_a_seed_to_record():
    params = make_spec().clean({"method": "a"})
    assert params["steps"] == 3
    assert 0 <= params["seed"] <= SEED_MAX


def test_it_keeps_a_given_seed():
    assert make_spec().clean({"method": "a", "seed": "42"})["seed"] == 42


def test_it_reports_every_bad_field_at_once():
    with pytest.raises(ValidationError) as info:
        make_spec().clean({"steps": "99", "typo": "1"})
    fields = {name for name, _ in info.value.errors}
    assert fields == {"steps", "typo", "method"}


def test_cross_field_rules_run_after_each_field_is_clean():
    spec = make_spec(validate=lambda p: [("steps", "b needs 5+")] if p["method"] == "b" and p["steps"] < 5 else [])
    with pytest.raises(ValidationError, match="b needs 5"):
        spec.clean({"method": "b", "steps": 2})
    assert spec.clean({"method": "b", "steps": 6})["steps"] == 6


def test_it_refuses_a_soft_limit_at_or_above_the_hard_limit():
    with pytest.raises(ValueError):
        make_spec(soft_time_limit=10, time_limit=10)


def test_it_names_parameters_that_changed_since_an_old_job():
    old = {"steps": 20, "method": "a", "seed": 1, "removed": 3}
    assert sorted(make_spec().changed_params(old)) == ["removed", "steps"]
