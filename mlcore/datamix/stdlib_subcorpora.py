"""FastMix Tier B (card §4): a character-level tiny transformer on Python standard-library sub-corpora.

Five sources cut offline from the installed CPython library, each a different kind of text:

- ``code``: the top-level modules with docstrings and comments removed (``ast.unparse``);
- ``docstrings``: every module, class and function docstring of those modules;
- ``comments``: every ``#`` comment of those modules;
- ``tests``: the regression tests (``test/test_*.py``) as written: code, comments and docstrings mixed;
- ``licence``: the licence text CPython ships (``LICENSE.txt``).

The target validation set is a *known fixed mix* of the held-out (test-split) blocks of these sources,
``TARGET_MIX`` by default, so the right answer of a mixture search is knowable: a good w moves towards
it. Text is read as ASCII (anything else becomes ``?``), so one token is one character and the loss in
bits is bits per character.
"""

from __future__ import annotations

import ast
import io
import sysconfig
import tokenize
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from mlcore.data.text import stdlib_source
from mlcore.data.textset import TextDataset
from mlcore.datamix.problem import Batch, MixtureProblem
from mlcore.datamix.sources import random_windows

SUBCORPORA = ("code", "docstrings", "comments", "tests", "licence")
#: Mostly code, some prose about it, no tests or licence: FastMix should move w from uniform towards this.
TARGET_MIX: dict[str, float] = {"code": 0.5, "docstrings": 0.3, "comments": 0.2, "tests": 0.0, "licence": 0.0}
VOCAB = 128  # ASCII
#: Per sub-corpus: plenty for a proxy of ~30K parameters, and it keeps the first build to seconds.
MAX_CHARS = 1_500_000


Documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _docstring_nodes(tree: ast.Module) -> list[Documented]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return [node for node in ast.walk(tree) if isinstance(node, kinds) and ast.get_docstring(node, clean=False)]


def _without_docstrings(tree: ast.Module) -> str:
    for node in _docstring_nodes(tree):
        node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)  # unparse drops comments too


def _comments(text: str) -> str:
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return ""
    return "\n".join(t.string for t in tokens if t.type == tokenize.COMMENT)


def _capped(documents: list[tuple[str, str]], max_chars: int) -> list[tuple[str, str]]:
    out, total = [], 0
    for name, text in documents:
        if text and total < max_chars:
            out.append((name, text[: max_chars - total]))
            total += len(out[-1][1])
    return out


@lru_cache(maxsize=2)
def subcorpora(max_chars: int = MAX_CHARS) -> dict[str, TextDataset]:
    """The five sub-corpora, each a :class:`TextDataset` (so train/test splits follow the platform's rule)."""
    code: list[tuple[str, str]] = []
    docstrings, comments = [], []
    for name, text in stdlib_source():
        if sum(len(t) for _, t in code) >= max_chars:
            break  # parsing the rest would only feed the smaller prose corpora, at seconds per megabyte
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue  # a module written for another Python version: skip it rather than guess
        docs = [ast.get_docstring(node, clean=True) or "" for node in _docstring_nodes(tree)]
        docstrings.append((name, "\n\n".join(docs)))
        comments.append((name, _comments(text)))
        code.append((name, _without_docstrings(tree)))
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    tests = [(p.name, p.read_text(encoding="utf-8", errors="replace")) for p in sorted(stdlib.glob("test/test_*.py"))]
    licence = [("LICENSE.txt", (stdlib / "LICENSE.txt").read_text(encoding="utf-8", errors="replace"))]
    documents = {"code": code, "docstrings": docstrings, "comments": comments, "tests": tests, "licence": licence}
    return {name: TextDataset(name, _capped(documents[name], max_chars)) for name in SUBCORPORA}


def encode(text: str) -> torch.Tensor:
    """Characters as ids 0–127 (one per character; non-ASCII becomes ``?``)."""
    return torch.frombuffer(bytearray(text.encode("ascii", errors="replace")), dtype=torch.uint8).long()


def _sequences(data: torch.Tensor, context: int, count: int, generator: torch.Generator) -> Batch:
    """``count`` random windows: inputs ``[count, context]`` and the next character at every position."""
    rows = random_windows(data, context + 1, count, generator)
    return rows[:, :-1], rows[:, 1:]


def _sequence_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class CharTransformer(nn.Module):
    """A causal pre-norm transformer over characters; ``head`` is the output head FastMix differentiates."""

    def __init__(self, *, context: int, width: int = 32, layers: int = 2, heads: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(context, width))
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True, activation="gelu"
        )
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(context), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        hidden = self.embed(ids) + self.position[:length]
        hidden = self.blocks(hidden, mask=self.mask[:length, :length], is_causal=True)
        return self.head(self.norm(hidden))


def stdlib_problem(
    *,
    target: Mapping[str, float] = TARGET_MIX,
    context: int = 32,
    width: int = 32,
    layers: int = 2,
    validation_windows: int = 128,
    max_chars: int = MAX_CHARS,
    seed: int = 0,
) -> MixtureProblem:
    """Tier B: the sub-corpora's train splits as sources; validation windows from their test splits in ``target``
    proportions."""
    unknown = set(target) - set(SUBCORPORA)
    if unknown or any(v < 0 for v in target.values()) or sum(target.values()) <= 0:
        raise ValueError(
            f"target must give non-negative weights with a positive sum to some of {', '.join(SUBCORPORA)}; "
            f"got {dict(target)}"
        )
    corpora = subcorpora(max_chars)
    streams = [encode("\n".join(corpora[name].split("train"))) for name in SUBCORPORA]
    total = sum(target.values())
    generator = torch.Generator().manual_seed(seed)
    parts = []
    for name in SUBCORPORA:
        count = round(validation_windows * target.get(name, 0.0) / total)
        if count:
            held_out = encode("\n".join(corpora[name].split("test")))
            parts.append(_sequences(held_out, context, count, generator))
    validation = (torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))

    def sample(k: int, n: int, generator: torch.Generator) -> Batch:
        return _sequences(streams[k], context, n, generator)

    def build(model_seed: int) -> nn.Module:
        torch.manual_seed(model_seed)
        return CharTransformer(context=context, width=width, layers=layers)

    return MixtureProblem(
        sources=list(SUBCORPORA),
        build=build,
        head=lambda model: list(model.head.parameters()),
        sample=sample,
        validation=validation,
        loss_fn=_sequence_loss,
    )


def distance_to(weights: list[float], target: Mapping[str, float] = TARGET_MIX) -> float:
    """Total-variation distance ½·Σ_k |w_k − t_k| between a mixture over ``SUBCORPORA`` and the target mix."""
    total = sum(target.values())
    return 0.5 * sum(abs(w - target.get(name, 0.0) / total) for w, name in zip(weights, SUBCORPORA, strict=True))
