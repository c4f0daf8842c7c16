import pytest
import torch

from mlcore.moe import PrototypeRouter


def test_prototype_scores_are_scaled_cosines_with_identity_activation():
    torch.manual_seed(0)
    router = PrototypeRouter(8, 4, top_k=2, alpha=2.0, unconditional=False)
    x = torch.randn(10, 8) * 5  # the score ignores the token's norm
    routing = router(x)
    cos = torch.nn.functional.cosine_similarity(x.unsqueeze(1), router.prototypes.unsqueeze(0), dim=-1)
    torch.testing.assert_close(routing.logits, 2.0 * cos)
    torch.testing.assert_close(routing.gate_weights, (2.0 * cos).topk(2, dim=-1).values)
    assert routing.num_experts == 4


def test_prototypes_start_small_and_normal():
    torch.manual_seed(1)
    router = PrototypeRouter(256, 16)
    assert router.prototypes.std().item() == pytest.approx(0.02, rel=0.05)


def test_null_tokens_go_to_the_unconditional_expert_with_weight_one():
    torch.manual_seed(2)
    router = PrototypeRouter(8, 3, top_k=1)
    x = torch.randn(6, 8)
    null = torch.tensor([False, True, False, True, True, False])
    routing = router(x, null_mask=null)
    assert routing.num_experts == 4 and router.unconditional_expert == 3
    assert routing.expert_ids[null, 0].tolist() == [3, 3, 3]
    assert routing.gate_weights[null, 0].tolist() == [1.0, 1.0, 1.0]
    assert bool((routing.expert_ids[~null, 0] < 3).all())
    assert routing.logits[null, 3].tolist() == [1.0, 1.0, 1.0]
    assert routing.logits[~null, 3].tolist() == [-1.0, -1.0, -1.0]
    # conditional tokens are untouched by the mask
    torch.testing.assert_close(routing.gate_weights[~null], router(x).gate_weights[~null])


def test_with_top_k_above_one_a_null_token_uses_one_slot_and_leaves_the_rest_inactive():
    torch.manual_seed(3)
    routing = PrototypeRouter(8, 4, top_k=2)(torch.randn(3, 8), null_mask=torch.tensor([True, False, False]))
    assert routing.active_mask().tolist() == [[True, False], [True, True], [True, True]]
    assert routing.gate_weights[0].tolist() == [1.0, 0.0]
    assert int(routing.expert_ids[0, 0]) == 4


def test_without_an_unconditional_expert_a_null_mask_is_refused():
    with pytest.raises(ValueError, match="unconditional=True"):
        PrototypeRouter(8, 4, unconditional=False)(torch.randn(2, 8), null_mask=torch.tensor([True, False]))


def test_a_null_mask_of_the_wrong_shape_is_refused():
    with pytest.raises(ValueError, match="one flag per token"):
        PrototypeRouter(8, 4)(torch.randn(3, 8), null_mask=torch.tensor([True, False]))
