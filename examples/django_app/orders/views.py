"""Place an order: the order row and its confirmation job commit together or not at all."""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from orders.models import Order
from orders.tasks import send_confirmation


class OutOfStock(Exception):
    """The order cannot be placed (its transaction rolls back, the job with it)."""


@require_POST
def place_order(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body or b"{}")
    try:
        with transaction.atomic():
            order = Order.objects.create(item=body["item"])
            result = send_confirmation.enqueue(order.id)
            if body.get("out_of_stock"):
                raise OutOfStock(body["item"])
    except OutOfStock:
        return JsonResponse({"error": "out of stock"}, status=409)
    return JsonResponse({"order": order.id, "job": result.id}, status=201)


@require_GET
def show_order(request: HttpRequest, order_id: int) -> JsonResponse:
    order = Order.objects.get(id=order_id)
    return JsonResponse({"order": order.id, "item": order.item, "confirmed": order.confirmed})
