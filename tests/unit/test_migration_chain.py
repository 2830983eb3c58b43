"""The shipped Alembic revisions form one linear chain: one base, one head, no branch, no merge.

Two revisions written on different branches that both revise the same parent would each pass their
own tests, yet together leave the script directory with two heads, and ``upgrade`` (to the head)
would no longer know where to go.  This check reads the script directory only: no database.
"""

from __future__ import annotations

from alembic.script import ScriptDirectory
from tether.adapters.sqlalchemy import migrations


def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(migrations.alembic_config(None))


def test_the_revisions_have_one_head_and_one_base() -> None:
    script = _script()
    heads, bases = script.get_heads(), script.get_bases()
    assert len(heads) == 1, (
        f"the revisions have {len(heads)} heads {sorted(heads)}: rebase the newer revision onto the other "
        "(set its down_revision) so they form one chain"
    )
    assert len(bases) == 1, f"the revisions have {len(bases)} bases {sorted(bases)}: only the first may revise nothing"


def test_every_revision_has_at_most_one_parent_and_one_child() -> None:
    script = _script()
    for revision in script.walk_revisions(base="base", head="heads"):
        parents = revision.down_revision
        assert parents is None or isinstance(parents, str), f"{revision.revision} merges {parents}"
        assert len(revision.nextrev) <= 1, f"{revision.revision} is revised by {sorted(revision.nextrev)}"
        assert not revision.branch_labels, f"{revision.revision} opens a named branch {revision.branch_labels}"


def test_the_chain_from_the_head_reaches_every_revision_file() -> None:
    """Walking down_revision from the head visits every revision, and every revision file is one."""
    script = _script()
    heads = script.get_heads()
    assert len(heads) == 1, f"no single head to walk from: {sorted(heads)}"
    chain = []
    current: str | None = heads[0]
    while current is not None:
        revision = script.get_revision(current)
        assert revision is not None
        chain.append(revision.revision)
        down = revision.down_revision
        assert down is None or isinstance(down, str)
        current = down
    files = sorted(p.name for p in (migrations.SCRIPT_LOCATION / "versions").glob("*.py") if p.name != "__init__.py")
    assert len(chain) == len(files), f"the chain {chain[::-1]} misses some of the revision files {files}"
    assert sorted(chain) == sorted(r.revision for r in script.walk_revisions(base="base", head="heads"))
