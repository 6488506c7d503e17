"""L1 files: read-only TOML items and Markdown blocks; bad edits never replace the last good."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mnemod.config import LimitsConfig
from mnemod.files.l1_files import L1Item, L1Problem, L1Registry, derived_id
from mnemod.ids import is_valid_id

ROOT = Path(__file__).resolve().parent.parent
LIMITS = LimitsConfig()

GOOD = """\
# Who the user is.
[[memory]]
content = "The user is Mei; she works in Asia/Taipei."
tags = ["identity"]

[[memory]]
id = "tz-rule"
content = "Give times in Asia/Taipei unless asked otherwise."
triggers = ["time ?zone", "\\\\bwhen\\\\b"]
once = true
importance = 4
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    path = tmp_path / "l1"
    path.mkdir()
    return path


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_good_files(folder: Path) -> None:
    write(folder, "identity.toml", GOOD)
    write(folder, "house-rules.md", "# House rules\n\nRun the tests before you commit.\n")
    registry = L1Registry(folder, LIMITS)
    assert registry.reload_all() == []
    items = registry.items()
    assert [item.id for item in items] == ["l1.house-rules", "l1.identity.1", "tz-rule"]
    block, first, second = items
    assert block == L1Item(
        id="l1.house-rules",
        content="# House rules\n\nRun the tests before you commit.\n",
        source="house-rules.md",
        kind="block",
    )
    assert block.always and block.tier == "hot"
    assert first.tags == ("identity",) and first.always and first.importance == 3
    assert second.triggers == ("time ?zone", "\\bwhen\\b")
    assert second.once and second.importance == 4 and second.tier == "warm"
    assert second.source == "identity.toml" and second.kind == "memory"


def test_example_files_load() -> None:
    registry = L1Registry(ROOT / "config" / "l1", LIMITS)
    assert registry.reload_all() == []
    items = registry.items()
    assert any(item.kind == "block" for item in items)
    assert any(item.triggers for item in items)


def test_stable_ids(folder: Path) -> None:
    write(folder, "identity.toml", GOOD)
    first = L1Registry(folder, LIMITS)
    first.reload_all()
    second = L1Registry(folder, LIMITS)
    second.reload_all()
    assert first.items() == second.items()
    assert derived_id("identity", 1) == "l1.identity.1"
    odd = derived_id("my notes (draft)", 12)
    assert odd == "l1.my-notes--draft-.12" and is_valid_id(odd)
    assert is_valid_id(derived_id("x" * 200, 999))


def test_syntax_error_keeps_last_good_and_names_line(folder: Path) -> None:
    path = write(folder, "identity.toml", GOOD)
    registry = L1Registry(folder, LIMITS)
    registry.reload_all()
    before = registry.items()
    write(folder, "identity.toml", GOOD + '\n[[memory]]\ncontent = "unterminated\n')
    problem = registry.reload_file(path)
    assert problem is not None
    assert problem.path == path
    assert problem.line == GOOD.count("\n") + 3
    assert "not valid TOML" in problem.reason
    assert str(problem) == f"{path}:{problem.line}: {problem.reason}"
    assert registry.items() == before
    assert registry.problems() == [problem]
    assert registry.reload_all() == [problem]
    assert registry.items() == before

    write(folder, "identity.toml", GOOD.replace("Mei", "Mei Lin"))
    assert registry.reload_file(path) is None
    assert registry.problems() == []
    assert registry.items()[0].content.startswith("The user is Mei Lin")


def test_bad_file_on_first_read_has_no_items(folder: Path) -> None:
    write(folder, "broken.toml", "[[memory]\n")
    registry = L1Registry(folder, LIMITS)
    problems = registry.reload_all()
    assert [(p.path.name, p.line) for p in problems] == [("broken.toml", 1)]
    assert registry.items() == []


@pytest.mark.parametrize(
    ("item", "key_line", "reason"),
    [
        ('trigers = ["x"]\ncontent = "c"', 1, "unknown key"),
        ('content = ""', 1, "content: required"),
        ("content = 3", 1, "content: required"),
        ('content = "c"\nimportance = 9', 2, "importance"),
        ('content = "c"\nonce = "yes"', 2, "once"),
        ('content = "c"\ntags = "a"', 2, "tags"),
        ('content = "c"\nid = "has space"', 2, "id"),
        ('content = "c"\ntriggers = ["(a)\\\\1"]', 2, "not a supported regex"),
        ('content = "c"\ntriggers = ["(?=look)ahead"]', 2, "not a supported regex"),
        ('content = "c"\ntriggers = ["(unclosed"]', 2, "not a supported regex"),
        ('content = "c"\ntriggers = ["' + "a" * 300 + '"]', 2, "at most 256"),
        ('content = "c"\ntriggers = [' + ", ".join(['"a"'] * 17) + "]", 2, "over the limit"),
        ('content = "' + "x" * 70000 + '"', 1, "over the limit"),
    ],
)
def test_schema_error_names_line(folder: Path, item: str, key_line: int, reason: str) -> None:
    text = GOOD + "\n# third item\n[[memory]]\n" + item + "\n"
    path = write(folder, "identity.toml", text)
    registry = L1Registry(folder, LIMITS)
    problem = registry.reload_file(path)
    assert problem is not None, reason
    header = text.split("\n").index("# third item") + 2
    assert problem.line == header + key_line
    assert "memory item 3" in problem.reason
    assert reason in problem.reason
    assert registry.items() == []


