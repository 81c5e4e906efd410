"""The dispatcher process: wire the parts together, run until told to stop.

Start-up never fails for a database outage: endpoints are loaded with capped
backoff while ``/healthz`` answers 200 and ``/readyz`` 503. The first SIGTERM
or SIGINT starts a graceful stop (see :mod:`dispatcher.engine`); a second one
abandons the grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from dispatcher.config import DispatcherConfig
from dispatcher.db import Health, retry_until
from dispatcher.engine import Engine
from dispatcher.maintenance import Maintenance
from dispatcher.metrics import Metrics
from dispatcher.server import HealthServer, dsn_connector
from dispatcher.shutdown import drain

log = logging.getLogger("dispatcher")
_ALIVE_AFTER = 60.0  # seconds without a loop tick before /healthz fails


def _install_signals(engine: Engine) -> None:
    def on_signal() -> None:
        if engine.stopping.is_set():
            log.warning("second signal: stopping now")
            engine.give_up.set()
        else:
            log.info("stopping: no new claims, finishing requests in flight")
        engine.stopping.set()
        engine.wake.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def _health_server(config: DispatcherConfig, engine: Engine) -> HealthServer:
    loop = asyncio.get_running_loop()
    stale = max(_ALIVE_AFTER, 3 * config.poll_interval)
    return HealthServer(
        engine.metrics, host=config.metrics_host, port=config.metrics_port,
        is_alive=lambda: loop.time() - engine.last_tick < stale,
        is_ready=lambda: engine.health.db_ok, connect=dsn_connector(config.dsn))


async def _dispatch(engine: Engine, maintenance: Maintenance) -> None:
    """Load endpoints, run the claimer until stopped, drain, record what is left."""
    config = engine.config
    loop = asyncio.get_running_loop()

    async def load_endpoints() -> None:
        # Each try counts as a tick: waiting out a database that is down at
        # start is the loop alive, and /healthz must stay 200 however long it lasts.
        engine.last_tick = loop.time()
        await maintenance.refresh_endpoints()

    await retry_until(load_endpoints, engine.stopping, max_wait=10.0)
    completer = asyncio.create_task(engine.completer.run(), name="completer")
    helpers = [asyncio.create_task(maintenance.run(), name="maintenance")]
    if config.once:
        with contextlib.suppress(Exception):
            await maintenance.rescue()
    else:
        helpers.append(asyncio.create_task(engine.listener.run(), name="listener"))
    try:
        if not engine.stopping.is_set():
            log.info("dispatching (concurrency %d, batch size %d)",
                     config.concurrency, config.batch_size)
            await engine.claim_loop()
        await drain(engine)
        engine.completer.close()
        try:
            await asyncio.wait_for(asyncio.shield(completer), config.shutdown_grace + 5)
        except TimeoutError:
            engine.give_up.set()
    finally:
        for task in (completer, *helpers):
            task.cancel()
        await asyncio.gather(completer, *helpers, return_exceptions=True)


async def run(config: DispatcherConfig) -> int:
    """Run the dispatcher; returns the process exit code."""
    engine = Engine(config, Metrics(), Health())
    maintenance = Maintenance(engine)
    _install_signals(engine)
    server = None if config.once else _health_server(config, engine)
    try:
        if server is not None:
            try:
                await server.start()
            except OSError as exc:
                log.error("%s", exc)
                return 1
        await _dispatch(engine, maintenance)
    finally:
        await engine.sender.aclose()
        for database in (engine.claim_db, engine.complete_db, maintenance.db):
            await database.close()
        if server is not None:
            await server.stop()
    log.info("stopped")
    return 1 if config.once and engine.dead_lettered else 0
