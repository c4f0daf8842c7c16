import pytest
import torch

from mlcore.data.video import bouncing_digits
from mlcore.video.dit import AuxLosses, VideoDiT, activated_ffn_parameters


def batch(n=4, frames=4, size=8, seed=0):
    data = bouncing_digits(n, frames=frames, size=size, seed=seed)
    return torch.from_numpy(data.clips).unsqueeze(1), torch.from_numpy(data.digits), torch.from_numpy(data.directions)


def test_a_fresh_dit_outputs_zero_velocity_of_the_input_shape_because_of_adaln_zero(tiny_dit):
    x, d, m = batch()
    v = tiny_dit()(x, torch.rand(4), d, m)
    assert v.shape == x.shape and torch.count_nonzero(v) == 0


@pytest.mark.parametrize("attention", ["full", "moga", "local"])
def test_every_attention_mode_trains_the_output_layer_from_a_zero_start(tiny_dit, attention):
    model = tiny_dit(attention=attention)
    x, d, m = batch()
    model(x, torch.rand(4), d, m).sub(x).square().mean().backward()
    assert model.final.weight.grad.abs().sum() > 0


def test_the_moe_and_promoe_ffns_activate_as_many_parameters_as_the_dense_one(tiny_dit):
    dense, moe, promoe = (activated_ffn_parameters(tiny_dit(ffn=kind)) for kind in ("dense", "moe", "promoe"))
    assert abs(moe - dense) / dense < 0.1 and moe == promoe


def test_promoe_routes_null_class_tokens_to_the_unconditional_expert_only(tiny_dit):
    model = tiny_dit(ffn="promoe")
    x, d, m = batch()
    d[:2] = model.null_digit
    m[:2] = model.null_direction
    aux = AuxLosses()
    model(x, torch.rand(4), d, m, aux=aux)
    routing = aux.routings[0]
    per_sample = routing.expert_ids[:, 0].reshape(4, -1)
    unconditional = model.blocks[0].ffn.moe.router.unconditional_expert
    assert (per_sample[:2] == unconditional).all() and (per_sample[2:] != unconditional).all()
    assert aux.contrastive is not None and aux.expert_balance is None


def test_without_conditional_routing_null_tokens_use_the_prototype_experts(tiny_dit):
    model = tiny_dit(ffn="promoe", promoe_conditional=False)
    x, d, m = batch()
    d[:] = model.null_digit
    aux = AuxLosses()
    model(x, torch.rand(4), d, m, aux=aux)
    assert aux.routings[0].num_experts == 4


def test_the_moe_ffn_records_a_switch_balance_loss_and_moga_a_group_balance_loss(tiny_dit):
    model = tiny_dit(ffn="moe", attention="moga")
    x, d, m = batch()
    aux = AuxLosses()
    model(x, torch.rand(4), d, m, aux=aux)
    assert aux.expert_balance is not None and aux.expert_balance > 0
    assert aux.group_balance is not None and aux.group_balance > 0


def test_it_runs_other_frame_counts_and_resolutions_than_it_was_built_for(tiny_dit):
    model = tiny_dit(attention="moga")
    x, d, m = batch(frames=6, size=12)
    assert model(x, torch.rand(4), d, m).shape == (4, 1, 6, 12, 12)


def test_a_resolution_the_patch_does_not_divide_is_refused(tiny_dit):
    x = torch.zeros(1, 1, 4, 10, 10)
    with pytest.raises(ValueError, match="divisible by the patch"):
        tiny_dit()(x, torch.rand(1), torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long))


def test_save_pretrained_and_from_pretrained_give_the_same_model(tiny_dit, tmp_path):
    model = tiny_dit(ffn="promoe", attention="moga")
    torch.nn.init.normal_(model.final.weight)
    model.save_pretrained(tmp_path)
    again = VideoDiT.from_pretrained(tmp_path)
    x, d, m = batch()
    t = torch.rand(4)
    assert again.config.ffn == "promoe" and tuple(again.config.window) == (2, 2, 2)
    assert torch.allclose(model(x, t, d, m), again(x, t, d, m), atol=1e-6)


def test_the_ec_dit_ffn_activates_as_much_as_dit_moe_and_adds_no_balance_loss(tiny_dit):
    model = tiny_dit(ffn="ec")
    assert activated_ffn_parameters(model) == activated_ffn_parameters(tiny_dit(ffn="moe"))
    x, d, m = batch()
    aux = AuxLosses()
    model(x, torch.rand(4), d, m, aux=aux).sub(x).square().mean().backward()
    assert aux.expert_balance is None and aux.contrastive is None
    counts = aux.routings[0].expert_counts()
    assert (counts == counts[0]).all()  # expert choice: every expert takes its capacity


