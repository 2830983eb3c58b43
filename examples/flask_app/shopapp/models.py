"""The order table, through Flask-SQLAlchemy."""

from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import Mapped, mapped_column

db = SQLAlchemy()


class Order(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    confirmed: Mapped[bool] = mapped_column(default=False)
