"""The shop's handlers on the fake app that Tether's pytest plugin provides (``tether_app``)."""

from __future__ import annotations

import pytest
import tether
from shop.emails import Outbox, register_handlers


@pytest.fixture
def outbox() -> Outbox:
    return Outbox()


@pytest.fixture
def app(tether_app: tether.Tether, outbox: Outbox) -> tether.Tether:
    register_handlers(tether_app, outbox)
    return tether_app
