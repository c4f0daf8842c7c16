import json
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from mlcore.moe import (
    LambdaNet,
    MoELayer,
    RoutingRecorder,
    RoutingTrace,
    SparsemaxRouter,
    TraceError,
    TraceMetadata,
    record_routing,
)


def two_layer_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(MoELayer(8, 16, 4, 2), torch.nn.Tanh(), MoELayer(8, 16, 6, 1, num_shared_experts=1))


@pytest.fixture
def trace():
    model = two_layer_model()
    with record_routing(model, logits=True) as recorder:
        model(torch.randn(5, 8))
        recorder.mark_sequence_end()
        mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
        with recorder.batch(mask):
            model(torch.randn(2, 4, 8))
    return recorder.to_trace(TraceMetadata(model="two-layer", source="random tokens"))


def test_recording_captures_every_layer_and_token_with_metadata(trace):
    assert trace.num_layers == 2 and trace.num_tokens == 12
    assert trace.sequence_lengths.tolist() == [5, 3, 4]
    assert trace.metadata.layers == (0, 1)
    assert trace.metadata.num_experts == (4, 6)
    assert trace.metadata.top_k == (2, 1)
    assert trace.metadata.shared_experts == (0, 1)
    assert trace.metadata.router == "topk-softmax"
    assert trace.expert_ids[0].dtype == torch.int32 and trace.expert_ids[0].shape == (12, 2)
    assert trace.router_logits[1].shape == (12, 6)


def test_recorded_decisions_are_the_layers_own():
    model = two_layer_model(1)
    x = torch.randn(6, 8)
    with record_routing(model) as recorder:
        model(x)
    trace = recorder.to_trace(TraceMetadata(model="m"))
    _, routing = model[0](x, return_routing=True)
    assert torch.equal(trace.expert_ids[0], routing.expert_ids.int())
    torch.testing.assert_close(trace.gate_weights[0], routing.gate_weights)
    assert trace.router_logits is None
    assert model[0].observers == [] and model[2].observers == []


def test_padding_tokens_are_left_out(trace):
    model = two_layer_model()
    x = torch.randn(2, 4, 8)
    with record_routing(model) as recorder, recorder.batch(torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]])):
        model(x)
    got = recorder.to_trace(TraceMetadata(model="m"))
    _, routing = model[0](x.reshape(8, 8)[[1, 2, 3, 4, 5]], return_routing=True)
    assert torch.equal(got.expert_ids[0], routing.expert_ids.int())
    assert got.sequence_lengths.tolist() == [3, 2]


def test_a_trace_survives_a_round_trip(trace, tmp_path):
    path = trace.save(tmp_path / "t.safetensors")
    back = RoutingTrace.load(path)
    assert back.metadata == trace.metadata
    for a, b in zip(
        back.expert_ids + back.gate_weights + back.router_logits,
        trace.expert_ids + trace.gate_weights + trace.router_logits,
    ):
        assert torch.equal(a, b)
    assert torch.equal(back.sequence_lengths, trace.sequence_lengths)
    assert [s.stop - s.start for s in back.sequences()] == [5, 3, 4]


def test_variable_k_routing_is_padded_with_unused_slots(tmp_path):
    torch.manual_seed(2)
    router = SparsemaxRouter(8, 5, LambdaNet([8]))
    with torch.no_grad():
        router.lambda_net.out.bias.fill_(-1.0)
    model = MoELayer(8, 8, router=router)
    with record_routing(model) as recorder:
        for n in (3, 50):
            model(torch.randn(n, 8))
            recorder.mark_sequence_end()
    trace = recorder.to_trace(TraceMetadata(model="ld-mole"))
    ids, weights = trace.expert_ids[0], trace.gate_weights[0]
    assert bool((ids == -1).any())
    assert bool((weights[ids == -1] == 0).all())
    assert bool(((ids >= 0).sum(-1) >= 1).all())
    assert trace.metadata.top_k == (ids.shape[1],) and trace.metadata.router == "sparsemax"
    RoutingTrace.load(trace.save(tmp_path / "v.safetensors"))
    assert int(trace.expert_counts(0).sum()) == int((ids >= 0).sum())


