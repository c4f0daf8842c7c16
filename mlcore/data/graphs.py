"""Motif graphs for graph OOD generalisation: a clean-room GOOD-Motif-style generator and a file format.

**Generator** (written from the GOOD paper's description only; GOOD itself is GPL and is neither
imported nor copied). Every graph is a *base* graph with one *motif* attached by a single edge;
the label is the motif's class, so the motif is the causal subgraph and the base is a
distribution-shifting background:

- bases (networkx): ``wheel``, ``tree`` (balanced binary), ``ladder``, ``star``, ``path``, each
  built at a requested *width* (about that many nodes);
- motifs: ``house`` (a square with a roof), ``cycle`` (a 6-cycle), ``crane`` (a square braced by
  one diagonal with a hanging node); the *heterogeneous* variant lets each class be caused by
  either of two motifs: house | ``grid`` (3×3), cycle | ``k4`` (a 4-clique), crane | ``bowtie``
  (two triangles sharing a node);
- noise: a fraction of labels replaced by another class (``label_noise``, 10% by default — it caps
  accuracy; the clean label is kept so the ceiling can be reported), and random extra edges
  (``edge_noise`` × the edge count, 5% by default);
- ground truth: a 0/1 mask over the edges, 1 on the motif's own edges.

Splits (``SPLITS``): ``train`` and ``id_val`` come from the training distribution, ``ood_val`` and
``ood_test`` from shifted ones:

- basis shift: wheel/tree/ladder for training, star for ``ood_val``, path for ``ood_test``
  (widths 8–20 throughout);
- size shift: every base, widths 6/10/15 for training, 30 for ``ood_val``, 70 for ``ood_test``.

**File format** (uploads and built-in datasets; plain JSON, never pickle or ``torch.save``)::

    {"format": "moelab-graphs", "version": 1,
     "name": "my graphs",                      # optional
     "classes": ["house", "cycle", "crane"],   # optional; else 0..max label
     "motifs": ["house", "cycle", "crane"],    # optional; names for the "motif" ids below
     "graphs": [
       {"nodes": 12,                           # node count; nodes are 0..nodes-1
        "edges": [[0, 1], [1, 2], ...],        # undirected, each edge once, no self-loops
        "label": 0,                            # class index
        "split": "train",                      # train | id_val | ood_val | ood_test
        "edge_mask": [0, 1, ...],              # optional: ground-truth 0/1 per edge (for AUC)
        "motif": 0}                            # optional: which causal pattern made the graph
     ]}

Graphs carry structure only (every node's feature is 1, as in GOOD-Motif). :func:`read_graphs`
checks everything against caps before building anything and names the graph and field that is
wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np

FORMAT, VERSION = "moelab-graphs", 1
SPLITS: tuple[str, ...] = ("train", "id_val", "ood_val", "ood_test")
BASES: tuple[str, ...] = ("wheel", "tree", "ladder", "star", "path")
CLASSES: tuple[str, ...] = ("house", "cycle", "crane")
#: Motif ids: the first three cause classes 0, 1, 2; the heterogeneous variant adds one more per class.
MOTIFS: tuple[str, ...] = ("house", "cycle", "crane", "grid", "k4", "bowtie")
#: Which motifs can cause each class in the heterogeneous variant.
HETEROGENEOUS: tuple[tuple[int, int], ...] = ((0, 3), (1, 4), (2, 5))

MAX_FILE_BYTES = 200 * 2**20
MAX_GRAPHS = 100_000
MAX_NODES = 5_000
MAX_EDGES = 50_000
MAX_TOTAL_EDGES = 10_000_000
MAX_CLASSES = 100

#: Fractions of the generated set per split.
SPLIT_FRACTIONS: dict[str, float] = {"train": 0.6, "id_val": 0.1, "ood_val": 0.15, "ood_test": 0.15}
BASIS_SHIFT: dict[str, tuple[str, ...]] = {
    "train": ("wheel", "tree", "ladder"),
    "id_val": ("wheel", "tree", "ladder"),
    "ood_val": ("star",),
    "ood_test": ("path",),
}
BASIS_WIDTHS = (8, 20)
SIZE_SHIFT: dict[str, tuple[int, ...]] = {
    "train": (6, 10, 15),
    "id_val": (6, 10, 15),
    "ood_val": (30,),
    "ood_test": (70,),
}


class GraphFormatError(ValueError):
    """A graph file does not follow the format; the message names the graph and field."""


@dataclass
class GraphSample:
    """One graph: ``edges`` is an [E, 2] int array of undirected edges, each once."""

    nodes: int
    edges: np.ndarray
    label: int
    split: str
    edge_mask: np.ndarray | None = None
    motif: int | None = None
    clean_label: int | None = None
    base: str | None = None
    width: int | None = None


@dataclass
class GraphSet:
    name: str
    graphs: list[GraphSample]
    classes: list[str]
    motifs: list[str] = field(default_factory=list)
    description: str = ""

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def split(self, name: str) -> list[GraphSample]:
        return [g for g in self.graphs if g.split == name]

    def splits(self) -> list[str]:
        return [s for s in SPLITS if any(g.split == s for g in self.graphs)]

    @property
    def has_edge_masks(self) -> bool:
        return all(g.edge_mask is not None for g in self.graphs)


# -- bases and motifs -----------------------------------------------------------------------------


def base_graph(name: str, width: int) -> nx.Graph:
    """A base of about ``width`` nodes (trees round to a full binary tree, ladders to an even count)."""
    if name == "wheel":
        return nx.wheel_graph(max(4, width))
    if name == "tree":
        height = max(1, round(math.log2(width + 1)) - 1)
        return nx.balanced_tree(2, height)
    if name == "ladder":
        return nx.ladder_graph(max(2, width // 2))
    if name == "star":
        return nx.star_graph(max(3, width - 1))
    if name == "path":
        return nx.path_graph(max(3, width))
    raise ValueError(f"unknown base {name!r}; known: {', '.join(BASES)}")


def motif_graph(name: str) -> nx.Graph:
    if name == "house":  # a square 0-1-2-3 with a roof node 4 on the 0-1 side
        return nx.Graph([(0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4)])
    if name == "cycle":
        return nx.cycle_graph(6)
    if name == "crane":  # a square braced by the 0-2 diagonal, node 4 hanging from 2
        return nx.Graph([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (2, 4)])
    if name == "grid":
        return nx.convert_node_labels_to_integers(nx.grid_2d_graph(3, 3))
    if name == "k4":
        return nx.complete_graph(4)
    if name == "bowtie":  # two triangles sharing node 0
        return nx.Graph([(0, 1), (1, 2), (2, 0), (0, 3), (3, 4), (4, 0)])
    raise ValueError(f"unknown motif {name!r}; known: {', '.join(MOTIFS)}")


def compose(
    base: nx.Graph, motif: nx.Graph, rng: np.random.Generator, edge_noise: float
) -> tuple[int, np.ndarray, np.ndarray]:
    """Attach ``motif`` to ``base`` by one edge, add random noise edges; return (nodes, edges, mask)."""
    n_base = base.number_of_nodes()
    n = n_base + motif.number_of_nodes()
    edges = {tuple(sorted((int(u), int(v)))) for u, v in base.edges()}
    motif_edges = {tuple(sorted((int(u) + n_base, int(v) + n_base))) for u, v in motif.edges()}
    anchor = (int(rng.integers(n_base)), n_base + int(rng.integers(motif.number_of_nodes())))
    edges |= motif_edges | {anchor}
    # Noise edges land anywhere (also touching the motif) but never duplicate an edge, so the
    # motif's own edges stay exactly the ground truth.
    extra = round(edge_noise * len(edges))
    tries = 0
    while extra > 0 and tries < 100 * (extra + 1):
        u, v = sorted(int(x) for x in rng.choice(n, size=2, replace=False))
        tries += 1
        if (u, v) not in edges:
            edges.add((u, v))
            extra -= 1
    ordered = np.array(sorted(edges), dtype=np.int64)
    mask = np.array([tuple(e) in motif_edges for e in ordered.tolist()], dtype=np.int8)
    return n, ordered, mask


# -- the generator --------------------------------------------------------------------------------


def _split_sizes(n_graphs: int) -> dict[str, int]:
    sizes = {s: int(n_graphs * f) for s, f in SPLIT_FRACTIONS.items()}
    sizes["train"] += n_graphs - sum(sizes.values())
    return sizes


def generate_motif_graphs(
    *,
    shift: str = "basis",
    variant: str = "standard",
    n_graphs: int = 2500,
    label_noise: float = 0.1,
    edge_noise: float = 0.05,
    seed: int = 0,
) -> GraphSet:
    """A GOOD-Motif-style set (module docstring), balanced over classes in every split."""
    if shift not in ("basis", "size"):
        raise ValueError(f"shift must be 'basis' or 'size', not {shift!r}")
    if variant not in ("standard", "heterogeneous"):
        raise ValueError(f"variant must be 'standard' or 'heterogeneous', not {variant!r}")
    if n_graphs < 4 * len(CLASSES):
        raise ValueError(f"n_graphs must be at least {4 * len(CLASSES)} (each split needs every class)")
    if not 0 <= label_noise < 1 or not 0 <= edge_noise < 1:
        raise ValueError("label_noise and edge_noise must be in [0, 1)")
    rng = np.random.default_rng(seed)
    n_classes = len(CLASSES)
    graphs: list[GraphSample] = []
    for split, count in _split_sizes(n_graphs).items():
        labels = rng.permutation(np.arange(count) % n_classes)
        for clean in labels.tolist():
            motif = HETEROGENEOUS[clean][int(rng.integers(2))] if variant == "heterogeneous" else clean
            if shift == "basis":
                base = BASIS_SHIFT[split][int(rng.integers(len(BASIS_SHIFT[split])))]
                width = int(rng.integers(BASIS_WIDTHS[0], BASIS_WIDTHS[1] + 1))
            else:
                base = BASES[int(rng.integers(len(BASES)))]
                width = SIZE_SHIFT[split][int(rng.integers(len(SIZE_SHIFT[split])))]
            nodes, edges, mask = compose(base_graph(base, width), motif_graph(MOTIFS[motif]), rng, edge_noise)
            label = clean
            if rng.random() < label_noise:
                label = int((clean + rng.integers(1, n_classes)) % n_classes)
            graphs.append(
                GraphSample(nodes, edges, label, split, mask, motif=motif, clean_label=clean, base=base, width=width)
            )
    motifs = list(MOTIFS if variant == "heterogeneous" else MOTIFS[:n_classes])
    return GraphSet(
        name=f"motif-{shift}" + ("-heterogeneous" if variant == "heterogeneous" else ""),
        graphs=graphs,
        classes=list(CLASSES),
        motifs=motifs,
        description=(
            f"GOOD-Motif-style {shift} shift ({variant}), {n_graphs} graphs, "
            f"{label_noise:.0%} label noise, {edge_noise:.0%} noise edges, seed {seed}"
        ),
    )


def label_ceiling(graphs: list[GraphSample]) -> float | None:
    """The best reachable accuracy: the fraction of graphs whose label was not flipped by noise."""
    known = [g for g in graphs if g.clean_label is not None]
    if not known:
        return None
    return sum(g.label == g.clean_label for g in known) / len(known)


# -- the file format ------------------------------------------------------------------------------


def to_json(graphset: GraphSet) -> dict[str, Any]:
    def one(g: GraphSample) -> dict[str, Any]:
        item: dict[str, Any] = {"nodes": g.nodes, "edges": g.edges.tolist(), "label": g.label, "split": g.split}
        if g.edge_mask is not None:
            item["edge_mask"] = g.edge_mask.tolist()
        if g.motif is not None:
            item["motif"] = g.motif
        return item

    return {
        "format": FORMAT,
        "version": VERSION,
        "name": graphset.name,
        "classes": graphset.classes,
        "motifs": graphset.motifs,
        "graphs": [one(g) for g in graphset.graphs],
    }


def write_graphs(graphset: GraphSet, path: Path) -> Path:
    path.write_text(json.dumps(to_json(graphset), separators=(",", ":")))
    return path


def _int(value: Any, where: str, *, low: int, high: int) -> int:
    # bool is an int subclass in Python; true/false is not a node id or a label.
    if isinstance(value, bool) or not isinstance(value, int):
        raise GraphFormatError(f"{where} must be an integer, got {json.dumps(value)[:40]}")
    if not low <= value <= high:
        raise GraphFormatError(f"{where} must be between {low} and {high}, got {value}")
    return value


def _names(doc: dict[str, Any], key: str) -> list[str] | None:
    names = doc.get(key)
    if names is None:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise GraphFormatError(f'"{key}" must be a list of non-empty strings')
    if not 1 <= len(names) <= MAX_CLASSES:
        raise GraphFormatError(f'"{key}" must list between 1 and {MAX_CLASSES} names')
    return names


def _graph(item: Any, index: int, n_classes: int, n_motifs: int) -> GraphSample:
    where = f"graph {index}"
    if not isinstance(item, dict):
        raise GraphFormatError(f"{where} must be an object with nodes, edges, label and split")
    unknown = set(item) - {"nodes", "edges", "label", "split", "edge_mask", "motif"}
    if unknown:
        raise GraphFormatError(f"{where} has unknown field(s) {', '.join(sorted(unknown))}")
    for key in ("nodes", "edges", "label", "split"):
        if key not in item:
            raise GraphFormatError(f'{where} has no "{key}"')
    nodes = _int(item["nodes"], f"{where}: nodes", low=1, high=MAX_NODES)
    label = _int(item["label"], f"{where}: label", low=0, high=n_classes - 1)
    if item["split"] not in SPLITS:
        raise GraphFormatError(
            f"{where}: split must be one of {', '.join(SPLITS)}, got {json.dumps(item['split'])[:40]}"
        )
    raw = item["edges"]
    if not isinstance(raw, list) or len(raw) > MAX_EDGES:
        raise GraphFormatError(f"{where}: edges must be a list of at most {MAX_EDGES} [u, v] pairs")
    if not all(isinstance(e, list) and len(e) == 2 for e in raw):
        raise GraphFormatError(f"{where}: every edge must be a [u, v] pair")
    flat = [_int(v, f"{where}: edge endpoint", low=0, high=nodes - 1) for e in raw for v in e]
    edges = np.array(flat, dtype=np.int64).reshape(-1, 2)
    if len(edges) and (edges[:, 0] == edges[:, 1]).any():
        bad = int(np.flatnonzero(edges[:, 0] == edges[:, 1])[0])
        raise GraphFormatError(f"{where}: edge {bad} is a self-loop; remove it")
    keys = edges.min(axis=1) * nodes + edges.max(axis=1)
    if len(set(keys.tolist())) != len(edges):
        raise GraphFormatError(f"{where}: an edge is listed twice (edges are undirected; list each once)")
    mask = None
    if item.get("edge_mask") is not None:
        raw_mask = item["edge_mask"]
        if not isinstance(raw_mask, list) or len(raw_mask) != len(raw):
            raise GraphFormatError(f"{where}: edge_mask must be a list with one 0/1 per edge ({len(raw)})")
        if any(v not in (0, 1) or isinstance(v, float) for v in raw_mask):
            raise GraphFormatError(f"{where}: edge_mask values must be 0 or 1")
        mask = np.array(raw_mask, dtype=np.int8)
    motif = None
    if item.get("motif") is not None:
        motif = _int(item["motif"], f"{where}: motif", low=0, high=max(0, n_motifs - 1))
    return GraphSample(nodes, edges, label, item["split"], mask, motif=motif)


def parse_graphs(doc: Any, *, name: str = "graphs") -> GraphSet:
    """Validate a decoded document (format above) and build a :class:`GraphSet`."""
    if not isinstance(doc, dict):
        raise GraphFormatError('the file must hold one JSON object with "format" and "graphs"')
    if doc.get("format") != FORMAT:
        raise GraphFormatError(f'"format" must be "{FORMAT}"')
    if doc.get("version") != VERSION:
        raise GraphFormatError(f'"version" must be {VERSION}, got {json.dumps(doc.get("version"))[:20]}')
    graphs = doc.get("graphs")
    if not isinstance(graphs, list) or not graphs:
        raise GraphFormatError('"graphs" must be a non-empty list')
    if len(graphs) > MAX_GRAPHS:
        raise GraphFormatError(f"at most {MAX_GRAPHS} graphs per file, got {len(graphs)}")
    total = sum(
        len(g.get("edges", ())) if isinstance(g, dict) and isinstance(g.get("edges"), list) else 0 for g in graphs
    )
    if total > MAX_TOTAL_EDGES:
        raise GraphFormatError(f"at most {MAX_TOTAL_EDGES} edges in all, got {total}")
    classes = _names(doc, "classes")
    motifs = _names(doc, "motifs") or []
    if classes is None:
        labels = [g.get("label") for g in graphs if isinstance(g, dict)]
        top = max((v for v in labels if isinstance(v, int) and not isinstance(v, bool)), default=0)
        classes = [str(c) for c in range(min(top, MAX_CLASSES - 1) + 1)]
    n_motifs = len(motifs) if motifs else MAX_CLASSES
    samples = [_graph(item, i, len(classes), n_motifs) for i, item in enumerate(graphs)]
    train = [g for g in samples if g.split == "train"]
    if len({g.label for g in train}) < 2:
        raise GraphFormatError('the "train" split needs graphs of at least two classes')
    if not any(g.split == "ood_test" for g in samples):
        raise GraphFormatError('no graph has split "ood_test"; mark the shifted graphs to evaluate on')
    title = doc.get("name") if isinstance(doc.get("name"), str) else name
    return GraphSet(name=title[:100], graphs=samples, classes=classes, motifs=motifs)


def read_graphs(path: Path) -> GraphSet:
    """Read a graph file (or a directory holding ``graphs.json``), with caps and clear errors."""
    if path.is_dir():
        path = path / "graphs.json"
        if not path.is_file():
            raise GraphFormatError("the dataset folder has no graphs.json")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise GraphFormatError(f"the file is {size} bytes; the limit is {MAX_FILE_BYTES}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise GraphFormatError("the file is not UTF-8 JSON") from None
    except json.JSONDecodeError as exc:
        raise GraphFormatError(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    return parse_graphs(doc, name=path.stem)


# -- built-in datasets (mlcore.data.registry) -----------------------------------------------------


def _builder(**kwargs: Any) -> Callable[[Path], None]:
    def build(target: Path) -> None:
        write_graphs(generate_motif_graphs(**kwargs, seed=0), target / "graphs.json")

    return build


build_motif_basis = _builder(shift="basis")
build_motif_size = _builder(shift="size")
build_motif_heterogeneous = _builder(shift="basis", variant="heterogeneous")