@pytest.mark.parametrize("attention", ["random", "blocktopk", "sta"])
def test_the_sparse_baseline_modes_train_the_model(tiny_dit, attention):
    model = tiny_dit(attention=attention)
    x, d, m = batch()
    model(x, torch.rand(4), d, m).sub(x).square().mean().backward()
    assert model.final.weight.grad.abs().sum() > 0


def test_the_race_dit_ffn_activates_as_much_as_dit_moe_on_average_and_adds_no_balance_loss(tiny_dit):
    model = tiny_dit(ffn="race")
    assert activated_ffn_parameters(model) == activated_ffn_parameters(tiny_dit(ffn="moe"))
    x, d, m = batch()
    aux = AuxLosses()
    model(x, torch.rand(4), d, m, aux=aux).sub(x).square().mean().backward()
    assert aux.expert_balance is None and aux.contrastive is None
    routing = aux.routings[0]
    assert int(routing.active_mask().sum()) == 2 * routing.num_tokens  # 2 experts per token on average
    # adaLN-Zero closes the FFN branch at initialisation, so train the FFN alone to see the router learn
    ffn = model.blocks[0].ffn
    ffn(torch.randn(2, 8, 16), torch.zeros(2, dtype=torch.bool), AuxLosses()).square().sum().backward()
    assert ffn.moe.router.weight.grad.abs().sum() > 0


def test_a_token_that_wins_no_expert_in_the_race_still_gets_the_shared_expert():
    from mlcore.video.dit import FeedForward

    torch.manual_seed(0)
    ffn = FeedForward(4, 16, "race", num_experts=4)
    with torch.no_grad():
        ffn.moe.router.weight.copy_(torch.eye(4))  # logits = x: the first token outscores the others
    x = torch.tensor([[[5.0, 4.0, 3.0, 2.0], [-5.0, -5.0, -5.0, -5.0], [0.0, 1.0, 0.0, 0.0]]])
    aux = AuxLosses()
    y = ffn(x, torch.tensor([False]), aux)
    assert aux.routings[0].active_mask().sum(-1).tolist() == [4, 0, 2]
    shared = ffn.moe.shared_output(x[0])
    torch.testing.assert_close(y[0, 1], shared[1])
    assert y[0, 1].abs().sum() > 0 and not torch.allclose(y[0, 0], shared[0])


@pytest.mark.parametrize("activation", ["sigmoid", "softmax"])
def test_the_promoe_activation_ablation_gates_the_identity_choice_with_the_activated_cosine(tiny_dit, activation):
    identity, ablated = tiny_dit(ffn="promoe"), tiny_dit(ffn="promoe", promoe_activation=activation)
    ablated.load_state_dict(identity.state_dict())  # same prototypes and experts, only the activation differs
    x, d, m = batch()
    d[0] = identity.null_digit
    aux_identity, aux_ablated = AuxLosses(), AuxLosses()
    identity(x, torch.full((4,), 0.5), d, m, aux=aux_identity)
    ablated(x, torch.full((4,), 0.5), d, m, aux=aux_ablated)
    plain, routing = aux_identity.routings[0], aux_ablated.routings[0]
    assert torch.equal(plain.expert_ids, routing.expert_ids)
    cosine = plain.logits[:, :4]
    activated = torch.sigmoid(cosine) if activation == "sigmoid" else torch.softmax(cosine, dim=-1)
    tokens = plain.num_tokens // 4
    conditional = slice(tokens, None)  # sample 0 is the null sample
    torch.testing.assert_close(
        routing.gate_weights[conditional], activated[conditional].gather(-1, routing.expert_ids[conditional])
    )
    assert not torch.allclose(routing.gate_weights[conditional], plain.gate_weights[conditional])
    assert (routing.expert_ids[:tokens] == 4).all() and (routing.gate_weights[:tokens] == 1).all()


def test_the_promoe_activation_is_saved_with_the_model_and_a_wrong_one_is_refused(tiny_dit, tmp_path):
    model = tiny_dit(ffn="promoe", promoe_activation="softmax")
    torch.nn.init.normal_(model.final.weight)
    model.save_pretrained(tmp_path)
    again = VideoDiT.from_pretrained(tmp_path)
    assert again.config.promoe_activation == "softmax"
    assert again.blocks[0].ffn.moe.router.activation == "softmax"
    x, d, m = batch()
    t = torch.rand(4)
    assert torch.allclose(model(x, t, d, m), again(x, t, d, m), atol=1e-6)
    with pytest.raises(ValueError, match="promoe_activation must be one of"):
        tiny_dit(ffn="promoe", promoe_activation="relu")
