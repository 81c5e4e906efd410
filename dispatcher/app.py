"""The dispatcher process: build the parts, wire them together, run until told to stop.

This is the composition root: the one place that opens the database
connections and the HTTP client and hands each part what it needs. The
parts talk through :class:`~dispatcher.control.Control` events and the
methods they are given, never through each other's insides.

Start-up never fails for a database outage: endpoints are loaded with capped
backoff while ``/healthz`` answers 200 and ``/readyz`` 503. Nor does it
dispatch against a schema older than it needs: the schema gate waits for
``outbox migrate`` (``--once`` exits 1 instead, as it does when the server
refuses its credentials or database). The first SIGTERM
or SIGINT starts a graceful stop (``dispatcher.shutdown``); a second one
abandons the grace period.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

from dispatcher.claimer import Claimer
from dispatcher.completer import Completer
from dispatcher.config import DispatcherConfig
from dispatcher.control import Control, Heartbeat
from dispatcher.db import Database, Health, retry_until
from dispatcher.deliver import Deliverer
from dispatcher.endpoint_view import EndpointView
from dispatcher.flights import Flights
from dispatcher.http.proxy import ProxyRoutes
from dispatcher.http.sender import HttpSender
from dispatcher.leases import Leases
from dispatcher.limits.slots import SlotBook
from dispatcher.listener import Listener
from dispatcher.maintenance import Maintenance
from dispatcher.observe.metrics import Metrics
from dispatcher.observe.resources import quiet_resource_errors, raise_open_files_limit
from dispatcher.observe.server import HealthServer, dsn_connector
from dispatcher.observe.tracing import Tracing
from dispatcher.observe.tracing import configure as configure_tracing
from dispatcher.once import OncePass
from dispatcher.schema_gate import GateVerdict, SchemaGate
from dispatcher.shutdown import drain
from outbox._shared.version import current as version
from outbox._shared.version import installed
from outbox.sql import SCHEMA_VERSION

log = logging.getLogger("dispatcher")
_ALIVE_AFTER = 60.0  # seconds without a loop turn before /healthz fails


@dataclass(frozen=True, slots=True)
class Parts:
    """Everything one dispatcher process runs, built by :func:`build`."""

    config: DispatcherConfig
    control: Control
    health: Health
    metrics: Metrics
    endpoints: EndpointView
    leases: Leases
    sender: HttpSender
    deliverer: Deliverer
    flights: Flights
    completer: Completer
    claimer: Claimer
    maintenance: Maintenance
    listener: Listener
    gate: SchemaGate
    databases: tuple[Database, ...]
    tracing: Tracing | None = None
    once: OncePass | None = None  # --once: the pass, and what differs for it


def build(config: DispatcherConfig) -> Parts:
    """Make every part and give each the connections and neighbours it works with."""
    control = Control(Heartbeat(max(_ALIVE_AFTER, 3 * config.poll_interval)))
    sender = make_sender(config)
    tracing = configure_tracing(config.traces_exporter, version())
    return build_site(config, control=control, metrics=Metrics(histograms=config.histograms),
                      sender=sender, tracing=tracing)


def make_sender(config: DispatcherConfig, *, databases: int = 1) -> HttpSender:
    """The HTTP client: one per process, shared by every database it serves, with room for
    ``databases`` of them sending ``--concurrency`` requests each (a request waiting for a
    connection would spend its own timeout waiting)."""
    proxies = config.proxies()
    sender = HttpSender(max_connections=config.concurrency * databases,
                        block_private_networks=config.block_private_networks,
                        allow_networks=config.allow_networks,
                        user_agent=f"outbox-dispatcher/{installed()}", proxies=proxies)
    _say_proxies(proxies, block_private=config.block_private_networks)
    return sender


def build_site(config: DispatcherConfig, *, control: Control, metrics: Metrics,
               sender: HttpSender, tracing: Tracing | None,
               health: Health | None = None) -> Parts:
    """The parts of one database (``config.dsn``): its connections, claims, requests and
    upkeep, around the process's HTTP client, metrics and tracing."""
    health = Health() if health is None else health
    endpoints = EndpointView(config.environ)
    claim_db, complete_db, upkeep_db = (Database(config.dsn, health, role)
                                        for role in ("claim", "complete", "maintenance"))
    slots = SlotBook()
    leases = Leases(config.lease, endpoints.longest_timeout, slots.held)
    completer = Completer(complete_db, leases, control.wake.set, control.give_up,
                          endpoints.describe, slots=slots)
    deliverer = Deliverer(sender, completer, metrics, control.wake.set,
                          tracing=tracing)
    flights = Flights(deliverer, free_slot=completer.free, hand_back=completer.hand_back,
                      on_done=control.wake.set, slots=slots)
    maintenance = Maintenance(config, db=upkeep_db, endpoints=endpoints, metrics=metrics,
                              leases=leases, wake=control.wake.set,
                              endpoints_changed=control.endpoints_changed,
                              tls_problems=sender.transport.tls.problems)
    once = OncePass(flights=flights, completer=completer, deliverer=deliverer,
                    maintenance=maintenance, db=upkeep_db) if config.once else None
    claimer = Claimer(db=claim_db, endpoints=endpoints, flights=flights, leases=leases, slots=slots,
                      wake=control.wake, stopping=control.stopping,
                      beat=control.heartbeat.beat, concurrency=config.concurrency,
                      batch_size=config.batch_size, poll_interval=config.poll_interval,
                      pass_over=None if once is None else once.over)
    listener = Listener(config.listen_dsn or config.dsn, control.wake.set,
                        notify_dsn=config.dsn, direct=bool(config.listen_dsn),
                        endpoints_changed=control.endpoints_changed.set)
    gate = SchemaGate(upkeep_db, health, needed=SCHEMA_VERSION)
    return Parts(config, control, health, metrics, endpoints, leases, sender, deliverer,
                 flights, completer, claimer, maintenance, listener, gate,
                 (claim_db, complete_db, upkeep_db), tracing, once)


