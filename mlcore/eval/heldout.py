"""The held-out evaluation a compression job or benchmark repeats for every model variant:
perplexity on each built-in source's test split and the zero-shot cloze suite, prepared once."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlcore.data.textset import source_splits
from mlcore.eval.cloze import ClozeItem, build_items, choice_loglikelihoods, score
from mlcore.eval.perplexity import heldout_windows, mean_nll

if TYPE_CHECKING:
    import torch


@dataclass
class HeldOut:
    windows: dict[str, torch.Tensor]
    cloze: dict[str, list[ClozeItem]]

    def evaluate(
        self,
        model: Any,
        tokenizer: Any,
        *,
        on_progress: Callable[[float, str], Any] | None = None,
        before_source: Callable[[str | None], Any] | None = None,
    ) -> dict[str, Any]:
        """``perplexity`` per source and their geometric mean, cloze ``acc``/``acc_norm`` per task and mean.

        ``on_progress(fraction, stage)`` hears where the evaluation is after every batch
        (``"stdlib-docs perplexity, window 48 of 256"``, ``"shakespeare cloze, item 40 of 100"``);
        the fraction weighs each part by the sequences it runs through the model.
        ``before_source(name)`` is told which source's held-out windows the next forwards run
        (``None`` before the cloze suite), for hooks that measure something per source.
        """
        sequences = sum(len(w) for w in self.windows.values())
        sequences += sum(len(item.choices) for items in self.cloze.values() for item in items)
        total, offset = max(1, sequences), 0

        def reporter(weight: int, what: str, unit: str) -> Callable[[int, int], None] | None:
            if on_progress is None:
                return None
            start = offset

            def report(done: int, count: int) -> None:
                on_progress((start + weight * done / max(1, count)) / total, f"{what}, {unit} {done} of {count}")

            return report

        ppl = {}
        for name, windows in self.windows.items():
            if before_source is not None:
                before_source(name)
            ppl[name] = math.exp(
                mean_nll(model, windows, on_batch=reporter(len(windows), f"{name} perplexity", "window"))
            )
            offset += len(windows)
        cloze = {}
        if before_source is not None:
            before_source(None)
        for name, items in self.cloze.items():
            weight = sum(len(item.choices) for item in items)
            on_batch = reporter(weight, f"{name} cloze", "item")
            cloze[name] = score(items, choice_loglikelihoods(model, tokenizer, items, on_batch=on_batch))
            offset += weight
        result: dict[str, Any] = {"perplexity": ppl, "cloze": cloze}
        result["ppl_mean"] = math.exp(sum(math.log(v) for v in ppl.values()) / len(ppl))
        if cloze:
            result["acc"] = sum(c["acc"] for c in cloze.values()) / len(cloze)
            result["acc_norm"] = sum(c["acc_norm"] for c in cloze.values()) / len(cloze)
        return result


def prepare_heldout(
    tokenizer: Any, sources: tuple[str, ...], *, length: int, windows: int, cloze_items: int
) -> HeldOut:
    splits = source_splits(sources, "test")
    return HeldOut(
        windows={
            name: heldout_windows(tokenizer, blocks, length=length, max_windows=windows)
            for name, blocks in splits.items()
        },
        cloze={name: build_items(blocks, n_items=cloze_items) for name, blocks in splits.items()}
        if cloze_items
        else {},
    )
