"""``python -m tether.entrypoints.cli``: the ``tether`` command without its console script."""

from tether.entrypoints.cli import main

if __name__ == "__main__":  # pragma: no cover
    main()
