import pytest
import torch

from mlcore.hf import HFModelError, adapt
from tests.mlcore.hf.conftest import ARCHS, build

# Decoder layers holding experts in each tiny config (DeepSeek and Qwen2-MoE start with a dense layer).
EXPECTED_LAYERS = {
    "mixtral": [0, 1],
    "qwen2_moe": [1, 2],
    "qwen3_moe": [0, 1],
    "olmoe": [0, 1],
    "deepseek_v2": [1, 2],
    "deepseek_v3": [1, 2],
    "gpt_oss": [0, 1],
}
SHARED = {"qwen2_moe": 1, "deepseek_v2": 1, "deepseek_v3": 1}


@pytest.mark.parametrize("arch", ARCHS)
def test_it_lists_the_moe_layers_with_their_shapes(arch: str) -> None:
    adapter = adapt(build(arch))
    assert adapter.arch == arch
    assert [info.index for info in adapter.layers] == EXPECTED_LAYERS[arch]
    for info in adapter.layers:
        assert info.name == f"model.layers.{info.index}.mlp"
        assert (info.num_experts, info.top_k, info.hidden) == (8, 2, 32)
        assert info.num_shared_experts == SHARED.get(arch, 0)
        assert info.router.weight.shape == (8, 32)
        assert info.experts.gate_up_proj.shape[0] == 8


def test_it_refuses_a_dense_model_saying_it_has_no_moe_layers() -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    with pytest.raises(HFModelError, match=r"has no MoE layers"):
        adapt(AutoModelForCausalLM.from_config(config))


def test_it_refuses_a_plain_module() -> None:
    with pytest.raises(HFModelError, match="not a Hugging Face model"):
        adapt(torch.nn.Linear(2, 2))


def test_importing_the_package_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, mlcore.hf; assert mlcore.hf.SUPPORTED; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == "False"


def test_a_qwen2_moe_with_a_zero_width_shared_expert_counts_no_shared_expert() -> None:
    from transformers import AutoModelForCausalLM

    from mlcore.hf import adapt, tiny_config

    model = AutoModelForCausalLM.from_config(tiny_config("qwen2_moe", shared_expert_intermediate_size=0))
    assert {info.num_shared_experts for info in adapt(model).layers} == {0}
    with_shared = AutoModelForCausalLM.from_config(tiny_config("qwen2_moe"))
    assert {info.num_shared_experts for info in adapt(with_shared).layers} == {1}
