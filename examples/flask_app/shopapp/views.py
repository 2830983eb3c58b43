"""Place an order: the order row and its confirmation job commit together or not at all."""

from flask import Blueprint, jsonify, request

from shopapp.jobs import tether_ext
from shopapp.models import Order, db

orders = Blueprint("orders", __name__)


@orders.post("/orders")
def place_order():
    body = request.get_json()
    order = Order(item=body["item"])
    db.session.add(order)
    db.session.flush()
    job = tether_ext.enqueue("orders.confirm", {"order": order.id}, connection=db.session).job
    if body.get("out_of_stock"):
        db.session.rollback()  # the order and its job go together
        return jsonify(error="out of stock"), 409
    db.session.commit()  # the job is announced to the workers after this commit
    return jsonify(order=order.id, job=job.id), 201


@orders.get("/orders/<int:order_id>")
def show_order(order_id: int):
    order = db.session.get(Order, order_id)
    return jsonify(order=order.id, item=order.item, confirmed=order.confirmed)
