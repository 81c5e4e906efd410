"""Dispatcher throughput and idle latency, against the seeds' loop in the same run.

    python benchmarks/throughput.py [--events 20000] [--baseline-events 1000] [--rounds 3]
                                    [--max-batch N] [--max-in-flight N] [--dispatchers N]
                                    [--event-loop asyncio|uvloop] [--fail-first] [--baseline DIR]
                                    [--fail-share SHARE]

One throwaway PostgreSQL (fsync on), one lean local receiver, one endpoint.
Each round measures, in turn:

* baseline: the seeds' pattern, one row per transaction
  (``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1``, mark processing, commit,
  POST, mark done, commit) in Python with psycopg and httpx;
* dispatcher: ``outbox-dispatcher`` (a subprocess) draining a backlog of
  ``--events`` unkeyed events published beforehand; the rate is taken between
  the first and the last arrival, so process start-up is not counted, and
  the dispatcher's CPU (user + system, from /proc) is read from its first
  arrival to its last, per event; with ``--max-batch N`` the endpoint takes
  N events per request; with ``--baseline DIR`` the same backlog is drained
  by this tree's dispatcher and by DIR's (another checkout: its dispatcher
  and its SQL, on this tree's schema), one after the other in every round,
  and PostgreSQL's CPU per event is read beside the dispatcher's (the
  statements' cost, which the dispatcher's own CPU does not show);
* idle latency: with the dispatcher running and idle, one event per
  transaction, the time from the producer's COMMIT returning to the
  receiver's arrival.

Prints medians and the ratio dispatcher / baseline; the figures go to
BENCHMARKS.md.

``--compare tracing`` instead drains the same backlog, round after round,
under three setups: tracing absent (events without trace context, no
``OTEL_*``), trace context only (events published inside a span, so every
request carries ``traceparent``, no SDK in the dispatcher), and the SDK
exporting each attempt's span to memory (OpenTelemetry's
``InMemorySpanExporter`` behind its batch processor). ``--compare pooler``
drains it directly and through PgBouncer in transaction mode (Debian's
``pgbouncer``, started on 127.0.0.1 with ``default_pool_size = 20``), and
directly as it would through a pooler (no prepared statements, settings in
each statement's transaction) to tell the pooler's hops from that.
``--compare egress`` drains it over plain http, over TLS directly (a
receiver signed by a CA made for the run, trusted through the endpoint's
``ca_file``), and over TLS through a forward proxy on 127.0.0.1
(``HTTPS_PROXY``: one ``CONNECT`` tunnel per connection, TLS to the
receiver inside it); the proxy and the receivers run in this process, so
the dispatcher's CPU is its own.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg

import outbox
from outbox._postgres.cluster import free_port
from outbox.migrate import migrate
from outbox.testing import Receiver, Request, Response, TemporaryPostgres

BASELINE_TABLE = """
CREATE TABLE IF NOT EXISTS seeds_outbox (
    id bigserial PRIMARY KEY, payload jsonb NOT NULL,
    state text NOT NULL DEFAULT 'new', created_at timestamptz NOT NULL DEFAULT now())
