"""A long evaluation says where it is: every batch reports the windows or cloze items done so far,
and the held-out evaluation turns them into one rising fraction with a readable stage."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

from mlcore.eval.cloze import build_items, choice_loglikelihoods
from mlcore.eval.heldout import HeldOut
from mlcore.eval.perplexity import mean_nll
from mlcore.hf import tiny_config
from mlcore.zoo.tokenizer import EOS, train_bpe


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config("qwen3_moe", vocab_size=300, max_position_embeddings=64)).eval()


@pytest.fixture(scope="module")
def tokenizer():
    text = "the quick brown fox jumps over the lazy dog " * 50
    return PreTrainedTokenizerFast(tokenizer_object=train_bpe([text], vocab_size=280), eos_token=EOS, pad_token=EOS)


def _windows(count: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 280, (count, 12), generator=torch.Generator().manual_seed(seed))


def _items() -> list:
    blocks = [" ".join(f"w{b}x{i}" for i in range(120)) for b in range(8)]
    return build_items(blocks, n_items=6, context_chars=100, continuation_chars=20, seed=3)


def test_perplexity_reports_the_windows_scored_after_every_batch(model) -> None:
    heard: list[tuple[int, int]] = []
    mean_nll(model, _windows(7), batch_size=3, on_batch=lambda done, total: heard.append((done, total)))
    assert heard == [(3, 7), (6, 7), (7, 7)]


def test_the_cloze_suite_reports_the_items_whose_choices_are_all_scored(model, tokenizer) -> None:
    heard: list[tuple[int, int]] = []
    choice_loglikelihoods(model, tokenizer, _items(), batch_size=8, on_batch=lambda *args: heard.append(args))
    # 6 items × 4 choices in batches of 8 requests: two items per batch.
    assert heard == [(2, 6), (4, 6), (6, 6)]


def test_an_evaluation_rises_through_its_sources_and_says_where_it_is(model, tokenizer) -> None:
    heldout = HeldOut(windows={"prose": _windows(32), "code": _windows(16, seed=1)}, cloze={"prose": _items()})
    heard: list[tuple[float, str]] = []
    heldout.evaluate(model, tokenizer, on_progress=lambda fraction, stage: heard.append((fraction, stage)))
    fractions = [fraction for fraction, _ in heard]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    stages = [stage for _, stage in heard]
    assert stages[0] == "prose perplexity, window 16 of 32"
    assert "code perplexity, window 16 of 16" in stages
    assert stages[-1] == "prose cloze, item 6 of 6"
    # 32 + 16 windows and 24 cloze requests: the windows of "prose" are 32 of 72 sequences.
    assert dict(zip(stages, fractions))["prose perplexity, window 32 of 32"] == pytest.approx(32 / 72)
