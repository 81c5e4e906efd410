"""A Starlette receiver: verify the delivery, then do its work once, in one transaction.

It notes the quick start's ``mail.*`` events in ``mail_notices``. Its own
database needs the inbox and that table, once::

    outbox migrate --inbox-only --dsn "$DATABASE_URL"
    psql "$DATABASE_URL" -c 'CREATE TABLE mail_notices (message_id bigint NOT NULL, event_id text NOT NULL)'

Then: ``WEBHOOK_SECRETS=whsec_... DATABASE_URL=... uvicorn receive_starlette:app``.
"""

import os

import psycopg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outbox import receive

FORMAT = os.environ.get("WEBHOOK_FORMAT", "standard-webhooks")  # the endpoint's --format
MAX_BODY = 5 * 1024 * 1024  # bytes; a batch holds at most 4 MiB of payloads
verifier = receive.Verifier(os.environ["WEBHOOK_SECRETS"].split(),  # new and old, when rotating
                            format=FORMAT, max_body=MAX_BODY)
DSN = os.environ["DATABASE_URL"]


async def capped_body(request: Request) -> bytes | None:
    """The body, or None as soon as it passes MAX_BODY: no more than that is held."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    return bytes(body)


async def notify(conn: psycopg.AsyncConnection, event: receive.Received) -> None:
    """The receiver's own work, in the same transaction as its inbox record."""
    await conn.execute("INSERT INTO mail_notices (message_id, event_id) VALUES (%s, %s)",
                       (event.data["message_id"], event.id))


async def hooks(request: Request) -> Response:
    body = await capped_body(request)
    if body is None:
        return Response(status_code=413)
    try:
        events = verifier.verify(request.headers, body)
    except receive.InvalidSignature:
        return Response(status_code=401)  # wrong secret: dead-lettered at once
    except receive.InvalidDelivery:
        return Response(status_code=400)
    # An exception below is a 500: nothing was committed, the dispatcher retries.
    async with await psycopg.AsyncConnection.connect(DSN) as conn, conn.transaction():
        for event in events:
            if await receive.afirst_time(conn, event.id, consumer="notify"):
                await notify(conn, event)
    return Response(status_code=204)  # committed: done, or skipped as a duplicate


app = Starlette(routes=[Route("/hooks", hooks, methods=["POST"])])
