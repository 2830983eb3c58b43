"""An example FastAPI service that enqueues a welcome e-mail through Tether on each signup."""
