"""Where every benchmark's JSON goes: one file per run, created with its folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(path: str | Path, payload: dict[str, Any]) -> None:
    """Write `payload` as indented JSON to `path` and say where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"written to {out}")
