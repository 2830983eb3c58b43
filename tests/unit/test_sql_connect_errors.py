"""The message of a database that cannot be reached: the driver's words, and one hint."""

from __future__ import annotations

from tether.adapters.sqlalchemy import REACH_HINT, SOCKET_HINT, unreachable_problem

#: What psycopg 3 says (libpq's text, with its own advice) for a refused port and a missing socket.
REFUSED = (
    'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
    "\tIs the server running on that host and accepting TCP/IP connections?"
)
NO_SOCKET = (
    'connection failed: connection to server on socket "/tmp/x/.s.PGSQL.5432" failed: No such file or directory\n'
    "\tIs the server running locally and accepting connections on that socket?"
)


def test_a_refused_port_gets_one_hint_as_one_sentence() -> None:
    assert unreachable_problem(REFUSED) == (
        'cannot connect (connection to server at "127.0.0.1", port 1 failed: Connection refused); ' + REACH_HINT
    )


def test_a_missing_socket_keeps_the_socket_advice_once() -> None:
    assert unreachable_problem(NO_SOCKET) == (
        'cannot connect (connection to server on socket "/tmp/x/.s.PGSQL.5432" failed: No such file or directory); '
        + SOCKET_HINT
    )


def test_a_message_without_advice_gets_ours() -> None:
    assert unreachable_problem("failed to resolve host 'db.invalid'") == f"cannot connect (failed to resolve host 'db.invalid'); {REACH_HINT}"
