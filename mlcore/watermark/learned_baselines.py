"""The card's two learned baselines as *marked decoders* for the embed path: Stable-Signature-like and WOUAF-like.

The embed path (:mod:`mlcore.watermark.embed`) marks a photo x with the residual of a keyed decoder,

    r_κ(x) = D_κ(E(x)) − D(E(x)),        x̃ = x + s · U(r_κ(R(x)))

and reads the mark back with a vote of the extractor η over the tiles of a working grid. It asks of
the keyed decoder only what MOLM's :class:`~mlcore.watermark.markers.Markers` offer: ``attach(vae)``
and a context ``keyed(κ)`` inside which ``vae.decode`` is the marked decoder D_κ (plus ``num_bits``,
``device`` and ``to``). The two classes here offer the same, so a
:class:`~mlcore.watermark.pipeline.Bundle` built with one of them goes through
:func:`~mlcore.watermark.embed.mark_image` and :func:`~mlcore.watermark.verification.decode` unchanged:
the photos, the working grid, the seamless tiles, the PSNR-targeting strength, the tile-vote reader
and the attacks are the very ones MOLM's rows use; only D_κ and η differ.

**Stable-Signature-like** (Fernandez et al., "The Stable Signature: Rooting Watermarks in Latent
Diffusion Models", ICCV 2023). Two stages:

1. a watermark extractor η is pre-trained (there: HiDDeN's, Zhu et al. 2018, trained with its
   encoder over random messages; the encoder is then discarded) and *frozen*;
2. for each user key m, a copy of the decoder is fine-tuned so that η reads m from its outputs,
   L = BCE(η(T(D_m(z))), m) + λ_i · L_perc(D_m(z), D(z)) with D the original decoder
   (the paper: a Watson-VGG perceptual loss, 100 steps of AdamW; η "whitened" on clean images so its
   bits have no leaning).

One decoder copy per key (:class:`KeyedDecoders`, :func:`finetune_decoder`): a new key is a new fine-tune.

**WOUAF-like** (Kim, Min, Patel, Cheng and Yang, "WOUAF: Weight Modulation for User Attribution and
Fingerprinting in Text-to-Image Diffusion Models", CVPR 2024). A mapping network M maps the
fingerprint φ to a vector w; per modulated convolution ℓ an affine map A_ℓ gives per-channel scales
u_ℓ = A_ℓ(w), and the convolution's weights become W^φ_{o,i,k} = u_{ℓ,i} · W_{o,i,k}. M, the A_ℓ
and the fingerprint decoder η (a ResNet-50 there) are trained jointly over random fingerprints, so
one model serves every key (:class:`KeyModulation`, :func:`train_modulation`).

**What is simplified here, and why.**

- *Same task as MOLM's rows.* Both baselines are trained on the embed path itself, as MOLM's
  markers are in :mod:`mlcore.watermark.residual_train`: residuals of 2 × 2 blocks of 32-pixel tiles
  blended with the embed path's window, scaled to the target PSNR (fidelity fixed by construction,
  so no λ trades it against accuracy; :func:`strength` never amplifies more than the embed path
  does), rounded to 8 bits, attacked (real JPEG and resizes with differentiable stand-ins), read tile
  by tile. The papers train on whole generated images.
- *Perceptual loss.* LPIPS and Watson-VGG need downloaded weights; with the mark's energy fixed, the
  loss to the original output is (1 − SSIM) between the marked patch and the photo (it moves the
  mark to where it is least visible) plus the energy term μ (log ‖r‖/‖r‖_target)², which keeps the
  decoder's own residual near the target so the embed path's strength stays near 1.
- *Stable Signature's pre-trained extractor* is the project's: molm-tiny's (a small CNN with a
  linear read-out, trained before any of this on the zoo decoder's marks), frozen; the reader's
  centring (:func:`~mlcore.watermark.embed.tile_bias`) plays the part of the whitening. We tried
  pre-training a HiDDeN pair here (a per-tile encoder with a linear message processor): it left
  chance within 100 steps at 24 dB (0.999 training bits), but what its extractor read was a pattern
  fixed to the tile's pixel grid, which the decoder could not learn to draw (0.51 held-out tile bits
  after 60 fine-tune steps at 24 dB), while against molm-tiny's extractor a fine-tune reaches 0.68 at
  38 dB under attacks in 100 steps: Stable Signature's stage 2 needs an extractor that reads what a
  decoder can write, and at our scale only one trained on a decoder's marks does.
- *WOUAF* modulates the same 16 ResNet convolutions MOLM routes (not every decoder convolution),
  keeps the decoder's weights frozen (WOUAF fine-tunes them too: here the unmarked decoder D must
  stay the zoo's, or the residual would carry a key-independent part) and has no demodulation
  (StyleGAN2's demodulation would change the decoder even when u = 1). The scales are
  u = 1 + A_ℓ(w), so a zero mapping is the frozen decoder exactly. The mapping is one linear layer
  without bias (the bench's setting, ``linear_mapping``): each bit then moves the scales along its
  own direction whatever the other bits are, where a StyleGAN-like MLP mixes the bits so that no bit
  has a consistent effect at the start. η starts from molm-tiny's extractor, as MOLM's residual rows
  do (WOUAF's from a pre-trained ResNet-50). A per-input-channel weight scale is applied as a scale of
  the convolution's input, which is the same operation: conv(x; W ⊙ u) = conv(u ⊙ x; W).
"""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn

