"""A throwaway Redis Cluster for tests: real ``redis-server`` processes on free ports under a
temporary directory, joined with ``redis-cli --cluster create``, killed and deleted at the end.

Used by the cluster fixtures (tests/contract/test_redis_cluster_dispatcher.py and
tests/integration/test_redis_cluster.py).  Nothing touches the shared Redis test server.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.throwaway_redis import FIRST_PORT, client_of, free_port, spawn_server, wait_for_server, wait_until

#: Milliseconds before a silent master counts as failed (low, so failover tests stay short).
NODE_TIMEOUT_MS = 1000


class ThrowawayRedisCluster:
    """``masters`` masters (and ``replicas`` extra nodes, each replicating one master, from the
    first one on) on 127.0.0.1; :meth:`start` waits for ``cluster_state:ok`` everywhere."""

    def __init__(self, masters: int = 3, replicas: int = 0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tether-redis-cluster-"))
        self.ports: list[int] = []
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._masters = masters
        self._replicas = replicas
        port = FIRST_PORT
        for _ in range(masters + replicas):
            port = free_port(port)
            self.ports.append(port)
            port += 1

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> ThrowawayRedisCluster:
        for port in self.ports:
            self._spawn(port)
        for port in self.ports:
            self._wait_ping(port)
        masters = self.ports[: self._masters]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *[f"127.0.0.1:{p}" for p in masters],
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok(masters)
        for index, port in enumerate(self.ports[self._masters :]):
            master = masters[index % len(masters)]
            replica = self.client(port)
            replica.cluster("meet", "127.0.0.1", str(master))
            wait_until(functools.partial(self._try_replicate, port, master), f"{port} to replicate {master}")
        self.wait_ok(self.ports)
        if self._replicas:
            wait_until(self._replicas_synced, "replicas to sync")
        return self

    def _try_replicate(self, port: int, master: int) -> bool:
        try:
            self.client(port).execute_command("CLUSTER", "REPLICATE", self.node_id(master))
        except redis.ResponseError:
            return False
        return True

    def _replicas_synced(self) -> bool:
        for port in self.ports[self._masters :]:
            info = self.client(port).info("replication")
            if info.get("master_link_status") != "up":
                return False
        return True

    def _spawn(self, port: int) -> None:
        self.procs[port] = spawn_server(
            self.root,
            port,
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(self.root / f"nodes-{port}.conf"),
            "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        )  # fmt: skip

    def stop(self) -> None:
        """Kill every node and delete the directory."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def kill(self, port: int) -> None:
        """Kill one node (SIGKILL), as a crashed server."""
        self.procs[port].kill()
        self.procs[port].wait(10)

    # -- helpers -----------------------------------------------------------------------------
    def url(self, port: int | None = None) -> str:
        return f"redis://127.0.0.1:{port or self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return client_of(port)

    def node_id(self, port: int) -> str:
        return str(self.client(port).execute_command("CLUSTER", "MYID"))

    def owner(self, slot: int, via: int | None = None) -> int:
        """The port of the master serving ``slot`` (as node ``via`` sees it)."""
        for entry in self.client(via or self._alive()[0]).execute_command("CLUSTER", "SLOTS"):
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            if start <= slot <= end:
                return int(master[1])
        raise LookupError(f"slot {slot} is not served")

    def masters(self) -> list[int]:
        return self.ports[: self._masters]

    def _alive(self) -> list[int]:
        return [p for p, proc in self.procs.items() if proc.poll() is None]

    def wait_ok(self, ports: list[int] | None = None, timeout: float = 30.0) -> None:
        for port in ports or self._alive():
            wait_until(functools.partial(self._cluster_ok, port), f"{port} cluster_state:ok", timeout)

    def _cluster_ok(self, port: int) -> bool:
        return bool(self.client(port).cluster("info").get("cluster_state") == "ok")

    def _wait_ping(self, port: int) -> None:
        wait_for_server(self.procs[port], port, self.root / f"redis-{port}.log")

    def move_slot(self, slot: int, target: int) -> None:
        """Reshard ``slot`` to the master on ``target`` the way ``redis-cli --cluster reshard``
        does: IMPORTING / MIGRATING, ``MIGRATE`` of every key, then ``SETSLOT NODE`` on all masters."""
        source = self.owner(slot)
        if source == target:
            return
        src, dst = self.client(source), self.client(target)
        src_id, dst_id = self.node_id(source), self.node_id(target)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
        for port in self.masters():
            if self.procs[port].poll() is None:
                self.client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        wait_until(lambda: all(self.owner(slot, via=p) == target for p in self._alive()), f"slot {slot} on {target} everywhere")


def prefix_on(cluster: ThrowawayRedisCluster, port: int, stem: str) -> str:
    """A key prefix ``<stem>-<n>`` whose hash slot (of ``{prefix}``) is served by the master on ``port``."""
    for n in range(100_000):
        prefix = f"{stem}-{n}"
        if cluster.owner(key_slot(("{" + prefix + "}").encode())) == port:
            return prefix
    raise LookupError(f"no prefix of {stem!r} lands on {port}")


def slot_of(prefix: str) -> int:
    return key_slot(("{" + prefix + "}").encode())
