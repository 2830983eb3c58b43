"""Create or upgrade Tether's tables on the migrated database by running Tether's own Alembic
revisions (``tether.connect(..., create=True)``): the same schema ``tether db upgrade`` builds.

It runs for the database that ``TETHER["DATABASE"]`` names (other aliases are skipped), outside
Django's migration transaction (``atomic = False``): Tether's revisions commit on their own
connection.  Reversing it leaves the tables in place (jobs are never dropped by a migration).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def create_tether_schema(apps: Any, schema_editor: Any) -> None:
    from tether.contrib.django.conf import create_schema, tether_settings

    alias = tether_settings()["DATABASE"]
    if alias is not None and schema_editor.connection.alias != alias:
        return
    create_schema()


class Migration(migrations.Migration):
    atomic = False
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(create_tether_schema, migrations.RunPython.noop, elidable=False)]
