"""The item-kind registry: one declaration per kind, read by the web as job specs are, and light
enough for the web process to import."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mlcore.data.registry import DATASETS
from mlcore.items.kind import ItemKind
from mlcore.items.registry import (
    ALL_KINDS,
    DATASET_KINDS,
    MODEL_KINDS,
    UnknownItemKind,
    _by_name,
    all_item_kinds,
    category_of,
    get_item_kind,
    platform_references,
)
from mlcore.jobs.registry import all_kinds
from mlcore.zoo.registry import MODELS


def test_importing_the_registry_and_describing_every_kind_does_not_import_torch() -> None:
    code = (
        "import sys; from mlcore.items.registry import all_item_kinds; import mlcore.items.checks; "
        "kinds = [k.describe() for k in all_item_kinds()]; "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(len(kinds))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == len(all_item_kinds())


def test_the_library_kinds_are_the_declared_kinds_with_a_check_models_first() -> None:
    assert tuple(k.name for k in all_item_kinds() if k.category == "model" and k.check) == MODEL_KINDS
    assert tuple(k.name for k in all_item_kinds() if k.category == "dataset" and k.check) == DATASET_KINDS
    assert (*MODEL_KINDS, *DATASET_KINDS) == ALL_KINDS
    assert {category_of(name) for name in MODEL_KINDS} == {"model"}
    assert {category_of(name) for name in DATASET_KINDS} == {"dataset"}


def test_every_kind_a_job_accepts_is_kept_in_a_library_or_built_by_the_platform() -> None:
    accepted = {kind for k in all_kinds() for param in k.spec.params for kind in getattr(param, "accepts", ())}
    declared = {kind.name: kind for kind in all_item_kinds()}
    assert accepted <= set(declared)
    # Not in a library: then the platform must build it (its references are declared with it).
    assert {name for name in accepted if not declared[name].in_library} == {
        name for name in accepted if declared[name].platform_references
    }


def test_every_built_in_item_is_of_a_declared_kind() -> None:
    declared = {kind.name for kind in all_item_kinds()}
    assert {item.kind for item in (*MODELS, *DATASETS)} <= declared


def test_every_library_kind_takes_a_folder_as_an_archive() -> None:
    assert all({"zip", "tar"} <= set(kind.formats) for kind in all_item_kinds() if kind.in_library)


def test_the_watermark_keyring_is_declared_as_a_platform_reference_not_a_library_kind() -> None:
    keyring = get_item_kind("watermark-keyring")
    assert not keyring.in_library and "watermark-keyring" not in ALL_KINDS
    assert [(r.reference, r.prefix) for r in platform_references(["images", "watermark-keyring"])] == [
        ("keyring:platform", "keyring:")
    ]
    assert platform_references(["images"]) == [] and platform_references([]) == []


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UnknownItemKind, match="hf-moe-lm"):
        get_item_kind("no-such-kind")
    # A built-in-only kind is no library kind: the library's own refusal lists what it holds.
    with pytest.raises(ValueError, match=r"Unknown item kind 'video-classifier'; use one of: hf-moe-lm, "):
        category_of("video-classifier")


def test_a_kind_declared_twice_is_refused() -> None:
    kind = ItemKind(name="text", category="dataset", title="Text", summary="", formats=("txt",))
    with pytest.raises(TypeError, match="registered twice: 'text'"):
        _by_name([kind, kind])
