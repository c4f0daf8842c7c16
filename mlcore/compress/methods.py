"""Every compression method by its job-facing name, and one call that plans and applies it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from mlcore.compress.baselines import plan_ean, plan_frequency, plan_random, plan_reap, plan_routing_score
from mlcore.compress.calibrate import Calibration
from mlcore.compress.hcsmoe import plan_hcsmoe
from mlcore.compress.mone import plan_mone
from mlcore.compress.naee import plan_naee
from mlcore.compress.plan import CompressionPlan, apply_plan
from mlcore.hf.adapter import MoEAdapter, adapt

#: Name → title; the order is the report's.
METHODS: dict[str, str] = {
    "mone": "MoNE (novices = mean outputs)",
    "mone-zero": "MoNE ranking, zero novices",
    "mone-delete": "MoNE ranking, experts deleted",
    "random": "Random",
    "frequency": "Frequency",
    "rs": "Routing score (model-wide)",
    "ean": "EAN",
    "reap": "REAP",
    "naee": "NAEE (enumeration)",
    "hc-smoe": "HC-SMoE (merging)",
}
#: Methods whose calibration must keep each layer's sampled inputs.
NEEDS_LAYER_INPUTS = ("naee",)


def make_plan(
    method: str,
    adapter: MoEAdapter,
    calibration: Calibration,
    keep: int,
    *,
    scope: str,
    seed: int = 0,
    on_layer: Callable[[int, int], Any] | None = None,
) -> CompressionPlan:
    """The plan of ``method`` keeping ``keep`` experts per layer (``scope`` = ``layer`` | ``global``).

    ``scope`` has no default here or in the ``plan_*`` functions: the compress-moe job's spec holds
    it, and the benchmark says which it measures. ``on_layer(done, total)`` hears each layer a
    method plans at length (NAEE's enumeration, which can take minutes); the others plan from the
    calibration's statistics in a blink and call nothing."""
    if method == "mone":
        return plan_mone(calibration, keep, scope=scope)
    if method == "mone-zero":
        return plan_mone(calibration, keep, scope=scope, zero_novices=True)
    if method == "mone-delete":
        return plan_mone(calibration, keep, scope=scope, delete=True)
    if method == "random":
        return plan_random(calibration, keep, scope=scope, seed=seed)
    if method == "frequency":
        return plan_frequency(calibration, keep, scope=scope)
    if method == "rs":
        return plan_routing_score(calibration, keep)
    if method == "ean":
        return plan_ean(calibration, keep, scope=scope)
    if method == "reap":
        return plan_reap(calibration, keep, scope=scope)
    if method == "naee":
        layers = len(calibration.layers)
        return plan_naee(
            adapter, calibration, keep, on_layer=None if on_layer is None else lambda i: on_layer(i + 1, layers)
        )
    if method == "hc-smoe":
        return plan_hcsmoe(adapter, calibration, keep)
    raise ValueError(f"unknown compression method {method!r}; known: {', '.join(METHODS)}")


def compressed_copy(model: Any, plan: CompressionPlan) -> tuple[Any, MoEAdapter]:
    """A deep copy of ``model`` with ``plan`` applied (the original stays intact for the next method)."""
    clone = copy.deepcopy(model)
    adapter = adapt(clone)
    with torch.no_grad():
        apply_plan(adapter, plan)
    return clone, adapter
