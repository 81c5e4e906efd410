"""``outbox-dispatcher --databases FILE``: one process serving the databases it owns.

Every turn (every quarter of a second, sooner when something calls for it)
the supervisor:

- takes the databases this process owns from the ``roster`` (the list and
  the fleet's members); a database it no longer owns, or no longer listed,
  is let go: its site drains (requests finish or are handed back);
- looks at each owned database without pinned connections (``probe``) when
  its next delivery comes due, when the hint says it had inserts
  (``activity``), at its sweep (``--sweep-interval`` after its last look: the
  watch, which also measures its gauges and says who serves it, ``watch``),
  or at the end of its backoff when it was set aside;
- pins connections (a ``site``) for a database with work due, within the
  ``budget``: when it is full, the site least recently busy gives its
  connections back; a site without work for ``RECENT`` seconds gives them
  back by itself, and its next due time is looked up once it has;
- sets aside, with capped backoff, a database that does not answer, refuses
  the role, or has no schema (or one too old), and says so once per change;
- reports ``outbox_database_up`` for the databases it owns and
  ``outbox_database_listed`` for every listed one, and ``/readyz`` ready while
  any database answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from dispatcher.app import install_signals, make_sender
from dispatcher.config import DispatcherConfig
from dispatcher.control import Control, Heartbeat
from dispatcher.many.activity import Activity
from dispatcher.many.budget import HELD, KEEP, SITE_COST, Budget
from dispatcher.many.probe import Look, look
from dispatcher.many.roster import Roster
from dispatcher.many.site import Site
from dispatcher.many.watch import Watcher, measure_once, next_look
from dispatcher.observe.by_database import FleetMetrics
from dispatcher.observe.logs import tag_databases
from dispatcher.observe.resources import quiet_resource_errors, raise_open_files_limit
from dispatcher.observe.server import HealthServer
from dispatcher.observe.tracing import configure as configure_tracing
from outbox._shared.database_catalog import Refreshed
from outbox._shared.databases import Database as Listed
from outbox._shared.dsn import without_passwords
from outbox._shared.version import current as version

log = logging.getLogger("dispatcher.many")
TURN = 0.25
"""Seconds between two turns of the supervisor, when nothing calls for one sooner (a look
found work, a site ended)."""
QUICK_TURN = 0.05
"""Seconds between two turns while a database waits for connections."""
RECENT = 60.0
"""Seconds without work after which a database gives its pinned connections back."""
SETTLE = 0.1
"""Seconds a site keeps its connections at least, and is idle at least, before the budget
may take them back for a database that waits."""
TURN_OVER = 5.0
"""Seconds after which the budget may take a busy site's connections back, for a database
that waits: when more databases have work than the budget can pin, they take turns."""
DOWN_AFTER = 10.0
"""Seconds a pinned database may go unanswered before it is set aside."""
HINT_EVERY = 1.0
"""Seconds between two reads of the servers' activity (the hint)."""
BACKOFF_MAX = 60.0
"""The longest wait before a database set aside is looked at again."""
LOOKS_AT_ONCE = 4
"""Short looks running at once (each holds one connection of the budget)."""
CHECK_EVERY = 300.0
"""Seconds a database's privileges and schema, once found usable, are taken as they were
by its looks (a site checks them again when it starts)."""
BACKLOG_EVERY = 15.0
"""Seconds between two measurements of a pinned database's backlog gauges (a scrape opens
no connection: with hundreds of databases it could not). The others' are measured by
their looks, at least every ``--sweep-interval``."""

State = Literal["cold", "pinned", "aside"]


@dataclass(slots=True)
class _Entry:
    """An owned database, as the supervisor keeps it."""

    listed: Listed
    state: State = "cold"
    site: Site | None = None
    look_at: float = 0.0  # when to look at it next (cold or aside)
    looking: bool = False
    wanted_since: float | None = None  # work found: pin it when the budget allows
    answered: bool = False  # its last look (or its site) found it usable
    backoff: float = 0.0
    why: str | None = None  # why it is set aside, as last logged
    checked_at: float | None = None  # when its privileges and schema last passed
    looked_at: float | None = None  # when its last look that answered began


