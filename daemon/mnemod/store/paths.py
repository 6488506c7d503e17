"""Where a namespace's files live.

`<data>/<namespace>/{log/, l2/, l3/index.json, l3/listing.json, l3/archive.jsonl, history.jsonl,
.lock}`, and
`<data>/.diverged/<namespace>-<time>/`: copies a follower set aside.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from mnemod.errors import InvalidInputError

NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DEFAULT_NAMESPACE = "default"
ASIDE_FOLDER = ".diverged"  # under the data folder: not a namespace (names start alnum)


def default_data_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("MNEMOD_DATA_DIR") or "./.mnemod")


def check_namespace(namespace: str) -> str:
    if not NAMESPACE_PATTERN.fullmatch(namespace):
        raise InvalidInputError(
            "namespace", f"{namespace!r}: use 1–64 letters, digits, '_', '.' or '-'"
        )
    return namespace


@dataclass(frozen=True)
class NamespacePaths:
    data_dir: Path
    namespace: str

    @property
    def root(self) -> Path:
        return self.data_dir / self.namespace

    @property
    def l2_dir(self) -> Path:
        return self.root / "l2"

    @property
    def l3_dir(self) -> Path:
        return self.root / "l3"

    @property
    def index(self) -> Path:
        return self.l3_dir / "index.json"

    @property
    def archive(self) -> Path:
        return self.l3_dir / "archive.jsonl"

    @property
    def history(self) -> Path:
        return self.root / "history.jsonl"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    @property
    def set_aside(self) -> list[Path]:
        """The copies of this namespace set aside (oldest first; store.replica): kept for
        a person to look at and remove (`mnemod doctor` warns of them, `status` lists them)."""
        pattern = re.compile(rf"{re.escape(self.namespace)}-\d{{8}}T\d{{12}}Z")
        try:
            found = [p for p in (self.data_dir / ASIDE_FOLDER).iterdir() if p.is_dir()]
        except FileNotFoundError:
            return []
        return sorted(p for p in found if pattern.fullmatch(p.name))


def list_namespaces(data_dir: Path) -> list[str]:
    if not data_dir.is_dir():
        return []
    return sorted(
        p.name
        for p in data_dir.iterdir()
        if p.is_dir()
        and NAMESPACE_PATTERN.fullmatch(p.name)
        and ((p / "l3").is_dir() or (p / "log").is_dir())
    )
