"""What every CLI command shares: the parsed flags, the config, the clock, and output."""

from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mnemod.cli.progress import phase
from mnemod.cli.terminal import for_stream, is_terminal
from mnemod.clock import Clock, clock_from_env
from mnemod.config import Config, load_config, resolve_l1_dir
from mnemod.errors import InvalidInputError
from mnemod.store.paths import (
    DEFAULT_NAMESPACE,
    NamespacePaths,
    check_namespace,
    default_data_dir,
)

if TYPE_CHECKING:  # loaded by the commands that open the files (see mnemod/__init__.py)
    from mnemod.domain.model import Entry
    from mnemod.store.engine import Engine


def data_dir_source(args: argparse.Namespace) -> str:
    """Where the data folder was given, for error messages."""
    if args.data_dir:
        return "--data-dir"
    return "MNEMOD_DATA_DIR" if os.environ.get("MNEMOD_DATA_DIR") else "data folder"


@dataclass
class Context:
    args: argparse.Namespace
    config: Config
    clock: Clock
    data_dir: Path
    namespace: str
    as_json: bool
    out: TextIO = sys.stdout

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Context:
        overrides: dict[str, dict[str, Any]] = {"redis": {"url": args.redis_url}}
        if getattr(args, "metrics_port", None) is not None:
            overrides["metrics"] = {"port": args.metrics_port}
        config = load_config(args.config, overrides=overrides)
        data_dir = Path(args.data_dir) if args.data_dir else default_data_dir()
        if data_dir.exists() and not data_dir.is_dir():
            raise InvalidInputError(data_dir_source(args), f"{data_dir} is not a folder")
        if getattr(args, "several_namespaces", False):
            namespace = DEFAULT_NAMESPACE  # `run`: see served_namespaces
        else:
            namespace = check_namespace(args.namespace)
        return cls(
            args=args,
            config=config,
            clock=clock_from_env(),
            data_dir=data_dir,
            namespace=namespace,
            as_json=args.json,
        )

    def make_data_dir(self) -> None:
        """Create the data folder (and its parents) if missing, or say why it cannot be."""
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInputError(
                data_dir_source(self.args), f"cannot create {self.data_dir}: {exc.strerror}"
            ) from exc
        if not os.access(self.data_dir, os.W_OK | os.X_OK):
            raise InvalidInputError(
                data_dir_source(self.args), f"{self.data_dir} is not writable by uid {os.getuid()}"
            )

    @property
    def paths(self) -> NamespacePaths:
        return NamespacePaths(self.data_dir, self.namespace)

    @property
    def l1_dir(self) -> Path:
        return resolve_l1_dir(self.config, self.data_dir)

    @contextmanager
    def engine(self, write: bool) -> Iterator[Engine]:
        """The namespace's engine: locked for writing, or a read-only view."""
        from mnemod.store.engine import Engine

        with phase("reading the index"):
            engine = Engine(
                self.paths,
                self.config,
                self.clock,
                l1_dir=self.l1_dir,
                actor="cli",
                readonly=not write,
            )
        try:
            yield engine
        finally:
            engine.close()

    # ---- output --------------------------------------------------------------------
    def emit(self, data: Any, text: str) -> None:
        """JSON with --json, else the human text (control characters escaped on a
        terminal: see cli/terminal.py)."""
        if self.as_json:
            self.out.write(json.dumps(data, ensure_ascii=False, indent=None) + "\n")
        elif text:
            self.out.write(for_stream(self.out, text.rstrip("\n")) + "\n")

    def emit_lines(self, lines: list[str], more: bytes | memoryview) -> None:
        """The human text of `lines`, then of `more` (UTF-8 lines, each ended by a newline):
        the bytes of `more` written as they are where the stream takes UTF-8 and is no
        terminal. At 100,000 entries decoding, copying and encoding them again was a third
        of `list`."""
        raw = getattr(self.out, "buffer", None)
        encoding = codecs.lookup(getattr(self.out, "encoding", None) or "ascii").name
        if raw is None or encoding != "utf-8" or is_terminal(self.out):
            self.emit(None, "\n".join([*lines, str(more, "utf-8")]))
            return
        if lines:
            self.out.write("\n".join(lines) + "\n")
        self.out.flush()
        raw.write(more)

    def entry_line(self, entry: Entry, layer: str = "") -> str:
        return self.row_line(entry.to_dict(), layer)

    def row_line(self, row: dict[str, Any], layer: str = "") -> str:
        """An entry's line from its `to_dict()`."""
        from mnemod.files.listing_file import row_line

        return row_line(row, layer)

    def entry_detail(self, entry: Entry, layer: str) -> str:
        data = entry.to_dict()
        lines = [f"{name}: {json.dumps(value, ensure_ascii=False)}" for name, value in data.items()]
        return "\n".join([f"layer: {layer}", *lines])