"""


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def server_cpu(datadir: Path) -> float:
    """CPU seconds of a PostgreSQL server so far: the postmaster's own and its reaped
    children's (cutime/cstime), plus every live child's."""
    postmaster = int((datadir / "postmaster.pid").read_text().split()[0])
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid, ppid = int(entry), int(fields[1])
        if pid == postmaster:
            total += sum(int(f) for f in fields[11:15]) / TICKS
        elif ppid == postmaster:
            total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


class Arrivals:
    """Counts arrivals (events, also inside batches) and remembers first/last times and ids."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.by_id: dict[str, float] = {}
        self.track_ids = False
        self.on_first: Callable[[], None] = lambda: None
        self.fail_first = False
        self.fail_share = 0.0
        self.failed: set[str] = set()
        self.ids: set[str] = set()

    def __call__(self, request: Request) -> Response:
        now = time.perf_counter()
        if request.method == "GET":
            return self.answer(request.path)
        events = request.body.count(b'"type":') if request.body.startswith(b"[") else 1
        if self.fail_first or self.fail_share:  # first attempts fail, their retries succeed
            event_id = request.headers.get("webhook-id", "")
            chosen = self.fail_first or zlib.crc32(event_id.encode()) % 1000 < (
                self.fail_share * 1000)
            with self.lock:
                if chosen and event_id not in self.failed:
                    self.failed.add(event_id)
                    return Response(503)
        with self.lock:
            if self.count == 0:
                self.first = now
                self.on_first()
            self.count += events
            self.last = now
            if events == 1:  # a peer's body carries the id; the dispatcher's header too
                self.ids.add(request.headers.get("webhook-id") or _body_id(request.body))
            if self.track_ids and request.body.startswith(b"["):  # a batch: ids in the body
                for event in json.loads(request.body):
                    self.by_id[event["id"]] = now
            elif self.track_ids:
                self.by_id[request.headers.get("webhook-id", "")] = now
        return Response(204)

    def answer(self, path: str) -> Response:
        """``GET /stats`` (what arrived: events, distinct ids, first and last arrival on
        ``time.perf_counter``'s clock) and ``GET /reset``, for drivers in other processes."""
        if path.startswith("/reset"):
            self.reset()
        elif not path.startswith("/stats"):
            return Response(404)
        with self.lock:
            stats = {"events": self.count, "distinct": len(self.ids), "first": self.first,
                     "last": self.last}
        return Response(200, {"content-type": "application/json"}, json.dumps(stats).encode())

    def wait_for(self, events: int, procs: Sequence[subprocess.Popen[bytes]],
                 timeout: float) -> None:
        """Until ``events`` arrived; RuntimeError when a dispatcher exits or time runs out."""
        deadline = time.monotonic() + timeout
        while self.count < events:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"dispatchers delivered {self.count} of {events}")
            time.sleep(0.005)

    def rate(self) -> float:
        """Events a second from the first arrival to the last."""
        return (self.count - 1) / (self.last - self.first)

    def reset(self) -> None:
        with self.lock:
            self.count, self.first, self.last = 0, 0.0, 0.0
            self.by_id.clear()
            self.failed.clear()
            self.ids.clear()


def _body_id(body: bytes) -> str:
    """The ``id`` of a JSON event body, or "" (not JSON, or none)."""
    try:
        event = json.loads(body)
    except ValueError:
        return ""
    return str(event.get("id", "")) if isinstance(event, dict) else ""


def baseline(dsn: str, url: str, events: int) -> float:
    """The seeds' loop: events/s."""
    with psycopg.connect(dsn) as conn:
        conn.execute(BASELINE_TABLE)
        conn.execute("TRUNCATE seeds_outbox")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO seeds_outbox (payload) VALUES (%s)",
                            [(f'{{"n": {i}}}',) for i in range(events)])
        conn.commit()
        started = time.perf_counter()
        done = 0
        with httpx.Client() as client:
            while True:
                row = conn.execute(
                    "SELECT id, payload::text FROM seeds_outbox WHERE state = 'new' "
                    "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED").fetchone()
                if row is None:
                    conn.commit()
                    break
                conn.execute("UPDATE seeds_outbox SET state = 'processing' WHERE id = %s",
                             (row[0],))
                conn.commit()
                client.post(url, content=row[1], headers={"content-type": "application/json"})
                conn.execute("UPDATE seeds_outbox SET state = 'done' WHERE id = %s", (row[0],))
                conn.commit()
                done += 1
        return done / (time.perf_counter() - started)


ENV: dict[str, str] = {**os.environ, "PYTHONUNBUFFERED": "1"}
DISPATCHER = ["-m", "dispatcher"]
UVLOOP = ["-c", "import runpy, uvloop; uvloop.install(); "
          "runpy.run_module('dispatcher', run_name='__main__', alter_sys=True)"]


def use_uvloop() -> None:
    """Dispatchers started from now on run on uvloop's event loop (``pip install uvloop``)."""
    DISPATCHER[:] = UVLOOP


# The dispatcher with its attempt spans exported to memory: OpenTelemetry's own
# in-memory exporter has no entry point for OTEL_TRACES_EXPORTER to name.
MEMORY_SPANS = ["-c", "import runpy, dispatcher.app as app; "
                "from opentelemetry.sdk.trace import TracerProvider; "
                "from opentelemetry.sdk.trace.export import BatchSpanProcessor; "
                "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
                "InMemorySpanExporter; from dispatcher.observe.tracing import Tracing\n"
                "def memory(_names, version):\n"
                "    provider = TracerProvider()\n"
                "    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))\n"
                "    return Tracing(provider, version)\n"
                "app.configure_tracing = memory\n"
                "runpy.run_module('dispatcher', run_name='__main__', alter_sys=True)"]


# The dispatcher connecting directly as it does through a pooler (no prepared
# statements, settings per transaction): what the pooler's own hops add, apart.
AS_POOLED = ["-c", "import runpy, sys; import dispatcher.db as db; "
             "db._pooled.add(sys.argv[sys.argv.index('--dsn') + 1]); "
             "runpy.run_module('dispatcher', run_name='__main__', alter_sys=True)"]


