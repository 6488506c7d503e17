"""The layers, read from the imports: a change that breaks one fails here, naming the line.

Every module under daemon/mnemod/ is parsed (imports inside functions, under TYPE_CHECKING
and literal `importlib.import_module` calls included) and held to the rule of its layer:
`domain` is pure and imports no other layer; `files`, `redisio` and `store` import nothing
above them; the library (`api`) and the agents' client never import the daemon or the CLI;
the shared modules beside the layers are leaves, so that using them brings no layer in.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "daemon"

LAYERS = (
    "mnemod.domain",
    "mnemod.files",
    "mnemod.redisio",
    "mnemod.store",
    "mnemod.runtime",
    "mnemod.cli",
    "mnemod.api",
    "mnemod.client",
)

# The modules beside the layers. Each must stay a leaf (it imports no layer): that is what
# lets domain, or any layer, use one without depending on what is above it.
LEAVES = (
    "mnemod.clock",
    "mnemod.config",
    "mnemod.durations",
    "mnemod.errors",
    "mnemod.ids",
    "mnemod.processes",
    "mnemod.tokens",
)


def _any(name: str) -> bool:
    return True


# What domain may take from the leaves, and why each is no I/O and no hidden input.
DOMAIN_MAY_USE: dict[str, Callable[[str], bool]] = {
    # exception classes, built from their fields
    "mnemod.errors": _any,
    # "14d" <-> timedelta, pure
    "mnemod.durations": _any,
    # pure conversions; utcnow, SystemClock and clock_from_env read the clock or the
    # environment, and domain is given `now`
    "mnemod.clock": {"format_time", "parse_time", "truncate"}.__contains__,
    # the id's form; new_id draws randomness, the caller makes ids
    "mnemod.ids": {"is_valid_id", "next_id"}.__contains__,
    # the counter's type; token_counter() loads tiktoken's encodings (disk, network), so
    # the caller builds the counter and passes it in
    "mnemod.tokens": {"TokenCounter", "estimate_tokens"}.__contains__,
    # the frozen settings dataclasses; load_config reads files and the environment
    "mnemod.config": lambda name: name.endswith("Config"),
}

# Modules whose use is I/O (or reads the clock), refused in domain.
DOMAIN_NO_IO = (
    # files and processes
    "os", "pathlib", "io", "builtins", "shutil", "tempfile", "glob", "fileinput", "fcntl",
    "mmap", "sqlite3", "shelve", "dbm", "subprocess", "signal", "multiprocessing",
    # network
    "socket", "ssl", "select", "selectors", "asyncio", "urllib", "http", "redis",
    # output: logs go out from the layers that own the work
    "logging", "structlog",
    # the clock (`now` is passed in) and tiktoken's encoding files
    "time", "tiktoken",
)  # fmt: skip
DOMAIN_NO_CALLS = {"open", "print", "input", "breakpoint"}
CLOCK_READS = {"now", "utcnow", "today"}
STANDARD_STREAMS = {"stdin", "stdout", "stderr"}


@dataclass(frozen=True)
class Rule:
    """Modules in `scope` (and under it) import nothing in `refused` (nor under it)."""

    name: str
    scope: tuple[str, ...]
    refused: tuple[str, ...]
    why: str


RULES = (
    Rule(
        "domain",
        ("mnemod.domain",),
        tuple(layer for layer in LAYERS if layer != "mnemod.domain"),
        "domain imports no other layer",
    ),
    Rule("domain-io", ("mnemod.domain",), DOMAIN_NO_IO, "domain does no I/O"),
    Rule(
        "files",
        ("mnemod.files",),
        ("mnemod.redisio", "mnemod.runtime", "mnemod.store", "mnemod.cli"),
        "files knows the on-disk formats, nothing above them",
    ),
    Rule(
        "redisio",
        ("mnemod.redisio",),
        ("mnemod.runtime", "mnemod.store", "mnemod.cli"),
        "redisio speaks Redis; the daemon decides",
    ),
    Rule(
        "store",
        ("mnemod.store",),
        ("mnemod.redisio", "mnemod.runtime", "mnemod.cli"),
        "the store works on the files without Redis or a daemon",
    ),
    Rule(
        "runtime",
        ("mnemod.runtime",),
        ("mnemod.cli",),
        "the CLI starts the daemon, never the reverse",
    ),
    Rule(
        "api-client",
        ("mnemod.api", "mnemod.client"),
        ("mnemod.runtime", "mnemod.cli"),
        "the library and the agents' client never load the daemon",
    ),
    Rule("leaves", LEAVES, LAYERS, "a shared module beside the layers imports no layer"),
)


@dataclass(frozen=True)
class Import:
    line: int
    target: str  # dotted: the module, or the module and the name taken from it
    statement: str  # as written, one name per statement

    def under(self, prefixes: tuple[str, ...]) -> bool:
        return any(self.target == p or self.target.startswith(p + ".") for p in prefixes)


@dataclass(frozen=True)
class Violation:
    rule: str
    module: str
    path: str
    line: int
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.module}: {self.what} ({self.why})"


def in_scope(module: str, scope: tuple[str, ...]) -> bool:
    return any(module == s or module.startswith(s + ".") for s in scope)


def imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[Import]:
    """Every import anywhere in the tree; relative ones resolved against `module`."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(node.lineno, alias.name, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            written = "." * node.level + (node.module or "")
            base = node.module or ""
            if node.level:
                parts = package[: len(package) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                target = base if alias.name == "*" else f"{base}.{alias.name}"
                yield Import(node.lineno, target, f"from {written} import {alias.name}")
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                yield Import(node.lineno, argument.value, ast.unparse(node))
            else:  # not a name the check can read: refused by every rule
                yield Import(node.lineno, "<dynamic>", ast.unparse(node))


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def _domain_may_use(found: Import) -> bool:
    if not found.target.startswith("mnemod.") or found.under(("mnemod.domain",)):
        return True
    for leaf, allowed in DOMAIN_MAY_USE.items():
        if found.target == leaf:
            return allowed is _any  # `import mnemod.clock` takes everything in it
        if found.target.startswith(leaf + "."):
            return allowed(found.target.removeprefix(leaf + ".").split(".")[0])
    return False


def _domain_io_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in DOMAIN_NO_CALLS:
                yield node.lineno, f"calls {node.func.id}()"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else ""
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else owner_name
            if node.func.attr in CLOCK_READS and owner_name in {"datetime", "date"}:
                yield node.lineno, f"reads the clock: {ast.unparse(node)}"
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "sys"
            and node.attr in STANDARD_STREAMS
        ):
            yield node.lineno, f"uses sys.{node.attr}"


