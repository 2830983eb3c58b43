"""Orders: placing one enqueues its confirmation in the same transaction."""
