"""The built-in sample for ``watermark-verify``: a demo key, and images made by the zoo's
``molm-tiny`` generator half under that key and half unmarked, so "Try with a sample" shows both
verdicts. The demo key is fixed (seeded), public, and belongs to no team.
"""

from __future__ import annotations

import random
from pathlib import Path

from mlcore.watermark.keys import KeyRecord, random_bits, write_keyring

DEMO_KEY = KeyRecord(
    id="demo", name="demo key", organisation="MoE Lab demo", bits=random_bits(48, random.Random(20260))
)
SAMPLES_PER_GROUP = 8


def build_demo_keyring(target: Path) -> None:
    write_keyring(target / "keyring.json", [DEMO_KEY])


def build_samples(target: Path) -> None:
    """``marked/NN.png`` under the demo key and ``unmarked/NN.png`` from the same latents."""
    from PIL import Image

    from mlcore.catalog import materialize
    from mlcore.watermark.pipeline import decode_under_keys, key_tensor, load_bundle
    from mlcore.zoo.registry import zoo_model

    bundle = load_bundle(materialize(zoo_model("molm-tiny")), need_unet=True)
    # 10 DDIM steps, as the markers were trained and benchmarked: on 20-step samples the committed
    # markers read only 23–31 of 48 bits (bench/results/watermark.md), below the detection threshold.
    latents = bundle.generator.sample_latents(SAMPLES_PER_GROUP, seed=0, steps=10)
    groups = {
        "marked": decode_under_keys(bundle, latents, key_tensor(DEMO_KEY.bits, bundle.num_bits)),
        "unmarked": decode_under_keys(bundle, latents, None),
    }
    for group, pixels in groups.items():
        (target / group).mkdir(parents=True, exist_ok=True)
        for i, image in enumerate(pixels):
            Image.fromarray(image).save(target / group / f"{i:02d}.png")
