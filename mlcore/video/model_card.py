"""What a video DiT was trained on, read from its folder: ``config.json`` (channels, label counts,
sample size) and, when present, ``card.json`` (class names, frames, resolution, what it saw).

Two families of model reach ``video-generate``:

- **Bouncing digits** (the zoo's DiT, or ``video-train`` without clips): greyscale, conditioned on a
  digit (10 classes) and a direction (4). The bouncing-digits judge can grade its clips.
- **The user's clips** (``video-train`` with ``clips`` / ``clip_set``): RGB or greyscale, conditioned
  on the user's classes by name (the card's ``classes``; none for unlabelled clips, then the model has
  one class) and a single direction. No judge of ours knows these classes.

A folder of neither (an uploaded VideoDiT without a card) is conditioned by class index, its classes
named ``0`` … ``n−1``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlcore.errors import JobError

#: The directions of bouncing digits, in the order of the DiT's direction labels.
DIRECTIONS = ("right", "left", "down", "up")
DIGITS = tuple(str(d) for d in range(10))


@dataclass(frozen=True)
class VideoModelCard:
    channels: int
    #: Names of the first label's classes, in label order; empty for a model of unlabelled clips.
    classes: tuple[str, ...]
    #: How many values the second label takes (4 directions for bouncing digits, 1 for user clips).
    directions: int
    frames: int
    resolution: int
    #: Conditioned on bouncing digits × directions (what the zoo's judge was trained to name).
    digits: bool
    #: The card's own words for the training data ("your clips"), or "" when it says nothing.
    trained_on: str = ""

    @property
    def labelled(self) -> bool:
        return bool(self.classes)

    @property
    def describe(self) -> str:
        """ "trained on your clips (RGB, classes left, right)" and the like, for log lines and refusals."""
        colour = "RGB" if self.channels == 3 else f"{self.channels} channel(s)" if self.channels != 1 else "greyscale"
        what = "bouncing digits" if self.digits else self.trained_on or "data without a card"
        classes = f"classes {', '.join(self.classes)}" if self.classes else "no classes (unlabelled clips)"
        return f"trained on {what} ({colour}, {classes}, {self.frames} frames of {self.resolution}²)"


def _card_json(folder: Path) -> dict[str, Any]:
    path = folder / "card.json"
    if not path.is_file():
        return {}
    try:
        card = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        message = "The model's card.json is not valid JSON; re-register the model from its video-train job."
        raise JobError(message) from None
    return card if isinstance(card, dict) else {}


def read_card(folder: Path, config: Any) -> VideoModelCard:
    """The model's card from ``folder`` and its loaded ``config`` (a VideoDiT's), or a :class:`JobError`
    when the card contradicts the weights."""
    card = _card_json(folder)
    channels = int(config["in_channels"])
    num_classes, directions = int(config["num_digits"]), int(config["num_directions"])
    frames = int(card.get("frames") or config["sample_frames"])
    resolution = int(card.get("resolution") or config["sample_size"])
    trained_on = str(card.get("trained_on") or "")
    if "classes" in card:  # a model of the user's clips: its classes by name, in label order
        names = card["classes"] if isinstance(card["classes"], list) else []
        classes = tuple(str(name) for name in names)
        # A model fine-tuned on fewer classes than it has rows keeps the extra rows unused.
        if len(classes) > num_classes:
            raise JobError(
                f"The model's card names {len(classes)} classes but its weights hold {num_classes}; the folder was "
                "changed after training. Re-register the model from its video-train job."
            )
        # Trained with direction 0 only (a fine-tuned digits model keeps its other rows, unused).
        return VideoModelCard(channels, classes, 1, frames, resolution, False, trained_on or "your clips")
    digits = channels == 1 and num_classes == len(DIGITS) and directions == len(DIRECTIONS)
    classes = DIGITS if digits else tuple(str(i) for i in range(num_classes))
    return VideoModelCard(channels, classes, directions, frames, resolution, digits, trained_on)
