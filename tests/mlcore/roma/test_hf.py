"""RoMA on an adapted Hugging Face MoE LM: the zoo's moe-lm-tiny (Qwen3-MoE, 4 MoE layers of 16 experts)."""

import json
import shutil
import zipfile

import pytest
import torch

from mlcore.hf import adapt, load_model
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.jobs.spec import ValidationError
from mlcore.roma.hf import HFRoutedLM
from mlcore.roma.roma import AlignConfig, align_routers, last_layers, manifold_loss, routing_vectors
from mlcore.roma.tasks import DIGIT_CLASSES, as_text, multitask_set
from mlcore.zoo.committed import CHECKPOINTS

ZOO_LM = CHECKPOINTS / "moe-lm-tiny"


@pytest.fixture(scope="module")
def lm() -> HFRoutedLM:
    from transformers import AutoTokenizer

    return HFRoutedLM(load_model(ZOO_LM), AutoTokenizer.from_pretrained(ZOO_LM), DIGIT_CLASSES)


@pytest.fixture(scope="module")
def prompts():
    return as_text(multitask_set(48, torch.Generator().manual_seed(1)))


def test_the_live_routing_of_the_hf_lm_gives_the_regulariser_a_gradient_on_the_router_weights(lm, prompts):
    clone = lm.clone()
    layers = last_layers(clone, 2)
    clone.router_parameters(layers)
    part = prompts.subset(torch.arange(8))
    clone.classify(part)
    r = clone.last_token_probs(layers, 8)
    assert r.shape == (8, 2 * 16)
    torch.testing.assert_close(r.view(8, 2, 16).sum(-1), torch.ones(8, 2))
    targets = torch.softmax(torch.randn(8, 3, r.shape[-1]), -1)
    manifold_loss(r, targets, torch.full((8, 3), 1 / 3)).backward()
    for position in layers:
        grad = clone.adapter.layers[position].router.weight.grad
        assert grad is not None and grad.abs().sum() > 0


def test_roma_on_the_hf_lm_trains_only_the_chosen_routers_and_its_regulariser_moves(lm, prompts):
    embeddings = torch.randn(len(prompts), 8, generator=torch.Generator().manual_seed(0))
    config = AlignConfig(layers=1, epochs=1, batch_size=16, warmup=1, lam=5.0, lr=1e-2, k=3)
    result = align_routers(lm, prompts, embeddings, config)
    assert result.successful >= 2  # the base LM answers some digit prompts right
    assert len({round(v, 6) for v in result.regulariser}) > 1
    tuned, base = dict(result.model.model.named_parameters()), dict(lm.model.named_parameters())
    changed = {name for name in base if not torch.equal(tuned[name], base[name])}
    assert changed == {f"{lm.adapter.layers[-1].name}.gate.weight"}


def test_an_override_replaces_the_last_tokens_routing_and_its_top_k_choice(lm, prompts):
    part = prompts.subset(torch.arange(6))
    layers = last_layers(lm, 1)
    forced = torch.zeros(6, 16)
    forced[:, 3], forced[:, 11] = 0.7, 0.3
    chosen = []
    router = lm.adapter.layers[layers[0]].router
    handle = router.register_forward_hook(lambda m, a, out: chosen.append(out[2].detach()))
    try:
        with torch.no_grad():
            overridden = lm.classify(part, {layers[0]: forced})
            r = lm.last_token_probs(layers, 6)
    finally:
        handle.remove()
    torch.testing.assert_close(r, forced)
    rows = lm.adapter.layers[layers[0]].router.moelab_roma["rows"]
    assert {tuple(sorted(ids)) for ids in chosen[0][rows].tolist()} == {(3, 11)}
    with torch.no_grad():
        assert not torch.allclose(overridden, lm.classify(part))  # the routing change reaches the answer
        assert routing_vectors(lm, part, layers)[0].shape == (6, 16)


