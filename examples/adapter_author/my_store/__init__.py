"""Stands in for a third-party adapter package."""

from my_store.audited import AuditedJobRepository

__all__ = ["AuditedJobRepository"]
