"""Config: defaults, TOML, MNEMOD_* overrides, CLI flags on top, errors as file:key: reason."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from mnemod.config import config_as_tree, load_config, redact_url
from mnemod.errors import ConfigError


def test_defaults_match_the_design() -> None:
    config = load_config(None, environ={})
    days = {name: d.days for name, d in config.ttl.types.items()}
    assert days == {"context": 14, "preference": 30, "progress": 7, "relation": 30, "insight": 21}
    assert config.ttl.access_extension == timedelta(days=7)
    assert config.ttl.max_lifetime == timedelta(days=90)
    assert (config.dedup.threshold, config.dedup.floor) == (0.382, 0.45)
    assert config.promotion.min_accesses == 3
    assert config.promotion.policy == "manual"
    assert config.hot.max_entries == 5000


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "mnemod.toml"
    path.write_text('[dedup]\nthreshold = 0.6\n[ttl]\ncontext = "3650d"\n[hot]\nmax_entries = 10\n')
    config = load_config(
        path,
        environ={"MNEMOD_DEDUP_THRESHOLD": "0.7", "MNEMOD_HOT_MAX_ENTRIES": "20"},
        overrides={"hot": {"max_entries": 30}},
    )
    assert config.dedup.threshold == 0.7
    assert config.ttl.types["context"] == timedelta(days=3650)
    assert config.hot.max_entries == 30


def test_dict_config_and_custom_type() -> None:
    config = load_config({"ttl": {"note": "2d", "access_extension": "1d"}}, environ={})
    assert "note" in config.types
    assert config.ttl.access_extension == timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[dedup]\nthreshold = "high"\n', ":dedup.threshold: expected a number"),
        ("[dedup]\nthreshold = 2.0\n", ":dedup.threshold: must be in (0, 1]"),
        ('[ttl]\ncontext = "soon"\n', ":ttl.context: not a duration"),
        ("[nope]\nx = 1\n", ":nope: unknown section"),
        ("[hot]\nsize = 1\n", ":hot.size: unknown key"),
        ('[promotion]\npolicy = "sometimes"\n', ":promotion.policy: must be manual or auto"),
        ("[dedup\n", ":-: not valid TOML"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert str(caught.value).startswith(str(path))
    assert expected in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """Saved in Latin-1 by an editor: exit 2 with the file named, not a traceback."""
    path = tmp_path / "latin1.toml"
    path.write_bytes("[resolve]\ndefault_budget = 300  # café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.toml:-: not valid UTF-8 \(byte 37\)"):
        load_config(path, environ={})


def test_env_error_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^MNEMOD_DEDUP_THRESHOLD:dedup.threshold"):
        load_config(None, environ={"MNEMOD_DEDUP_THRESHOLD": "abc"})


def test_redaction() -> None:
    assert redact_url("redis://app:s3cret@host:6379/0") == "redis://app:***@host:6379/0"
    assert redact_url("rediss://:s3cret@host") == "rediss://:***@host"
    assert (
        redact_url("unix:///run/r.sock?password=s3cret&db=1")
        == "unix:///run/r.sock?password=***&db=1"
    )
    config = load_config({"redis": {"url": "redis://u:pw@h:1/0"}}, environ={})
    assert "pw" not in str(config_as_tree(config))


def test_the_namespaces_a_daemon_serves(tmp_path: Path) -> None:
    assert load_config(None, environ={}).daemon.namespaces == ("default",)
    path = tmp_path / "mnemod.toml"
    path.write_text('[daemon]\nnamespaces = ["work", "home", "work"]\n')
    assert load_config(path, environ={}).daemon.namespaces == ("work", "home")
    env = {"MNEMOD_DAEMON_NAMESPACES": "a, b,*"}
    assert load_config(None, environ=env).daemon.namespaces == ("a", "b", "*")
    assert config_as_tree(load_config(path, environ={}))["daemon"]["namespaces"] == ["work", "home"]
    for bad in ("[]", "[1, 2]", "3"):
        path.write_text(f"[daemon]\nnamespaces = {bad}\n")
        with pytest.raises(ConfigError, match=r"daemon\.namespaces"):
            load_config(path, environ={})
    with pytest.raises(ConfigError, match=r"daemon\.discover_interval"):
        load_config({"daemon": {"discover_interval": "100ms"}}, environ={})