def _task_file(path, rows=48):
    words = ["red", "green", "blue", "gold", "grey", "pink"]
    lines = [
        # Distinct texts: the split hashes each row's content, so repeated rows would all land on one side.
        json.dumps({"text": f"{words[i % 6]} {words[(i // 6) % 6]} {i} -> ", "label": "A" if i % 3 else "B"})
        for i in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_router_align_job_tunes_an_uploaded_hf_checkpoint_on_an_uploaded_task_file(tmp_path):
    folder = tmp_path / "moe-lm-tiny"
    shutil.copytree(ZOO_LM, folder)
    archive = tmp_path / "checkpoint.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in folder.iterdir():
            z.write(path, f"moe-lm-tiny/{path.name}")
    kind, ctx = get_kind("router-align"), InMemoryContext()
    raw = {"embedding": "tfidf-svd", "epochs": 1, "oracle_steps": 2, "layers": 2, "k": 3, "seed": 0}
    files = {"checkpoint": [archive], "task_file": [_task_file(tmp_path / "task.jsonl")]}
    params, inputs = prepare(kind, raw, files, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "succeeded", (outcome.error, outcome.traceback)
    scalars = ctx.metrics.scalars
    for method in ("base", "ce_only", "roma", "c3po_lite", "oracle"):
        assert 0.0 <= scalars[f"test_accuracy_{method}"] <= 1.0
    assert scalars["test_accuracy_oracle"] >= scalars["test_accuracy_base"]
    assert "test_gap_closed_roma" in scalars and "test_knn_overlap_roma" in scalars
    assert "iid_accuracy_base" not in scalars  # an upload is scored on its own test rows only
    assert [r.kind for r in ctx.registrations] == ["hf-moe-lm"]
    tuned = dict(load_model(ctx.artifacts["roma_model"].path).named_parameters())
    base = load_model(ZOO_LM)
    routers = {f"{info.name}.gate.weight" for info in adapt(base).layers[-2:]}
    changed = {name for name, value in base.named_parameters() if not torch.equal(value, tuned[name])}
    assert changed and changed <= routers  # only the last two MoE layers' routers moved


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"text": "a", "label": "A"}\n' * 20, "a task needs at least two labels"),
        (
            "".join(json.dumps({"text": f"x{i}", "label": ["Apple", "Apricot"][i % 2]}) + "\n" for i in range(40)),
            "start with the same token",
        ),
        ('{"text": "a", "label": "A", "colour": 1}\n', "unknown field"),
    ],
)
def test_it_refuses_bad_task_files_with_a_clear_error_and_records_nothing(tmp_path, content, message):
    path = tmp_path / "task.jsonl"
    path.write_text(content)
    kind, ctx = get_kind("router-align"), InMemoryContext()
    raw = {"model": str(ZOO_LM), "epochs": 1, "oracle_steps": 1, "seed": 0}
    params, inputs = prepare(kind, raw, {"task_file": [path]}, resolver=LocalResolver(), workdir=ctx.workdir)
    outcome = execute(kind, params, inputs, ctx)
    assert outcome.status == "failed" and message in outcome.error
    assert not ctx.artifacts and not ctx.registrations


def test_a_task_file_without_a_language_model_is_refused(tmp_path):
    kind, ctx = get_kind("router-align"), InMemoryContext()
    raw = {"pretrain_steps": 10, "seed": 0}
    # Refused before anything runs, as at submission: the task set would otherwise be ignored.
    with pytest.raises(ValidationError, match="needs a language model"):
        prepare(
            kind, raw, {"task_file": [_task_file(tmp_path / "t.jsonl")]}, resolver=LocalResolver(), workdir=ctx.workdir
        )


def test_a_small_hf_moe_lm_pretrained_on_the_task_prompts_lowers_its_loss(lm):
    from mlcore.roma.hf import pretrain_lm

    losses = []
    subject = pretrain_lm(
        lm.tokenizer, steps=25, batch_size=32, hidden=32, layers=2, experts=4, on_step=lambda s, v: losses.append(v)
    )
    assert subject.num_moe_layers == 2 and subject.num_experts(0) == 4
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    assert not subject.model.training  # handed back ready for evaluation


def _tiny_lm(arch: str, vocab: int):
    from transformers import AutoModelForCausalLM

    from mlcore.hf import tiny_config

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config(arch, vocab_size=vocab), dtype=torch.float32).eval()


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe", "olmoe", "deepseek_v2"])
def test_every_softmax_router_architecture_exposes_live_routing_and_takes_an_override(arch, lm, prompts):
    subject = HFRoutedLM(_tiny_lm(arch, len(lm.tokenizer)), lm.tokenizer, DIGIT_CLASSES)
    layers = last_layers(subject, 1)
    part = prompts.subset(torch.arange(4))
    experts = subject.num_experts(layers[0])
    forced = torch.softmax(torch.randn(4, experts, generator=torch.Generator().manual_seed(0)), -1)
    subject.router_parameters(layers)
    logits = subject.classify(part, {layers[0]: forced})
    torch.testing.assert_close(subject.last_token_probs(layers, 4), forced)
    subject.classify(part)
    r = subject.last_token_probs(layers, 4)
    (logits.sum() + r.square().sum()).backward()
    assert subject.adapter.layers[layers[0]].router.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("arch", ["gpt_oss", "deepseek_v3"])
def test_routers_that_are_not_softmax_over_all_experts_are_refused_by_name(arch, lm):
    from mlcore.hf.architectures import HFModelError

    with pytest.raises(HFModelError, match="router-align needs a softmax router"):
        HFRoutedLM(_tiny_lm(arch, len(lm.tokenizer)), lm.tokenizer, DIGIT_CLASSES)
