import math

import pytest
import torch
from transformers import AutoModelForCausalLM

from mlcore.eval.cloze import ClozeItem, build_items, choice_loglikelihoods, score
from mlcore.eval.perplexity import expert_counts, mean_nll, perplexity, usage_entropy
from mlcore.hf import tiny_config
from mlcore.zoo.tokenizer import train_bpe


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config("qwen3_moe", vocab_size=300, max_position_embeddings=64)).eval()


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    from mlcore.zoo.tokenizer import EOS

    text = "the quick brown fox jumps over the lazy dog " * 50
    return PreTrainedTokenizerFast(tokenizer_object=train_bpe([text], vocab_size=280), eos_token=EOS, pad_token=EOS)


def test_perplexity_is_exp_of_the_mean_next_token_nll(model):
    windows = torch.randint(0, 300, (5, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=windows).logits, dim=-1)
    manual = -logprobs[:, :-1].gather(2, windows[:, 1:, None]).mean().item()
    assert mean_nll(model, windows, batch_size=2) == pytest.approx(manual, rel=1e-5)
    assert perplexity(model, windows) == pytest.approx(math.exp(manual), rel=1e-5)


def test_expert_counts_add_up_to_top_k_per_token(model):
    windows = torch.randint(0, 300, (3, 10), generator=torch.Generator().manual_seed(1))
    counts = expert_counts(model, windows, batch_size=2)
    assert len(counts) == 2 and all(sum(layer) == 3 * 10 * 2 for layer in counts)


def test_usage_entropy_is_one_when_even_and_zero_when_collapsed():
    assert usage_entropy([5, 5, 5, 5]) == pytest.approx(1.0)
    assert usage_entropy([20, 0, 0, 0]) == 0.0
    assert 0 < usage_entropy([10, 5, 3, 2]) < 1


def _blocks() -> list[str]:
    return [" ".join(f"w{b}x{i}" for i in range(120)) for b in range(8)]


def test_cloze_items_are_reproducible_and_the_answer_follows_its_context():
    blocks = _blocks()
    items = build_items(blocks, n_items=20, context_chars=100, continuation_chars=20, seed=3)
    assert items == build_items(blocks, n_items=20, context_chars=100, continuation_chars=20, seed=3)
    for item in items:
        assert len(item.choices) == 4 and len(set(item.choices)) == 4
        true = item.choices[item.answer]
        assert any(item.context + true in block for block in blocks)
        assert all(choice.startswith(" ") for choice in item.choices)
    assert len({item.answer for item in items}) > 1


def test_acc_and_acc_norm_score_like_lm_eval_harness():
    items = [ClozeItem("c", (" a", " bbbbbbbbb"), 1), ClozeItem("c", (" a", " bb"), 0)]
    loglikelihoods = [[-3.0, -6.0], [-1.0, -5.0]]
    # acc: argmax of sums -> [0, 0]; acc_norm: per character -> item 1 [-1.5, -0.6] -> 1, item 2 [-0.5, -1.67] -> 0.
    assert score(items, loglikelihoods) == {"acc": 0.5, "acc_norm": 1.0}


def test_choice_loglikelihoods_sum_the_continuation_tokens(model, tokenizer):
    item = ClozeItem("the quick brown", (" fox jumps", " dog"), 0)
    scores = choice_loglikelihoods(model, tokenizer, [item], batch_size=1)[0]
    for choice, value in zip(item.choices, scores):
        context = tokenizer.backend_tokenizer.encode(item.context, add_special_tokens=False).ids
        continuation = tokenizer.backend_tokenizer.encode(choice, add_special_tokens=False).ids
        ids = torch.tensor([context + continuation])
        with torch.no_grad():
            logprobs = torch.log_softmax(model(input_ids=ids).logits[0], dim=-1)
        expected = sum(logprobs[len(context) - 1 + i, t].item() for i, t in enumerate(continuation))
        assert value == pytest.approx(expected, rel=1e-4)
