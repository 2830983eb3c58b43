"""An order, confirmed by a background task."""

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    confirmed = models.BooleanField(default=False)