def check(module: str, source: str, path: str = "", is_package: bool = False) -> list[Violation]:
    """The layer rules `module` (whose text is `source`) breaks; empty when it keeps them."""
    tree = ast.parse(source, path or module)
    where = path or module
    found = list(imports(tree, module, is_package))
    violations: list[Violation] = []
    for rule in RULES:
        if not in_scope(module, rule.scope):
            continue
        for item in found:
            if item.target == "<dynamic>" or item.under(rule.refused):
                what = f"imports {item.target}: `{item.statement}`"
                violations.append(Violation(rule.name, module, where, item.line, what, rule.why))
    if in_scope(module, ("mnemod.domain",)):
        for item in found:
            if not item.under(LAYERS) and not _domain_may_use(item):  # layers: rule "domain"
                what = f"imports {item.target}: `{item.statement}`"
                why = "domain takes only the pure parts of the shared modules"
                violations.append(Violation("domain-uses", module, where, item.line, what, why))
        for line, what in _domain_io_calls(tree):
            why = "domain does no I/O"
            violations.append(Violation("domain-io", module, where, line, what, why))
    return sorted(set(violations), key=lambda v: (v.line, v.what))


@dataclass(frozen=True)
class Module:
    name: str
    path: Path
    is_package: bool


def package_modules() -> list[Module]:
    modules = []
    for path in sorted((SOURCE / "mnemod").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules.append(Module(name, path, is_package))
    return modules


def check_module(module: Module) -> list[Violation]:
    source = module.path.read_text(encoding="utf-8")
    shown = str(module.path.relative_to(SOURCE.parent))
    return check(module.name, source, shown, module.is_package)


# -- the package --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_the_package_keeps_its_layers(rule: Rule) -> None:
    covered = [m for m in package_modules() if in_scope(m.name, rule.scope)]
    assert covered, f"rule {rule.name}: no module in {rule.scope} (moved? update the rule)"
    names = {rule.name, "domain-uses"} if rule.name == "domain" else {rule.name}
    broken = [str(v) for m in covered for v in check_module(m) if v.rule in names]
    assert not broken, "\n".join(broken)


def test_every_module_has_a_place() -> None:
    """A new top-level module is a layer or a leaf, so some rule holds it."""
    placed = (*LAYERS, *LEAVES)
    unplaced = [m.name for m in package_modules() if m.name != "mnemod"]
    unplaced = [name for name in unplaced if not in_scope(name, placed)]
    assert not unplaced, f"add to LAYERS or LEAVES in {Path(__file__).name}: {unplaced}"


# -- the checker itself, on made-up sources -----------------------------------------------

DOMAIN_SOURCE = """\
import os.path
from typing import TYPE_CHECKING
from mnemod.clock import parse_time, utcnow
from mnemod.config import TTLConfig, load_config
from mnemod.domain.model import Entry
import mnemod.errors

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


def later(path):
    from .. import runtime
    from ..files import atomic
    with open(path) as fh:
        print(fh.read(), file=sys.stderr)
    return datetime.now(UTC)
"""


def test_the_checker_catches_domain_breaking_its_rules() -> None:
    found = {(v.line, v.what.split(":")[0]) for v in check("mnemod.domain.x", DOMAIN_SOURCE)}
    assert found == {
        (1, "imports os.path"),
        (3, "imports mnemod.clock.utcnow"),
        (4, "imports mnemod.config.load_config"),
        (9, "imports mnemod.store.engine.Engine"),
        (13, "imports mnemod.runtime"),
        (14, "imports mnemod.files.atomic"),
        (15, "calls open()"),
        (16, "calls print()"),
        (16, "uses sys.stderr"),
        (17, "reads the clock"),
    }


def test_a_violation_names_the_module_the_line_and_the_import() -> None:
    source = "x = 1\n\n\ndef f():\n    from mnemod.runtime.daemon import Daemon\n"
    (violation,) = check("mnemod.store.engine", source, "daemon/mnemod/store/engine.py")
    assert str(violation) == (
        "daemon/mnemod/store/engine.py:5: mnemod.store.engine: imports "
        "mnemod.runtime.daemon.Daemon: `from mnemod.runtime.daemon import Daemon` "
        "(the store works on the files without Redis or a daemon)"
    )


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("mnemod.store.engine", "import mnemod.redisio.keys"),
        ("mnemod.store", "from .. import redisio"),
        ("mnemod.store.engine", "from ..runtime.daemon import Daemon"),
        ("mnemod.store.engine", "importlib.import_module('mnemod.runtime.daemon')"),
        ("mnemod.store.engine", "importlib.import_module(name)"),
        ("mnemod.files.journal", "from mnemod.store.paths import NamespacePaths"),
        ("mnemod.files.journal", "from mnemod import redisio"),
        ("mnemod.redisio.events", "from mnemod.store.engine import Engine"),
        ("mnemod.redisio.events", "from mnemod.runtime import writer"),
        ("mnemod.runtime.daemon", "from mnemod.cli.main import main"),
        ("mnemod.api", "from mnemod.runtime.writer import Writer"),
        ("mnemod.client", "import mnemod.runtime"),
        ("mnemod.client", "from mnemod.cli import main"),
        ("mnemod.domain.framing", "from mnemod.tokens import token_counter"),
        ("mnemod.domain.model", "import mnemod.clock"),
        ("mnemod.domain.model", "from mnemod import api"),
        ("mnemod.config", "from mnemod.domain.model import Entry"),
        ("mnemod.errors", "from mnemod.files.atomic import make_dirs"),
    ],
)
def test_the_checker_catches_an_import_across_a_layer(module: str, line: str) -> None:
    is_package = module == "mnemod.store"
    violations = check(module, f"import importlib\n\ndef f(name):\n    {line}\n", "", is_package)
    assert [v.line for v in violations] == [4]


@pytest.mark.parametrize(
    ("module", "line"),
    [
        ("mnemod.store.engine", "from mnemod.files.atomic import make_dirs"),
        ("mnemod.store.engine", "from .paths import NamespacePaths"),
        ("mnemod.redisio.events", "from mnemod.files.session_ledger import SESSION_TTL"),
        ("mnemod.api", "from mnemod.store.engine import Engine"),
        ("mnemod.client", "from mnemod.redisio.keys import Keys"),
        ("mnemod.runtime.daemon", "from mnemod.redisio.lease import Lease"),
        ("mnemod.domain.gc", "from mnemod.config import Config"),
        ("mnemod.domain.gc", "from .merge import merge_into"),
        ("mnemod.domain.gc", "import re"),
        ("mnemod.domain.framing", "from mnemod.tokens import TokenCounter"),
        ("mnemod.domain.model", "import mnemod.errors"),
    ],
)
def test_the_checker_lets_an_import_down_the_layers_through(module: str, line: str) -> None:
    assert check(module, f"def f():\n    {line}\n") == []
