"""Which namespaces `mnemod run` serves: `--namespace` (repeated, comma lists, `*`), else
`daemon.namespaces`; every other command still takes one namespace."""

from __future__ import annotations

import pytest

from mnemod.cli.context import Context
from mnemod.cli.main import build_parser
from mnemod.cli.run_cmd import served_namespaces
from mnemod.errors import InvalidInputError


def context(*argv: str) -> Context:
    return Context.from_args(build_parser().parse_args(list(argv)))


def test_run_takes_the_flag_repeated_or_as_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEMOD_DAEMON_NAMESPACES", raising=False)
    assert served_namespaces(context("run")) == ("default",)
    assert served_namespaces(context("run", "--namespace", "work")) == ("work",)
    flags = ("run", "--namespace", "a,b", "-n", "c", "-n", "a")
    assert served_namespaces(context(*flags)) == ("a", "b", "c")
    assert served_namespaces(context("run", "-n", "*")) == ("*",)


def test_the_config_decides_without_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMOD_DAEMON_NAMESPACES", "home,work")
    assert served_namespaces(context("run")) == ("home", "work")
    assert served_namespaces(context("run", "-n", "lab")) == ("lab",)  # the flag wins


def test_a_bad_name_is_refused_naming_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(InvalidInputError, match="--namespace: 'no/such'"):
        served_namespaces(context("run", "-n", "ok,no/such"))
    monkeypatch.setenv("MNEMOD_DAEMON_NAMESPACES", "ok,-bad")
    with pytest.raises(InvalidInputError, match=r"daemon\.namespaces: '-bad'"):
        served_namespaces(context("run"))


def test_other_commands_take_one_namespace() -> None:
    assert context("status", "-n", "a", "-n", "b").namespace == "b"  # the last, as before
    with pytest.raises(InvalidInputError, match="namespace"):
        context("status", "--namespace", "a,b")
