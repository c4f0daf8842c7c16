"""The held-out evaluation a compression job or benchmark repeats for every model variant:
perplexity on each built-in source's test split and the zero-shot cloze suite, prepared once."""

from __future__ import annotations

import math
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

    def evaluate(self, model: Any, tokenizer: Any) -> dict[str, Any]:
        """``perplexity`` per source and their geometric mean, cloze ``acc``/``acc_norm`` per task and mean."""
        ppl = {name: math.exp(mean_nll(model, w)) for name, w in self.windows.items()}
        cloze = {
            name: score(items, choice_loglikelihoods(model, tokenizer, items)) for name, items in self.cloze.items()
        }
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
