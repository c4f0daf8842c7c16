"""MOLM markers: P parallel LoRA adapters per routed convolution, one switched on per key symbol.

Paper section 3 (method card, section 2): inside each routed ResNet block of the frozen VAE
decoder sit P parallel low-rank adapters; the M-bit key κ is cut into L segments of log₂P bits and
segment l, read as an integer s_l (most significant bit first), switches on adapter s_l of slot l:

    h_l ← conv_l(x) + α · B_{l,s_l} A_{l,s_l} x                    (hard, one-hot route; no router)

with A (rank × C_in) and B (C_out × rank) 1×1 convolutions. We give **each convolution its own slot**
(conv1 and conv2 of a block read different symbols) — the card's way to reach ≥ 48 bits: a
decoder with 8 ResNet blocks, 16 slots and P = 8 carries 16 × 3 = 48 bits.

The adapters never touch the decoder's weights: they are forward hooks on its ``Conv2d`` modules,
active only inside :meth:`Markers.keyed`, so the frozen decoder stays byte-identical (and a real
diffusers VAE directory works unchanged) and "adapters off" reproduces it exactly.

**Why a bias shift** (``shift_scale``). The low-rank term B_s A_s x is linear in the
activation x, so the image change one key bit causes depends on the image: on the zoo VAE the
signed change of flipping a bit has a mean cosine of only 0.02–0.05 between two images, i.e. every
image carries its bits along a different direction, and an extractor trained against it stayed at
chance (0.50 after 2,400 steps). The adapted convolution's bias is also a parameter of the generator:
giving each adapter a shift Δb_{l,s} (the full perturbation is then W + B_s A_s, b + Δb_s) adds a
content-independent component — cosine 0.12–0.46 at the same position — which the extractor learns
within a few hundred steps. The route, the symbols and the hooks are unchanged.

**MOLM as the paper builds it** is the same class with ``shift_scale`` ``None`` or ``0``: no shift
parameters at all (a zero shift would be a trainable parameter that training turns back into a
shift), so the perturbation is the routed LoRA term alone. :meth:`Markers.without_shift` turns
trained shifted markers into that variant, keeping their adapters. The shift is forgeable: it is
the same in every image, so the mean of a few marked images' residuals carries it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn


def routed_convolutions(vae: nn.Module) -> list[tuple[str, nn.Conv2d]]:
    """The decoder's routed convolutions in forward order: conv1 and conv2 of every ResNet block.

    Found by structure (``decoder.mid_block`` then ``decoder.up_blocks``), so any diffusers
    ``AutoencoderKL`` — ours or a Stable Diffusion VAE — yields its own list.
    """
    decoder = getattr(vae, "decoder", None)
    if decoder is None or not hasattr(decoder, "up_blocks"):
        raise ValueError("expected a diffusers AutoencoderKL (a .decoder with up_blocks); got " + type(vae).__name__)
    blocks: list[tuple[str, nn.Module]] = []
    if getattr(decoder, "mid_block", None) is not None:
        blocks += [(f"decoder.mid_block.resnets.{i}", r) for i, r in enumerate(decoder.mid_block.resnets)]
    for b, up in enumerate(decoder.up_blocks):
        blocks += [(f"decoder.up_blocks.{b}.resnets.{i}", r) for i, r in enumerate(up.resnets)]
    return [(f"{name}.{conv}", getattr(block, conv)) for name, block in blocks for conv in ("conv1", "conv2")]


def bits_to_symbols(bits: torch.Tensor, bits_per_symbol: int) -> torch.Tensor:
    """(B, M) {0, 1} → (B, M / b) integers: segment l, most significant bit first (section 3)."""
    if bits.shape[-1] % bits_per_symbol:
        raise ValueError(f"{bits.shape[-1]} key bits do not split into {bits_per_symbol}-bit symbols")
    segments = bits.reshape(*bits.shape[:-1], -1, bits_per_symbol).long()
    weights = 2 ** torch.arange(bits_per_symbol - 1, -1, -1, device=bits.device)
    return (segments * weights).sum(-1)


def symbols_to_bits(symbols: torch.Tensor, bits_per_symbol: int) -> torch.Tensor:
    """The inverse of :func:`bits_to_symbols`."""
    shifts = torch.arange(bits_per_symbol - 1, -1, -1, device=symbols.device)
    return ((symbols.unsqueeze(-1) >> shifts) & 1).flatten(-2).float()


def parse_key(bits: str, num_bits: int) -> np.ndarray:
    """A key string of '0'/'1' → (num_bits,) float array; ``ValueError`` with the reason otherwise."""
    text = bits.strip()
    if not text or set(text) - {"0", "1"}:
        raise ValueError("a key's bits must be a string of 0s and 1s")
    if len(text) != num_bits:
        raise ValueError(f"the key has {len(text)} bits but these markers carry {num_bits}")
    return np.array([c == "1" for c in text], dtype=np.float32)


def key_rows(bits: torch.Tensor | np.ndarray, num_bits: int, carrier: str) -> torch.Tensor:
    """A key ((M,) or (B, M)) as rows (B, M); a sentence naming the ``carrier`` when M is not ``num_bits``."""
    key = torch.as_tensor(np.asarray(bits) if not isinstance(bits, torch.Tensor) else bits)
    key = key.reshape(1, -1) if key.ndim == 1 else key
    if key.shape[-1] != num_bits:
        raise ValueError(f"the key has {key.shape[-1]} bits but {carrier} {num_bits}")
    return key


class Markers(ModelMixin, ConfigMixin):
    """The LoRA banks: for slot l, A_l (P, r, C_in) and B_l (P, C_out, r); see the module docstring."""

    @register_to_config
    def __init__(
        self,
        slots: tuple[str, ...] = (),
        in_channels: tuple[int, ...] = (),
        out_channels: tuple[int, ...] = (),
        num_adapters: int = 8,
        rank: int = 8,
        alpha: float = 1.0,
        init_scale: float = 0.0,
        bitwise_init: bool = False,
        shift_scale: float | None = None,
    ) -> None:
        super().__init__()
        if num_adapters < 2 or num_adapters & (num_adapters - 1):
            raise ValueError(f"num_adapters (P) must be a power of two ≥ 2, not {num_adapters}")
        if not (len(slots) == len(in_channels) == len(out_channels)) or not slots:
            raise ValueError("give one in/out channel count per slot, and at least one slot")
        self.down = nn.ParameterList()
        self.up = nn.ParameterList()
        # Optional per-adapter bias shifts b_{l,s} (P, C_out): the adapted convolution's bias, b + Δb_s,
        # perturbed alongside its weight, W + B_s A_s. ``None`` (the default, and every checkpoint
        # saved before) or 0 means no shift and no shift parameters. See "Why a bias shift" in the
        # module docstring.
        self.shift = nn.ParameterList()
        bits = int(math.log2(num_adapters))
        # Symbol s's bits as ±1, most significant first: (P, log2 P).
        signs = symbols_to_bits(torch.arange(num_adapters)[:, None], bits) * 2 - 1
        for cin, cout in zip(in_channels, out_channels, strict=True):
            # A: Kaiming-like; B: zero in the paper (adapters start as the identity). A non-zero
            # ``init_scale`` lets the extractor see key-dependent images from step 0.
            if bitwise_init:
                # Our deviation for CPU budgets: all P adapters of a slot start from one A, and
                # B_s = Σ_j ±D_j (sign = bit j of s), so flipping one key bit flips the sign of one
                # perturbation. The extractor then starts from 48 sign-detection problems rather than
                # 16 eight-way classifications. Training moves every adapter freely afterwards.
                down = (torch.randn(rank, cin) / math.sqrt(cin)).expand(num_adapters, rank, cin).clone()
                directions = torch.randn(bits, cout, rank) * init_scale / math.sqrt(rank * bits)
                up = torch.einsum("pb,bor->por", signs, directions)
            else:
                down = torch.randn(num_adapters, rank, cin) / math.sqrt(cin)
                up = torch.randn(num_adapters, cout, rank) * init_scale / math.sqrt(rank)
            self.down.append(nn.Parameter(down))
            self.up.append(nn.Parameter(up.contiguous()))
            if shift_scale:
                # The same ±-per-bit structure as ``bitwise_init``: flipping key bit j of this slot
                # flips the sign of one content-independent shift direction E_j.
                shift_dirs = torch.randn(bits, cout) * shift_scale / math.sqrt(bits)
                self.shift.append(nn.Parameter(torch.einsum("pb,bo->po", signs, shift_dirs).contiguous()))
        self._symbols: torch.Tensor | None = None
        self._handles: list[Any] = []

    @classmethod
    def for_vae(cls, vae: nn.Module, *, num_adapters: int = 8, rank: int = 8, **kwargs: Any) -> Markers:
        convs = routed_convolutions(vae)
        return cls(
            slots=tuple(name for name, _ in convs),
            in_channels=tuple(c.in_channels for _, c in convs),
            out_channels=tuple(c.out_channels for _, c in convs),
            num_adapters=num_adapters,
            rank=rank,
            **kwargs,
        )

    @property
    def has_shift(self) -> bool:
        return len(self.shift) > 0

    def without_shift(self) -> Markers:
        """A copy with these adapters (A, B) and no bias shift: the routed LoRA perturbation alone."""
        config = {k: v for k, v in self.config.items() if not k.startswith("_")}
        copy = type(self)(**{**config, "shift_scale": 0.0})
        adapters = {k: v for k, v in self.state_dict().items() if not k.startswith("shift.")}
        copy.load_state_dict(adapters)
        return copy.to(self.device)

    @property
    def bits_per_symbol(self) -> int:
        return int(math.log2(self.config.num_adapters))

    @property
    def num_bits(self) -> int:
        return len(self.config.slots) * self.bits_per_symbol

    def random_keys(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """(n, M) uniformly random key bits as floats — a fresh key per image (section 3, training)."""
        return torch.randint(0, 2, (n, self.num_bits), generator=generator).float()

    def _delta(self, slot: int, x: torch.Tensor) -> torch.Tensor:
        symbols = self._symbols[:, slot]  # type: ignore[index]
        if symbols.shape[0] != x.shape[0]:
            symbols = symbols.expand(x.shape[0]) if symbols.shape[0] == 1 else symbols
        a = self.down[slot][symbols].to(x.dtype)  # (B, r, C_in)
        b = self.up[slot][symbols].to(x.dtype)  # (B, C_out, r)
        h = torch.einsum("bchw,brc->brhw", x, a)
        delta = torch.einsum("brhw,bor->bohw", h, b)
        if len(self.shift):
            delta = delta + self.shift[slot][symbols].to(x.dtype)[:, :, None, None]
        return self.config.alpha * delta

    def attach(self, vae: nn.Module) -> None:
        """Hook every routed convolution of ``vae``; idle until :meth:`keyed` sets a key."""
        self.detach()
        convs = routed_convolutions(vae)
        names = [name for name, _ in convs]
        if tuple(names) != tuple(self.config.slots):
            raise ValueError(
                f"these markers were trained for a decoder with {len(self.config.slots)} routed convolutions; "
                f"this VAE has {len(names)} (or a different layout) — train markers for it"
            )
        for slot, (_, conv) in enumerate(convs):
            if (conv.in_channels, conv.out_channels) != (self.config.in_channels[slot], self.config.out_channels[slot]):
                raise ValueError(f"slot {names[slot]}: channel counts differ from the markers'; train markers for it")

            def hook(module: nn.Module, args: tuple[torch.Tensor, ...], output: torch.Tensor, slot: int = slot) -> Any:
                if self._symbols is None:
                    return None  # adapters off: the frozen decoder, exactly
                return output + self._delta(slot, args[0])

            self._handles.append(conv.register_forward_hook(hook))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @contextmanager
    def keyed(self, bits: torch.Tensor | np.ndarray) -> Iterator[None]:
        """Inside the block, the attached decoder is watermarked with ``bits`` ((M,) or (B, M))."""
        if not self._handles:
            raise RuntimeError("attach the markers to a VAE first")
        key = key_rows(bits, self.num_bits, "these markers carry")
        self._symbols = bits_to_symbols(key.to(self.device), self.bits_per_symbol)
        try:
            yield
        finally:
            self._symbols = None
