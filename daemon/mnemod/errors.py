"""Every error mnemod raises on purpose: one root, narrow subclasses that say what and where.

Only the CLI maps these to exit codes: `UsageError`/`InvalidInputError` → 2, the rest → 1.
"""

from __future__ import annotations

from pathlib import Path


class MnemodError(Exception):
    """Root of mnemod's own errors."""

    exit_code = 1


class UsageError(MnemodError):
    """A command line argparse refuses (unknown flag, missing argument, bad choice)."""

    exit_code = 2


class InvalidInputError(MnemodError):
    """Bad input from outside (an event, a CLI argument, a request): names the field."""

    exit_code = 2

    def __init__(self, field: str, reason: str, where: str = "") -> None:
        self.field = field
        self.reason = reason
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}: {reason}")


class ConfigError(MnemodError):
    """A config value that cannot be used; message is `file:key: reason`, or for a
    command-line flag `--flag (key): reason`."""

    exit_code = 2

    def __init__(self, source: str, key: str, reason: str) -> None:
        self.source = source
        self.key = key
        self.reason = reason
        where = f"{source} ({key})" if source.startswith("--") else f"{source}:{key}"
        super().__init__(f"{where}: {reason}")


class CorruptFileError(MnemodError):
    """A data file that cannot be parsed; it is left untouched for a person to look at."""

    def __init__(self, path: Path, reason: str, line: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.line = line
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {reason}")


class CorruptIndexError(CorruptFileError):
    """index.json (and its .bak) cannot be read: mnemod refuses rather than overwrite it."""


class LockedError(MnemodError):
    """Another writer holds the namespace."""

    def __init__(self, path: Path, holder: str) -> None:
        self.path = path
        self.holder = holder
        super().__init__(
            f"{path}: namespace is locked by another writer ({holder}); "
            "stop it, or send changes through the running daemon"
        )


class NotFoundError(MnemodError):
    """No entry with that id or key."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"not found: {what}")


class RedisUnavailableError(MnemodError):
    """Redis cannot be reached (the message never carries a password)."""