def test_the_recorder_takes_decisions_from_an_adapter_and_needs_the_layout_it_cannot_see():
    recorder = RoutingRecorder()
    recorder.record(3, torch.tensor([[0, 2], [1, 2]]), torch.tensor([[0.6, 0.4], [0.5, 0.5]]))
    with pytest.raises(ValueError, match=r"TraceMetadata\.num_experts is needed"):
        recorder.to_trace(TraceMetadata(model="hf"))
    recorder.describe_layer(3, num_experts=4, shared_experts=0)
    trace = recorder.to_trace(TraceMetadata(model="hf"))
    assert trace.metadata.layers == (3,) and trace.metadata.num_experts == (4,)


def test_layers_that_saw_different_token_counts_are_refused():
    recorder = RoutingRecorder()
    recorder.record(0, torch.tensor([[0]]), torch.tensor([[1.0]]))
    recorder.record(1, torch.tensor([[0], [1]]), torch.tensor([[1.0], [1.0]]))
    with pytest.raises(ValueError, match="different numbers of tokens"):
        recorder.mark_sequence_end()


# -- loading untrusted files -------------------------------------------------------------------


def rewrite(trace, path, *, tensors=None, header=None, metadata=None):
    data = dict(trace.tensors()) if tensors is None else tensors
    meta = trace.metadata.to_json() if metadata is None else metadata
    head = {"format": "moelab-routing-trace", "version": "1", "metadata": json.dumps(meta)}
    head.update(header or {})
    save_file(data, str(path), metadata=head)
    return path


def test_a_truncated_file_is_refused(trace, tmp_path):
    path = trace.save(tmp_path / "t.safetensors")
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(TraceError, match="not a readable safetensors routing trace"):
        RoutingTrace.load(path)


def test_a_file_with_a_garbage_header_is_refused(tmp_path):
    path = tmp_path / "g.safetensors"
    path.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(TraceError, match="not a readable"):
        RoutingTrace.load(path)


def test_a_safetensors_file_that_is_not_a_trace_is_refused(tmp_path):
    save_file({"w": torch.zeros(2)}, str(tmp_path / "w.safetensors"))
    with pytest.raises(TraceError, match="not a MoE Lab routing trace"):
        RoutingTrace.load(tmp_path / "w.safetensors")


def test_a_newer_format_version_asks_for_an_upgrade(trace, tmp_path):
    path = rewrite(trace, tmp_path / "t.safetensors", header={"version": "2"})
    with pytest.raises(TraceError, match="format version 2; this MoE Lab reads up to 1"):
        RoutingTrace.load(path)


def test_an_out_of_range_expert_id_is_refused(trace, tmp_path):
    tensors = trace.tensors()
    tensors["layers.1.expert_ids"][4, 0] = 6
    with pytest.raises(TraceError, match=r"holds 6; ids must be in \[0, 6\)"):
        RoutingTrace.load(rewrite(trace, tmp_path / "t.safetensors", tensors=tensors))


def test_a_token_without_experts_or_with_a_repeated_expert_is_refused(trace, tmp_path):
    tensors = trace.tensors()
    tensors["layers.0.expert_ids"][2] = -1
    tensors["layers.0.gate_weights"][2] = 0
    with pytest.raises(TraceError, match="every token needs at least one expert"):
        RoutingTrace.load(rewrite(trace, tmp_path / "a.safetensors", tensors=tensors))
    tensors = trace.tensors()
    tensors["layers.0.expert_ids"][2] = 1
    with pytest.raises(TraceError, match="same expert twice"):
        RoutingTrace.load(rewrite(trace, tmp_path / "b.safetensors", tensors=tensors))


def test_a_wrong_dtype_or_shape_is_refused(trace, tmp_path):
    tensors = trace.tensors()
    tensors["layers.0.gate_weights"] = tensors["layers.0.gate_weights"].double()
    with pytest.raises(TraceError, match=r"layers\.0\.gate_weights must be float32, got float64"):
        RoutingTrace.load(rewrite(trace, tmp_path / "a.safetensors", tensors=tensors))
    tensors = trace.tensors()
    tensors["layers.1.router_logits"] = tensors["layers.1.router_logits"][:, :5].contiguous()
    with pytest.raises(TraceError, match=r"layers.1.router_logits has shape \[12, 5\], expected \[12, 6\]"):
        RoutingTrace.load(rewrite(trace, tmp_path / "b.safetensors", tensors=tensors))


