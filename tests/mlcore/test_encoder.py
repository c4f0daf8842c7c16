from types import SimpleNamespace

import pytest
import torch
from torch import nn

from mlcore.encoder import EncoderTrunk


def trunk() -> EncoderTrunk:
    shape = SimpleNamespace(vocab_size=11, hidden=8, max_length=5, layers=2)
    return EncoderTrunk(shape, block=lambda: nn.Linear(8, 8))


def test_the_trunk_names_its_weights_as_the_committed_checkpoints_do() -> None:
    names = set(trunk().state_dict())
    assert {"position", "embed.weight", "norm.weight", "norm.bias"} <= names
    assert {n.split(".")[1] for n in names if n.startswith("blocks.")} == {"0", "1"}


def test_the_trunk_runs_every_block_in_order_and_normalises() -> None:
    model = trunk()
    out = model.hidden_states(torch.tensor([[1, 2, 3]]))
    assert out.shape == (1, 3, 8)
    assert torch.allclose(out.mean(-1), torch.zeros(1, 3), atol=1e-5)


def test_the_trunk_refuses_a_sequence_longer_than_its_positions() -> None:
    with pytest.raises(ValueError, match="6 tokens exceed the model's 5"):
        trunk().hidden_states(torch.zeros(1, 6, dtype=torch.long))
