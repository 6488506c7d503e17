"""mnemod: a small memory-maintenance daemon for LLM agents.

The library works on the files without a daemon; see `mnemod.open`.

The store (`open`, `Store`, `Entry`) loads on first use: an agent that only imports
`mnemod.client`, and the Claude Code hook that runs on every prompt, do not pay for the
engine, the tokenizer and the ranking at start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mnemod.errors import (
    ConfigError,
    CorruptIndexError,
    InvalidInputError,
    LockedError,
    MnemodError,
    NotFoundError,
)

if TYPE_CHECKING:
    from mnemod.api import Store, open_store
    from mnemod.domain.model import Entry

    open = open_store

__version__ = "0.1.0"

_LAZY = {
    "open": ("mnemod.api", "open_store"),
    "open_store": ("mnemod.api", "open_store"),
    "Store": ("mnemod.api", "Store"),
    "Entry": ("mnemod.domain.model", "Entry"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'mnemod' has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


__all__ = [
    "ConfigError",
    "CorruptIndexError",
    "Entry",
    "InvalidInputError",
    "LockedError",
    "MnemodError",
    "NotFoundError",
    "Store",
    "__version__",
    "open",
    "open_store",
]
