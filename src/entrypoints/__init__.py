"""Entrypoints: the embeddable API, the worker pool, maintenance, the container and the CLI."""