from mlcore.watermark.embed import MAX_STRENGTH
from mlcore.watermark.extractor import Extractor
from mlcore.watermark.markers import key_rows, routed_convolutions
from mlcore.watermark.quality import ssim
from mlcore.watermark.residual_attacks import jpeg_real, quantise, random_attacks, rescale
from mlcore.watermark.residual_train import (
    TILES_PER_SIDE,
    Checkpoint,
    MarkSchedule,
    PatchPool,
    cut_tiles,
    marked_fields,
    target_rms,
)

Log = Callable[[dict[str, Any]], None]


def key_string(bits: torch.Tensor | np.ndarray) -> str:
    """An (M,) key as '0101…'."""
    return "".join("1" if float(b) > 0.5 else "0" for b in np.asarray(torch.as_tensor(bits).cpu()).reshape(-1))


def _one_key(bits: torch.Tensor | np.ndarray, num_bits: int) -> torch.Tensor:
    """``bits`` ((M,) or (B, M) with every row the same) as one (M,) float key; ``ValueError`` otherwise."""
    key = key_rows(bits, num_bits, "these decoders carry").float().cpu()
    if not bool((key == key[:1]).all()):
        raise ValueError("one fine-tuned decoder marks one key: a batch must carry the same key in every row")
    return key[0]


# ---------------------------------------------------------------------------------------------
# Stable-Signature-like: one fine-tuned decoder per key, a frozen pre-trained extractor.
# ---------------------------------------------------------------------------------------------


class KeyedDecoders(nn.Module):
    """Stable Signature's marked decoders: for each key m, a fine-tuned copy D_m of the VAE decoder.

    Inside :meth:`keyed` the attached VAE decodes with D_m (its ``decoder`` module is swapped for the
    copy and put back on exit), so ``vae.decode`` is the marked decoder and everything else — the
    latent's ``post_quant_conv``, the encoder — is the original. A key without a copy is refused.
    """

    def __init__(self, num_bits: int) -> None:
        super().__init__()
        self._num_bits = num_bits
        self.decoders = nn.ModuleDict()
        # Held outside the module tree: the VAE is not part of these decoders (nor moved or saved with them).
        self._attached: list[nn.Module] = []

    @property
    def num_bits(self) -> int:
        return self._num_bits

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def keys(self) -> list[str]:
        return list(self.decoders)

    def add(self, key: torch.Tensor | np.ndarray, decoder: nn.Module) -> None:
        """Register ``decoder`` (a fine-tuned copy of the VAE's) as D_m for ``key``."""
        self.decoders[key_string(_one_key(key, self.num_bits))] = decoder

    def attach(self, vae: nn.Module) -> None:
        if not hasattr(vae, "decoder"):
            raise ValueError("expected a diffusers AutoencoderKL (with a .decoder); got " + type(vae).__name__)
        self._attached[:] = [vae]

    def detach(self) -> None:
        self._attached.clear()

    @contextmanager
    def keyed(self, bits: torch.Tensor | np.ndarray) -> Iterator[None]:
        """Inside the block the attached VAE decodes with the copy fine-tuned for ``bits`` ((M,), or (B, M)
        repeating one key)."""
        if not self._attached:
            raise RuntimeError("attach the decoders to a VAE first")
        name = key_string(_one_key(bits, self.num_bits))
        if name not in self.decoders:
            raise ValueError(
                f"no decoder was fine-tuned for this key ({len(self.decoders)} keys have one): "
                "Stable Signature needs one fine-tune per key"
            )
        vae = self._attached[0]
        original = vae.decoder
        vae.decoder = self.decoders[name]
        try:
            yield
        finally:
            vae.decoder = original

    def save(self, folder: Path) -> None:
        """One ``decoder-i.safetensors`` per key, then ``keys.json`` (written last: it lists the finished ones)."""
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        for i, decoder in enumerate(self.decoders.values()):
            weights = {k: v.detach().cpu().contiguous() for k, v in decoder.state_dict().items()}
            save_file(weights, folder / f"decoder-{i}.safetensors")
        (folder / "keys.json").write_text(json.dumps({"num_bits": self.num_bits, "keys": self.keys}))

    @classmethod
    def load(cls, folder: Path, vae: nn.Module) -> KeyedDecoders:
        """The decoders :meth:`save` wrote, as copies of ``vae``'s decoder with the saved weights, attached."""
        from safetensors.torch import load_file

        meta = json.loads((folder / "keys.json").read_text())
        out = cls(meta["num_bits"])
        for i, name in enumerate(meta["keys"]):
            decoder = copy.deepcopy(vae.decoder)
            decoder.load_state_dict(load_file(folder / f"decoder-{i}.safetensors"))
            out.decoders[name] = decoder.eval().requires_grad_(False)
        out.attach(vae)
        return out


