"""The example config documents every setting with its real default."""

from __future__ import annotations

import tomllib
from pathlib import Path

from mnemod.config import config_as_tree, load_config

EXAMPLE = Path(__file__).parent.parent / "config" / "mnemod.toml"


def test_example_config_lists_every_key_with_its_default() -> None:
    documented = tomllib.loads(EXAMPLE.read_text())
    defaults = config_as_tree(load_config(None, environ={}), redact=False)
    assert {s: set(v) for s, v in documented.items()} == {s: set(v) for s, v in defaults.items()}
    loaded = config_as_tree(load_config(EXAMPLE, environ={}), redact=False)
    assert loaded == defaults
