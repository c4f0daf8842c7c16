"""Checks on a checkpoint that need only its small files, run before any weight is read.

``check_config`` refuses configs that cannot describe a working MoE model and quantised checkpoints
(FP8, MXFP4, ...: the adapter edits float experts); ``check_weight_dtypes`` refuses quantised
tensors a config forgot to declare, from the safetensors headers alone; ``check_tokenizer`` refuses
a missing tokenizer (where the job needs one) or one whose ids do not fit the embedding, which
would otherwise crash deep inside the forward with an index error. Every refusal says what to do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlcore.hf.architectures import HFModelError

#: safetensors dtype codes of floating-point weights the adapter edits.
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}
#: Index and flag tensors that checkpoints legitimately hold beside float weights.
INDEX_DTYPES = {"I64", "I32", "I16", "I8", "U8", "BOOL"}
_QUANT_NAMES = {"F8_E4M3": "FP8 (E4M3)", "F8_E5M2": "FP8 (E5M2)", "F8_E8M0": "MX scales (E8M0)", "F4": "FP4"}


def check_config(raw: dict[str, Any]) -> None:
    """Refuse a quantised checkpoint (naming its format) and a config with impossible sizes."""
    quant = raw.get("quantization_config") or raw.get("text_config", {}).get("quantization_config")
    if quant:
        method = str(quant.get("quant_method") or quant.get("format") or "unknown").upper()
        raise HFModelError(
            f"The checkpoint's weights are quantised ({method}); MoE Lab edits float experts. Dequantise it to "
            "bfloat16 first (load it with transformers on a machine that supports the format, then save_pretrained "
            "with dtype=torch.bfloat16) and upload that."
        )
    problems = [
        f"{name} = {raw.get(name)!r}"
        for name in ("hidden_size", "num_hidden_layers", "vocab_size")
        if name in raw and not (isinstance(raw[name], int) and raw[name] > 0)
    ]
    if problems:
        raise HFModelError(f"config.json is not a usable model config ({', '.join(problems)}); fix those fields.")


def check_weight_dtypes(headers: dict[str, dict[str, Any]]) -> None:
    """Refuse tensors in quantised formats, from the safetensors headers (file name → header)."""
    found: dict[str, str] = {}
    for file, header in headers.items():
        for name, entry in header.items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            dtype = str(entry.get("dtype"))
            if dtype not in FLOAT_DTYPES | INDEX_DTYPES:
                found.setdefault(dtype, f"{file}: {name}")
    if found:
        formats = ", ".join(_QUANT_NAMES.get(d, d) for d in sorted(found))
        first = next(iter(found.values()))
        raise HFModelError(
            f"The checkpoint holds quantised tensors ({formats}, e.g. {first}); MoE Lab edits float experts. "
            "Dequantise it to bfloat16 and upload that."
        )


def checkpoint_dtype(headers: dict[str, dict[str, Any]]) -> str | None:
    """The floating dtype most weight bytes are stored in ("BF16", "F32", ...)."""
    total: dict[str, int] = {}
    for header in headers.values():
        for name, entry in header.items():
            if name != "__metadata__" and isinstance(entry, dict) and entry.get("dtype") in FLOAT_DTYPES:
                start, end = entry.get("data_offsets", (0, 0))
                total[entry["dtype"]] = total.get(entry["dtype"], 0) + int(end) - int(start)
    return max(total, key=total.__getitem__) if total else None


def check_tokenizer(path: Path, vocab_rows: int, *, required: bool) -> None:
    """A tokenizer next to the config whose every id is below the embedding's ``vocab_rows``."""
    path = Path(path)
    files = [path / "tokenizer.json", path / "tokenizer_config.json"]
    if not any(f.is_file() for f in files):
        if required:
            raise HFModelError(
                "The checkpoint has no tokenizer; include tokenizer.json (and tokenizer_config.json) next to "
                "config.json, as save_pretrained writes them."
            )
        return
    size = _tokenizer_size(path)
    if size is not None and size > vocab_rows:
        raise HFModelError(
            f"The tokenizer has {size} token ids but the model's embedding has {vocab_rows} rows, so some ids "
            "would index past it; upload the tokenizer that belongs to this checkpoint (or resize the embedding)."
        )


def _tokenizer_size(path: Path) -> int | None:
    """1 + the largest id the tokenizer can emit (its vocabulary plus added tokens)."""
    file = path / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise HFModelError("tokenizer.json is not valid JSON; re-save the tokenizer with save_pretrained.") from None
    ids: list[int] = []
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids += [int(v) for v in vocab.values() if isinstance(v, int)]
    elif isinstance(vocab, list):  # Unigram: a list of [piece, score]
        ids.append(len(vocab) - 1)
    ids += [int(t["id"]) for t in data.get("added_tokens") or [] if isinstance(t, dict) and "id" in t]
    return max(ids) + 1 if ids else None
