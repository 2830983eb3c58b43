"""What the domain needs from the world, as typing.Protocols in domain terms."""

from tether.ports.clock import Clock
from tether.ports.dispatcher import Dispatcher
from tether.ports.repository import JobRepository

__all__ = ["Clock", "Dispatcher", "JobRepository"]
