"""The order's background work, as Django tasks (run by ``manage.py tether_worker``)."""

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task

from orders.models import Order


@task(queue_name="emails")
def send_confirmation(order_id: int) -> None:
    """Send the order's confirmation (here: mark it confirmed)."""
    Order.objects.filter(id=order_id).update(confirmed=True)


@task()
def always_fails(reason: str) -> None:
    """A task that fails, to show how a failure reads back."""
    raise ValueError(reason)
