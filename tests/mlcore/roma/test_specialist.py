import pytest
import torch

from mlcore.roma.model import MoEClassifierConfig
from mlcore.roma.roma import routing_vectors
from mlcore.roma.specialist import (
    SpecialistConfig,
    base_diagnostics,
    pretrain_specialists,
    specialist_sets,
    task_experts,
)
from mlcore.roma.tasks import multitask_set

TINY = MoEClassifierConfig(hidden=16, layers=2, heads=2, experts=8, top_k=2, expert_ffn=16)


def test_each_task_owns_its_own_block_of_top_k_experts():
    table = task_experts(4, 8, 2)
    torch.testing.assert_close(table.sum(-1), torch.ones(4))
    assert table[1].nonzero().flatten().tolist() == [2, 3] and table[3].nonzero().flatten().tolist() == [6, 7]
    with pytest.raises(ValueError, match="4 tasks need 12 experts at top-3"):
        task_experts(4, 8, 3)


def test_a_stale_synonym_must_be_one_the_routers_are_taught_and_one_must_stay_right():
    assert SpecialistConfig().variant == "stale2"
    assert SpecialistConfig(router_synonyms=(0,), stale_synonyms=()).variant == "untaught12"
    with pytest.raises(ValueError, match="stale_synonyms must be among the router_synonyms"):
        SpecialistConfig(router_synonyms=(0, 1), stale_synonyms=(2,))
    with pytest.raises(ValueError, match="at least one synonym"):
        SpecialistConfig(router_synonyms=(2,), stale_synonyms=(2,))


@pytest.fixture(scope="module")
def specialist():
    config = SpecialistConfig(routed_layers=1, steps=150, seed=0)
    return config, pretrain_specialists(TINY, config)


def test_the_routers_send_the_stale_phrasing_to_the_next_tasks_experts_and_the_others_to_their_own(specialist):
    config, model = specialist
    data = multitask_set(300, torch.Generator().manual_seed(5), tasks=config.tasks)
    top = routing_vectors(model, data, [1])[0].topk(2, dim=-1).indices.sort(-1).values
    pair = lambda task: torch.stack([2 * task, 2 * task + 1], dim=-1)  # noqa: E731
    own = (top == pair(data.tasks)).all(-1)
    following = (top == pair((data.tasks + 1) % 4)).all(-1)
    stale = data.synonyms == 2
    assert following[stale].float().mean() > own[stale].float().mean() + 0.2
    assert own[~stale].float().mean() > following[~stale].float().mean() + 0.2


def test_the_diagnostics_report_each_synonym_and_the_splits_use_every_phrasing(specialist):
    config, model = specialist
    train, splits = specialist_sets(config, 60, 90, seed=1, shifted_length=TINY.max_length - 1)
    assert len(train) == 60 and set(splits) == {"iid", "shifted"}
    assert splits["shifted"].tokens.shape[1] == TINY.max_length and set(train.synonyms.tolist()) == {0, 1, 2}
    rows = base_diagnostics(model, splits["iid"], config)["per_synonym"]
    assert [r["stale"] for r in rows] == [False, False, True] and sum(r["examples"] for r in rows) == 90
    assert all(0.0 <= r["routed"] <= 1.0 and 0.0 <= r["accuracy"] <= 1.0 for r in rows)
