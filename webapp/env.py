"""Tiny typed readers for settings from the environment, each with a working default.

``NAME_FILE`` (a path to a file holding the value) wins over ``NAME``, so secrets can come from
Docker or Kubernetes secret files instead of the process environment.
"""

from __future__ import annotations

import os
from pathlib import Path

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = env_str(name, "").strip().lower()
    if name not in os.environ and f"{name}_FILE" not in os.environ:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: set it to true or false")


def env_int(name: str, default: int) -> int:
    raw = env_str(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: set it to a whole number") from None


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in env_str(name, default).split(",") if item.strip()]