class Supervisor:
    """Runs the databases this process owns until told to stop."""

    def __init__(self, config: DispatcherConfig, path: str, first: Refreshed,
                 environ: Mapping[str, str]) -> None:
        self._config = config
        self._control = Control(Heartbeat(60.0))
        self._metrics = FleetMetrics(histograms=config.histograms)
        self._budget = Budget(config.max_connections)
        self._roster = Roster(path, first, environ, lease=config.lease, budget=self._budget,
                              stopping=self._control.stopping)
        self._activity = Activity(self._budget)
        self._entries: dict[str, _Entry] = {}
        self._leaving: list[Site] = []
        pinned_at_once = max(1, (config.max_connections - HELD - KEEP) // SITE_COST)
        self._sender = make_sender(config, databases=pinned_at_once)
        self._tracing = configure_tracing(config.traces_exporter, version())
        self._looks: set[asyncio.Task[None]] = set()
        self._nudge = asyncio.Event()  # something calls for a turn now
        self._sweep = config.sweep_interval
        self._watcher = Watcher(every=config.sweep_interval)

    # -- one turn ---------------------------------------------------------------------

    def _turn(self, now: float) -> None:
        self._control.heartbeat.beat()
        self._reconcile(now)
        for entry in list(self._entries.values()):
            if entry.state == "pinned":
                self._watch(entry, now)
        self._leaving = [site for site in self._leaving if not self._ended(site)]
        self._look(now)
        self._pin(now)
        for name, entry in self._entries.items():
            self._metrics.databases.served(name, entry.state != "aside")
        self._metrics.databases.listed(self._roster.names())

    def _reconcile(self, now: float) -> None:
        owned = self._roster.owned()
        for name in [n for n in self._entries if n not in owned]:
            entry = self._entries.pop(name)
            self._metrics.databases.left(name)
            if entry.site is not None:
                entry.site.stop("let go")
                self._leaving.append(entry.site)
            log.info("database %s is let go (%s)", name,
                     "another dispatcher serves it" if self._roster.listed(name)
                     else "no longer listed")
        for name, listed in owned.items():
            known = self._entries.get(name)
            if known is None:
                self._entries[name] = _Entry(listed, look_at=now)
            elif known.listed != listed:  # its DSN changed: start again with the new one
                known.listed = listed
                if known.site is not None:
                    known.site.stop("its entry changed")

    def _ended(self, site: Site) -> bool:
        """A site drained and closed: its connections go back to the budget."""
        if not site.done:
            return False
        self._budget.give_now(SITE_COST)
        task = asyncio.get_running_loop().create_task(self._budget.wake_waiters())
        self._looks.add(task)
        task.add_done_callback(self._looks.discard)
        return True

    def _watch(self, entry: _Entry, now: float) -> None:
        site = entry.site
        assert site is not None
        site.watch(now)
        if site.done:
            failure = site.failure()
            why = site.stopping_for
            self._ended(site)
            entry.site = None
            if failure is not None or why == "down":
                self._aside(entry, failure or site.parts.health.why or "it stopped answering",
                            now)
            else:
                entry.state = "cold"
                entry.look_at = now + (0.5 if why == "idle" else 0.0)
            return
        if site.stopping_for is not None:
            return
        if now - site.last_ready > DOWN_AFTER:
            site.stop("down", now=True)
        elif now - site.last_busy > RECENT:
            site.stop("idle")
        else:
            entry.answered = True

    def _aside(self, entry: _Entry, why: str, now: float) -> None:
        why = without_passwords(why, [entry.listed.dsn, entry.listed.listen_dsn or ""])
        entry.state = "aside"
        entry.checked_at = None
        entry.answered = False
        entry.wanted_since = None
        entry.backoff = min(BACKOFF_MAX, max(1.0, entry.backoff * 2))
        entry.look_at = now + entry.backoff * random.uniform(0.8, 1.0)  # noqa: S311
        if why != entry.why:
            log.warning("database %s is set aside, tried again with backoff: %s",
                        entry.listed.name, why)
            entry.why = why

    def _look(self, now: float) -> None:
        due = sorted((e for e in self._entries.values()
                      if e.state != "pinned" and not e.looking and e.wanted_since is None
                      and e.look_at <= now), key=lambda e: e.look_at)
        for entry in due[:max(0, LOOKS_AT_ONCE - len([e for e in self._entries.values()
                                                      if e.looking]))]:
            entry.looking = True
            task = asyncio.get_running_loop().create_task(self._look_at(entry))
            self._looks.add(task)
            task.add_done_callback(self._looks.discard)

    async def _look_at(self, entry: _Entry) -> None:
        try:
            checked = entry.checked_at
            check = checked is None or time.monotonic() - checked > CHECK_EVERY
            async with self._budget.one():
                began = time.monotonic()
                found = await look(entry.listed.dsn, check=check, watcher=self._watcher)
            if check and found.problem is None:
                entry.checked_at = time.monotonic()
        finally:
            entry.looking = False
        self._found(entry, found, time.monotonic(), began)

    def _found(self, entry: _Entry, found: Look, now: float, began: float) -> None:
        if self._entries.get(entry.listed.name) is not entry or entry.state == "pinned":
            return  # let go meanwhile
        if found.problem is not None:
            self._aside(entry, found.problem, now)
            return
        if entry.state == "aside":
            log.info("database %s answers again and is served", entry.listed.name)
        entry.state, entry.why, entry.backoff, entry.answered = "cold", None, 0.0, True
        if found.measured is not None:
            self._metrics.databases.of(entry.listed.name).measured(found.measured.backlog,
                                                                   found.measured.horizon)
        first, entry.looked_at = entry.looked_at is None, began
        if found.due_now:
            entry.wanted_since = now
            self._nudge.set()
            return
        entry.look_at = next_look(now, began, found.due_in, self._sweep, first=first)

    async def _hint(self) -> None:
        while not self._control.stopping.is_set():
            cold = [e.listed for e in self._entries.values() if e.state == "cold"]
            try:
                moved = await self._activity.moved(cold)
            except Exception:  # a hint is only a hint
                log.debug("the activity hint failed", exc_info=True)
                moved = set()
            now = time.monotonic()
            for name in moved:
                entry = self._entries.get(name)
                if entry is not None and entry.state == "cold":
                    entry.look_at = min(entry.look_at, now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._control.stopping.wait(), HINT_EVERY)

    def _pin(self, now: float) -> None:
        waiting = sorted((e for e in self._entries.values()
                          if e.wanted_since is not None and e.state == "cold"),
                         key=lambda e: e.wanted_since or 0.0)
        if not waiting:
            return
        giving_back = sum(1 for e in self._entries.values()
                          if e.site is not None and e.site.stopping_for is not None)
        giving_back += len(self._leaving)
        for entry in waiting:
            if self._budget.take(SITE_COST, keep=KEEP):
                self._start(entry, now)
                continue
            if giving_back > 0:
                giving_back -= 1
                continue
            victim = min((e for e in self._entries.values()
                          if e.site is not None and e.site.stopping_for is None
                          and self._may_take_back(e.site, now)),
                         key=lambda e: e.site.last_busy if e.site else 0.0, default=None)
            if victim is None or victim.site is None:
                return
            victim.site.stop("taken back")
            log.debug("database %s gives its connections back for %s", victim.listed.name,
                      entry.listed.name)
            return

    @staticmethod
    def _may_take_back(site: Site, now: float) -> bool:
        age = now - site.started
        return age > TURN_OVER or (age > SETTLE and now - site.last_busy > SETTLE)

    def _start(self, entry: _Entry, now: float) -> None:
        site = Site(entry.listed, self._config,
                    metrics=self._metrics.databases.of(entry.listed.name),
                    sender=self._sender, tracing=self._tracing)
        entry.site, entry.state, entry.wanted_since = site, "pinned", None
        site.start(self._nudge.set)
        log.debug("database %s has work: connections pinned", entry.listed.name)

    def _ready(self) -> bool:
        return any(e.answered for e in self._entries.values())

    # -- the process ------------------------------------------------------------------

    async def run(self) -> int:
        raise_open_files_limit()
        quiet_resource_errors(asyncio.get_running_loop())
        tag_databases()
        install_signals(self._control)
        self._roster.say_problem()
        server = HealthServer(self._metrics, host=self._config.metrics_host,
                              port=self._config.metrics_port,
                              is_alive=self._control.heartbeat.alive, is_ready=self._ready)
        self._budget.take(HELD)
        helpers: list[asyncio.Task[None]] = []
        try:
            try:
                await server.start()
            except OSError as exc:
                log.error("%s", exc)
                return 1
            with contextlib.suppress(TimeoutError):  # the members before the first turn
                await asyncio.wait_for(self._roster.beat(), 10.0)
            log.info("dispatching for %d listed databases (at most %d connections)",
                     self._roster.count(), self._config.max_connections)
            helpers = [asyncio.create_task(self._roster.keep_list(), name="databases list"),
                       asyncio.create_task(self._roster.keep_members(), name="members"),
                       asyncio.create_task(self._hint(), name="activity hint"),
                       asyncio.create_task(self._metrics.loop_lag.run(), name="loop lag"),
                       asyncio.create_task(self._measure(), name="backlog"),
                       asyncio.create_task(self._give_up_all(), name="give up")]
            while not self._control.stopping.is_set():
                self._nudge.clear()
                self._turn(time.monotonic())
                waiting = any(e.wanted_since is not None for e in self._entries.values())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._nudge.wait(), QUICK_TURN if waiting else TURN)
            await self._stop_all()
        finally:
            for task in (*helpers, *self._looks):
                task.cancel()
            await asyncio.gather(*helpers, *self._looks, return_exceptions=True)
            await self._roster.close()
            await self._activity.close()
            await self._sender.aclose()
            await server.stop()
            if self._tracing is not None:
                self._tracing.shutdown()
        log.info("stopped")
        return 0

    async def _measure(self) -> None:
        """The backlog gauges of the databases with pinned connections, through a short-lived
        connection each (their looks measure the others')."""
        while not self._control.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._control.stopping.wait(), BACKLOG_EVERY)
            for entry in list(self._entries.values()):
                if entry.site is None or entry.site.stopping_for is not None:
                    continue
                measured = None
                with contextlib.suppress(TimeoutError):  # a gauge not refreshed is only stale
                    async with self._budget.one(), asyncio.timeout(5.0):
                        measured = await measure_once(entry.listed.dsn, self._watcher)
                if measured is not None and self._entries.get(entry.listed.name) is entry:
                    self._metrics.databases.of(entry.listed.name).measured(measured.backlog,
                                                                           measured.horizon)

    async def _give_up_all(self) -> None:
        await self._control.give_up.wait()
        for site in self._sites():
            site.give_up()

    def _sites(self) -> list[Site]:
        return [*(e.site for e in self._entries.values() if e.site is not None),
                *self._leaving]

    async def _stop_all(self) -> None:
        """Every site drains as a lone dispatcher does; one that has not ended well after
        the grace (its database hangs) is cut off."""
        sites = self._sites()
        for site in sites:
            site.stop("stopping")
            if self._control.give_up.is_set():
                site.give_up()
        waits = [asyncio.ensure_future(site.wait()) for site in sites]
        if not waits:
            return
        _done, late = await asyncio.wait(waits, timeout=self._config.shutdown_grace + 10)
        if late:
            log.warning("%d databases did not finish stopping in time: %s", len(late),
                        ", ".join(sorted(s.name for s in sites if not s.done)))
            for site in sites:
                site.cancel()
            await asyncio.gather(*late, return_exceptions=True)


async def run(config: DispatcherConfig, path: str, first: Refreshed,
              environ: Mapping[str, str]) -> int:
    """Serve the databases of the file at ``path``; returns the process exit code."""
    return await Supervisor(config, path, first, environ).run()
