"""DELIVERY.md, the promises Tether makes about delivery, names the tests that fail if a promise
breaks: every test it names exists (read from the source, nothing run), every promise names at
least one, and the README and the documentation site lead to the page."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DELIVERY = ROOT / "DELIVERY.md"
#: A test as DELIVERY.md names it: `tests/<path>.py::<function>` or `tests/<path>.py::<Class>::<method>`,
#: optionally with a parametrization (`[...]`) after the last name.
NODE = re.compile(r"`(tests/[\w/]+\.py)((?:::\w+)+)(?:\[[^`\]]*\])?`")
#: The contract suite's test classes: a test named on PostgreSQL must run on the other stores too.
CONTRACT_CLASSES = {
    "tests/contract/test_postgres_repository.py::TestPostgresRepository": [
        "tests/contract/test_memory_repository.py::TestInMemoryJobRepository",
        "tests/contract/test_sqlite_repository.py::TestSqliteRepository",
    ],
}


def named_tests(text: str) -> list[str]:
    return [path + names for path, names in NODE.findall(text)]


def missing(node: str) -> str | None:
    """Why ``node`` is not a test that pytest would collect, or None when it is one."""
    path, *names = node.split("::")
    source = ROOT / path
    if not source.is_file():
        return "no such file"
    if not names[-1].startswith("test"):
        return f"{names[-1]} is not a test name"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    top = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    if len(names) == 1:
        return None if isinstance(top.get(names[0]), ast.FunctionDef) else f"no function {names[0]}"
    if len(names) != 2:
        return "nested classes are not used here"
    class_name, method = names
    found = top.get(class_name)
    if isinstance(found, ast.ClassDef) and any(
        isinstance(item, ast.FunctionDef) and item.name == method for item in found.body
    ):
        return None
    # Inherited from a contract suite, or a class made by an assignment (a state machine's test case).
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    cls = getattr(module, class_name, None)
    if cls is None:
        return f"no class {class_name}"
    return None if callable(getattr(cls, method, None)) else f"{class_name} has no {method}"


def test_every_test_delivery_md_names_exists() -> None:
    nodes = named_tests(DELIVERY.read_text(encoding="utf-8"))
    assert len(nodes) >= 60
    problems = {node: missing(node) for node in nodes}
    assert {node: why for node, why in problems.items() if why} == {}


def test_every_contract_test_named_on_postgres_runs_on_memory_and_sqlite_too() -> None:
    for node in named_tests(DELIVERY.read_text(encoding="utf-8")):
        for postgres_class, others in CONTRACT_CLASSES.items():
            if node.startswith(postgres_class + "::"):
                method = node.rsplit("::", 1)[1]
                for other in others:
                    assert missing(f"{other}::{method}") is None, f"{other}::{method}"


def test_every_promise_names_a_test() -> None:
    sections = re.split(r"^## ", DELIVERY.read_text(encoding="utf-8"), flags=re.MULTILINE)[1:]
    assert len(sections) >= 10
    for section in sections:
        assert named_tests(section), f"the promise {section.splitlines()[0]!r} names no test"


def test_the_checker_finds_a_test_that_does_not_exist() -> None:
    assert missing("tests/unit/test_delivery_contract.py::test_every_promise_names_a_test") is None
    assert missing("tests/unit/test_delivery_contract.py::test_no_such_test") == "no function test_no_such_test"
    assert missing("tests/unit/no_such_file.py::test_x") == "no such file"
    assert missing("tests/contract/test_sqlite_repository.py::TestSqliteRepository::test_no_such") == (
        "TestSqliteRepository has no test_no_such"
    )
    assert named_tests("`tests/a/b.py::C::test_d[memory]` and `tests/a/c.py::test_e`") == [
        "tests/a/b.py::C::test_d", "tests/a/c.py::test_e"]


def test_the_readme_and_the_documentation_site_lead_to_delivery_md() -> None:
    assert "(DELIVERY.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    page = ROOT / "docs" / "delivery.md"
    assert '--8<-- "DELIVERY.md"' in page.read_text(encoding="utf-8")
    assert "delivery.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
