import platform
import time

import pytest
import torch
from torch.overrides import TorchFunctionMode

from mlcore.moe import MoELayer, PrototypeRouter, profile


@pytest.mark.parametrize(("activation", "gated", "shared"), [("silu", True, 0), ("relu", False, 1)])
def test_the_loop_baseline_computes_what_the_layer_computes(activation, gated, shared):
    torch.manual_seed(0)
    layer = MoELayer(8, 12, 5, 2, activation=activation, gated=gated, num_shared_experts=shared, dtype=torch.float64)
    x = torch.randn(30, 8, dtype=torch.float64)
    torch.testing.assert_close(profile.loop_forward(layer, x), layer(x))


def test_the_module_list_loop_computes_what_the_layer_computes_and_trains_its_own_copies():
    torch.manual_seed(0)
    layer = MoELayer(8, 12, 5, 2, num_shared_experts=1, dtype=torch.float64)
    x = torch.randn(30, 8, dtype=torch.float64)
    loop = profile.module_list_loop(layer)
    out = loop(x)
    torch.testing.assert_close(out, layer(x))
    out.sum().backward()
    # Its experts are its own parameters: the layer's fused expert weights get no gradient from it.
    assert layer.gate_up_proj.grad is None and layer.down_proj.grad is None


def test_the_loop_baseline_refuses_expert_biases():
    with pytest.raises(ValueError, match="without bias"):
        profile.loop_forward(MoELayer(8, 8, 2, 1, bias=True), torch.randn(2, 8))


def test_layer_flops_counts_router_routed_and_shared_matmuls():
    layer = MoELayer(4, 6, 3, 2, num_shared_experts=1, shared_intermediate=5)
    forward = 2 * 10 * 4 * 3 + 2 * 20 * (12 + 6) * 4 + 2 * 10 * (10 + 5) * 4
    assert profile.layer_flops(layer, 10, 20) == 3 * forward
    ungated = MoELayer(4, 6, router=PrototypeRouter(4, 3, unconditional=False), gated=False)
    assert profile.layer_flops(ungated, 10, 10) == 3 * (2 * 10 * 4 * 3 + 2 * 10 * (6 + 6) * 4)


def test_single_threaded_runs_are_timed_in_process_cpu_time_which_other_processes_cannot_inflate():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert profile.cpu_clock() is time.process_time
        # A sleeping step costs no CPU: wall time would count it, this clock does not.
        seconds = profile.round_robin({"sleep": lambda: time.sleep(0.05)}, 1, clock=profile.cpu_clock())
        assert seconds["sleep"] < 0.01
    finally:
        torch.set_num_threads(threads)
    if threads > 1:
        assert profile.cpu_clock() is time.perf_counter


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_malloc_is_told_to_keep_freed_memory_on_glibc():
    assert profile.keep_freed_memory() is True


def test_each_training_step_starts_from_no_gradients_as_after_zero_grad():
    layer = MoELayer(8, 12, 4, 2)
    x = torch.randn(16, 8, requires_grad=True)
    step = profile.train_step(layer, x, torch.randn_like(x))
    step()
    first = layer.gate_up_proj.grad.clone()
    step()
    # Accumulating would have doubled it; the step reset it first.
    torch.testing.assert_close(layer.gate_up_proj.grad, first)
    assert x.grad is not None and layer.router.weight.grad is not None


class _CountMatmuls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += func is torch.mm
        return func(*args, **(kwargs or {}))


def test_the_gemm_floor_runs_the_layers_expert_matmuls_and_refuses_shared_experts():
    torch.manual_seed(0)
    layer = MoELayer(8, 12, 4, 2)
    x = torch.randn(32, 8)
    floor = profile.expert_matmuls(layer, x)
    with _CountMatmuls() as counter:
        floor()
    used = int((torch.bincount(layer.router(x).expert_ids.reshape(-1), minlength=4) > 0).sum())
    # Two GEMMs forward and four backward per expert that has tokens, nothing for empty experts.
    assert counter.calls == 6 * used
    with pytest.raises(ValueError, match="shared"):
        profile.expert_matmuls(MoELayer(8, 12, 4, 2, num_shared_experts=1), x)
