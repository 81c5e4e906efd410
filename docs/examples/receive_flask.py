"""A Flask receiver: verify the delivery, then do its work once, in one transaction.

It keeps the quick start's ``mail.*`` events in ``mail_archive``. Its own
database needs the inbox and that table, once::

    outbox migrate --inbox-only --dsn "$DATABASE_URL"
    psql "$DATABASE_URL" -c 'CREATE TABLE mail_archive (message_id bigint NOT NULL, event_id text NOT NULL)'

Then: ``WEBHOOK_SECRETS=whsec_... DATABASE_URL=... flask --app receive_flask run``.
"""

import os

import psycopg
from flask import Flask, request

from outbox import receive

FORMAT = os.environ.get("WEBHOOK_FORMAT", "standard-webhooks")  # the endpoint's --format
MAX_BODY = 5 * 1024 * 1024  # bytes; a batch holds at most 4 MiB of payloads
verifier = receive.Verifier(os.environ["WEBHOOK_SECRETS"].split(),  # new and old, when rotating
                            format=FORMAT, max_body=MAX_BODY)
DSN = os.environ["DATABASE_URL"]
app = Flask(__name__)
# Flask reads no more of a body than this (a larger Content-Length: 413 at once).
app.config["MAX_CONTENT_LENGTH"] = MAX_BODY + 1


def archive(conn: psycopg.Connection, event: receive.Received) -> None:
    """The receiver's own work, in the same transaction as its inbox record."""
    conn.execute("INSERT INTO mail_archive (message_id, event_id) VALUES (%s, %s)",
                 (event.data["message_id"], event.id))


@app.post("/hooks")
def hooks() -> tuple[str, int]:
    body = request.get_data()
    if len(body) > MAX_BODY:  # a body without Content-Length that went on past it
        return "", 413
    try:
        events = verifier.verify(request.headers, body)
    except receive.InvalidSignature:
        return "", 401  # wrong secret: dead-lettered at once
    except receive.InvalidDelivery:
        return "", 400
    # An exception below is a 500: nothing was committed, the dispatcher retries.
    with psycopg.connect(DSN) as conn:  # commits when the block ends without an error
        for event in events:
            if receive.first_time(conn, event.id, consumer="archive"):
                archive(conn, event)
    return "", 204  # committed: done, or skipped as a duplicate