def start_dispatcher(dsn: str, *extra: str, command: list[str] | None = None,
                     tree: str | None = None,
                     env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """The dispatcher on ``dsn``; ``tree``: another checkout's, run from there; ``env``:
    variables on top of this process's (a proxy)."""
    environ = {**ENV, **(env or {})}
    return subprocess.Popen(
        [sys.executable, *(command or DISPATCHER), "--dsn", dsn, "--metrics-port", str(free_port()),
         "--log-level", "WARNING", "--retention", "0", *extra],
        env=environ if tree is None else {**environ, "PYTHONPATH": tree}, cwd=tree)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dispatcher_rate(dsn: str, arrivals: Arrivals, events: int, extra: list[str],
                    processes: int = 1, *, span: Callable[[], Any] | None = None,
                    command: list[str] | None = None, publish_dsn: str | None = None,
                    env: dict[str, str] | None = None) -> tuple[float, float]:
    """Publish a backlog, start the dispatcher(s), time first to last arrival: events/s,
    and the dispatchers' CPU ms per event over the same span.

    ``span`` makes the context manager each batch is published in (a traced
    backlog); ``command`` runs the dispatcher; ``publish_dsn`` is where the
    backlog is published (default ``dsn``); ``env``: the dispatchers' extra variables."""
    rate, cpu, _ = drain(dsn, arrivals, events, extra, processes, span=span, command=command,
                         publish_dsn=publish_dsn, env=env)
    return rate, cpu


def drain(dsn: str, arrivals: Arrivals, events: int, extra: list[str],
          processes: int = 1, *, span: Callable[[], Any] | None = None,
          command: list[str] | None = None, publish_dsn: str | None = None,
          env: dict[str, str] | None = None, tree: str | None = None,
          datadir: Path | None = None) -> tuple[float, float, float]:
    """``dispatcher_rate``, with ``tree``: another checkout's dispatcher; and with
    ``datadir``, the PostgreSQL server's CPU ms per event over the same span (else 0)."""
    def server() -> float:
        return server_cpu(datadir) if datadir is not None else 0.0

    with psycopg.connect(publish_dsn or dsn) as conn:
        for start in range(0, events, 1000):
            with span() if span is not None else contextlib.nullcontext():
                outbox.publish_many(conn, [outbox.Event("bench.event", {"n": i})
                                           for i in range(start, min(events, start + 1000))])
            conn.commit()
    arrivals.reset()
    procs = [start_dispatcher(dsn, *extra, command=command, env=env, tree=tree)
             for _ in range(processes)]
    at_first: list[tuple[float, float]] = []
    arrivals.on_first = lambda: at_first.append(
        (sum(cpu_seconds(p.pid) for p in procs), server()))
    try:
        arrivals.wait_for(events, procs, 600)
        cpu = sum(cpu_seconds(p.pid) for p in procs) - at_first[0][0]
        server_cpu_used = server() - at_first[0][1]
    finally:
        arrivals.on_first = lambda: None
        for proc in procs:
            stop(proc)
    return arrivals.rate(), cpu / events * 1000, server_cpu_used / events * 1000


def idle_latency(dsn: str, arrivals: Arrivals, samples: int, extra: list[str]) -> list[float]:
    """Commit-to-arrival seconds of single events published while the dispatcher idles."""
    arrivals.reset()
    arrivals.track_ids = True
    proc = start_dispatcher(dsn, *extra)
    latencies: list[float] = []
    try:
        with psycopg.connect(dsn) as conn:
            outbox.publish(conn, "bench.warmup", {})
            conn.commit()
            deadline = time.monotonic() + 30
            while arrivals.count < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            for _ in range(samples):
                event_id = outbox.publish(conn, "bench.idle", {"at": time.time()})
                conn.commit()
                committed = time.perf_counter()
                deadline = time.monotonic() + 10
                while str(event_id) not in arrivals.by_id:
                    if time.monotonic() > deadline:
                        raise RuntimeError("an idle event did not arrive within 10 s")
                    time.sleep(0.0005)
                latencies.append(arrivals.by_id[str(event_id)] - committed)
                time.sleep(0.02)
    finally:
        arrivals.track_ids = False
        stop(proc)
    return latencies


def bench_endpoint(dsn: str, url: str, args: argparse.Namespace) -> None:
    """The schema, and the one endpoint every event goes to (--max-batch, --max-in-flight)."""
    with psycopg.connect(dsn) as conn:
        migrate(conn)
        conn.execute("INSERT INTO outbox.endpoints (name, url, events, events_like, "
                     "max_batch, max_in_flight) VALUES ('bench', %s, '{*}', '{%%}', %s, %s)",
                     (url, args.max_batch, args.max_in_flight))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--baseline-events", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--dispatcher-args", default="", help="extra flags, space-separated")
    parser.add_argument("--dispatchers", type=int, default=1,
                        help="dispatcher processes draining the backlog together (default 1)")
    parser.add_argument("--max-batch", type=int, default=1,
                        help="events per request the endpoint takes (default 1)")
    parser.add_argument("--max-in-flight", type=int, default=64,
                        help="the endpoint's --max-in-flight (default 64, the dispatcher's "
                        "--concurrency)")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop"), default="asyncio",
                        help="the dispatcher's event loop (default asyncio's, as it runs; "
                        "uvloop needs pip install uvloop)")
    parser.add_argument("--fail-first", action="store_true",
                        help="the receiver answers 503 to every event's first attempt and "
                        "204 to its retry (no backoff, no circuit breaker): the cost of "
                        "recording a failed attempt; events/s counts delivered events")
    parser.add_argument("--fail-share", type=float, default=0.0, metavar="SHARE",
                        help="the first attempts of this share of the events (0-1) fail "
                        "(503), their retries succeed, the circuit breaker on as by default: "
                        "the breaker's window then always holds failures")
    parser.add_argument("--tmpfs", action="store_true",
                        help="data directory on tmpfs (commits cost nothing) instead of disk")
    parser.add_argument("--compare", choices=("tracing", "pooler", "egress"),
                        help="side by side: tracing absent / trace context / SDK to memory, "
                        "direct / through PgBouncer, or plain http / TLS / TLS through a "
                        "proxy")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout: its dispatcher drains the same backlog after "
                        "this tree's in every round; CPU per event of both, and PostgreSQL's")
    args = parser.parse_args()
    if args.compare:
        compare(args)
        return
    if args.baseline:
        against(args)
        return
    extra = args.dispatcher_args.split()
    if args.event_loop == "uvloop":
        use_uvloop()
    arrivals = Arrivals()
    base_rates: list[float] = []
    rates: list[float] = []
    cpus: list[float] = []
    latencies: list[float] = []
    with (TemporaryPostgres(fsync=True, tmpfs=args.tmpfs) as pg,
          Receiver(arrivals, record=False) as rx):
        bench_endpoint(pg.dsn, rx.url, args)
        with psycopg.connect(pg.dsn) as conn:
            if args.fail_first:
                conn.execute("UPDATE outbox.endpoints SET min_backoff_seconds = 0, "
                             "max_backoff_seconds = 0.001, breaker_failures = 0")
            conn.commit()
        arrivals.fail_first = args.fail_first
        arrivals.fail_share = args.fail_share
        if args.fail_share:
            with psycopg.connect(pg.dsn) as conn:
                conn.execute("UPDATE outbox.endpoints SET min_backoff_seconds = 0, "
                             "max_backoff_seconds = 0.001")
        for round_no in range(1, args.rounds + 1):
            base_rates.append(baseline(pg.dsn, rx.url, args.baseline_events))
            rate, cpu = dispatcher_rate(pg.dsn, arrivals, args.events, extra, args.dispatchers)
            rates.append(rate)
            cpus.append(cpu)
            latencies += idle_latency(pg.dsn, arrivals, args.latency_samples // args.rounds,
                                      extra)
            print(f"round {round_no}: baseline {base_rates[-1]:8.0f} ev/s   "
                  f"dispatcher {rates[-1]:8.0f} ev/s ({cpus[-1]:.3f} ms CPU/event)   "
                  f"ratio {rates[-1] / base_rates[-1]:5.1f}x",
                  flush=True)
    base, ours = statistics.median(base_rates), statistics.median(rates)
    print()
    print(f"baseline (seeds' loop)  median {base:8.0f} events/s")
    print(f"outbox-dispatcher       median {ours:8.0f} events/s, "
          f"{statistics.median(cpus):.3f} ms CPU per event")
    ratio = statistics.median(r / b for r, b in zip(rates, base_rates, strict=True))
    print(f"ratio                   median {ratio:8.1f}x")
    print(f"idle commit-to-arrival  p50 {pct(latencies, 0.5) * 1000:.1f} ms   "
          f"p99 {pct(latencies, 0.99) * 1000:.1f} ms   ({len(latencies)} samples)")


