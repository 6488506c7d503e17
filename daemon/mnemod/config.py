"""Configuration: frozen dataclasses built from TOML or a dict, `MNEMOD_<SECTION>_<KEY>` on top.

Precedence (lowest first): defaults, the file (or dict), environment, CLI flags (passed in as
`overrides`). Every value is validated here, at startup, with `source:section.key: reason`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from mnemod.durations import format_duration, parse_duration
from mnemod.errors import ConfigError

DAY = timedelta(days=1)


@dataclass(frozen=True)
class TTLConfig:
    types: Mapping[str, timedelta] = field(
        default_factory=lambda: {
            "context": 14 * DAY,
            "preference": 30 * DAY,
            "progress": 7 * DAY,
            "relation": 30 * DAY,
            "insight": 21 * DAY,
        }
    )
    access_extension: timedelta = 7 * DAY
    max_lifetime: timedelta = 90 * DAY


@dataclass(frozen=True)
class DedupConfig:
    threshold: float = 0.382  # the score (weighted, aligned, balanced Jaccard less penalties)
    floor: float = 0.45  # the plain keyword Jaccard every merge reaches (domain.dedup)


@dataclass(frozen=True)
class PromotionConfig:
    min_accesses: int = 3
    policy: str = "manual"


@dataclass(frozen=True)
class HotConfig:
    max_entries: int = 5000


@dataclass(frozen=True)
class RedisConfig:
    url: str = ""
    prefix: str = "mnemod"
    socket_timeout: timedelta = timedelta(seconds=5)
    redis_server: str = "redis-server"
    socket_perm: int = 0o700  # embedded socket; 0o770 lets the daemon's group (agents) in


@dataclass(frozen=True)
class LimitsConfig:
    max_content_bytes: int = 65536
    max_keywords: int = 64
    max_tags: int = 32
    max_triggers: int = 16
    max_trigger_length: int = 256
    max_key_length: int = 200


@dataclass(frozen=True)
class TokensConfig:
    encoding: str = "cl100k_base"


@dataclass(frozen=True)
class ResolveConfig:
    default_budget: int = 1000


@dataclass(frozen=True)
class L1Config:
    dir: str = ""  # empty: <data-dir>/l1


@dataclass(frozen=True)
class ScheduleConfig:
    """Each job: an interval (`10m`) or a cron expression (`cron: 0 3 * * *`)."""

    expiry: str = "5m"
    gc: str = "1h"
    hot_refresh: str = "10m"
    snapshot: str = "2s"
    trim: str = "10m"
    heartbeat: str = "5s"


@dataclass(frozen=True)
class DaemonConfig:
    # `mnemod run` serves these; "*" adds every namespace found in the data folder or with
    # an events stream in Redis, looked for every `discover_interval`
    namespaces: tuple[str, ...] = ("default",)
    discover_interval: timedelta = timedelta(seconds=10)
    batch_size: int = 200
    block: timedelta = timedelta(seconds=1)
    drain_deadline: timedelta = timedelta(seconds=20)
    lease_ttl: timedelta = timedelta(seconds=15)
    watch_debounce: timedelta = timedelta(milliseconds=300)
    stream_max_len: int = 100000
    feed_max_len: int = 1000  # change-log records the feed keeps for followers behind
    group_access: bool = False  # memory files 0640 / folders 0750 instead of 0600 / 0700


@dataclass(frozen=True)
class LogConfig:
    level: str = "info"
    format: str = "auto"  # auto: console on a TTY, JSON lines otherwise


@dataclass(frozen=True)
class MetricsConfig:
    port: int = 0  # 0: off
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class Config:
    ttl: TTLConfig = field(default_factory=TTLConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    promotion: PromotionConfig = field(default_factory=PromotionConfig)
    hot: HotConfig = field(default_factory=HotConfig)
    redis: RedisConfig = field(default_factory=RedisConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    tokens: TokensConfig = field(default_factory=TokensConfig)
    resolve: ResolveConfig = field(default_factory=ResolveConfig)
    l1: L1Config = field(default_factory=L1Config)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    log: LogConfig = field(default_factory=LogConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    source: str = "defaults"

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.ttl.types)


_SECTIONS: dict[str, type[Any]] = {
    f.name: f.type if isinstance(f.type, type) else globals()[str(f.type)]
    for f in dataclasses.fields(Config)
    if f.name != "source"
}
_TTL_EXTRA = ("access_extension", "max_lifetime")


def load_config(
    source: str | Path | Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Build the effective config. `source` is a TOML path, a dict tree, or None for defaults."""
    tree: dict[str, dict[str, tuple[Any, str]]] = {}
    label = "defaults"
    if isinstance(source, (str, Path)):
        path = Path(source)
        label = str(path)
        _merge(tree, _read_toml(path), label)
    elif source is not None:
        label = "config"
        _merge(tree, source, label)
    env = os.environ if environ is None else environ
    for name, value in sorted(env.items()):
        if not name.startswith("MNEMOD_"):
            continue
        rest = name[len("MNEMOD_") :].lower()
        section, _, key = rest.partition("_")
        if section in _SECTIONS and key:
            tree.setdefault(section, {})[key] = (value, name)
    for section, values in (overrides or {}).items():
        for key, value in values.items():
            if value is not None:
                flag = f"--{section}-{key}".replace("_", "-")  # --redis-url, --metrics-port
                tree.setdefault(section, {})[key] = (value, flag)
    return _build(tree, label)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError as exc:
        raise ConfigError(str(path), "-", "file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "-", f"not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:  # TOML is UTF-8; tomllib does not say where it is not
        raise ConfigError(str(path), "-", f"not valid UTF-8 (byte {exc.start})") from exc
    except OSError as exc:
        raise ConfigError(str(path), "-", f"cannot read: {exc.strerror}") from exc


def _merge(
    tree: dict[str, dict[str, tuple[Any, str]]], data: Mapping[str, Any], label: str
) -> None:
    for section, values in data.items():
        if section not in _SECTIONS:
            raise ConfigError(label, section, f"unknown section (known: {', '.join(_SECTIONS)})")
        if not isinstance(values, Mapping):
            raise ConfigError(label, section, "must be a table")
        for key, value in values.items():
            tree.setdefault(section, {})[key] = (value, label)


def _build(tree: dict[str, dict[str, tuple[Any, str]]], label: str) -> Config:
    sections: dict[str, Any] = {}
    for section, cls in _SECTIONS.items():
        values = tree.get(section, {})
        if section == "ttl":
            sections[section] = _build_ttl(values)
            continue
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, (value, source) in values.items():
            if key not in known:
                raise ConfigError(
                    source, f"{section}.{key}", f"unknown key (known: {', '.join(known)})"
                )
            default = getattr(cls(), key)
            kwargs[key] = _convert(value, default, source, f"{section}.{key}")
        sections[section] = cls(**kwargs)
    config = Config(**sections, source=label)
    _validate(config, tree)
    return config


def _build_ttl(values: dict[str, tuple[Any, str]]) -> TTLConfig:
    default = TTLConfig()
    types = dict(default.types)
    extras: dict[str, timedelta] = {}
    for key, (value, source) in values.items():
        duration = _convert(value, timedelta(), source, f"ttl.{key}")
        if duration <= timedelta():
            raise ConfigError(source, f"ttl.{key}", "must be longer than 0")
        if key in _TTL_EXTRA:
            extras[key] = duration
        else:
            if not key.isidentifier() or not key.islower():
                raise ConfigError(source, f"ttl.{key}", "a memory type is a lowercase word")
            types[key] = duration
    return TTLConfig(types=types, **extras)


def _convert(value: Any, default: Any, source: str, key: str) -> Any:
    converter = _CONVERTERS[type(default)]
    try:
        return converter(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(source, key, str(exc)) from exc


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {
        "1",
        "true",
        "yes",
        "on",
        "0",
        "false",
        "no",
        "off",
    }:
        return value.lower() in {"1", "true", "yes", "on"}
    raise ValueError(f"expected true or false, got {value!r}")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)  # 0o770 and 0x10 as well as 42
        except ValueError:
            pass
    raise ValueError(f"expected an integer, got {value!r}")


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ValueError(f"expected a number, got {value!r}")


def _to_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _to_names(value: Any) -> tuple[str, ...]:
    """A list of names, or one string of them separated by commas (`a,b`, as in MNEMOD_*)."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a list of names, got {value!r}")
    names = tuple(dict.fromkeys(v.strip() for v in value if v.strip()))
    if not names:
        raise ValueError("expected at least one name")
    return names


def _to_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    if isinstance(value, str):
        return parse_duration(value)
    raise ValueError(f"expected a duration like 14d or 10m, got {value!r}")


_CONVERTERS: dict[type, Callable[[Any], Any]] = {
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
    timedelta: _to_duration,
    tuple: _to_names,
}


def _validate(config: Config, tree: dict[str, dict[str, tuple[Any, str]]]) -> None:
    def check(section: str, key: str, ok: bool, reason: str) -> None:
        if not ok:
            source = tree.get(section, {}).get(key, (None, config.source))[1]
            raise ConfigError(source, f"{section}.{key}", reason)

    check("dedup", "threshold", 0.0 < config.dedup.threshold <= 1.0, "must be in (0, 1]")
    check("dedup", "floor", 0.0 < config.dedup.floor <= 1.0, "must be in (0, 1]")
    check("promotion", "min_accesses", config.promotion.min_accesses >= 1, "must be ≥ 1")
    check(
        "promotion",
        "policy",
        config.promotion.policy in {"manual", "auto"},
        "must be manual or auto",
    )
    check("hot", "max_entries", config.hot.max_entries >= 0, "must be ≥ 0")
    check("limits", "max_content_bytes", config.limits.max_content_bytes >= 16, "must be ≥ 16")
    check("resolve", "default_budget", config.resolve.default_budget >= 1, "must be ≥ 1")
    check(
        "log",
        "level",
        config.log.level in {"debug", "info", "warning", "error"},
        "must be debug, info, warning or error",
    )
    check(
        "log",
        "format",
        config.log.format in {"auto", "json", "console"},
        "must be auto, json or console",
    )
    check("daemon", "batch_size", 1 <= config.daemon.batch_size <= 10000, "must be 1–10000")
    check("daemon", "feed_max_len", config.daemon.feed_max_len >= 100, "must be at least 100")
    check(
        "daemon",
        "discover_interval",
        config.daemon.discover_interval >= timedelta(seconds=1),
        "must be 1s or longer",
    )
    check("metrics", "port", 0 <= config.metrics.port <= 65535, "must be a TCP port or 0 (off)")
    check(
        "redis",
        "prefix",
        bool(config.redis.prefix) and ":" not in config.redis.prefix,
        "must be non-empty without ':'",
    )
    url = config.redis.url
    check(
        "redis",
        "url",
        url == "" or url.startswith(URL_SCHEMES),
        f"must start with {', '.join(URL_SCHEMES)} (or be empty for the embedded server)",
    )
    for key in dataclasses.asdict(config.schedule):
        spec = getattr(config.schedule, key)
        try:
            parse_schedule(spec)
        except ValueError as exc:
            check("schedule", key, False, str(exc))


def resolve_l1_dir(config: Config, data_dir: Path) -> Path:
    """The L1 folder: `l1.dir`, else `l1` in the data folder."""
    return Path(config.l1.dir) if config.l1.dir else data_dir / "l1"


def parse_schedule(spec: str) -> tuple[str, Any]:
    """`10m` → ("interval", timedelta); `cron: 0 3 * * *` → ("cron", "0 3 * * *")."""
    text = spec.strip()
    if text.startswith("cron:"):
        expression = text[len("cron:") :].strip()
        if len(expression.split()) != 5:
            raise ValueError(f"a cron expression has 5 fields, got {expression!r}")
        return ("cron", expression)
    interval = parse_duration(text)
    if interval <= timedelta():
        raise ValueError("an interval must be longer than 0")
    return ("interval", interval)


def config_as_tree(
    config: Config, redact: bool = True, seconds: bool = False
) -> dict[str, dict[str, Any]]:
    """The effective config as a TOML-shaped tree (password redacted). Durations are text
    (`14d`), or with `seconds` numbers of seconds, which the config accepts as well."""

    def duration(value: timedelta) -> str | float | int:
        if not seconds:
            return format_duration(value)
        total = value.total_seconds()
        return int(total) if total.is_integer() else total

    tree: dict[str, dict[str, Any]] = {}
    for section in _SECTIONS:
        value = getattr(config, section)
        if section == "ttl":
            entries = {name: duration(d) for name, d in value.types.items()}
            entries["access_extension"] = duration(value.access_extension)
            entries["max_lifetime"] = duration(value.max_lifetime)
            tree[section] = entries
            continue
        rendered: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if isinstance(item, timedelta):
                item = duration(item)
            rendered[f.name] = list(item) if isinstance(item, tuple) else item
        tree[section] = rendered
    if redact:
        tree["redis"]["url"] = redact_url(config.redis.url)
    return tree


URL_SCHEMES = (
    "redis://",
    "rediss://",
    "unix://",
    "redis+cluster://",
    "rediss+cluster://",
    "redis+sentinel://",
    "rediss+sentinel://",
)
"""The `redis.url` forms (redisio.connection builds their clients; docs/operations.md)."""


def redact_url(url: str) -> str:
    """`redis://user:secret@host` → `redis://user:***@host`; also `?password=` query values
    (and `sentinel_password=`)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        credentials, _, host = authority.rpartition("@")
        user, colon, _password = credentials.partition(":")
        authority = f"{user}:***@{host}" if colon else f"***@{host}"
    rebuilt = f"{scheme}://{authority}{slash}{tail}"
    if "password=" in rebuilt:
        head, _, query = rebuilt.partition("?")
        parts = [
            f"{p.partition('=')[0]}=***" if p.partition("=")[0].endswith("password") else p
            for p in query.split("&")
        ]
        rebuilt = f"{head}?{'&'.join(parts)}"
    return rebuilt