def test_sequence_lengths_must_cover_every_token(trace, tmp_path):
    tensors = trace.tensors()
    tensors["sequence_lengths"] = torch.tensor([5, 3, 3])
    with pytest.raises(TraceError, match=r"has shape \[12, 2\], expected \[11, 2\]"):
        RoutingTrace.load(rewrite(trace, tmp_path / "t.safetensors", tensors=tensors))


def test_missing_or_unexpected_tensors_are_named(trace, tmp_path):
    tensors = trace.tensors()
    del tensors["layers.1.gate_weights"]
    tensors["extra"] = torch.zeros(1)
    with pytest.raises(TraceError, match=r"missing \['layers.1.gate_weights'\], unexpected \['extra'\]"):
        RoutingTrace.load(rewrite(trace, tmp_path / "t.safetensors", tensors=tensors))


def test_metadata_that_disagrees_with_the_tensors_is_refused(trace, tmp_path):
    meta = trace.metadata.to_json()
    meta["num_experts"] = [4]
    with pytest.raises(TraceError, match="metadata num_experts lists 1 layers; the trace has 2"):
        RoutingTrace.load(rewrite(trace, tmp_path / "a.safetensors", metadata=meta))
    meta = trace.metadata.to_json()
    meta["top_k"] = ["2", 1]
    with pytest.raises(TraceError, match="'top_k' must be a list of integers"):
        RoutingTrace.load(rewrite(trace, tmp_path / "b.safetensors", metadata=meta))
    path = rewrite(trace, tmp_path / "c.safetensors", header={"metadata": "{not json"})
    with pytest.raises(TraceError, match="not valid JSON"):
        RoutingTrace.load(path)


def test_a_saved_file_holds_the_documented_tensors(trace, tmp_path):
    names = set(load_file(str(trace.save(tmp_path / "t.safetensors"))))
    assert names == {
        "sequence_lengths",
        *(f"layers.{l}.{part}" for l in (0, 1) for part in ("expert_ids", "gate_weights", "router_logits")),
    }


def test_a_hugging_face_model_is_recorded_through_the_adapter(tmp_path):
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config("qwen2_moe")).eval()
    ids = torch.randint(3, 100, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[0, :2] = 0  # left padding
    with torch.no_grad(), record_routing(model, logits=True) as recorder, recorder.batch(mask):
        model(ids, attention_mask=mask, use_cache=False)
    trace = recorder.to_trace(TraceMetadata(model="tiny qwen2_moe"))
    assert trace.sequence_lengths.tolist() == [5, 7]
    assert trace.metadata.router == "hf-qwen2_moe"
    assert len(trace.metadata.layers) == trace.num_layers >= 1
    assert all(s >= 1 for s in trace.metadata.shared_experts)
    assert trace.router_logits[0].shape == (12, trace.metadata.num_experts[0])
    assert RoutingTrace.load(trace.save(tmp_path / "hf.safetensors")).metadata == trace.metadata


def test_observers_are_removed_even_when_the_forward_fails():
    model = two_layer_model()
    with pytest.raises(ValueError, match="inputs of width 8"), record_routing(model):
        model(torch.randn(3, 5))
    assert model[0].observers == [] and model[2].observers == []


def test_a_mask_that_does_not_cover_the_batch_is_refused():
    model = two_layer_model()
    with (
        pytest.raises(ValueError, match="saw 8 tokens but the attention mask covers 6"),
        record_routing(model) as recorder,
        recorder.batch(torch.ones(2, 3)),
    ):
        model(torch.randn(2, 4, 8))


def test_recording_does_not_change_the_output():
    model = two_layer_model()
    x = torch.randn(2, 4, 8)
    plain = model(x)
    with record_routing(model, logits=True):
        assert torch.equal(model(x), plain)
