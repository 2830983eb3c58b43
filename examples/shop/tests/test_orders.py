"""The shop's tests, written with tether.testing only: no database, no broker, no worker threads."""

from __future__ import annotations

from datetime import timedelta

from shop.orders import Line, Order, place_order
from tether.testing import assert_enqueued, assert_not_enqueued, drain

ORDER = Order(id=42, email="ada@example.com", lines=[Line("tea", 2, 450), Line("mug", 1, 1099)])


def test_placing_an_order_enqueues_exactly_one_confirmation_email(app):
    place_order(app, ORDER)
    assert_enqueued(app, "emails.order_confirmation", {"order_id": 42, "to": "ada@example.com", "total_cents": 1999}, count=1)


def test_placing_the_same_order_twice_still_sends_one_email(app):
    place_order(app, ORDER)
    place_order(app, ORDER)
    assert_enqueued(app, "emails.order_confirmation", {"order_id": 42, "to": "ada@example.com", "total_cents": 1999}, count=1)


def test_a_phone_order_sends_no_email(app):
    place_order(app, Order(id=7, email=None, lines=[Line("tea", 1, 450)]))
    assert_not_enqueued(app, "emails.order_confirmation")


def test_draining_sends_the_confirmation(app, outbox):
    place_order(app, ORDER)
    report = drain(app)
    assert [(run.job_type, run.outcome) for run in report] == [("emails.order_confirmation", "completed")]
    assert outbox.sent == [("ada@example.com", "Your order #42", "Thank you! Total: 19.99 EUR")]


def test_a_failing_mail_server_is_retried_with_backoff(app, outbox, tether_clock, monkeypatch):
    start = tether_clock.now()
    failures = iter([ConnectionError("smtp down"), ConnectionError("smtp down")])

    def flaky_send(to, subject, body):
        error = next(failures, None)
        if error is not None:
            raise error
        outbox.sent.append((to, subject, body))

    monkeypatch.setattr(outbox, "send", flaky_send)
    place_order(app, ORDER)
    report = drain(app)  # moves the fake clock to each retry: backoff 1 s, then 2 s
    assert [run.outcome for run in report] == ["retrying", "retrying", "completed"]
    assert [run.ran_at - start for run in report] == [timedelta(0), timedelta(seconds=1), timedelta(seconds=3)]
    assert report.retrying[0].error.startswith("ConnectionError: smtp down")
    assert len(outbox.sent) == 1


def test_a_bad_address_is_not_retried(app, outbox):
    place_order(app, Order(id=8, email="not-an-address", lines=[Line("tea", 1, 450)]))
    report = drain(app)
    assert [run.outcome for run in report] == ["dead"]
    assert "not an e-mail address" in report.dead[0].error
    assert outbox.sent == []
