"""A small byte-level BPE tokenizer, trained in the recipe with ``tokenizers``, saved as a HF tokenizer.

Byte-level, so any text (code, prose, an upload in another script) encodes without unknown tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"


def train_bpe(texts: Iterable[str], *, vocab_size: int) -> Any:
    """Train a byte-level BPE with ``vocab_size`` tokens (``EOS`` is id 0) on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def save_hf_tokenizer(tokenizer: Any, directory: Path, *, model_max_length: int) -> None:
    """Save so that ``AutoTokenizer.from_pretrained(directory)`` loads it offline."""
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=EOS,
        model_max_length=model_max_length,
    )
    wrapped.save_pretrained(directory)


def load_hf_tokenizer(directory: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)