def against(args: argparse.Namespace) -> None:
    """``--baseline DIR``: this tree and DIR drain the backlog in turn, round by round."""
    extra = args.dispatcher_args.split()
    arrivals = Arrivals()
    trees = {"this tree": None, "baseline": os.path.abspath(args.baseline)}
    results: dict[str, list[tuple[float, float, float]]] = {name: [] for name in trees}
    with (TemporaryPostgres(fsync=True, tmpfs=args.tmpfs) as pg,
          Receiver(arrivals, record=False) as rx):
        bench_endpoint(pg.dsn, rx.url, args)
        for round_no in range(1, args.rounds + 1):
            for name, tree in trees.items():
                results[name].append(drain(pg.dsn, arrivals, args.events, extra,
                                           args.dispatchers, tree=tree, datadir=pg.datadir))
                rate, cpu, server = results[name][-1]
                print(f"round {round_no}: {name:<10} {rate:8.0f} ev/s  dispatcher "
                      f"{cpu:.3f} + PostgreSQL {server:.3f} ms CPU/event", flush=True)
    print()
    for name, runs in results.items():
        rate, cpu, server = (statistics.median(run[i] for run in runs) for i in range(3))
        print(f"{name:<10} median {rate:8.0f} events/s, dispatcher {cpu:.3f} ms + "
              f"PostgreSQL {server:.3f} ms CPU per event")


