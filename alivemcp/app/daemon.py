"""The long-running daemon: config → probes → scheduler → status, metrics, alerting.

Reload (SIGHUP) swaps the config in place: unchanged checks keep their probe instance and
state; changed ones are torn down and rebuilt; an invalid file is refused and the old config
keeps running. Reload requests are coalesced, and one that arrives while the daemon is still
starting is applied once it has started.

SIGTERM/SIGINT stop scheduling; runs already probing get ``scheduler.shutdown_grace`` to finish
and their results are recorded (and reach alerting); then teardowns (canary clean-up) run while
alerting flushes its queue, and the process exits 0. The whole stop takes at most the grace plus
:data:`STOP_OVERHEAD_SECONDS`. A stop during start-up skips what has not started yet.

The daemon holds ``data_dir`` exclusively (:mod:`alivemcp.app.datadir`): a second daemon on the same
directory exits 2 with one line saying who holds it.

Cluster mode (``cluster:`` set; docs/cluster.md; wired in :mod:`alivemcp.app.clustered`): the
replica probes only the checks of the shards its location's consumer group hands it, and
decides (pages for) the checks of the shards the deployment's verdict group hands it. Its
results take the route declared in :mod:`alivemcp.app.route` (admission, the quorum stage, the
results stream), and the view of the results topic gives the quorum stage every other
replica's results. Kafka is joined in the background after the HTTP server is up; cluster
topics whose layout cannot serve the config stop the daemon with exit code 2 and one line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import itertools
import signal
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import structlog

from alivemcp.alerting.manager import AlertManager
from alivemcp.app.clustered import ClusterParts, cluster_parts, quorum_board
from alivemcp.app.configload import LOAD_IN_CHILD_BYTES, file_size, load_off_loop
from alivemcp.app.datadir import DataDirInUseError, DataDirLock
from alivemcp.app.discovered import DiscoveredChecks, DiscoveryParts
from alivemcp.app.instruments import ConfigMetrics
from alivemcp.app.lifecycle import STOP_SIGNALS, take_held_signals
from alivemcp.app.route import Admission, result_route
from alivemcp.app.slices import APPLY_SLICE, AnyOf, Slices, names_of, teardown_all
from alivemcp.cluster._kafka import ClusterKafka
from alivemcp.cluster.config import DEFAULT_LOCATION
from alivemcp.cluster.stream import ResultsStream
from alivemcp.cluster.verdicts import Verdicts
from alivemcp.config import (
    ConfigError,
    LoadedConfig,
    ResolvedCheck,
    split_listen,
)
from alivemcp.discovery.manager import DiscoveryManager
from alivemcp.engine.checks import build_handle, check_info
from alivemcp.engine.instruments import SchedulerMetrics
from alivemcp.engine.results import CheckInfo
from alivemcp.engine.runner import ProbeHandle
from alivemcp.engine.scheduler import Scheduler
from alivemcp.engine.status import StatusStore
from alivemcp.history.store import HistoryStore
from alivemcp.hygiene.collector import collector_paused
from alivemcp.hygiene.heap import dropping, settle_heap, tune_allocator
from alivemcp.hygiene.logging import configure_logging
from alivemcp.plumbing import Plumbing, user_agent
from alivemcp.toolsurface.metrics import SurfaceCollector
from alivemcp.toolsurface.store import SurfaceStore
from alivemcp.toolsurface.tracker import SurfaceTracker
from alivemcp.web.auth import WebAccess
from alivemcp.web.discovery import DiscoveryCollector
from alivemcp.web.metrics import Metrics
from alivemcp.web.server import HttpServer
from alivemcp.web.webconfig import WebConfig

__all__ = ["Daemon"]

log = structlog.get_logger("alivemcp.app.daemon")

#: The whole shutdown must fit well inside Kubernetes' default 30 s: the grace (default 10 s)
#: plus this overhead. Teardowns and the alert flush run side by side, each within 3 s.
TEARDOWN_SECONDS = 3.0
ALERT_FLUSH_SECONDS = 3.0
HISTORY_FLUSH_SECONDS = 3.0
#: Beyond the grace: a reload in progress 1 s to cancel, runs cut at the end of the grace 2 s
#: to unwind, teardowns and flush 3 s, requests being answered 1 s, closing clients ~1 s.
STOP_OVERHEAD_SECONDS = 8.0
EXIT_DATA_DIR_IN_USE = 2
EXIT_CLUSTER_TOPICS = 2


class Daemon:
    def __init__(
        self,
        loaded: LoadedConfig,
        config_path: Path | None,
        listen: str | None = None,
        *,
        web_config: WebConfig | None = None,
        web_config_pinned: bool = False,
    ) -> None:
        self._loaded = loaded
        self._config_path = config_path
        self._listen = listen or loaded.config.server.listen
        cluster = loaded.config.cluster
        self.store = StatusStore(replica=cluster.replica_id if cluster is not None else "")
        self.metrics = Metrics(self.store)
        self.config_metrics = ConfigMetrics(self.metrics.registry)
        # The probes' User-Agent names this replica's location (its targets can tell the
        # vantage points apart).
        self.plumbing = Plumbing(
            user_agent=user_agent(cluster.location)
            if cluster is not None and cluster.location != DEFAULT_LOCATION
            else None
        )
        #: The checks' infos as the last applied config made them: status, history, probe
        #: handles and alerting share one each (at 100,000 checks a second set was 13 MB).
        with collector_paused():  # (an entry per check each; see _apply)
            self._applied_infos = [check_info(c) for c in loaded.checks]
            self.alerts = AlertManager(
                loaded.config.alerting,
                [
                    (info, c.alert)
                    for info, c in zip(self._applied_infos, loaded.checks, strict=True)
                ],
                Path(loaded.config.data_dir),
                self.metrics.registry,
                shared=cluster is not None,
                status_of=self._status_of if cluster is not None else None,
            )
        history = loaded.config.history
        self.history = (
            HistoryStore(loaded.config.data_dir, history, self.metrics.registry)
            if history.enabled
            else None
        )
        if self.history is not None:
            self.metrics.checks.set_uptime_source(history.metrics_window, self.history.live_uptime)
        self.surfaces = SurfaceTracker(
            SurfaceStore(loaded.config.data_dir, max_versions=history.tool_surface_versions),
            self.alerts.observe_surface,
            replica=cluster.replica_id if cluster is not None else "",
        )
        self.metrics.registry.register(SurfaceCollector(self.surfaces))
        stream: ResultsStream | None = None
        verdicts: Verdicts | None = None
        if cluster is not None:
            kafka = ClusterKafka(cluster.kafka, self.plumbing)
            stream = ResultsStream(
                cluster, kafka, self.metrics.registry, surface_of=self.surfaces.record_for
            )
            self.surfaces.publish = stream.publish
            verdicts = Verdicts(
                quorum_board(cluster),
                self.store,
                self.alerts,
                self.history,
                lambda name: self.cluster is not None and self.cluster.decides(name),
                self.metrics.registry,
            )
        self.pipeline = result_route(
            store=self.store,
            alerts=self.alerts,
            history=self.history,
            registry=self.metrics.registry,
            stream=stream,
            admission=Admission(self._admit) if cluster is not None else None,
            surfaces=self.surfaces,
            verdicts=verdicts,
        )
        self.scheduler = Scheduler(
            self.store.mark_in_flight,
            SchedulerMetrics(self.metrics.registry),
            self.pipeline,
            loaded.config.scheduler,
        )
        self.cluster: ClusterParts | None = None
        if cluster is not None:
            assert stream is not None and verdicts is not None
            self.cluster = cluster_parts(
                cluster,
                kafka,
                stream,
                verdicts,
                store=self.store,
                history=self.history,
                alerts=self.alerts,
                surfaces=self.surfaces,
                metrics=self.metrics,
                data_dir=Path(loaded.config.data_dir),
                scheduler=self.scheduler,
                checks=self._configured_checks,
                build=self._build_handle,
                retire=self._retire,
            )
        self.discovered = DiscoveredChecks(
            DiscoveryParts(
                scheduler=self.scheduler,
                store=self.store,
                alerts=self.alerts,
                history=self.history,
                build_handle=self._build_discovered_handle,
                retire=self._retire,
                probed=self._probed_check,
                configured=lambda: self._configured_names,
                counted=self._count_configured,
                surfaces=self.surfaces,
            )
        )
        self._configured_names = frozenset(c.name for c in loaded.checks)
        self.discovery = DiscoveryManager(
            loaded,
            self.plumbing.http,
            self.discovered.apply,
            base_dir=config_path.parent if config_path is not None else Path.cwd(),
        )
        # TLS, credentials and headers: --web.config.file (web_config, pinned) or the config's.
        self.web_access = WebAccess.serving(
            loaded.config.server,
            self.metrics.registry,
            config_dir=config_path.parent if config_path is not None else Path.cwd(),
            web_config=web_config,
            pinned=web_config_pinned,
        )
        self.server = HttpServer(
            self.store,
            self.metrics,
            self.scheduler.alive,
            lambda: self._loaded is not None,
            self.alerts.firing_alerts,
            self.history,
            self.discovery.snapshot,
            surfaces=self.surfaces,
            mcp=loaded.config.server.mcp,
            access=self.web_access,
        )
        self.metrics.registry.register(DiscoveryCollector(self.discovery.snapshot))
        self._data_dir_lock = DataDirLock(loaded.config.data_dir)
        self._stop = asyncio.Event()
        self._reload_lock = asyncio.Lock()
        self._reload_wanted = asyncio.Event()
        self._reloader: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Future[None]] = set()  # teardowns of checks a reload replaced
        self._stopping = False
        self._exit_code = 0
        self._cluster_starter: asyncio.Task[None] | None = None
        self._hand_written_counts: Counter[str] = Counter(c.probe_type for c in loaded.checks)

    # -- cluster mode ------------------------------------------------------------------------

    def _status_of(self, name: str) -> str | None:
        state = self.store.get(name)
        return state.last.status.value if state is not None and state.last is not None else None

    def _admit(self, name: str) -> bool:
        """Cluster mode: a result goes on only while its shard is held and the lease is live
        (a replica frozen past its lease may start a run as it thaws; the result is dropped)."""
        return self.cluster is not None and self.cluster.node.admit(name)

    def _configured_checks(self) -> Sequence[ResolvedCheck]:
        return [*self._loaded.checks, *self.discovered.checks()]

    def _build_discovered_handle(self, check: ResolvedCheck, info: CheckInfo) -> ProbeHandle:
        return build_handle(check, self.plumbing, results=self.store, info=info)

    def _count_configured(self, discovered: Counter[str]) -> None:
        self.config_metrics.set_configured(self._hand_written_counts + discovered)

    def _build_handle(self, check: ResolvedCheck) -> ProbeHandle:
        return build_handle(check, self.plumbing, results=self.store)

    def _retire(self, handles: list[ProbeHandle]) -> None:
        """Tear down probe instances in the background (joined by the shutdown)."""
        handles = [handle for handle in handles if handle.needs_teardown]
        if handles:
            teardown = asyncio.ensure_future(teardown_all(handles, TEARDOWN_SECONDS))
            self._retiring.add(teardown)
            teardown.add_done_callback(self._retiring.discard)

    def _probed_check(self, check: ResolvedCheck) -> bool:
        """Whether this process schedules the check: all in standalone mode; in cluster mode
        the checks of the shards held, where the check's locations include this one's."""
        cluster = self.cluster
        return cluster is None or (
            check.probed_in(cluster.config.location) and cluster.probing.owns(check.name)
        )

    def _cluster_failed(self, why: str) -> None:
        self._exit_code = EXIT_CLUSTER_TOPICS
        self._stop.set()

    async def _stop_cluster(self, parts: ClusterParts) -> None:
        starter, self._cluster_starter = self._cluster_starter, None
        if starter is not None and not starter.done():
            starter.cancel()
            await asyncio.wait({starter}, timeout=2)
        await parts.stop()

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> int:
        # Signals first: a SIGHUP or SIGTERM during start-up must neither kill the process
        # nor be lost. Reloads wait until the daemon has started; a stop skips the rest.
        self._take_signals()
        if not self._lock_data_dir():
            return EXIT_DATA_DIR_IN_USE
        try:
            if not self._stop.is_set():
                await self._start()
            await self._stop.wait()
            await self.shutdown()
        finally:
            self._data_dir_lock.release()
        return self._exit_code

    def _take_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._reload_wanted.set)
        for signum in take_held_signals():
            if signum == signal.SIGHUP:
                self._reload_wanted.set()
            else:
                self._stop.set()

    def _lock_data_dir(self) -> bool:
        """Take data_dir before anything touches it; False when another daemon holds it."""
        try:
            self._data_dir_lock.acquire()
        except DataDirInUseError as exc:
            print(exc, file=sys.stderr, flush=True)
            return False
        except OSError as exc:
            # An unwritable data_dir does not stop probing or paging (alerting says so too).
            log.warning(
                "cannot lock data_dir; running without the one-daemon guard",
                data_dir=self._data_dir_lock.data_dir,
                error=exc.strerror or str(exc),
            )
        return True

    async def _start(self) -> None:
        _raise_open_files_limit()
        tune_allocator()
        host, port = split_listen(self._listen)
        await self.server.start(host, port)
        await self.alerts.start()
        if self.history is not None:
            self.history.start()
        await self.surfaces.start()
        if self._stop.is_set():
            return
        await self._apply(self._loaded, self._probed_check, self._applied_infos)
        self.config_metrics.config_loaded(True)
        settle_heap()
        self.scheduler.start()
        await self.discovery.start()
        self._reloader = asyncio.create_task(self._reload_on_request(), name="alivemcp-reload")
        if self.cluster is not None:
            self._cluster_starter = asyncio.create_task(
                self.cluster.start(self._cluster_failed), name="alivemcp-cluster-start"
            )
        log.info(
            "alivemcp running",
            listen=f"{host}:{self.server.port}",
            checks=len(self._loaded.checks),
            config=self._loaded.source,
        )

    def request_stop(self) -> None:
        self._stop.set()

    async def shutdown(self) -> None:
        self._stopping = True
        grace = self._loaded.config.scheduler.shutdown_grace
        log.info("stopping", grace_seconds=grace)
        await self._cancel_reload()
        await self.discovery.aclose()
        await self.scheduler.stop(grace)
        handles = [entry.handle for entry in self.scheduler.checks.values()]
        if self.cluster is not None:
            # After the scheduler (runs in flight finish within the grace and reach the
            # stream): the node's revoke then flushes the stream and writes alert state.
            await self._stop_cluster(self.cluster)
            handles += [h for h in self.cluster.probing.parked() if h.needs_teardown]
        # Canary clean-up (of running checks, and of those a cancelled reload was retiring)
        # and the alert flush (results of the last runs) are independent: side by side.
        await asyncio.gather(
            teardown_all(handles, TEARDOWN_SECONDS),
            *self._retiring,
            self.alerts.stop(grace=ALERT_FLUSH_SECONDS),
            *([self.history.stop(HISTORY_FLUSH_SECONDS)] if self.history is not None else []),
            self.surfaces.stop(),
        )
        if self.cluster is not None:
            await self.cluster.kafka.aclose()
        await self.plumbing.aclose()
        await self.server.stop()
        log.info("stopped")

    async def _reload_on_request(self) -> None:
        while True:
            await self._reload_wanted.wait()
            self._reload_wanted.clear()
            if self._stopping:
                return
            try:
                await self.reload()
            except Exception:  # the next SIGHUP must still be heard
                self.config_metrics.config_loaded(False)
                log.exception("config reload failed; keeping the running config")

    async def _cancel_reload(self) -> None:
        """A reload in progress is abandoned: a config still loading is never applied; one
        already applied keeps its teardowns going (they join the shutdown's)."""
        reloader, self._reloader = self._reloader, None
        if reloader is not None:
            reloader.cancel()
            await asyncio.wait({reloader}, timeout=1)

    # -- config ------------------------------------------------------------------------------

    async def reload(self) -> bool:
        async with self._reload_lock:
            if self._config_path is None:
                return False
            try:
                loaded = await load_off_loop(self._config_path, self._loaded.checks)
            except ConfigError as exc:
                self.config_metrics.config_loaded(False)
                log.error(
                    "config reload refused; keeping the running config",
                    errors=exc.shown(),
                    error_count=len(exc.errors),
                    source=exc.source,
                )
                return False
            configure_logging(loaded.config.logging.level, loaded.config.logging.format)
            if loaded.config.server.listen != self._loaded.config.server.listen:
                log.warning("server.listen changed: takes effect on restart")
            await self.web_access.reconfigure(loaded.config.server)
            if loaded.config.history.enabled != self._loaded.config.history.enabled:
                log.warning("history.enabled changed: takes effect on restart")
            if loaded.config.data_dir != self._loaded.config.data_dir:
                log.warning("data_dir changed: takes effect on restart")
            if loaded.config.cluster != self._loaded.config.cluster:
                log.warning("cluster changed: takes effect on restart")
            if self.history is not None:
                self.history.reconfigure(loaded.config.history)
                self.metrics.checks.set_uptime_source(
                    loaded.config.history.metrics_window, self.history.live_uptime
                )
            loaded, infos = await self._keeping_unchanged(loaded)
            names = await names_of(loaded.checks)
            # No discovery refresh changes checks while the config's apply walks them (it
            # would add a check back that the refresh had just removed).
            async with self.discovered.lock:
                self._configured_names = names
                self.discovered.yield_names(names)
                old_teardowns = await self._apply(loaded, self._probed_check, infos)
                if self.cluster is not None:
                    self.cluster.node.shard_of.retain(c.name for c in loaded.checks)
                self.scheduler.configure_limits(loaded.config.scheduler)
                slices = Slices()  # (an entry per check: a quarter of a second at 100,000)
                with collector_paused():  # (it builds an entry per check; see _apply)
                    # Walked by the steps (a list of 100,000 pairs made first held the loop).
                    entries = itertools.chain(
                        zip(
                            self._applied_infos,
                            (c.alert for c in loaded.checks),
                            strict=True,
                        ),
                        self.discovered.alert_entries(),
                    )
                    for _ in self.alerts.reconfiguring(loaded.config.alerting, entries):
                        await slices.step()
                    # Frozen before the collector is back: its first young collection would walk
                    # every object made while it was off (a quarter of a second at 100,000).
                    gc.freeze()
                replaced, self._loaded = self._loaded, loaded
            self.config_metrics.config_loaded(True)
            await self.discovery.reconfigure(loaded)
            # Logged when the new config takes effect: what follows (teardowns, freeing the
            # replaced checks) is clean-up a stop may cut short, and the reload stands anyway.
            log.info(
                "config reloaded",
                checks=len(loaded.checks),
                loaded_in="process"
                if file_size(self._config_path) >= LOAD_IN_CHILD_BYTES
                else "thread",
            )
            if slices.cancelled:  # a stop: the replaced instances go with its own teardowns
                self._retire(old_teardowns)
                raise asyncio.CancelledError
            # Shielded: a stop cancels the reload, never a canary clean-up half-way.
            teardown = asyncio.ensure_future(teardown_all(old_teardowns, TEARDOWN_SECONDS))
            self._retiring.add(teardown)
            teardown.add_done_callback(self._retiring.discard)
            await asyncio.shield(teardown)
            doomed = list(replaced.checks)  # the replaced config's checks, freed in slices
            del replaced
            slices = Slices()
            for _ in dropping(doomed):
                await slices.step()
            if slices.cancelled:
                raise asyncio.CancelledError
            settle_heap()
            return True

    async def _keeping_unchanged(
        self, loaded: LoadedConfig
    ) -> tuple[LoadedConfig, list[CheckInfo]]:
        """``loaded`` with each check that did not change replaced by the running one, and the
        checks' infos (a kept check's own). What is kept stays as it was in memory: the
        status entry, the alerting entry and the kept /metrics lines follow the info, so a
        reload that changes a few of 100,000 checks rebuilds a few of each, not 100,000 (whose
        replaced objects stayed in the heap as holes: 93 MB after a reload of 100,000 checks
        that changed nothing). A config loaded in a child holds the running objects already
        (see :mod:`alivemcp.app.configload`); one loaded in a thread is small, and its copies of
        kept checks are freed with it. Slices of :data:`APPLY_SLICE` checks; nothing has
        changed yet if it is cancelled."""
        checks, applied = self._loaded.checks, self._applied_infos
        incoming = list(loaded.checks)
        infos: list[CheckInfo] = []
        position: dict[str, int] | None = None
        for i, check in enumerate(incoming):
            # Most reloads keep the checks' order; the running check's position by name is
            # looked up only when it did not (built a slice at a time: in one go, a dict of
            # 100,000 names held the loop 80 ms).
            at: int | None = i
            if i >= len(checks) or checks[i].name != check.name:
                if position is None:
                    position = {}
                    for j, running in enumerate(checks):
                        position[running.name] = j
                        if j % APPLY_SLICE == APPLY_SLICE - 1:
                            await asyncio.sleep(0)
                at = position.get(check.name)
            if at is not None and checks[at].same_as(check):
                incoming[i], info = checks[at], applied[at]
            else:
                info = check_info(check)
            infos.append(info)
            if i % APPLY_SLICE == APPLY_SLICE - 1:
                await asyncio.sleep(0)
        return dataclasses.replace(loaded, checks=tuple(incoming)), infos

    async def _apply(
        self,
        loaded: LoadedConfig,
        probed: Callable[[ResolvedCheck], bool] | None = None,
        infos_made: Sequence[CheckInfo] | None = None,
    ) -> list[ProbeHandle]:
        """Make the scheduler match ``loaded`` (only the checks ``probed`` says this process
        runs, if given; status and history know them all); returns handles that need a
        teardown. ``infos_made``: the checks' infos, when the caller made them already.

        Two phases, each :data:`APPLY_SLICE` checks at a time with the event loop let run in
        between: at 100,000 checks each took seconds, and in one go that held every running
        check back as long. First the new probe instances are built; nothing running changes,
        so a reload cancelled then leaves the old config whole. Then the switch: replaced and
        removed checks leave the schedule, the status store and history take the new list,
        and the new probe instances join the schedule in one batch (one start window for their
        first runs). A cancel during the switch finishes it without yielding, then goes on.
        (In cluster mode a rebalance may add or remove checks meanwhile: each step goes by
        what is scheduled and ``probed`` at that moment.)"""
        # At 100,000 checks this builds about a million objects: with the collector on, its
        # full collections over them (each larger than the last) held the loop for seconds.
        # Off meanwhile, and what was built is frozen at the end (see settle_heap), so no
        # collection walks it while checks run.
        with collector_paused():
            # Built a slice at a time with the rest (in one go, a dict of 100,000 checks held
            # the loop for tens of milliseconds).
            wanted: dict[str, ResolvedCheck] = {}
            running = self.scheduler.checks
            infos: list[CheckInfo] = []
            fresh: dict[str, tuple[ProbeHandle, object]] = {}
            for i, check in enumerate(loaded.checks):
                info = check_info(check) if infos_made is None else infos_made[i]
                infos.append(info)
                name = check.name
                wanted[name] = check
                if probed is None or probed(check):
                    entry = running.get(name)
                    if entry is None or entry.fingerprint != check.fingerprint():
                        handle = build_handle(check, self.plumbing, results=self.store, info=info)
                        fresh[name] = (handle, check.fingerprint())
                if i % APPLY_SLICE == APPLY_SLICE - 1:
                    await asyncio.sleep(0)
            # The switch: sliced as well, but never left half-done (see Slices).
            slices = Slices()
            retired: list[ProbeHandle] = []
            for name in list(running):
                entry = running.get(name)
                configured = wanted.get(name)
                if entry is not None and configured is None and name in self.discovered:
                    pass  # a discovered check: changed by its source, not by the config
                elif entry is not None and (
                    configured is None
                    or configured.fingerprint() != entry.fingerprint
                    or (probed is not None and not probed(configured))
                ):
                    self.scheduler.remove(name)
                    if entry.handle.needs_teardown:
                        retired.append(entry.handle)
                await slices.step()
            everything = [*infos, *self.discovered.infos()]
            for _ in self.store.align(everything):
                await slices.step()
            if self.history is not None:
                self.history.set_checks(everything)
            self.surfaces.retain(AnyOf(wanted, self.discovered))
            with self.scheduler.batch():  # one start window for all the new first runs
                for check, info in zip(loaded.checks, infos, strict=True):
                    name = check.name
                    if name not in running and (probed is None or probed(check)):
                        built = fresh.get(name)
                        if built is None:  # a shard gained while the others were built
                            built = (
                                build_handle(check, self.plumbing, results=self.store, info=info),
                                check.fingerprint(),
                            )
                        self.scheduler.add(*built)
                    await slices.step()
            self._hand_written_counts = Counter(c.probe_type for c in loaded.checks)
            self._count_configured(self.discovered.counts())
            self._applied_infos = infos
            gc.freeze()
        if slices.cancelled:  # (a stop: the replaced instances are torn down with its own)
            self._retire(retired)
            raise asyncio.CancelledError
        return retired


def _raise_open_files_limit() -> None:
    """Each probe in flight holds a socket or two: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError) as exc:  # pragma: no cover - platform limits
        log.warning("could not raise the open-files limit", error=str(exc))
