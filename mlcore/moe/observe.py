"""Shared plumbing for watching MoE layers: attaching observers, and padding masks.

Routing traces (:mod:`mlcore.moe.traces`) and per-expert statistics (:mod:`mlcore.moe.stats`)
both watch every :class:`~mlcore.moe.layer.MoELayer` of a model during calibration forwards, and
both must skip padding tokens when a batch of unequal sequences is padded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch import Tensor, nn

from mlcore.moe.layer import MoELayer, moe_layers
from mlcore.moe.routers import Routing

LayerCallback = Callable[[int, MoELayer, Tensor, Routing], None]


class _Tap:
    """The observer put on one layer: forwards its forward pass to a callback with the layer index."""

    def __init__(self, index: int, callback: LayerCallback) -> None:
        self.index, self.callback = index, callback

    def observe(self, layer: MoELayer, x: Tensor, routing: Routing) -> None:
        self.callback(self.index, layer, x, routing)


@contextmanager
def observing(model: nn.Module, callback: LayerCallback) -> Iterator[list[MoELayer]]:
    """Call ``callback(index, layer, x, routing)`` after every MoE layer's forward inside the block;
    yields the layers (index = position in ``model.modules()``). Observers are removed on exit."""
    layers = moe_layers(model)
    taps = [_Tap(index, callback) for index in range(len(layers))]
    for layer, tap in zip(layers, taps):
        layer.observers.append(tap)
    try:
        yield layers
    finally:
        for layer, tap in zip(layers, taps):
            layer.observers.remove(tap)


class TokenMask:
    """Which rows of the next forward's flattened tokens are real (not padding).

    ``with collector.batch(attention_mask):`` around a forward of a padded [B, S] batch keeps the
    rows where the mask is 1; outside such a block every row is kept.
    """

    def __init__(self) -> None:
        self._mask: Tensor | None = None

    @contextmanager
    def batch(self, attention_mask: Tensor) -> Iterator[None]:
        if attention_mask.dim() != 2:
            raise ValueError(f"attention_mask must be [batch, sequence], got shape {tuple(attention_mask.shape)}")
        if self._mask is not None:
            raise RuntimeError("batch() blocks do not nest; close the previous one first")
        self._mask = attention_mask.detach().bool()
        try:
            yield
        finally:
            self._mask = None
        self._batch_done(self._lengths(attention_mask))

    @staticmethod
    def _lengths(attention_mask: Tensor) -> list[int]:
        return [int(n) for n in attention_mask.bool().sum(dim=1).tolist() if n]

    def _batch_done(self, lengths: list[int]) -> None:
        """Hook: the block ended normally, with these (non-empty) sequence lengths."""

    def keep(self, rows: int) -> Tensor | None:
        """The flat [rows] bool mask for this forward, or None to keep every row."""
        if self._mask is None:
            return None
        if self._mask.numel() != rows:
            raise ValueError(
                f"a layer saw {rows} tokens but the attention mask covers {self._mask.numel()}; "
                "pass the mask of the batch being run"
            )
        return self._mask.reshape(-1)
