"""Helpers shared by the benchmark scripts of this folder (they run as scripts, so this folder is
on their import path)."""

from __future__ import annotations


def percentile(xs: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (as peerbench computes it)."""
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def delete_redis_keys(redis_url: str, prefix: str) -> None:
    """Delete every key a Tether dispatcher wrote under ``prefix`` on ``redis_url``."""
    import redis
    from tether.adapters.redis_streams.keys import StreamKeys

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=StreamKeys(prefix).pattern(), count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
