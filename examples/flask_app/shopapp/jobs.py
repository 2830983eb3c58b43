"""The app's background jobs, registered on the Tether extension (run inside the app context)."""

from tether.contrib.flask import TetherExtension

from shopapp.models import Order, db

tether_ext = TetherExtension()


@tether_ext.handler("orders.confirm", queue="emails")
def confirm_order(payload: dict) -> None:
    order = db.session.get(Order, payload["order"])
    order.confirmed = True
    db.session.commit()
