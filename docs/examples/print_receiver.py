"""A receiver that prints what arrives: verify each delivery, print its events, answer 204.

    WEBHOOK_SECRET=whsec_... python3 docs/examples/print_receiver.py [--port 8000]

No framework and no database: the standard library's HTTP server and
``outbox.receive.Verifier``, on 127.0.0.1. Point an endpoint at it
(``--url http://127.0.0.1:8000/events``) to watch deliveries before your
own receiver exists; a real one does each event's work once, in its own
transaction (``receive_flask.py``, ``receive_starlette.py``).
"""

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from outbox import receive

MAX_BODY = 5 * 1024 * 1024  # bytes; a batch holds at most 4 MiB of payloads
verifier = receive.Verifier([os.environ["WEBHOOK_SECRET"]], max_body=MAX_BODY)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            self.answer(400)
            return
        if not 0 <= length <= MAX_BODY:
            self.answer(413 if length > MAX_BODY else 400)
            return
        body = self.rfile.read(length)
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            events = verifier.verify(headers, body)
        except receive.InvalidSignature as exc:
            print(f"refused (401): {exc}", flush=True)
            self.answer(401)  # wrong secret: the dispatcher makes it a dead letter
            return
        except receive.InvalidDelivery as exc:
            print(f"refused (400): {exc}", flush=True)
            self.answer(400)
            return
        for event in events:
            print(f"{event.type} id={event.id} key={event.key} data={json.dumps(event.data)}",
                  flush=True)
        self.answer(204)

    def answer(self, status: int) -> None:
        self.send_response(status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per event above is enough


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"receiving on http://127.0.0.1:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
