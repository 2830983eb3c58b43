"""pytest plugin registered through the ``pytest11`` entry point (fixtures land with the test kit)."""