def _say_proxies(proxies: ProxyRoutes, *, block_private: bool) -> None:
    """Name the proxies in use at start (credentials masked), and what the SSRF guard can
    no longer see behind them."""
    for scheme, proxy in (("https", proxies.https), ("http", proxies.http)):
        if proxy is not None:
            log.info("%s:// endpoints go through the proxy %s%s", scheme, proxy,
                     " (but the hosts NO_PROXY names)" if proxies.direct else "")
    if proxies and block_private:
        log.warning("--block-private-networks cannot see the address of an endpoint reached "
                    "through a proxy (the proxy resolves its name): enforce the rule at the "
                    "proxy; it still applies to the connections made directly (NO_PROXY)")


def install_signals(control: Control) -> None:
    def on_signal() -> None:
        if control.stopping.is_set():
            log.warning("second signal: stopping now")
        else:
            log.info("stopping: no new claims, finishing requests in flight")
        control.stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def _health_server(parts: Parts) -> HealthServer:
    config = parts.config
    return HealthServer(
        parts.metrics, host=config.metrics_host, port=config.metrics_port,
        is_alive=parts.control.heartbeat.alive, is_ready=lambda: parts.health.ready,
        connect=dsn_connector(config.dsn))


async def dispatch(parts: Parts, *, watch_loop: bool = True) -> bool:
    """Wait for a usable schema, load endpoints, run the claimer until stopped, drain,
    record what is left. False when it could not start (``--once`` only).
    ``watch_loop``: also sample the event loop's lag (once per process)."""
    config, control = parts.config, parts.control
    verdict = await parts.gate.wait(control.stopping, once=parts.once is not None,
                                    interval=min(max(config.poll_interval, 0.1), 5.0),
                                    beat=control.heartbeat.beat)
    if verdict is not GateVerdict.READY:
        return verdict is GateVerdict.STOPPED

    async def load_endpoints() -> None:
        # Each try counts as a beat: waiting out a database that is down at
        # start is the loop alive, and /healthz must stay 200 however long it lasts.
        control.heartbeat.beat()
        await parts.maintenance.refresh_endpoints()

    await retry_until(load_endpoints, control.stopping, max_wait=10.0)
    completer = asyncio.create_task(parts.completer.run(), name="completer")
    helpers = [asyncio.create_task(parts.maintenance.run(), name="maintenance")]
    if watch_loop:
        helpers.append(asyncio.create_task(parts.metrics.loop_lag.run(), name="loop lag"))
    if parts.once is not None:
        await parts.once.before()
    else:
        helpers.append(asyncio.create_task(parts.listener.run(), name="listener"))
    try:
        if not control.stopping.is_set():
            log.info("dispatching (concurrency %d, batch size %d)",
                     config.concurrency, config.batch_size)
            await parts.claimer.run()
        await drain(parts.flights, parts.completer, config.shutdown_grace)
        parts.completer.close()
        try:
            await asyncio.wait_for(asyncio.shield(completer), config.shutdown_grace + 5)
        except TimeoutError:
            control.give_up.set()
    finally:
        await cancel_all([completer, *helpers])
    return True


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the tasks and wait for their end, cancelling again those still running each
    second: on Python 3.11 a cancellation that meets a timeout's end (``wait_for``, a
    connect's timeout) can be lost, and the task would run on for ever (a listener
    stopped while it was connecting did, with --databases)."""
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=1.0)
    await asyncio.gather(*tasks, return_exceptions=True)


async def run(config: DispatcherConfig) -> int:
    """Run the dispatcher; returns the process exit code."""
    raise_open_files_limit()
    quiet_resource_errors(asyncio.get_running_loop())
    parts = build(config)
    install_signals(parts.control)
    server = None if parts.once is not None else _health_server(parts)
    try:
        if server is not None:
            try:
                await server.start()
            except OSError as exc:
                log.error("%s", exc)
                return 1
        started = await dispatch(parts)
        summary = await parts.once.summary() if parts.once is not None and started else None
    finally:
        await parts.maintenance.resign()
        await parts.sender.aclose()
        for database in parts.databases:
            await database.close()
        if server is not None:
            await server.stop()
        if parts.tracing is not None:
            parts.tracing.shutdown()
    if not started:
        log.info("stopped")
        return 1
    if parts.once is not None and summary is not None:
        log.info("%s", summary)
        return parts.once.exit_code()
    log.info("stopped")
    return 0
