"""A layer-by-layer calibration whose process dies continues from its first unfinished layer, with
the statistics of an uninterrupted pass."""

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from mlcore.compress.calibrate import Calibration, calibrate
from mlcore.hf import adapt, layer_by_layer
from mlcore.hf.families import tiny_family_config

LAYERS = 4


class Died(Exception):
    """Stands in for the worker being killed once a layer has been committed."""


def windows() -> torch.Tensor:
    return torch.randint(3, 128, (6, 12), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_family_config("olmoe", num_hidden_layers=LAYERS)).eval()
    model.save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def run(folder: Path, **kwargs: Any) -> Calibration:
    with layer_by_layer(folder) as model:
        return calibrate(adapt(model), windows(), batch_size=2, sequential=True, **kwargs)


def assert_same(a: Calibration, b: Calibration) -> None:
    for name, value in a.statistics.state_dict().items():
        assert torch.equal(value, b.statistics.state_dict()[name]), name
    assert torch.equal(a.gated_norm_sum, b.gated_norm_sum)


def test_a_calibration_killed_after_a_layer_resumes_there_with_the_same_statistics(
    checkpoint: Path, tmp_path: Path
) -> None:
    whole = run(checkpoint)
    progress = tmp_path / "progress"

    def die_after_two(done: int, total: int) -> None:
        if done == 2:
            raise Died

    with pytest.raises(Died):
        run(checkpoint, checkpoint_dir=progress, on_layer=die_after_two)
    layers_run: list[int] = []
    resumed = run(checkpoint, checkpoint_dir=progress, on_layer=lambda done, total: layers_run.append(done))
    assert layers_run == [3, 4], "the resumed pass ran layers it had finished"
    assert_same(whole, resumed)


def test_a_process_killed_in_the_middle_of_a_layer_resumes_from_that_layer(checkpoint: Path, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    # A real SIGKILL-like death (no exception handlers, no cleanup) while layer 3 runs its second batch.
    script = textwrap.dedent(
        f"""
        import os, torch
        torch.set_num_threads({torch.get_num_threads()})  # this process's: float sums then agree bit for bit
        from mlcore.compress.calibrate import calibrate
        from mlcore.hf import adapt, layer_by_layer
        ids = torch.randint(3, 128, (6, 12), generator=torch.Generator().manual_seed(0))
        with layer_by_layer({str(checkpoint)!r}) as model:
            adapter = adapt(model)
            seen = []
            def hook(module, args):
                seen.append(1)
                if len(seen) == 2 * 3 + 2:
                    os._exit(9)
            model.model.layers[2].register_forward_pre_hook(hook)
            for layer in model.model.layers[:2]:
                layer.register_forward_pre_hook(lambda m, a: seen.append(1))
            calibrate(adapter, ids, batch_size=2, sequential=True, checkpoint_dir={str(progress)!r})
        """
    )
    died = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[3], timeout=120)
    assert died.returncode == 9
    layers_run: list[int] = []
    resumed = run(checkpoint, checkpoint_dir=progress, on_layer=lambda done, total: layers_run.append(done))
    assert layers_run == [3, 4]
    assert_same(run(checkpoint), resumed)


def test_a_checkpoint_of_other_windows_is_not_resumed(checkpoint: Path, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    with pytest.raises(Died):
        run(checkpoint, checkpoint_dir=progress, on_layer=lambda done, total: (_ for _ in ()).throw(Died))
    with layer_by_layer(checkpoint) as model:
        layers_run: list[int] = []
        other = windows().flip(0)
        calibrate(
            adapt(model),
            other,
            batch_size=2,
            sequential=True,
            checkpoint_dir=progress,
            on_layer=lambda done, total: layers_run.append(done),
        )
    assert layers_run == [1, 2, 3, 4]


def test_a_second_pass_of_the_same_job_running_at_once_keeps_nothing_rather_than_mix(
    checkpoint: Path, tmp_path: Path
) -> None:
    import fcntl
    import os

    progress = tmp_path / "progress"
    progress.mkdir()
    held = os.open(progress, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the first attempt, still alive
    try:
        second = run(checkpoint, checkpoint_dir=progress)
    finally:
        os.close(held)
    assert not (progress / "progress.json").exists() and not any(progress.iterdir())
    assert_same(run(checkpoint), second)