# ---------------------------------------------------------------------------------------------
# WOUAF-like: key → per-channel weight modulation of the decoder's convolutions.
# ---------------------------------------------------------------------------------------------


class KeyModulation(ModelMixin, ConfigMixin):
    """WOUAF's fingerprint modulation: u_ℓ = 1 + A_ℓ(M(2φ − 1)) scales the input channels of convolution ℓ."""

    @register_to_config
    def __init__(
        self,
        slots: tuple[str, ...] = (),
        in_channels: tuple[int, ...] = (),
        num_bits: int = 48,
        hidden: int = 128,
        init_scale: float = 0.0,
        linear_mapping: bool = False,
    ) -> None:
        super().__init__()
        if len(slots) != len(in_channels) or not slots:
            raise ValueError("give one input channel count per modulated convolution, and at least one")
        # M: a small MLP, as WOUAF's mapping network (StyleGAN's, shortened); or one linear layer, so that
        # each bit moves the scales along its own fixed direction whatever the other bits are.
        if linear_mapping:
            # No bias: a key-independent part of the scales would only add a key-independent mark.
            self.mapping = nn.Sequential(nn.Linear(num_bits, hidden, bias=False))
        else:
            self.mapping = nn.Sequential(
                nn.Linear(num_bits, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden), nn.LeakyReLU(0.2)
            )
        # A_ℓ: zero at init_scale 0, so the modulated decoder *is* the frozen decoder until trained.
        self.affine = nn.ModuleList(nn.Linear(hidden, c) for c in in_channels)
        for a in self.affine:
            nn.init.normal_(a.weight, std=init_scale / math.sqrt(hidden))
            nn.init.zeros_(a.bias)
        self._scales: list[torch.Tensor] | None = None
        self._handles: list[Any] = []

    @classmethod
    def for_vae(cls, vae: nn.Module, *, num_bits: int = 48, **kwargs: Any) -> KeyModulation:
        convs = routed_convolutions(vae)
        return cls(
            slots=tuple(n for n, _ in convs),
            in_channels=tuple(c.in_channels for _, c in convs),
            num_bits=num_bits,
            **kwargs,
        )

    @property
    def num_bits(self) -> int:
        return int(self.config.num_bits)

    def scales(self, keys: torch.Tensor) -> list[torch.Tensor]:
        """(B, M) keys → per convolution, (B, C_in) scales u_ℓ."""
        w = self.mapping(2 * keys.to(self.device, self.dtype) - 1)
        return [1 + a(w) for a in self.affine]

    def attach(self, vae: nn.Module) -> None:
        """Hook every modulated convolution of ``vae``; idle (the frozen decoder) until :meth:`keyed`."""
        self.detach()
        convs = routed_convolutions(vae)
        if tuple(n for n, _ in convs) != tuple(self.config.slots) or any(
            c.in_channels != cin for (_, c), cin in zip(convs, self.config.in_channels, strict=True)
        ):
            raise ValueError("this modulation was built for another decoder layout; build one for this VAE")
        for slot, (_, conv) in enumerate(convs):

            def hook(module: nn.Module, args: tuple[torch.Tensor, ...], slot: int = slot) -> Any:
                if self._scales is None:
                    return None
                u = self._scales[slot].to(args[0].dtype)
                if u.shape[0] != args[0].shape[0] and u.shape[0] != 1:
                    raise ValueError(f"{u.shape[0]} keys for a batch of {args[0].shape[0]}")
                # W ⊙ u over input channels is the same convolution as W on u ⊙ x.
                return (args[0] * u[:, :, None, None],)

            self._handles.append(conv.register_forward_pre_hook(hook))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @contextmanager
    def keyed(self, bits: torch.Tensor | np.ndarray) -> Iterator[None]:
        """Inside the block the attached decoder is modulated by ``bits`` ((M,) or (B, M))."""
        if not self._handles:
            raise RuntimeError("attach the modulation to a VAE first")
        key = key_rows(bits, self.num_bits, "this modulation carries").float()
        self._scales = self.scales(key)
        try:
            yield
        finally:
            self._scales = None


