"""mnemod: a small memory-maintenance daemon for LLM agents.

The library works on the files without a daemon; see `mnemod.open`.
"""

from mnemod.api import Store, open_store
from mnemod.domain.model import Entry
from mnemod.errors import (
    ConfigError,
    CorruptIndexError,
    InvalidInputError,
    LockedError,
    MnemodError,
    NotFoundError,
)

__version__ = "0.1.0"

open = open_store

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
