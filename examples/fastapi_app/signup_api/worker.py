"""The worker's entry point when the API runs without ``SIGNUP_WORKER=1``:
``tether worker --app signup_api.worker:create_tether``."""

from __future__ import annotations

import tether

from signup_api.app import Settings, open_tether
from signup_api.emails import Outbox


def create_tether() -> tether.Tether:
    return open_tether(Settings.from_env(), Outbox())