# ---------------------------------------------------------------------------------------------
# Training on the embed path (shared by both baselines).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BaselineTrainConfig(MarkSchedule):
    steps: int = 400
    patches: int = 8  # patches per step, 2 × 2 tiles each
    lr: float = 1e-3  # the marking side (a fine-tuned decoder, or the mapping and affines)
    lr_extractor: float = 1.5e-3  # when η trains (WOUAF)
    warmup: int = 20
    psnr: float = 38.0
    psnr_start: float = 32.0  # a stronger mark first, annealed to ``psnr`` over ``ramp_fraction`` of the steps
    ramp_fraction: float = 0.4
    perceptual_weight: float = 0.2  # λ on (1 − SSIM) of the marked patch against the photo
    energy_weight: float = 0.05  # μ on (log ‖r‖ / ‖r‖_target)²
    attack_ramp: bool = True  # mostly unattacked early, the full mix by the end of the PSNR ramp
    attacks: bool = True  # False: the marked patches are only rounded to 8 bits (tests)
    seed: int = 0
    log_every: int = 50


def rms(x: torch.Tensor) -> torch.Tensor:
    """Root mean square, with a floor so its gradient stays finite at a zero residual (an unmoved decoder copy)."""
    return (x.pow(2).mean() + 1e-16).sqrt()


def strength(raw: torch.Tensor, goal: float) -> torch.Tensor:
    """s for a mark of RMS ``raw``: scaled to the RMS ``goal`` of the target PSNR, but never amplified more
    than the embed path amplifies (:data:`~mlcore.watermark.embed.MAX_STRENGTH`). A fine-tune that starts
    from the unmarked decoder has no residual at all; its first marks are weaker than the target, not
    noise blown up to it."""
    return torch.clamp(goal / raw.clamp_min(1e-12), max=MAX_STRENGTH)


@dataclass(frozen=True)
class Resume:
    """Where a training starts and how it checkpoints: ``step`` done, the optimizer's state and logged
    rows of a saved run; ``on_checkpoint(step, optimizer, rows)`` called at every log boundary, after
    which the loop stops when ``out_of_time()`` says so (the caller sees the step it saved)."""

    step: int = 0
    optimizer_state: dict[str, Any] | None = None
    rows: tuple[dict[str, Any], ...] = ()
    on_checkpoint: Checkpoint | None = None
    out_of_time: Callable[[], bool] | None = None


#: (patch indices, (P, M) keys) → (P, 3, S, S) residual fields at the marking side's own strength.
Fields = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: (torch generator, patches) → (P, M) keys for a step.
Keys = Callable[[torch.Generator, int], torch.Tensor]


