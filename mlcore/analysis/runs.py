"""Training runs for the Efficiency Leverage fit: the CSV schema, its reader, and EL per run.

CSV schema (one row per finished training run; a header row with these names, any order,
extra columns ignored):

=================  ========  =====================================================================
column             type      meaning
=================  ========  =====================================================================
name               text      a label for the run
kind               text      ``dense`` or ``moe``
total_params       number    all parameters (non-embedding), > 0
active_params      number    parameters used per token (non-embedding), 0 < active ≤ total
experts            integer   routed experts E (1 for dense)
top_k              integer   routed experts per token k (1 for dense), 1 ≤ k ≤ E
shared_experts     integer   shared experts (0 if none)
granularity        number    G = 2·d_model / d_expert (paper's definition; 1 for dense)
tokens             number    training tokens
flops              number    training compute C in FLOPs (e.g. 6·active_params·tokens)
loss               number    final held-out loss (nats per token)
budget             text      optional: the compute budget a run belongs to; by default runs with
                             flops within 1% of each other share a budget
=================  ========  =====================================================================

The activation ratio is A = k / E over routed experts; with ``count_shared`` it is
(k + S) / (E + S) (the papers differ; the choice is recorded with the fit).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlcore.analysis.el import DenseLaw, fit_dense_law

REQUIRED = (
    "name",
    "kind",
    "total_params",
    "active_params",
    "experts",
    "top_k",
    "shared_experts",
    "granularity",
    "tokens",
    "flops",
    "loss",
)
MAX_ROWS = 100_000


class RunsError(ValueError):
    """A runs table that cannot be used; the message names the row and column."""


@dataclass(frozen=True)
class Run:
    name: str
    kind: str
    total_params: float
    active_params: float
    experts: int
    top_k: int
    shared_experts: int
    granularity: float
    tokens: float
    flops: float
    loss: float
    budget: str = ""

    def activation(self, *, count_shared: bool = False) -> float:
        s = self.shared_experts if count_shared else 0
        return (self.top_k + s) / (self.experts + s)


def _number(row: dict[str, str], column: str, line: int, *, integer: bool = False) -> float:
    raw = (row.get(column) or "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise RunsError(f"row {line}: {column} is {raw!r}, not a number") from None
    if not math.isfinite(value):
        raise RunsError(f"row {line}: {column} must be finite")
    if integer and value != int(value):
        raise RunsError(f"row {line}: {column} must be a whole number, got {raw}")
    return value


def parse_row(row: dict[str, str], line: int) -> Run:
    kind = (row.get("kind") or "").strip().lower()
    if kind not in ("dense", "moe"):
        raise RunsError(f"row {line}: kind must be 'dense' or 'moe', got {row.get('kind')!r}")
    n = {c: _number(row, c, line) for c in ("total_params", "active_params", "granularity", "tokens", "flops", "loss")}
    i = {c: int(_number(row, c, line, integer=True)) for c in ("experts", "top_k", "shared_experts")}
    for column in ("total_params", "active_params", "granularity", "tokens", "flops", "loss"):
        if n[column] <= 0:
            raise RunsError(f"row {line}: {column} must be positive")
    if n["active_params"] > n["total_params"]:
        raise RunsError(f"row {line}: active_params exceeds total_params")
    if not 1 <= i["top_k"] <= i["experts"]:
        raise RunsError(f"row {line}: need 1 ≤ top_k ≤ experts, got top_k={i['top_k']}, experts={i['experts']}")
    if i["shared_experts"] < 0:
        raise RunsError(f"row {line}: shared_experts must be ≥ 0")
    if kind == "moe" and i["top_k"] == i["experts"] and i["experts"] > 1:
        raise RunsError(f"row {line}: an MoE run with top_k = experts is dense; mark it kind=dense")
    return Run(
        name=(row.get("name") or f"row {line}").strip(),
        kind=kind,
        budget=(row.get("budget") or "").strip(),
        **n,
        **i,
    )


def read_runs(path: Path) -> list[Run]:
    """Read and check a runs CSV; every problem is reported with its row number."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise RunsError(f"{path.name} is not UTF-8 text; save the table as a UTF-8 CSV") from None
    from mlcore.sniff import csv_dialect

    # A TSV or a semicolon export (a spreadsheet in a comma-decimal locale) reads like a CSV.
    reader = csv.DictReader(text.splitlines(), dialect=csv_dialect(path))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise RunsError(f"the runs table lacks the column(s) {', '.join(missing)}; see the schema in the help")
    runs = [parse_row(row, line) for line, row in enumerate(reader, start=2)]
    if len(runs) > MAX_ROWS:
        raise RunsError(f"the runs table has {len(runs)} rows; at most {MAX_ROWS}")
    return runs


def write_runs(runs: list[Run], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*REQUIRED, "budget"])
        writer.writeheader()
        for r in runs:
            writer.writerow({c: getattr(r, c) for c in (*REQUIRED, "budget")})


def budgets(runs: list[Run]) -> list[str]:
    """The budget label of every run: its ``budget`` column, else its flops to 1% (2 significant digits)."""
    return [r.budget or f"{float(f'{r.flops:.2g}'):.2g}" for r in runs]


@dataclass(frozen=True)
class Leverage:
    run: Run
    budget: str
    dense_flops: float
    el: float


def measured_leverage(runs: list[Run], *, keep_within: float = 0.0025) -> tuple[DenseLaw, list[Leverage]]:
    """EL per MoE run (paper §4.1): fit the dense loss–compute law, invert it at each MoE run's
    loss, and keep, per (budget, E, k, S, G) configuration, the runs within ``keep_within``
    (0.25%) of its best loss."""
    labels = budgets(runs)
    dense = [(r, b) for r, b in zip(runs, labels) if r.kind == "dense"]
    moe = [(r, b) for r, b in zip(runs, labels) if r.kind == "moe"]
    if not moe:
        raise RunsError("the runs table holds no MoE runs (kind=moe)")
    if len({b for _, b in dense}) < 2:
        raise RunsError("the runs table needs dense runs at two or more compute budgets to fit the dense law")
    budget_flops: dict[str, float] = {}
    for r, b in dense:
        budget_flops.setdefault(b, r.flops)
    law = fit_dense_law([budget_flops[b] for _, b in dense], [r.loss for r, _ in dense])
    best: dict[tuple, float] = {}
    for r, b in moe:
        key = (b, r.experts, r.top_k, r.shared_experts, r.granularity)
        best[key] = min(r.loss, best.get(key, np.inf))
    out = []
    for r, b in moe:
        if r.loss > best[(b, r.experts, r.top_k, r.shared_experts, r.granularity)] * (1 + keep_within):
            continue
        dense_flops = float(law.compute_for(r.loss))
        out.append(Leverage(r, b, dense_flops, dense_flops / r.flops))
    return law, out
