import pytest
import torch

from mlcore.video.dit import VideoDiT

TINY = {"dim": 16, "depth": 1, "heads": 2, "ffn_width": 32, "num_experts": 4, "num_groups": 2, "window": (2, 2, 2)}


@pytest.fixture
def tiny_dit():
    def build(**overrides):
        torch.manual_seed(0)
        return VideoDiT(**{**TINY, **overrides})

    return build
