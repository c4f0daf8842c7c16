from pathlib import Path

import pytest
import torch


def _calibration_text() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[name] for name in sorted(topics)[:20])


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> Path:
    """A tiny Qwen3-MoE checkpoint (d=32, 2 layers, 8 experts, top-2) with a byte-level BPE tokenizer."""
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config
    from mlcore.zoo.tokenizer import save_hf_tokenizer, train_bpe

    folder = tmp_path_factory.mktemp("tiny-lm")
    save_hf_tokenizer(train_bpe([_calibration_text()], vocab_size=300), folder, model_max_length=64)
    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", vocab_size=300, max_position_embeddings=64, eos_token_id=0, pad_token_id=0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def calibration_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("calibration") / "calibration.txt"
    path.write_text(_calibration_text())
    return path