def test_unknown_top_level_key_and_table(folder: Path) -> None:
    registry = L1Registry(folder, LIMITS)
    path = write(folder, "a.toml", 'title = "x"\n[[memory]]\ncontent = "c"\n')
    problem = registry.reload_file(path)
    assert problem is not None and problem.line == 1 and "'title'" in problem.reason
    path = write(folder, "a.toml", '# comment\n[memory]\ncontent = "c"\n')
    problem = registry.reload_file(path)
    assert problem is not None and problem.line == 2 and "not a table" in problem.reason


def test_duplicate_ids(folder: Path) -> None:
    registry = L1Registry(folder, LIMITS)
    twice = '[[memory]]\nid = "x"\ncontent = "1"\n\n[[memory]]\nid = "x"\ncontent = "2"\n'
    path = write(folder, "a.toml", twice)
    problem = registry.reload_file(path)
    assert problem is not None and problem.line == 5 and "already used" in problem.reason
    write(folder, "a.toml", '[[memory]]\nid = "x"\ncontent = "1"\n')
    write(folder, "b.toml", '\n[[memory]]\nid = "x"\ncontent = "2"\n')
    problems = registry.reload_all()
    assert [str(p) for p in problems] == [f"{folder / 'b.toml'}:2: id x is already used in a.toml"]
    assert [item.content for item in registry.items()] == ["1"]


def test_md_block(folder: Path) -> None:
    registry = L1Registry(folder, LIMITS)
    path = write(folder, "rules.md", "\ufeffBe brief.\n")
    assert registry.reload_file(path) is None
    assert registry.items() == [L1Item("l1.rules", "Be brief.\n", source="rules.md", kind="block")]
    write(folder, "rules.md", "  \n")
    assert registry.reload_file(path) is None
    assert registry.items() == []
    path.write_bytes(b"ok\n\xff\n")
    problem = registry.reload_file(path)
    assert problem == L1Problem(path, 2, "not UTF-8 text")
    big = write(folder, "big.md", "x" * (LIMITS.max_content_bytes + 1))
    assert registry.reload_file(big) is not None


def test_deletion(folder: Path) -> None:
    write(folder, "identity.toml", GOOD)
    rules = write(folder, "rules.md", "Be brief.\n")
    registry = L1Registry(folder, LIMITS)
    registry.reload_all()
    assert len(registry.items()) == 3
    rules.unlink()
    assert registry.reload_file(rules) is None
    assert [item.source for item in registry.items()] == ["identity.toml", "identity.toml"]
    assert registry.forget_file(folder / "identity.toml")
    assert registry.items() == []
    assert not registry.forget_file(folder / "identity.toml")

    write(folder, "identity.toml", GOOD)
    registry.reload_all()
    (folder / "identity.toml").unlink()
    assert registry.reload_all() == []
    assert registry.items() == []


def test_ignores_other_files_and_missing_folder(tmp_path: Path, folder: Path) -> None:
    write(folder, ".identity.toml.swp", "junk")
    write(folder, "notes.txt", "junk")
    registry = L1Registry(folder, LIMITS)
    assert registry.reload_all() == []
    assert registry.reload_file(folder / "notes.txt") is None
    assert registry.items() == []
    shutil.rmtree(folder)
    assert L1Registry(tmp_path / "nowhere", LIMITS).reload_all() == []


def test_a_symlink_leading_outside_the_folder_is_refused(folder: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- not for prompts", encoding="utf-8")
    (folder / "notes.md").symlink_to(secret)
    (folder / "sneaky.toml").symlink_to(Path("..") / "elsewhere.toml")  # relative, still out
    (tmp_path / "elsewhere.toml").write_text(GOOD, encoding="utf-8")
    registry = L1Registry(folder, LIMITS)
    problems = registry.reload_all()
    assert registry.items() == []
    assert [str(p) for p in problems] == [
        f"{folder / 'notes.md'}: a symlink to {secret}, outside the L1 folder: refused",
        f"{folder / 'sneaky.toml'}: a symlink to {tmp_path / 'elsewhere.toml'}, "
        "outside the L1 folder: refused",
    ]


def test_a_symlink_inside_the_folder_is_read(folder: Path) -> None:
    (folder / "shared").mkdir()
    write(folder / "shared", "team.md", "Answer in English.")
    write(folder, "base.toml", GOOD)
    (folder / "team.md").symlink_to(Path("shared") / "team.md")
    (folder / "alias.md").symlink_to(folder / "shared" / "team.md")
    registry = L1Registry(folder, LIMITS)
    assert registry.reload_all() == []
    assert {i.source for i in registry.items()} == {"alias.md", "base.toml", "team.md"}


def test_a_linked_l1_folder_still_reads_its_own_files(folder: Path, tmp_path: Path) -> None:
    write(folder, "base.toml", GOOD)
    (folder / "same.md").symlink_to(folder / "base.toml")  # an .md view of a file inside
    linked = tmp_path / "l1-link"
    linked.symlink_to(folder)
    registry = L1Registry(linked, LIMITS)
    assert registry.reload_all() == []
    assert len(registry.items()) == 3
