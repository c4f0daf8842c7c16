import json

import numpy as np
import pytest

from mlcore.data.graphs import (
    GraphFormatError,
    generate_motif_graphs,
    label_ceiling,
    motif_graph,
    read_graphs,
    to_json,
    write_graphs,
)


@pytest.fixture(scope="module")
def basis():
    return generate_motif_graphs(shift="basis", n_graphs=240, seed=1)


def doc(**graph):
    base = {"nodes": 3, "edges": [[0, 1], [1, 2]], "label": 0, "split": "train"}
    graphs = [
        {**base, **graph},
        {**base, "label": 1},
        {**base, "split": "ood_test"},
    ]
    return {"format": "moelab-graphs", "version": 1, "graphs": graphs}


def write(tmp_path, content):
    path = tmp_path / "graphs.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_the_generator_is_seeded():
    a, b = (generate_motif_graphs(n_graphs=60, seed=3) for _ in range(2))
    c = generate_motif_graphs(n_graphs=60, seed=4)
    assert to_json(a) == to_json(b) != to_json(c)


def test_the_ground_truth_marks_exactly_the_motif_edges(basis):
    for g in basis.graphs:
        motif = motif_graph(basis.motifs[g.motif])
        assert int(g.edge_mask.sum()) == motif.number_of_edges()
        assert g.edges.shape == (len(g.edge_mask), 2) and (g.edges[:, 0] < g.edges[:, 1]).all()


def test_every_split_holds_every_class_in_equal_numbers(basis):
    for split in ("train", "id_val", "ood_val", "ood_test"):
        clean = np.bincount([g.clean_label for g in basis.split(split)], minlength=3)
        assert clean.max() - clean.min() <= 1 and clean.min() > 0


def test_the_basis_shift_tests_on_bases_never_seen_in_training(basis):
    assert {g.base for g in basis.split("train")} == {"wheel", "tree", "ladder"}
    assert {g.base for g in basis.split("ood_val")} == {"star"}
    assert {g.base for g in basis.split("ood_test")} == {"path"}


def test_the_size_shift_tests_on_much_larger_graphs():
    size = generate_motif_graphs(shift="size", n_graphs=120, seed=0)
    train = max(g.nodes for g in size.split("train"))
    assert min(g.nodes for g in size.split("ood_test")) > 2 * train
    assert {g.width for g in size.split("ood_val")} == {30}


def test_in_the_heterogeneous_variant_each_class_comes_from_two_motifs():
    hetero = generate_motif_graphs(variant="heterogeneous", n_graphs=300, seed=0)
    causes = {c: {g.motif for g in hetero.graphs if g.clean_label == c} for c in range(3)}
    assert causes == {0: {0, 3}, 1: {1, 4}, 2: {2, 5}}
    assert hetero.motifs[3:] == ["grid", "k4", "bowtie"]


def test_label_noise_flips_about_the_requested_share_and_sets_the_ceiling():
    noisy = generate_motif_graphs(n_graphs=1200, label_noise=0.2, seed=0)
    assert 0.75 < label_ceiling(noisy.graphs) < 0.85
    assert label_ceiling(generate_motif_graphs(n_graphs=60, label_noise=0.0).graphs) == 1.0


def test_a_written_set_reads_back_unchanged(basis, tmp_path):
    back = read_graphs(write_graphs(basis, tmp_path / "g.json"))
    assert back.classes == basis.classes and back.motifs == basis.motifs and len(back.graphs) == len(basis.graphs)
    for a, b in zip(basis.graphs, back.graphs, strict=True):
        assert (a.nodes, a.label, a.split, a.motif) == (b.nodes, b.label, b.split, b.motif)
        assert np.array_equal(a.edges, b.edges) and np.array_equal(a.edge_mask, b.edge_mask)


def test_a_dataset_folder_is_read_through_its_graphs_json(basis, tmp_path):
    write_graphs(basis, tmp_path / "graphs.json")
    assert len(read_graphs(tmp_path).graphs) == len(basis.graphs)
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphFormatError, match=r"no graphs\.json"):
        read_graphs(tmp_path / "empty")


def test_a_minimal_file_without_masks_or_names_is_accepted(tmp_path):
    graphs = read_graphs(write(tmp_path, doc()))
    assert graphs.classes == ["0", "1"] and not graphs.has_edge_masks


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"edges": [[0, 0]]}, "graph 0: edge 0 is a self-loop"),
        ({"edges": [[0, 1], [1, 0]]}, "graph 0: an edge is listed twice"),
        ({"edges": [[0, 3]]}, "graph 0: edge endpoint must be between 0 and 2"),
        ({"edges": [[0, 1, 2]]}, "graph 0: every edge must be a"),
        ({"label": True}, "graph 0: label must be an integer"),
        ({"label": 1.0}, "graph 0: label must be an integer"),
        ({"split": "test"}, "graph 0: split must be one of"),
        ({"edge_mask": [1]}, "graph 0: edge_mask must be a list with one 0/1 per edge"),
        ({"edge_mask": [1, 2]}, "graph 0: edge_mask values must be 0 or 1"),
        ({"nodes": 0}, "graph 0: nodes must be between 1"),
        ({"nodes": 10**9}, "graph 0: nodes must be between 1 and 5000"),
        ({"features": [1]}, "graph 0 has unknown field"),
    ],
)
def test_a_broken_graph_is_refused_with_its_index_and_field(tmp_path, change, message):
    with pytest.raises(GraphFormatError, match=message):
        read_graphs(write(tmp_path, doc(**change)))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"format": "moelab-graphs", "graphs": [', "not valid JSON"),
        ("[1, 2]", "one JSON object"),
        ({"format": "networkx", "version": 1, "graphs": []}, '"format" must be "moelab-graphs"'),
        ({"format": "moelab-graphs", "version": 2, "graphs": []}, '"version" must be 1'),
        ({"format": "moelab-graphs", "version": 1, "graphs": []}, '"graphs" must be a non-empty list'),
    ],
)
def test_a_file_that_is_not_a_graph_set_is_refused(tmp_path, content, message):
    with pytest.raises(GraphFormatError, match=message):
        read_graphs(write(tmp_path, content))


def test_a_set_without_shifted_test_graphs_or_with_one_training_class_is_refused(tmp_path):
    no_test = doc()
    no_test["graphs"][2]["split"] = "train"
    with pytest.raises(GraphFormatError, match='no graph has split "ood_test"'):
        read_graphs(write(tmp_path, no_test))
    one_class = doc()
    one_class["graphs"][1]["label"] = 0
    with pytest.raises(GraphFormatError, match="at least two classes"):
        read_graphs(write(tmp_path, one_class))


def test_binary_content_is_refused(tmp_path):
    path = tmp_path / "graphs.json"
    path.write_bytes(b"\x80\x04\x95pickle")
    with pytest.raises(GraphFormatError, match="not UTF-8"):
        read_graphs(path)
