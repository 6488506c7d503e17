"""What every CLI command shares: the parsed flags, the config, the clock, and output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from mnemod.clock import Clock, clock_from_env, format_time
from mnemod.config import Config, load_config
from mnemod.store.paths import NamespacePaths, check_namespace, default_data_dir

if TYPE_CHECKING:  # loaded by the commands that open the files (see mnemod/__init__.py)
    from mnemod.domain.model import Entry
    from mnemod.store.engine import Engine


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
        return cls(
            args=args,
            config=config,
            clock=clock_from_env(),
            data_dir=data_dir,
            namespace=check_namespace(args.namespace),
            as_json=args.json,
        )

    @property
    def paths(self) -> NamespacePaths:
        return NamespacePaths(self.data_dir, self.namespace)

    @property
    def l1_dir(self) -> Path:
        from mnemod.api import resolve_l1_dir

        return resolve_l1_dir(self.config, self.data_dir)

    @contextmanager
    def engine(self, write: bool) -> Iterator[Engine]:
        """The namespace's engine: locked for writing, or a read-only view."""
        from mnemod.store.engine import Engine

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
        """JSON with --json, else the human text."""
        if self.as_json:
            self.out.write(json.dumps(data, ensure_ascii=False, indent=None) + "\n")
        elif text:
            self.out.write(text.rstrip("\n") + "\n")

    def entry_line(self, entry: Entry, layer: str = "") -> str:
        expires = "never" if entry.expires_at is None else format_time(entry.expires_at)
        content = entry.content.replace("\n", " ")
        if len(content) > 80:
            content = content[:77] + "..."
        label = f" [{entry.key}]" if entry.key else ""
        where = f"{layer} " if layer else ""
        return (
            f"{entry.id}  {where}{entry.type:<10} imp={entry.importance} acc={entry.access_count} "
            f"expires={expires}{label}  {content}"
        )

    def entry_detail(self, entry: Entry, layer: str) -> str:
        data = entry.to_dict()
        lines = [f"{name}: {json.dumps(value, ensure_ascii=False)}" for name, value in data.items()]
        return "\n".join([f"layer: {layer}", *lines])
