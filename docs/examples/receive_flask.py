"""A Flask receiver: verify the delivery, then do its work once, in one transaction."""

import os

import psycopg
from flask import Flask, request

from outbox import receive

verifier = receive.Verifier(os.environ["WEBHOOK_SECRETS"].split())  # new and old, when rotating
DSN = os.environ["DATABASE_URL"]
app = Flask(__name__)


def bill(conn: psycopg.Connection, event: receive.Received) -> None:
    """The receiver's own work, in the same transaction as its inbox record."""
    conn.execute("INSERT INTO invoices (order_id, event_id) VALUES (%s, %s)",
                 (event.data["order_id"], event.id))


@app.post("/hooks")
def hooks() -> tuple[str, int]:
    try:
        events = verifier.verify(request.headers, request.get_data())
    except receive.InvalidSignature:
        return "", 401  # wrong secret: dead-lettered at once
    except receive.InvalidDelivery:
        return "", 400
    # An exception below is a 500: nothing was committed, the dispatcher retries.
    with psycopg.connect(DSN) as conn:  # commits when the block ends without an error
        for event in events:
            if receive.first_time(conn, event.id, consumer="billing"):
                bill(conn, event)
    return "", 204  # committed: done, or skipped as a duplicate
