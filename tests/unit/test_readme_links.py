"""README.md's links into the repository point at files that exist, and their anchors at headings
that exist.  (The pages under docs/ are checked by the strict MkDocs build of `make docs`; the
README is not part of that site.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the headings of ``page`` (lower case, punctuation dropped, spaces as -)."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\s-]", "", heading.strip().lower())
        found.add(re.sub(r"\s+", "-", slug))
    return found


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = [target for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
             if not re.match(r"[a-z]+:", target)]
    assert len(links) > 10
    for target in links:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).is_file(), f"README.md links to {target}: no such file"
        if anchor:
            assert anchor in _anchors(ROOT / path), f"README.md links to {target}: no such heading"