def compare(args: argparse.Namespace) -> None:
    """The ``--compare`` runs: setups interleaved round by round, medians of the rounds."""
    extra = args.dispatcher_args.split()
    arrivals = Arrivals()
    with contextlib.ExitStack() as stack:
        pg = stack.enter_context(TemporaryPostgres(fsync=True, tmpfs=args.tmpfs))
        rx = stack.enter_context(Receiver(arrivals, record=False))
        bench_endpoint(pg.dsn, rx.url, args)
        setups: dict[str, dict[str, Any]]
        if args.compare == "tracing":
            from opentelemetry.sdk.trace import TracerProvider

            tracer = TracerProvider().get_tracer("bench")
            traced = functools.partial(tracer.start_as_current_span, "request")
            setups = {"tracing absent": {},
                      "trace context, no SDK": {"span": traced},
                      "SDK, spans to memory": {"span": traced, "command": MEMORY_SPANS}}
        elif args.compare == "egress":
            setups = egress_setups(stack, pg.dsn, rx.url, arrivals)
        else:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.support.pgbouncer import PgBouncer

            bouncer = stack.enter_context(PgBouncer(pg.dsn, pool_size=20))
            setups = {"direct": {},
                      "direct, as if pooled": {"command": AS_POOLED},
                      "through PgBouncer": {"dsn": bouncer.dsn_for(pg.dsn),
                                            "publish_dsn": pg.dsn}}
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in setups}
        for round_no in range(1, args.rounds + 1):
            for name, setup in setups.items():
                options = dict(setup)
                dsn = options.pop("dsn", pg.dsn)
                endpoint = options.pop("endpoint", None)
                if endpoint is not None:  # where the endpoint points, for this setup
                    with psycopg.connect(pg.dsn) as conn:
                        conn.execute("UPDATE outbox.endpoints SET url = %s, ca_file = %s",
                                     endpoint)
                results[name].append(dispatcher_rate(dsn, arrivals, args.events, extra,
                                                     args.dispatchers, **options))
                rate, cpu = results[name][-1]
                print(f"round {round_no}: {name:<24} {rate:8.0f} ev/s  "
                      f"({cpu:.3f} ms CPU/event)", flush=True)
    print()
    first = None
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        first = first or (rate, cpu)
        print(f"{name:<24} median {rate:8.0f} events/s, {cpu:.3f} ms CPU per event "
              f"({rate / first[0]:.0%} of the first; CPU {1000 * (cpu - first[1]):+.0f} us/event)")


def egress_setups(stack: contextlib.ExitStack, dsn: str, plain_url: str,
                  arrivals: Arrivals) -> dict[str, dict[str, Any]]:
    """Plain http, TLS direct, TLS through a proxy: the endpoint's URL and CA file for each,
    and the proxy variable for the last."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.support.egress import ForwardProxy, Pki, server_context

    pki = Pki(Path(stack.enter_context(tempfile.TemporaryDirectory())))
    tls = stack.enter_context(Receiver(arrivals, record=False, tls=server_context(pki)))
    proxy = stack.enter_context(ForwardProxy())
    return {"plain http": {"endpoint": (plain_url, None)},
            "TLS direct": {"endpoint": (tls.url, pki.ca_file)},
            "TLS through the proxy": {"endpoint": (tls.url, pki.ca_file),
                                      "env": {"HTTPS_PROXY": proxy.url}}}


if __name__ == "__main__":
    main()
