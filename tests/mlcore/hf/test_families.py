"""Every MoE causal-LM family of the installed transformers, built tiny, through every adapter operation.

One model per family (hidden 32, 8 experts, top-2, 3 layers), checked against its own stock forward:
hooks leave logits bit-identical, Σ gate × captured expert output is what the experts module
returned, removal reloads in stock transformers with the same logits, novices and masks survive a
save (whose files hold no novice weights, and whose shipped code allocates none), and a
layer-by-layer pass (per forward and sequential) routes like the full model. Families refused for
a structural reason must be refused with exactly that reason.
"""

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

from mlcore.compress.plan import CompressionPlan
from mlcore.compress.streamed import write_compressed
from mlcore.hf import HFModelError, adapt, layer_by_layer, load_model
from mlcore.hf.checkpoint import MODULES_FIELD, stored_tensors
from mlcore.hf.discovery import StructuralRefusal
from mlcore.hf.families import MOE_FAMILIES, tiny_family_config
from mlcore.hf.matrix import describe
from mlcore.hf.sequential import run_sequentially
from mlcore.hf.support import GAPS, REFUSED, family_row
from tests.mlcore.hf.conftest import file_tensors

DOCS = Path(__file__).resolve().parents[3] / "docs" / "hf-support.md"

FAMILIES = [
    pytest.param(
        family,
        marks=pytest.mark.xfail(strict=True, reason="; ".join(f"{op}: {why}" for op, why in GAPS[family].items())),
    )
    if family in GAPS
    else family
    for family in sorted(MOE_FAMILIES)
]


def build(model_type: str, seed: int = 0, **overrides: Any) -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_family_config(model_type, **overrides)).eval()


def token_ids(seed: int = 1) -> Tensor:
    return torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(seed))


def run(model: Any, ids: Tensor) -> Tensor:
    with torch.no_grad():
        return model(ids, use_cache=False).logits


def routing(model: Any, ids: Tensor) -> dict[int, tuple[Tensor, Tensor]]:
    found: dict[int, tuple[Tensor, Tensor]] = {}

    def record(layer: int, expert_ids: Tensor, gates: Tensor, _: Any) -> None:
        found[layer] = (expert_ids.clone(), gates.clone())

    with torch.no_grad(), adapt(model).capture_routing(record):
        model(ids, use_cache=False)
    return found


