"""The example project's settings and URLs."""
