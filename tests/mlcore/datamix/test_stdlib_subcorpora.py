import ast

import pytest
import torch

from mlcore.data.text import stdlib_source
from mlcore.datamix.fastmix import FastMixConfig, fastmix
from mlcore.datamix.stdlib_subcorpora import (
    SUBCORPORA,
    TARGET_MIX,
    CharTransformer,
    distance_to,
    encode,
    stdlib_problem,
    subcorpora,
)

SMALL = 200_000  # characters per sub-corpus: enough for a tiny proxy, a second or two to build


def _decode(ids: torch.Tensor) -> str:
    return bytes(ids.tolist()).decode("ascii")


def test_docstrings_and_comments_leave_the_code_for_their_own_sub_corpora():
    corpora = subcorpora(SMALL)
    text = {name: "\n".join(doc for _, doc in corpora[name].documents) for name in SUBCORPORA}
    source = next(s for n, s in stdlib_source() if n == "_compression.py")
    docstring = ast.get_docstring(ast.parse(source))
    comment = "# Set to size of decompressed stream once it is known, for SEEK_END"
    assert comment in source and docstring
    assert docstring in text["docstrings"] and docstring not in text["code"]
    assert comment in text["comments"] and comment not in text["code"]
    assert "class DecompressReader(io.RawIOBase):" in text["code"]
    assert all(line.startswith("#") for line in text["comments"].splitlines() if line)
    assert "PYTHON SOFTWARE FOUNDATION LICENSE" in text["licence"] and "import unittest" in text["tests"]
    assert all(corpora[name].split("train") and corpora[name].split("test") for name in SUBCORPORA)


def test_the_validation_set_is_the_target_mix_of_held_out_text():
    target = {"code": 0.75, "comments": 0.25}
    problem = stdlib_problem(target=target, validation_windows=32, max_chars=SMALL, context=16)
    inputs, targets = problem.validation
    assert inputs.shape == targets.shape == (32, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # every position predicts the next character
    held_out = {name: "\n".join(subcorpora(SMALL)[name].split("test")) for name in SUBCORPORA}
    homes = [
        [name for name in SUBCORPORA if _decode(torch.cat([row, last[-1:]])) in held_out[name]]
        for row, last in zip(inputs, targets, strict=True)
    ]
    assert sum("code" in h for h in homes) == 24 and sum("comments" in h for h in homes) == 8


def test_a_target_naming_an_unknown_source_is_refused():
    with pytest.raises(ValueError, match="target must give"):
        stdlib_problem(target={"novels": 1.0}, max_chars=SMALL)


def test_one_id_per_character_so_the_loss_in_bits_is_bits_per_character():
    ids = encode("é = 1  # naïve")
    assert len(ids) == len("é = 1  # naïve") and int(ids.max()) < 128 and _decode(ids[:1]) == "?"


def test_the_proxy_never_looks_at_later_characters():
    model = CharTransformer(context=12, width=16).eval()
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 128
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[:, :8], model(changed)[:, :8])
        assert not torch.allclose(model(ids)[:, 8:], model(changed)[:, 8:])


def test_the_distance_to_the_target_is_total_variation():
    assert distance_to([TARGET_MIX[name] for name in SUBCORPORA]) == pytest.approx(0.0)
    assert distance_to([0.2] * 5) == pytest.approx(0.4)
    assert distance_to([0, 0, 0, 0, 1], {"code": 2.0, "docstrings": 2.0}) == pytest.approx(1.0)


def test_one_forward_pass_gives_the_same_per_source_losses_as_one_pass_each():
    problem = stdlib_problem(max_chars=SMALL, validation_windows=8)
    model, generator = problem.build(0), torch.Generator().manual_seed(0)
    batches = [problem.sample(k, 3, generator) for k in range(problem.k)]
    torch.testing.assert_close(
        problem.source_losses(model, batches), torch.stack([problem.loss(model, b) for b in batches])
    )


def test_fastmix_moves_weight_off_the_code_sources_when_the_target_is_prose():
    # A tiny, early search cannot tell the prose sources (comments, licence) apart reliably, but it must
    # see that code and tests do not help a licence target: the share they start with (0.4) must fall.
    problem = stdlib_problem(target={"licence": 1.0}, max_chars=SMALL, validation_windows=32, seed=0)
    result = fastmix(problem, FastMixConfig(steps=60, batch_per_source=4, lr_z=0.2, interval=5), seed=0)
    weights = dict(zip(problem.sources, result.final, strict=True))
    assert weights["code"] + weights["tests"] < 0.25
    assert len(result.weights) == 13 and result.weights[0][1] == [0.2] * 5