def check_capture(model: Any, ids: Tensor) -> None:
    """Hooks change nothing; Σ gate × E_e(x) over the captured pairs equals the experts' own output."""
    adapter = adapt(model)
    plain = run(model, ids)
    sums: dict[int, Tensor] = {}
    returned: dict[int, Tensor] = {}
    routed: dict[int, Tensor] = {}

    def on_expert(layer: int, expert: int, outputs: Tensor, gates: Tensor, rows: Tensor) -> None:
        total = sums.setdefault(layer, torch.zeros(ids.numel(), outputs.shape[-1], dtype=torch.float64))
        total.index_add_(0, rows, (gates[:, None] * outputs).double())

    def on_routing(layer: int, expert_ids: Tensor, gates: Tensor, _: Any) -> None:
        routed[layer] = expert_ids

    handles = [
        info.experts.register_forward_hook(lambda m, a, out, i=info.index: returned.__setitem__(i, out.detach()))
        for info in adapter.layers
    ]
    with adapter.capture_expert_outputs(on_expert), adapter.capture_routing(on_routing, logits=True):
        hooked = run(model, ids)
    for handle in handles:
        handle.remove()
    assert torch.equal(hooked, plain), "capture hooks changed the logits"
    for info in adapter.layers:
        assert routed[info.index].shape == (ids.numel(), info.top_k)
        assert int(routed[info.index].max()) < info.num_experts
        expected = returned[info.index].reshape(ids.numel(), -1).double()
        torch.testing.assert_close(sums[info.index], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_adapter_operation_works_on_the_family(model_type: str, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = build(model_type)
    if model_type in REFUSED:
        reason, _ = REFUSED[model_type]
        with pytest.raises(StructuralRefusal) as refused:
            adapt(model)
        assert refused.value.reason == reason
        return
    ids = token_ids()
    adapter = adapt(model)
    assert len(adapter.layers) >= 1
    row = family_row(model_type, MOE_FAMILIES[model_type], adapter.support(), describe(adapter))
    assert row in DOCS.read_text(encoding="utf-8").splitlines(), "regenerate with: python -m mlcore.hf.matrix"
    assert {(info.num_experts, info.top_k) for info in adapter.layers} <= {(8, 2), (8, 1)}
    check_capture(model, ids)

    # Novices (expert 3 of every MoE layer): the expert outputs its constant; the edit survives
    # save → load_model, and stock transformers computes the same (shipped code, or native biases).
    first = adapter.layers[0].index
    model.save_pretrained(tmp_path / "original")
    expert_three = sum(p[3].nbytes for info in adapter.layers for p in info.experts.parameters(recurse=False))
    vector = torch.linspace(-1, 1, adapter.layers[0].hidden)
    adapter.replace_with_novices({info.index: {3: vector} for info in adapter.layers})
    seen: list[Tensor] = []

    def keep_novice(layer: int, expert: int, outputs: Tensor, gates: Tensor, rows: Tensor) -> None:
        if (layer, expert) == (first, 3):
            seen.append(outputs)

    with adapter.capture_expert_outputs(keep_novice):
        run(model, token_ids(seed=2))
    assert all(torch.allclose(out, vector.expand_as(out)) for out in seen)
    check_capture(model, ids)
    novice_dir = tmp_path / "novices"
    adapter.save(novice_dir)
    # The compact layout: the files hold every tensor of the original but the novices' weights, and
    # the streamed writer (one decoder layer at a time) writes the very same tensors.
    stored = sum(t.nbytes for t in stored_tensors(novice_dir))
    assert stored == sum(t.nbytes for t in stored_tensors(tmp_path / "original")) - expert_three
    plan = CompressionPlan(
        "mone",
        keep={info.index: [e for e in range(8) if e != 3] for info in adapter.layers},
        novices={info.index: {3: vector} for info in adapter.layers},
    )
    write_compressed(tmp_path / "original", plan, tmp_path / "streamed")
    written, saved = file_tensors(tmp_path / "streamed"), file_tensors(novice_dir)
    assert sorted(written) == sorted(saved)
    assert all(torch.equal(written[name], tensor) for name, tensor in saved.items())
    # Within float32 rounding: a loaded model may run another experts implementation than from_config's.
    torch.testing.assert_close(run(load_model(novice_dir), ids), run(model, ids), rtol=0, atol=1e-5)
    # Every family ships the novice code (GPT-OSS too: its biases could hold c_e only with every expert stored).
    assert (novice_dir / "modeling_moelab_sidecar.py").is_file()
    with pytest.raises(ValueError, match="custom code"):
        AutoModelForCausalLM.from_pretrained(novice_dir)
    stock_novices = AutoModelForCausalLM.from_pretrained(novice_dir, trust_remote_code=True, dtype=torch.float32)
    torch.testing.assert_close(run(stock_novices.eval(), ids), run(model, ids), rtol=0, atol=1e-5)
    # The shipped code never allocates the novices' weights: 7 experts per layer in memory.
    modules = stock_novices.config.to_dict()[MODULES_FIELD].values()
    for experts in map(stock_novices.get_submodule, modules):
        assert {p.shape[0] for p in experts.parameters(recurse=False)} == {7}

    # The export with the novices deleted is another model, served as is by stock transformers.
    exported = adapter.save_without_novices(tmp_path / "export")
    assert {info.num_experts for info in exported.layers} == {7} and not exported.novices
    stock_export = AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32).eval()
    torch.testing.assert_close(run(stock_export, ids), run(exported.model, ids), rtol=0, atol=1e-5)

    # Removal keeping 6 of 8 in every MoE layer: the stock loader serves the same logits.
    sliced = build(model_type)
    sliced_adapter = adapt(sliced)
    sliced_adapter.remove_experts({info.index: [0, 1, 2, 4, 5, 7] for info in sliced_adapter.layers})
    assert {info.num_experts for info in sliced_adapter.layers} == {6}
    check_capture(sliced, ids)
    removed_dir = tmp_path / "removed"
    sliced_adapter.save(removed_dir)
    stock = AutoModelForCausalLM.from_pretrained(removed_dir, dtype=torch.float32).eval()
    torch.testing.assert_close(run(stock, ids), run(sliced, ids), rtol=0, atol=1e-5)

    # Uneven removal needs masks: masked experts are never selected, or the refusal says why.
    masked = build(model_type)
    masked_adapter = adapt(masked)
    uneven = {info.index: [0, 1, 2, 4, 5, 7] for info in masked_adapter.layers[:1]}
    if masked_adapter.support()["remove_experts"] in ("uniform", "no") and len(masked_adapter.layers) > 1:
        with pytest.raises(HFModelError, match="needs masks"):
            masked_adapter.remove_experts(uneven)
    elif len(masked_adapter.layers) > 1:
        masked_adapter.remove_experts(uneven)
        chosen = routing(masked, ids)[first][0]
        assert not bool(torch.isin(chosen, torch.tensor([3, 6])).any())

    # Layer by layer from the saved checkpoint: the same routing and logits as the full model.
    full = routing(model, ids)
    with layer_by_layer(novice_dir) as streamed:
        streamed_routing = routing(streamed, ids)
        streamed_logits = run(streamed, ids)
    assert sorted(streamed_routing) == sorted(full)
    for layer, (expert_ids, gates) in full.items():
        assert torch.equal(streamed_routing[layer][0], expert_ids)
        torch.testing.assert_close(streamed_routing[layer][1], gates)
    torch.testing.assert_close(streamed_logits, run(model, ids), rtol=0, atol=1e-5)

    # The sequential pass (every batch through layer i before layer i + 1 is read): the same logits.
    batches = [ids, token_ids(seed=2)]
    logits: dict[int, Tensor] = {}
    with layer_by_layer(novice_dir) as streamed:
        run_sequentially(streamed, batches, on_output=lambda b, out: logits.__setitem__(b, out.logits))
    for b, batch in enumerate(batches):
        torch.testing.assert_close(logits[b], run(model, batch), rtol=0, atol=1e-5)
