"""PTv3-lite: a pure-PyTorch Point Transformer V3 (Wu et al., CVPR 2024) that runs on a CPU, with
Point-MoE's sparse experts (Point-MoE, arXiv 2505.23926 v2, section 3).

What is kept from PTv3 (method card, section 2):
- **Serialisation.** Points are ordered along a space-filling curve of their voxel coordinates; the
  blocks alternate between the z-order (Morton) curve and its transposed variant (x and y swapped),
  so consecutive blocks see different neighbourhoods. Hilbert orders are left out (bit tricks only
  change which neighbours share a patch).
- **Patch attention.** The ordered points are cut into patches of ``patch`` points (each sample
  padded by repeating its own points, as PTv3 does) and attend within a patch through
  ``scaled_dot_product_attention``. That is the ``"rank"`` layout; ``"local"`` (below) builds the
  patches from octree cubes instead.
- **Grid pooling / unpooling.** Stage s+1 keeps one token per occupied voxel of twice the size
  (max-pooled projected features, mean coordinates); the decoder adds the coarse features back to
  the skip features through the pooling's inverse map.
- **Normalisation** as in PTv3: BatchNorm in the embedding, pooling, unpooling and head; LayerNorm in
  the pre-norm residual blocks. The card says Point-MoE's ablation prefers BatchNorm in the blocks
  too (``block_norm="batch"``), but here it fails at inference: with running statistics, tokens they
  under-normalise are squared by every gated-ReLU MLP and overflow to inf on 2–28% of outdoor points
  (docs/point-moe.md). A LayerNorm bounds every token before each MLP, whatever the scan.
- **PPT's point-prompt normalisation** (Wu et al., "Towards Large-scale 3D Representation Learning
  with Multi-dataset Point Prompt Training", CVPR 2024), the card's oracle baseline: with
  ``domains`` set, each block norm takes the γ, β of the token's dataset (:class:`DomainLayerNorm`).

**Local patches** (``patch_layout="local"``). Cutting the curve every ``patch`` tokens by *rank*
makes a token's patch depend on how many tokens come before it in its sample, i.e. on every point of
the window, however far away: a tile that loses one point at its edge shifts the cut of every patch
after that point along the curve, so tiled and untiled runs of a scan disagree deep inside tiles
(4.8% of a street's labels, 7.5% of a 10k-point sample, with the 32-voxel tile margin). A local
layout makes a patch a function of the tokens near it only:

1. Root cubes of 2^10 stage-0 voxels (:data:`LOCAL_ROOT_BITS`; 2^(10−s) voxels at stage s, the same
   cubes) aligned to the window's origin. Tiles are anchored at multiples of it
   (:data:`mlcore.pointcloud.segment.WINDOW_ALIGN_VOXELS`), so every window sees the same cubes.
2. A cube holding more than ``patch`` tokens is split into its 8 octants, recursively; a token's
   leaf is the shallowest cube around it that holds at most ``patch`` (:func:`leaf_depths`: one sort
   of the Morton codes, whose prefixes are the cubes, and a sliding maximum; no loop per point).
3. Consecutive sibling leaves (children of one split cube, in curve order) are merged greedily while
   they fit one patch: a decision that reads only the parent's tokens. On training crops a patch
   then holds 41 tokens of 64 on average instead of a bare leaf's 24.
4. Each group fills the fewest multiples of :data:`LOCAL_SLOT_STEP` (16) slots that hold it, and the
   padding slots (its own tokens repeated) are masked out of attention and of the patch centroid,
   so the padding changes no number; equal-sized patches share one attention call. 12–15% of the
   slots are padding (rank layout: under 1.5% on whole scans, 3–7% at the coarse stages of training
   crops); a training step of the zoo recipe takes about 8% more CPU time, inference about 6%.
5. The second order of each pair of blocks (PTv3's transposed curve) shifts every cube by
   :data:`LOCAL_SHIFT` (¼ to ⅔ of a cube at every depth), so consecutive blocks
   still mix across the other's patch borders (Swin's shifted windows, at every scale).

So a token's patch changes only when a cube around it whose count is near ``patch`` loses tokens,
i.e. within about one patch's extent of a window edge; through the coarse stages (patches of 3 m
median, 6–11 m at the 90th percentile on a street at 0.4 m voxels) a label still feels an edge a few
metres away. Old configurations have no ``patch_layout`` and
load as ``"rank"``, computing exactly what they did.

What changes: the sparse-convolution xCPE is replaced by a positional MLP of each point's offset
from its patch centroid (no spconv), and no drop-path (tiny models, short schedules).

**Point-MoE** (card, section 2): in every block the attention output projection W_o
(``placement="proj"``, the released config) or the FFN (``placement="ffn"``, the earlier project
page) becomes a :class:`~mlcore.moe.MoELayer`: bias-free gated-ReLU experts
E(x) = W_down(ReLU(W_gate·x) ⊙ W_up·x), a bias-free linear softmax router over all experts, top-k
renormalised. The router sees token features only — never a dataset id. The dense twin replaces the
same projection by one gated MLP, as wide as k experts (equal active compute) or E experts (equal
total parameters).

Labels come from scaled cosines between projected point features and one learned embedding per
master class (the paper uses text embeddings of the class names; see the card), restricted per
dataset in the loss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from mlcore.moe import MoELayer, Routing, switch_load_balance_loss

MAX_GRID = 2**16  # voxel coordinates per axis that fit the 48-bit Morton code below
PATCH_LAYOUTS = ("rank", "local")
#: ``PTv3Config.ground`` choices.
GROUNDS = ("lowest", "robust")
#: log2 of the local layout's root cubes in stage-0 voxels (1024 = 102 m outdoors, 41 m indoors); at
#: stage s the roots are 2^(10−s) of that stage's voxels, the same cubes. Windows of a tiled scan are
#: anchored at multiples of this (:data:`mlcore.pointcloud.segment.WINDOW_ALIGN_VOXELS`), so they
#: all see the same cubes.
LOCAL_ROOT_BITS = 10
#: The second (transposed) local layout shifts every cube by this bit pattern, masked to the root's
#: bits: an offset of ¼ to ⅔ of a cube at every octree depth, so the cube borders of the two layouts
#: never coincide (Swin's shifted windows, at every scale at once).
LOCAL_SHIFT = 0x5555
#: Local patches hold between 1 and ``patch`` tokens; each gets the fewest multiples of this many
#: slots that hold it, so padding stays small while equal-sized patches still share one attention call.
LOCAL_SLOT_STEP = 16

#: oneDNN's matmul with a fused activation: on a CPU it runs the narrow layers here (32–96 inputs)
#: about 1.3–1.7× faster than the MKL GEMM behind F.linear and saves a pass for the activation.
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


_FUSED_INFERENCE = True


@contextmanager
def reference_inference() -> Iterator[None]:
    """Within this block, eval-mode forwards without autograd take the readable training path instead
    of the fused one (:meth:`Block._forward_inference`): for checking one against the other."""
    global _FUSED_INFERENCE
    before, _FUSED_INFERENCE = _FUSED_INFERENCE, False
    try:
        yield
    finally:
        _FUSED_INFERENCE = before


def _fused(*modules: nn.Module) -> bool:
    """Take the fused inference path: ``modules`` (and, for BatchNorms, the statistics they fold)
    in eval mode, no autograd, not inside :func:`reference_inference`."""
    return _FUSED_INFERENCE and not torch.is_grad_enabled() and not any(m.training for m in modules)


def fused_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, act: str = "none") -> Tensor:
    """act(x·Wᵀ + b) for x [N, in], act one of "none", "relu", "gelu" (exact, erf-based); inference
    only (the oneDNN kernel has no autograd)."""
    if _ONEDNN and x.device.type == "cpu" and x.dtype == torch.float32 and not torch.is_grad_enabled():
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, act, [], "none" if act == "gelu" else "")
    y = F.linear(x, weight, bias)
    return F.gelu(y) if act == "gelu" else F.relu(y) if act == "relu" else y


def bn_affine(norm: nn.BatchNorm1d) -> tuple[Tensor, Tensor]:
    """An eval-mode BatchNorm as x · scale + shift."""
    assert norm.running_var is not None and norm.running_mean is not None
    scale = norm.weight * torch.rsqrt(norm.running_var + norm.eps)
    return scale, norm.bias - norm.running_mean * scale


def linear_bn_act(layers: nn.Sequential, x: Tensor) -> Tensor:
    """Linear → BatchNorm → GELU (:func:`_norm_act`); in eval mode without autograd the BatchNorm is
    folded into the linear layer and the GELU fused into its matmul."""
    if not _fused(*layers.modules()):
        return layers(x)
    linear, rest = layers[0], layers[1:]
    norm, act = rest if len(rest) == 2 else rest[0]
    assert isinstance(linear, nn.Linear) and isinstance(norm, nn.BatchNorm1d) and isinstance(act, nn.GELU)
    scale, shift = bn_affine(norm)
    bias = shift if linear.bias is None else linear.bias * scale + shift
    return fused_linear(x, linear.weight * scale[:, None], bias, "gelu")


def _apply_inference(layer: nn.Module, x: Tensor) -> Tensor:
    """A W_o variant (plain linear, dense gated MLP or Point-MoE) on its inference path."""
    if isinstance(layer, GatedMLP):
        return layer.inference(x)
    if isinstance(layer, nn.Linear):
        return fused_linear(x, layer.weight, layer.bias)
    return layer(x)


@dataclass(frozen=True)
class PTv3Config:
    in_channels: int = 5
    num_classes: int = 14
    channels: tuple[int, ...] = (32, 64, 96)
    depths: tuple[int, ...] = (1, 1, 2)  #: encoder blocks per stage
    dec_depths: tuple[int, ...] = (1, 1)  #: decoder blocks, coarse to fine (one per stage below the last)
    head_dim: int = 16
    patch: int = 64
    ffn_ratio: float = 2.0  #: dense FFN width (× C)
    #: "moe": W_o is a Point-MoE layer; "dense": one gated MLP of width proj_ratio × C; "linear": plain W_o.
    proj: str = "linear"
    proj_ratio: float = 1.0  #: expert width (moe) or gated-MLP width (dense), × C
    #: "moe": the FFN is a Point-MoE layer of experts ffn_ratio / top_k × C wide (equal active compute).
    ffn: str = "dense"
    experts: int = 4
    top_k: int = 2
    embed_dim: int = 32  #: width of the cosine label head
    block_norm: str = "layer"  #: the blocks' pre-norms: "layer" (PTv3) or "batch" (the card's ablation)
    #: PPT-style oracle: one set of block-norm affine parameters per dataset, chosen by dataset id.
    domains: tuple[str, ...] = ()
    #: How the serialised tokens are cut into patches: "rank" (PTv3: every ``patch`` consecutive
    #: tokens of a sample) or "local" (octree cells of at most ``patch`` tokens, see the module
    #: docstring). Configurations saved before the field existed are "rank".
    patch_layout: str = "rank"
    #: Where a scan's height channel starts when it is segmented: "lowest" (its lowest point) or
    #: "robust" (:func:`mlcore.pointcloud.datasets.ground_level`: a low percentile, so a few points
    #: under the ground, multipath echoes or noise as real scanners return, do not lift every other
    #: point). Configurations saved before the field existed are "lowest".
    ground: str = "lowest"

    def __post_init__(self) -> None:
        if len(self.depths) != len(self.channels) or len(self.dec_depths) != len(self.channels) - 1:
            raise ValueError("PTv3Config needs one depth per stage and one decoder depth per stage below the last")
        if self.proj not in ("moe", "dense", "linear") or self.ffn not in ("moe", "dense"):
            raise ValueError(f"proj must be moe|dense|linear and ffn moe|dense, got {self.proj!r}, {self.ffn!r}")
        if any(c % self.head_dim for c in self.channels):
            raise ValueError(f"every stage width must be a multiple of head_dim={self.head_dim}")
        if not 1 <= self.top_k <= self.experts:
            raise ValueError(f"top_k must be between 1 and experts={self.experts}")
        if self.block_norm not in ("layer", "batch"):
            raise ValueError(f"block_norm must be layer|batch, got {self.block_norm!r}")
        if self.domains and self.block_norm != "layer":
            raise ValueError("per-dataset norms (domains) need block_norm='layer'")
        if self.ground not in GROUNDS:
            raise ValueError(f"ground must be {'|'.join(GROUNDS)}, got {self.ground!r}")
        if self.patch_layout not in PATCH_LAYOUTS:
            raise ValueError(f"patch_layout must be rank|local, got {self.patch_layout!r}")

    @property
    def is_moe(self) -> bool:
        return self.proj == "moe" or self.ffn == "moe"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PTv3Config:
        # Configurations saved before block_norm existed describe BatchNorm blocks.
        data = {"block_norm": "batch", **data}
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclass
class PointBatch:
    """Grid-sampled points of several samples, concatenated."""

    coord: Tensor  #: [N, 3] float, in voxel units (xyz / grid), per sample shifted to start at 0
    feat: Tensor  #: [N, F] float
    batch: Tensor  #: [N] int64 sample index, non-decreasing
    #: [samples] int64 index into the model's ``domains`` per sample (PPT-style models only)
    domain: Tensor | None = None

    @property
    def grid(self) -> Tensor:
        return self.coord.floor().long()


# -- serialisation ----------------------------------------------------------------------------------


def _spread_bits(v: Tensor) -> Tensor:
    """Insert two zero bits between the 16 low bits of v (the classic Morton 'part1by2')."""
    v = v & 0xFFFF
    v = (v | (v << 16)) & 0x0000FF0000FF
    v = (v | (v << 8)) & 0x00F00F00F00F
    v = (v | (v << 4)) & 0x0C30C30C30C3
    v = (v | (v << 2)) & 0x249249249249
    return v


def morton(grid: Tensor, *, transpose: bool = False) -> Tensor:
    """The z-order code of voxel coordinates [N, 3] (int64, each < 2^16); ``transpose`` swaps x and y
    (PTv3's "z-trans" order)."""
    x, y, z = grid.unbind(-1)
    if transpose:
        x, y = y, x
    return _spread_bits(x) | (_spread_bits(y) << 1) | (_spread_bits(z) << 2)


@dataclass
class Patches:
    """Where each patch slot reads from, and which slots are real (the rest repeat points)."""

    index: Tensor  #: [slots] token index per slot, patch after patch
    valid: Tensor  #: [slots] bool, True for the first occurrence of each token
    patch: int  #: the configured patch size (the positional offsets are scaled by its square root)
    #: [tokens] the slot holding each token's first occurrence: attention outputs go back to the
    #: tokens by one gather (padding slots repeat tokens and are never read back)
    slot_of: Tensor
    #: (slots per patch, slots) of each run of equal-sized patches, in slot order; empty means one
    #: run of ``patch``-slot patches
    buckets: list[tuple[int, int]] = field(default_factory=list)
    #: True: padding slots are masked out of attention and of the patch centroid, so a patch computes
    #: a function of its own tokens only (the local layout). False: they count as the tokens they
    #: repeat (PTv3's padding; the rank layout)
    masked: bool = False

    def __post_init__(self) -> None:
        if not self.buckets:
            self.buckets = [(self.patch, len(self.index))]

    def runs(self) -> Iterator[tuple[int, slice]]:
        """(slots per patch, slot range) of each run of equal-sized patches."""
        start = 0
        for size, slots in self.buckets:
            yield size, slice(start, start + slots)
            start += slots


def _cut(
    order: Tensor,
    counts: Tensor,
    patch: int,
    sizes: Tensor | None = None,
    *,
    starts: Tensor | None = None,
    masked: bool = False,
) -> Patches:
    """Cut ``order`` (token indices, group g holding ``counts[g]`` entries from ``starts[g]``, by
    default the next ones) into patches: group g into patches of ``sizes[g]`` slots (default
    ``patch``; groups sorted by it), padded to a whole number of patches by cycling through its own
    tokens, so no patch mixes groups."""
    device = order.device
    if sizes is None:
        sizes = torch.full_like(counts, patch)
    if starts is None:
        starts = torch.cumsum(counts, 0) - counts
    padded = (counts + sizes - 1) // sizes * sizes
    group = torch.repeat_interleave(torch.arange(len(counts), device=device), padded)
    slot = torch.arange(int(padded.sum()), device=device) - torch.repeat_interleave(
        torch.cumsum(padded, 0) - padded, padded
    )
    n = counts[group]
    index = order[starts[group] + slot % n]
    valid = slot < n
    slot_of = torch.empty_like(order).index_copy_(0, index[valid], torch.nonzero(valid).view(-1))
    run_sizes, run_groups = torch.unique_consecutive(sizes, return_counts=True)
    run_slots = torch.zeros(len(run_sizes), dtype=torch.long, device=device).index_add_(
        0, torch.repeat_interleave(torch.arange(len(run_sizes), device=device), run_groups), padded
    )
    buckets = [(int(size), int(total)) for size, total in zip(run_sizes, run_slots, strict=True)]
    return Patches(index=index, valid=valid, patch=patch, slot_of=slot_of, buckets=buckets, masked=masked)


def make_patches(grid: Tensor, batch: Tensor, patch: int, *, transpose: bool) -> Patches:
    """The "rank" layout: order tokens along the curve within each sample, then cut each sample's
    sequence into patches of ``patch`` tokens; a sample's last patch is filled by cycling through its
    own tokens, so no patch mixes samples."""
    order = torch.argsort((batch << 48) | morton(grid, transpose=transpose))
    counts = torch.bincount(batch)
    return _cut(order, counts[counts > 0], patch)


def leaf_depths(key: Tensor, patch: int, root_bits: int) -> Tensor:
    """For sorted octree keys (3·``root_bits`` low bits of Morton code under a prefix naming the root
    cube), each token's leaf depth: that of the shallowest cube around it holding at most ``patch``
    tokens (``root_bits`` if even its voxel holds more).

    A token's depth-d cube holds more than ``patch`` tokens exactly when some run of ``patch`` + 1
    consecutive keys containing the token shares it, and a run of sorted keys shares the cubes its
    two ends share. So: the deepest cube shared by the ends of every such run (−1 for none), its
    maximum over the runs containing each token (a sliding max), plus one."""
    n, bits = len(key), 3 * root_bits
    if n <= patch:
        return torch.zeros_like(key)
    differ = key[patch:] ^ key[:-patch]
    shared = torch.full_like(differ, -1)
    for d in range(root_bits + 1):
        shared += (differ >> (bits - 3 * d)) == 0
    runs = F.pad(shared.to(torch.float32)[None, None], (patch, patch), value=-1.0)
    deepest = F.max_pool1d(runs, patch + 1, stride=1)[0, 0].long()
    return (deepest + 1).clamp(max=root_bits)


def make_local_patches(grid: Tensor, batch: Tensor, patch: int, *, transpose: bool, root_bits: int) -> Patches:
    """The "local" layout (module docstring, "Local patches"): octree leaves of at most ``patch``
    tokens under root cubes of 2^``root_bits`` voxels, consecutive sibling leaves merged greedily
    while they fit one patch. ``transpose`` shifts every cube by :data:`LOCAL_SHIFT` (masked to the
    root's bits) and orders children along the transposed curve."""
    bits = 3 * root_bits
    g = grid.long()
    if transpose:
        g = (g + (LOCAL_SHIFT & ((1 << root_bits) - 1))).clamp(max=MAX_GRID - 1)
    # The Morton code's top bits are the root cube's code, its low 3·root_bits bits the path below.
    key, order = torch.sort((batch << 48) | morton(g, transpose=transpose), stable=True)
    depth = leaf_depths(key, patch, root_bits)
    leaf_key = key >> (bits - 3 * depth)
    first = torch.ones_like(key, dtype=torch.bool)
    first[1:] = (leaf_key[1:] != leaf_key[:-1]) | (depth[1:] != depth[:-1])
    starts = torch.nonzero(first).view(-1)
    sizes = torch.diff(starts, append=starts.new_tensor([len(key)]))
    leaf_depth, parent = depth[starts], leaf_key[starts] >> 3
    # Runs of consecutive sibling leaves (one parent cube, at most 8), packed greedily in curve order.
    run_first = torch.ones_like(starts, dtype=torch.bool)
    run_first[1:] = (parent[1:] != parent[:-1]) | (leaf_depth[1:] != leaf_depth[:-1]) | (leaf_depth[1:] == 0)
    run = torch.cumsum(run_first, 0) - 1
    pos = torch.arange(len(starts), device=key.device) - torch.nonzero(run_first).view(-1)[run]
    fill = torch.zeros(int(run[-1]) + 1 if len(run) else 0, dtype=torch.long, device=key.device)
    opens = run_first.clone()
    for p in range(8):
        at = torch.nonzero(pos == p).view(-1)
        if not len(at):
            break
        total = fill[run[at]] + sizes[at] if p else sizes[at]
        new = total > patch if p else torch.ones_like(at, dtype=torch.bool)
        opens[at] = new
        fill[run[at]] = torch.where(new, sizes[at], total)
    group_starts = starts[opens]
    counts = torch.diff(group_starts, append=group_starts.new_tensor([len(key)]))
    # Each group gets the fewest whole LOCAL_SLOT_STEPs of slots that hold it (at most `patch`); the
    # groups are sorted by that size so equal-sized patches form runs, one attention call each.
    step = min(patch, LOCAL_SLOT_STEP)
    slots = ((counts + step - 1) // step * step).clamp(max=patch)
    by_size = torch.argsort(slots, stable=True)
    return _cut(order, counts[by_size], patch, slots[by_size], starts=group_starts[by_size], masked=True)


# -- building blocks --------------------------------------------------------------------------------


class GatedMLP(nn.Module):
    """W_down(ReLU(W_gate·x) ⊙ W_up·x), bias-free: a Point-MoE expert, used densely."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.relu(gate) * up)

    def inference(self, x: Tensor, scale: Tensor | None = None, shift: Tensor | None = None) -> Tensor:
        """forward(x · scale + shift) without autograd: the affine map (an eval-mode BatchNorm) is
        folded into W_gate and W_up, and the ReLU into W_gate's matmul."""
        hidden = self.down.in_features
        w = self.gate_up.weight
        b = None
        if scale is not None and shift is not None:
            w, b = w * scale, w @ shift
        gate = fused_linear(x, w[:hidden], None if b is None else b[:hidden], "relu")
        up = fused_linear(x, w[hidden:], None if b is None else b[hidden:])
        return fused_linear(gate.mul_(up), self.down.weight)


class RoutedProjection(nn.Module):
    """A :class:`~mlcore.moe.MoELayer` of gated-ReLU experts that remembers its last routing (for the
    balance loss and expert-usage statistics)."""

    def __init__(self, dim: int, hidden: int, experts: int, top_k: int) -> None:
        super().__init__()
        self.moe = MoELayer(dim, hidden, experts, top_k, activation="relu", gated=True)
        self.routing: Routing | None = None

    def forward(self, x: Tensor) -> Tensor:
        y, self.routing = self.moe(x, return_routing=True)
        return y


def _norm_act(dim: int) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm1d(dim), nn.GELU())


class DomainLayerNorm(nn.Module):
    """PPT's point-prompt normalisation (PDNorm) in its decoupled, non-adaptive form: a LayerNorm
    whose affine parameters γ_d, β_d belong to the token's dataset d — the dataset id is an input."""

    def __init__(self, dim: int, domains: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(domains, dim))
        self.bias = nn.Parameter(torch.zeros(domains, dim))

    def forward(self, x: Tensor, domain: Tensor | None) -> Tensor:
        if domain is None:
            raise ValueError("this model normalises per dataset (PPT): every sample needs its dataset id")
        return torch.addcmul(self.bias[domain], F.layer_norm(x, x.shape[-1:]), self.weight[domain])


def _block_norm(dim: int, cfg: PTv3Config) -> nn.Module:
    if cfg.domains:
        return DomainLayerNorm(dim, len(cfg.domains))
    return nn.LayerNorm(dim) if cfg.block_norm == "layer" else nn.BatchNorm1d(dim)


def _normalise(norm: nn.Module, x: Tensor, domain: Tensor | None) -> Tensor:
    return norm(x, domain) if isinstance(norm, DomainLayerNorm) else norm(x)


def patch_offsets(coord: Tensor, patches: Patches) -> Tensor:
    """[slots, 3] each slot's offset from its patch's centroid, over √patch (the positional MLP's
    input); in a masked layout the centroid is that of the patch's own tokens."""
    sizes = [size for size, _ in patches.buckets]
    slots = coord[patches.index].split([n for _, n in patches.buckets])
    valid = patches.valid.split([n for _, n in patches.buckets])
    parts = []
    for size, c, v in zip(sizes, slots, valid, strict=True):
        c = c.view(-1, size, 3)
        if patches.masked:
            w = v.view(-1, size, 1).to(c.dtype)
            centre = (c * w).sum(1, keepdim=True) / w.sum(1, keepdim=True)
        else:
            centre = c.mean(dim=1, keepdim=True)
        parts.append(((c - centre) / patches.patch**0.5).view(-1, 3))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def patch_attention(qkv: Tensor, patches: Patches, heads: int) -> Tensor:
    """[slots, C] multi-head attention within each patch from [slots, 3C] queries, keys, values; in a
    masked layout padding slots are no keys."""
    dim = qkv.shape[-1] // 3
    counts = [n for _, n in patches.buckets]
    parts = []
    for (size, _), part, valid in zip(patches.buckets, qkv.split(counts), patches.valid.split(counts), strict=True):
        q, k, v = part.view(-1, size, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
        mask = valid.view(-1, 1, 1, size) if patches.masked else None
        parts.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(-1, dim))
    return parts[0] if len(parts) == 1 else torch.cat(parts)


class Block(nn.Module):
    """Pre-norm: x += PE(offset from patch centroid); x += W_o·Attn(N(x)); x += FFN(N(x)), N the
    block norm (LayerNorm, BatchNorm or PPT's per-dataset LayerNorm)."""

    def __init__(self, dim: int, cfg: PTv3Config, *, transpose: bool) -> None:
        super().__init__()
        self.heads = dim // cfg.head_dim
        self.transpose = transpose
        self.pos = nn.Sequential(nn.Linear(3, dim), nn.GELU(), nn.Linear(dim, dim))
        self.norm1 = _block_norm(dim, cfg)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj: nn.Module
        if cfg.proj == "moe":
            self.proj = RoutedProjection(dim, max(1, round(cfg.proj_ratio * dim)), cfg.experts, cfg.top_k)
        elif cfg.proj == "dense":
            self.proj = GatedMLP(dim, max(1, round(cfg.proj_ratio * dim)))
        else:
            self.proj = nn.Linear(dim, dim)
        self.norm2 = _block_norm(dim, cfg)
        self.ffn: nn.Module
        if cfg.ffn == "moe":
            self.ffn = RoutedProjection(dim, max(1, round(cfg.ffn_ratio * dim / cfg.top_k)), cfg.experts, cfg.top_k)
        else:
            self.ffn = GatedMLP(dim, max(1, round(cfg.ffn_ratio * dim)))

    def forward(self, x: Tensor, coord: Tensor, patches: Patches, domain: Tensor | None = None) -> Tensor:
        """``domain``: [tokens] dataset index, for PPT-style per-dataset norms."""
        if _fused(self, self.norm1, self.norm2):
            return self._forward_inference(x, coord, patches, domain)
        idx = patches.index
        h = _normalise(self.norm1, x, domain)[idx] + self.pos(patch_offsets(coord, patches))
        a = patch_attention(self.qkv(h), patches, self.heads)
        x = x + self.proj(a[patches.slot_of])
        return x + self.ffn(_normalise(self.norm2, x, domain))

    def _forward_inference(self, x: Tensor, coord: Tensor, patches: Patches, domain: Tensor | None) -> Tensor:
        """:meth:`forward` in eval mode without autograd, the same function computed with fewer
        passes over memory: BatchNorms (and a LayerNorm's affine map) folded into the linear layer
        that reads them (or into the positional bias), GELU/ReLU fused into the matmuls
        (:func:`fused_linear`)."""
        idx, dim = patches.index, x.shape[-1]
        offset = patch_offsets(coord, patches)
        pos_in, pos_out = self.pos[0], self.pos[2]
        # N(x) + the positional MLP's output bias, per token, gathered to the slots.
        h = fused_linear(fused_linear(offset, pos_in.weight, pos_in.bias, "gelu"), pos_out.weight)
        if isinstance(self.norm1, nn.BatchNorm1d):
            scale, shift = bn_affine(self.norm1)
            h += torch.addcmul(shift + pos_out.bias, x, scale)[idx]
        elif isinstance(self.norm1, nn.LayerNorm):
            h += F.layer_norm(x, (dim,), self.norm1.weight, self.norm1.bias + pos_out.bias)[idx]
        else:
            h += (_normalise(self.norm1, x, domain) + pos_out.bias)[idx]
        a = patch_attention(fused_linear(h, self.qkv.weight, self.qkv.bias), patches, self.heads)
        x = x + _apply_inference(self.proj, a[patches.slot_of])
        if not isinstance(self.ffn, GatedMLP):
            return x + self.ffn(_normalise(self.norm2, x, domain))
        if isinstance(self.norm2, nn.BatchNorm1d):
            return x + self.ffn.inference(x, *bn_affine(self.norm2))
        if isinstance(self.norm2, nn.LayerNorm):
            return x + self.ffn.inference(F.layer_norm(x, (dim,)), self.norm2.weight, self.norm2.bias)
        return x + self.ffn.inference(_normalise(self.norm2, x, domain))


@dataclass
class Level:
    """One stage's tokens: coordinates (voxel units of that stage), integer grid, batch, and the
    map from the previous stage's tokens to these (None at stage 0)."""

    coord: Tensor
    batch: Tensor
    inverse: Tensor | None = None
    patches: list[Patches] = field(default_factory=list)

    @property
    def grid(self) -> Tensor:
        return self.coord.floor().long().clamp(0, MAX_GRID - 1)


def grid_pool(level: Level) -> Level:
    """Stage s → s+1: one token per occupied voxel of twice the size (PTv3's grid pooling)."""
    coarse = level.grid // 2
    key = (level.batch << 48) | morton(coarse)
    _, inverse = torch.unique(key, return_inverse=True)
    m = int(inverse.max()) + 1 if len(inverse) else 0
    counts = torch.zeros(m, device=key.device).index_add_(0, inverse, torch.ones_like(inverse, dtype=torch.float32))
    coord = torch.zeros(m, 3, device=key.device).index_add_(0, inverse, level.coord / 2) / counts[:, None]
    batch = torch.zeros(m, dtype=torch.long, device=key.device).scatter_(0, inverse, level.batch)
    return Level(coord=coord, batch=batch, inverse=inverse)


def layout_patches(cfg: PTv3Config, level: Level, stage: int, *, transpose: bool) -> Patches:
    """The patches of one stage's tokens in the model's ``patch_layout``."""
    if cfg.patch_layout == "local":
        root_bits = max(0, LOCAL_ROOT_BITS - stage)
        return make_local_patches(level.grid, level.batch, cfg.patch, transpose=transpose, root_bits=root_bits)
    return make_patches(level.grid, level.batch, cfg.patch, transpose=transpose)


class PTv3(nn.Module):
    """Encoder stages with grid pooling between them, a U-Net decoder with unpooling, a cosine head."""

    def __init__(self, cfg: PTv3Config) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.channels
        self.embed = nn.Sequential(nn.Linear(cfg.in_channels, c[0]), nn.BatchNorm1d(c[0]), nn.GELU())
        self.encoder = nn.ModuleList()
        self.down = nn.ModuleList()
        n = 0
        for s, (dim, depth) in enumerate(zip(c, cfg.depths, strict=True)):
            if s:
                self.down.append(nn.Sequential(nn.Linear(c[s - 1], dim), _norm_act(dim)))
            blocks = []
            for _ in range(depth):
                blocks.append(Block(dim, cfg, transpose=bool(n % 2)))
                n += 1
            self.encoder.append(nn.ModuleList(blocks))
        self.up_coarse = nn.ModuleList()
        self.up_skip = nn.ModuleList()
        self.decoder = nn.ModuleList()
        for s in reversed(range(len(c) - 1)):
            self.up_coarse.append(nn.Sequential(nn.Linear(c[s + 1], c[s]), _norm_act(c[s])))
            self.up_skip.append(nn.Sequential(nn.Linear(c[s], c[s]), _norm_act(c[s])))
            blocks = []
            for _ in range(cfg.dec_depths[s]):
                blocks.append(Block(c[s], cfg, transpose=bool(n % 2)))
                n += 1
            self.decoder.append(nn.ModuleList(blocks))
        self.head = nn.Sequential(nn.Linear(c[0], c[0]), _norm_act(c[0]), nn.Linear(c[0], cfg.embed_dim))
        self.class_embed = nn.Parameter(torch.randn(cfg.num_classes, cfg.embed_dim))
        self.logit_scale = nn.Parameter(torch.tensor(10.0).log())
        #: Per stage, the token each input point falls in (set by the last forward pass).
        self._to_points: list[Tensor] = []

    # -- routing bookkeeping --------------------------------------------------------------------
    def routed(self) -> list[tuple[int, RoutedProjection]]:
        """(stage, layer) for every MoE layer, in forward order (encoder, then decoder)."""
        out: list[tuple[int, RoutedProjection]] = []
        for s, blocks in enumerate(self.encoder):
            out += [(s, m) for b in blocks for m in b.modules() if isinstance(m, RoutedProjection)]
        for i, blocks in enumerate(self.decoder):
            s = len(self.cfg.channels) - 2 - i
            out += [(s, m) for b in blocks for m in b.modules() if isinstance(m, RoutedProjection)]
        return out

    def balance_loss(self) -> Tensor:
        """Card, section 2.4: mean over MoE layers of E·Σ_e f_e·P̄_e (Switch eq. 4)."""
        losses = [switch_load_balance_loss(m.routing) for _, m in self.routed() if m.routing is not None]
        return torch.stack(losses).mean() if losses else torch.zeros(())

    def point_routing(self) -> list[Tensor]:
        """Per MoE layer, the top-1 expert of the token each input point falls in, [N] int64 (after a
        forward pass): what the expert-usage charts count."""
        maps = self._to_points
        return [m.routing.expert_ids[:, 0][maps[s]] for s, m in self.routed() if m.routing is not None]

    # -- forward -----------------------------------------------------------------------------------
    def _patches(self, level: Level, blocks: Any, stage: int) -> list[Patches]:
        cache: dict[bool, Patches] = {}
        out = []
        for b in blocks:
            if b.transpose not in cache:
                cache[b.transpose] = layout_patches(self.cfg, level, stage, transpose=b.transpose)
            out.append(cache[b.transpose])
        return out

    def features(self, points: PointBatch) -> Tensor:
        """[N, C0] per-point features after the decoder."""
        if self.cfg.domains and points.domain is None:
            raise ValueError("this model normalises per dataset (PPT): every sample needs its dataset id")
        level = Level(coord=points.coord, batch=points.batch)
        levels = [level]

        def domain(s: int) -> Tensor | None:
            return None if points.domain is None or not self.cfg.domains else points.domain[levels[s].batch]

        x = linear_bn_act(self.embed, points.feat)
        skips: list[Tensor] = []
        for s, blocks in enumerate(self.encoder):
            if s:
                new = grid_pool(levels[-1])
                x = torch.full(
                    (len(new.coord), x.shape[-1]), -torch.inf, device=x.device, dtype=x.dtype
                ).scatter_reduce(0, new.inverse[:, None].expand(-1, x.shape[-1]), x, "amax", include_self=True)
                x = linear_bn_act(self.down[s - 1], x)
                levels.append(new)
            for b, patches in zip(blocks, self._patches(levels[s], blocks, s), strict=True):
                x = b(x, levels[s].coord, patches, domain(s))
            skips.append(x)
        # Map stage-0 points to the token they fall in at each stage (for expert-usage statistics).
        to_points = [torch.arange(len(points.coord), device=x.device)]
        for lv in levels[1:]:
            assert lv.inverse is not None
            to_points.append(lv.inverse[to_points[-1]])
        self._to_points = to_points
        for i, blocks in enumerate(self.decoder):
            s = len(levels) - 2 - i
            inverse = levels[s + 1].inverse
            assert inverse is not None
            x = linear_bn_act(self.up_coarse[i], x)[inverse] + linear_bn_act(self.up_skip[i], skips[s])
            for b, patches in zip(blocks, self._patches(levels[s], blocks, s), strict=True):
                x = b(x, levels[s].coord, patches, domain(s))
        return x

    def forward(self, points: PointBatch) -> Tensor:
        """[N, num_classes] logits: s·cos(head(f), class embedding)."""
        f = self.features(points)
        if _fused(*self.head.modules()):
            z = fused_linear(linear_bn_act(self.head[:2], f), self.head[2].weight, self.head[2].bias)
        else:
            z = self.head(f)
        z = F.normalize(z, dim=-1)
        return self.logit_scale.exp().clamp(max=100) * z @ F.normalize(self.class_embed, dim=-1).T


def parameter_counts(model: PTv3) -> dict[str, int]:
    """Total parameters, and those active per token (an MoE layer counts k of its E experts)."""
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for _, layer in model.routed():
        per_expert = (layer.moe.gate_up_proj.numel() + layer.moe.down_proj.numel()) // layer.moe.num_experts
        inactive += per_expert * (layer.moe.num_experts - layer.moe.top_k)
    return {"total": total, "active": total - inactive}


def restrict_logits(logits: Tensor, allowed: Tensor) -> Tensor:
    """Logits outside each point's dataset label set → −inf (card, section 2.7). allowed: [N, K] bool."""
    return logits.masked_fill(~allowed, -torch.inf)
