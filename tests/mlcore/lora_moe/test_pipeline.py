import json

import pytest
import torch

from mlcore.lora_moe.base import EncoderConfig, TinyEncoder
from mlcore.lora_moe.mixture import MixtureConfig
from mlcore.lora_moe.pipeline import FinetuneConfig, PretrainConfig, finetune, pretrain
from mlcore.lora_moe.tasks import LEVEL_OFFSET, level_batch, level_labels, pretrain_batch

SMALL = EncoderConfig(hidden=16, layers=1, heads=2, ffn=32)


def test_pretraining_tasks_have_the_right_targets():
    batch = pretrain_batch(64, torch.Generator().manual_seed(0))
    digits = batch.tokens[:, 1:] - 20
    for task_token, expected in ((2, digits), (3, digits.flip(-1)), (4, digits.cumsum(-1) % 10)):
        rows = batch.tokens[:, 0] == task_token
        assert rows.any()
        assert torch.equal(batch.targets[rows], expected[rows])


def test_majority_and_parity_labels_look_only_at_the_first_d_digits():
    digits = torch.tensor([[5, 6, 1, 9, 9, 9, 9, 9], [5, 1, 1, 9, 9, 9, 9, 9]])
    levels = torch.tensor([3, 3])
    assert level_labels("majority", digits, levels).tolist() == [1, 0]
    assert level_labels("parity", digits, levels).tolist() == [0, 1]
    batch = level_batch("majority", 100, torch.Generator().manual_seed(0), levels=(2, 6))
    assert set((batch.tokens[:, 0] - LEVEL_OFFSET).tolist()) == {2, 6}


def test_pretraining_lowers_the_loss():
    losses = []
    pretrain(PretrainConfig(steps=60, batch_size=32, warmup=5), SMALL, on_step=lambda s, loss, *_: losses.append(loss))
    assert sum(losses[-10:]) < sum(losses[:10])


def test_finetuning_with_ld_mole_learns_and_reports_routing_statistics():
    torch.manual_seed(0)
    base = TinyEncoder(SMALL)
    config = FinetuneConfig(steps=40, batch_size=32, train_examples=256, eval_examples=200, levels=(2, 3))
    result = finetune(base, MixtureConfig(routing="ld-mole", experts=4, rank=2, lambda_hidden=8), config)
    assert result.zero_expert_rate == 0.0
    assert set(result.accuracy_by_level) == {2, 3}
    assert len(result.active_heatmap) == 6 and all(len(v) == 9 for v in result.active_heatmap.values())
    assert sum(result.active_histogram) == 6 * 200 * 9 and result.active_histogram[0] == 0
    assert 1.0 <= result.mean_active <= 4.0 and result.mean_lambda is not None
    assert result.losses[-1][1] < result.losses[0][1] + 0.5
    # The base stays untouched: fine-tuning works on a copy.
    assert all(isinstance(b.q, torch.nn.Linear) for b in base.blocks)


def test_the_encoder_round_trips_through_safetensors_and_refuses_foreign_configs(tmp_path):
    model = TinyEncoder(SMALL)
    model.save(tmp_path / "m")
    again = TinyEncoder.load(tmp_path / "m")
    tokens = torch.randint(0, 30, (2, 9))
    torch.testing.assert_close(model(tokens), again(tokens))
    (tmp_path / "m" / "config.json").write_text(json.dumps({"architecture": "qwen3_moe"}))
    with pytest.raises(ValueError, match="does not describe a lora-tiny-encoder"):
        TinyEncoder.load(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"model\.safetensors is missing"):
        TinyEncoder.load(tmp_path / "m")