def train_on_residuals(
    fields_of: Fields,
    keys_of: Keys,
    marking: list[nn.Parameter],
    extractor: Extractor,
    pool: PatchPool,
    config: BaselineTrainConfig,
    *,
    train_extractor: bool,
    modules: list[nn.Module] = (),  # type: ignore[assignment]
    log: Log | None = None,
    resume: Resume | None = None,
) -> list[dict[str, Any]]:
    """Train the marking side (and η when ``train_extractor``) on residual-marked photo patches.

    One step: P patches and keys, the residual fields scaled to this step's PSNR, the marked patches
    rounded and attacked, L = BCE(η(tiles), κ) + λ (1 − SSIM(marked, photo)) + μ (log ‖r‖/‖r‖_target)².
    A frozen η stays in eval mode (its BatchNorm statistics fixed) and still passes gradients to the
    images. Each step's draws come from (seed, step), so a run resumed from a checkpoint (``resume``)
    takes the same steps as one that never stopped. Returns the logged rows.
    """
    tile = extractor.image_size
    per = TILES_PER_SIDE**2
    groups = [{"params": marking, "lr": config.lr, "weight_decay": 0.0}]
    if train_extractor:
        groups.append({"params": list(extractor.parameters()), "lr": config.lr_extractor, "weight_decay": 1e-4})
    optimizer = torch.optim.AdamW(groups)
    base_lrs = [g["lr"] for g in groups]
    resume = resume or Resume()
    if resume.optimizer_state is not None:
        optimizer.load_state_dict(resume.optimizer_state)
    extractor.requires_grad_(train_extractor)
    extractor.train(train_extractor)
    for m in modules:
        m.train()
    rows: list[dict[str, Any]] = list(resume.rows)
    running: dict[str, list[float]] = {"loss_bits": [], "train_bits": [], "raw_psnr": []}
    started = time.monotonic()
    for step in range(resume.step + 1, config.steps + 1):
        g = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
        rng = np.random.default_rng((config.seed, step, 29))
        for group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
            group["lr"] = lr * config.lr_factor(step)
        index = torch.randint(0, len(pool), (config.patches,), generator=g)
        keys = keys_of(g, config.patches)
        raw_fields = fields_of(index, keys)
        raw = rms(raw_fields)
        goal = target_rms(config.psnr_at(step))
        photos = pool.photos[index]
        unrounded = (photos + raw_fields * strength(raw, goal)).clamp(-1, 1)
        batch = quantise(unrounded)
        if config.attacks:
            batch = random_attacks(batch, rng, mix=config.attack_mix(step))
        logits = extractor(cut_tiles(batch, tile))
        target = keys.repeat_interleave(per, 0)
        loss_bits = F.binary_cross_entropy_with_logits(logits, target)
        loss_perceptual = 1 - ssim(unrounded, photos)
        # Clamped: a decoder copy that has not moved yet has no residual, and log 0 has no gradient to give.
        loss_energy = torch.log(raw.clamp_min(1e-3 * target_rms(config.psnr)) / target_rms(config.psnr)) ** 2
        loss = loss_bits + config.perceptual_weight * loss_perceptual + config.energy_weight * loss_energy
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for g_ in groups for p in g_["params"]], 5.0)
        optimizer.step()
        running["loss_bits"].append(loss_bits.item())
        running["train_bits"].append(((logits > 0).float() == target).float().mean().item())
        running["raw_psnr"].append(20 * math.log10(2 / max(raw.item(), 1e-12)))
        if step % config.log_every == 0 or step == config.steps:
            row = {"step": step, "psnr_trained": round(config.psnr_at(step), 2)}
            row.update({k: round(float(np.mean(v)), 4) for k, v in running.items()})
            row["seconds"] = round(time.monotonic() - started, 1)
            running = {k: [] for k in running}
            rows.append(row)
            if log is not None:
                log(row)
        # Only at a log boundary: the running means restart there, so a resumed run logs the same rows.
        if resume.on_checkpoint is not None and step % config.log_every == 0:
            resume.on_checkpoint(step, optimizer, rows)
            if resume.out_of_time is not None and resume.out_of_time():
                break
    extractor.eval().requires_grad_(False)
    for m in modules:
        m.eval()
    return rows


def random_keys(num_bits: int) -> Keys:
    """A fresh random key per patch (WOUAF's training: one model for every key)."""
    return lambda g, n: torch.randint(0, 2, (n, num_bits), generator=g).float()


