from dataclasses import dataclass
from importlib import import_module

import pytest

from mlcore.jobs import Choice, Int, JobSpec, Multi
from mlcore.jobs.binding import BindingError, bind
from mlcore.jobs.registry import get_kind


@dataclass(frozen=True)
class Config:
    steps: int = 100
    batch_size: int = 32
    size: int = 16
    modes: tuple[str, ...] = ()
    warmup: int = 50


SPEC = JobSpec(
    name="test-binding",
    title="Binding",
    summary="A spec whose defaults differ from its config's.",
    version=1,
    queue="cpu",
    params=(
        Int(name="steps", default=10),
        Int(name="batch_size", default=16),
        Int(name="resolution", default=8),
        Multi(name="modes", default=["a"], options=("a", "b")),
        Choice(name="flavour", default="plain", options=("plain", "fancy")),
    ),
)


def test_the_spec_default_wins_over_the_dataclass_default():
    config = bind(Config, SPEC.clean({}), rename={"resolution": "size"}, convert={"modes": tuple}, skip=("flavour",))
    assert config == Config(steps=10, batch_size=16, size=8, modes=("a",), warmup=50)


def test_it_fills_renamed_converted_and_fixed_fields_and_leaves_the_rest_at_the_config_default():
    params = SPEC.clean({"steps": "40", "resolution": "12", "modes": "b,a"})
    config = bind(Config, params, rename={"resolution": "size"}, convert={"modes": tuple}, skip=("flavour",), warmup=4)
    assert config == Config(steps=40, batch_size=16, size=12, modes=("a", "b"), warmup=4)


def test_it_refuses_a_parameter_that_names_no_field():
    with pytest.raises(BindingError, match="'flavour' fills no field of Config"):
        bind(Config, SPEC.clean({}), rename={"resolution": "size"})


def test_it_refuses_rules_for_parameters_the_spec_does_not_have():
    params = SPEC.clean({})
    with pytest.raises(BindingError, match="rename names 'res'"):
        bind(Config, params, rename={"res": "size", "resolution": "size"}, skip=("flavour",))
    with pytest.raises(BindingError, match="skip names 'colour'"):
        bind(Config, params, rename={"resolution": "size"}, skip=("flavour", "colour"))


def test_it_refuses_a_field_filled_twice():
    params = SPEC.clean({})
    with pytest.raises(BindingError, match="'steps' is given both by parameter 'steps' and as a fixed value"):
        bind(Config, params, rename={"resolution": "size"}, skip=("flavour",), steps=3)
    with pytest.raises(BindingError, match="'size' is filled by both 'steps' and 'resolution'"):
        bind(Config, params, rename={"resolution": "size", "steps": "size"}, skip=("flavour",))


def test_it_refuses_a_fixed_value_for_no_field_and_a_class_that_is_no_dataclass():
    params = SPEC.clean({})
    with pytest.raises(BindingError, match="fixed value 'epochs' is not a field of Config"):
        bind(Config, params, rename={"resolution": "size"}, skip=("flavour",), epochs=3)
    with pytest.raises(BindingError, match="not one"):
        bind(dict, params)


# Every kind that fills a method config through ``bind``, and the function that does it: a parameter
# added to a spec without a place in a config fails here, in seconds, not in a worker.
BINDERS = [
    ("data-mixture", "_search_config"),
    ("distill", "_train_config"),
    ("graph-ood", "_train_config"),
    ("lora-moe-finetune", "_mixture_config"),
    ("lora-moe-finetune", "_finetune_config"),
    ("moe-planner", "_architecture"),
    ("moe-planner", "_serving"),
    ("moe-planner", "_user_constants"),
    ("pointcloud-train", "_train_config"),
    ("pointcloud-train", "_model_config"),
    ("router-align", "_study_config"),
    ("video-train", "_train_config"),
    ("watermark-robustness", "_suite_config"),
    ("watermark-train", "_molm_config"),
]


@pytest.mark.parametrize(("kind", "binder"), BINDERS)
def test_every_kind_binds_its_sample_parameters(kind, binder):
    spec = get_kind(kind).spec
    build = getattr(import_module(f"mlcore.jobs.{kind.replace('-', '_')}"), binder)
    params = spec.clean(spec.sample)
    config = build(params, None) if binder == "_serving" else build(params)
    assert config is not None


def test_a_job_with_defaults_runs_with_the_spec_defaults_where_the_config_keeps_its_own():
    # The pointcloud zoo recipes rely on TrainConfig's eval_every=0; a job's default is the form's 100.
    from mlcore.jobs.pointcloud_train import _train_config

    spec = get_kind("pointcloud-train").spec
    assert _train_config(spec.clean({})).eval_every == spec.param("eval_every").default == 100
