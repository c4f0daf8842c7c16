"""Memory plans read from safetensors headers alone: kinds that hold the whole model refuse a model
the worker cannot fit with both figures, before any weight is read."""

from pathlib import Path

import pytest

from mlcore.hf import HFModelError
from mlcore.hf.memory import check_whole_fits, memory_needs
from mlcore.zoo.committed import CHECKPOINTS

ZOO_LM = CHECKPOINTS / "moe-lm-tiny"


def test_a_kind_that_trains_through_the_model_refuses_one_the_worker_cannot_hold() -> None:
    weights = memory_needs(ZOO_LM, load_bytes=4, activations=0, working=0).weights
    with pytest.raises(HFModelError, match=r"Distillation holds the whole model in memory: about .* this worker has"):
        check_whole_fits(ZOO_LM, device="cpu", what="Distillation", batch_tokens=512, available=weights // 2)
    check_whole_fits(ZOO_LM, device="cpu", what="Distillation", batch_tokens=512, available=weights + (4 << 30))


def test_the_needs_follow_the_load_dtype_not_the_file(tmp_path: Path) -> None:
    # The zoo's float16 files are computed in float32: twice their bytes on disk.
    on_disk = sum(p.stat().st_size for p in ZOO_LM.glob("*.safetensors"))
    computed = memory_needs(ZOO_LM, load_bytes=4, activations=0, working=0).weights
    assert 1.9 * on_disk < computed < 2.05 * on_disk