def finetune_decoder(
    vae: nn.Module,
    extractor: Extractor,
    key: torch.Tensor,
    pool: PatchPool,
    config: BaselineTrainConfig,
    *,
    log: Log | None = None,
) -> tuple[nn.Module, list[dict[str, Any]]]:
    """Stable Signature's stage 2: a copy of ``vae``'s decoder fine-tuned so the frozen ``extractor`` reads ``key``."""
    decoder = copy.deepcopy(vae.decoder).requires_grad_(True)
    one = KeyedDecoders(extractor.num_bits)
    one.add(key, decoder)
    one.attach(vae)
    tile = extractor.image_size
    rows = train_on_residuals(
        lambda index, keys: marked_fields(vae, one, pool, index, keys, tile),  # type: ignore[arg-type]
        lambda g, n: key.float().reshape(1, -1).expand(n, -1),
        list(decoder.parameters()),
        extractor,
        pool,
        config,
        train_extractor=False,
        modules=[decoder],
        log=log,
    )
    return decoder.eval().requires_grad_(False), rows


def train_over_random_keys(
    vae: nn.Module,
    marking: nn.Module,
    extractor: Extractor,
    pool: PatchPool,
    config: BaselineTrainConfig,
    *,
    log: Log | None = None,
    resume: Resume | None = None,
) -> list[dict[str, Any]]:
    """A keyed marking module attached to ``vae`` (one model for every key) and ``extractor`` trained
    jointly over random keys: WOUAF's training (:func:`train_modulation`), and MOLM's markers on the
    same harness (:func:`train_markers`)."""
    tile = extractor.image_size
    marking.requires_grad_(True)
    return train_on_residuals(
        lambda index, keys: marked_fields(vae, marking, pool, index, keys, tile),  # type: ignore[arg-type]
        random_keys(marking.num_bits),  # type: ignore[arg-type]
        list(marking.parameters()),
        extractor,
        pool,
        config,
        train_extractor=True,
        modules=[marking],
        log=log,
        resume=resume,
    )


def train_modulation(
    vae: nn.Module,
    modulation: KeyModulation,
    extractor: Extractor,
    pool: PatchPool,
    config: BaselineTrainConfig,
    *,
    log: Log | None = None,
) -> list[dict[str, Any]]:
    """WOUAF's training: the mapping, the affines and ``extractor`` jointly over random keys.

    ``modulation`` must be attached to ``vae``."""
    return train_over_random_keys(vae, modulation, extractor, pool, config, log=log)


def train_markers(
    vae: nn.Module,
    markers: nn.Module,
    extractor: Extractor,
    pool: PatchPool,
    config: BaselineTrainConfig,
    *,
    log: Log | None = None,
    resume: Resume | None = None,
) -> list[dict[str, Any]]:
    """MOLM itself on this harness: its key-routed adapters (:class:`~mlcore.watermark.markers.Markers`,
    no bias shift, attached to ``vae``) and ``extractor`` trained jointly over random keys exactly as
    :func:`train_modulation` trains WOUAF's mapping — same loss, schedule, attacks and patches — so a
    comparison with the baselines is at equal training. (:func:`~mlcore.watermark.residual_train.
    train_jointly`, the ``molm-residual`` recipe, adds MOLM's null and forgery terms and a longer budget.)"""
    if getattr(markers, "has_shift", False):
        raise ValueError("train MOLM's markers without the bias shift (markers.without_shift())")
    return train_over_random_keys(vae, markers, extractor, pool, config, log=log, resume=resume)


@torch.no_grad()
def tile_accuracy(
    fields_of: Fields, extractor: Extractor, held: PatchPool, keys: torch.Tensor, *, psnr: float
) -> dict[str, float]:
    """Per-tile bit accuracy on held-out patches marked at ``psnr``: clean, after JPEG-75 and a 0.5 resize."""
    tile = extractor.image_size
    fields = torch.cat(
        [fields_of(torch.arange(s, min(len(held), s + 32)), keys[s : s + 32]) for s in range(0, len(held), 32)]
    )
    marked = quantise((held.photos + fields * strength(rms(fields), target_rms(psnr))).clamp(-1, 1))
    target = keys.repeat_interleave(TILES_PER_SIDE**2, 0)
    out = {}
    for name, images in (
        ("none", marked),
        ("jpeg75", jpeg_real(marked, 75)),
        ("resize05", quantise(rescale(marked, 0.5))),
    ):
        logits = extractor(cut_tiles(images, tile))
        out[f"tile_{name}"] = round(((logits > 0).float() == target).float().mean().item(), 4)
    return out
