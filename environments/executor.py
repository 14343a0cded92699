"""One way to fan work out, on this machine's threads or on a Ray cluster: `batch` and `eval` call it alike.

    with executor_for(backend, address, workers) as ex:
        for outcome in ex.run(fn, items):    # in the order items finish
            ...                              # the driver (this process) writes every result

`fn` is a module-level function (Ray ships it by reference, so every node must have pinpoint installed: see
docs/cluster.md) and returns a value instead of writing files, so the caller stays the only writer of preds.jsonl,
reports and summaries. An item's own exception comes back as `Outcome.error`, exactly as `fn` raised it; the
machinery failing under an item (its Ray worker killed, its node lost) is retried once, on another node where
there is one, and then comes back as a `TaskLost` error: infrastructure, never a result, so nothing is written
twice and a rerun retries it.

On Ray each item is a task asking `Needs.cpus` CPUs and `Needs.docker` units of the custom `docker` resource,
which each node declares as the number of boxes its engine holds (`ray start --resources '{"docker": 8}'`), so
no node runs more boxes than that.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pinpoint.environments.errors import PinpointError, UsageError

BACKENDS = ("local", "ray")
#: environment variables a Ray task gets from the driver: pinpoint's folders and switches, the endpoint's
_FORWARDED_PREFIXES = ("PINPOINT_", "OPENAI_")


class TaskLost(PinpointError, RuntimeError):
    """The machinery under an item failed (a worker process killed, a node lost), twice: infrastructure."""


class ClusterUnavailable(PinpointError, RuntimeError):
    """The Ray cluster cannot be reached or cannot run the items (no node offers what they need)."""


@dataclass(frozen=True)
class Needs:
    """What one item holds while it runs: CPUs, and boxes on its node's Docker engine."""

    cpus: float = 1.0
    docker: int = 0


@dataclass(frozen=True)
class Item:
    """One unit of a fan-out: `fn(*args)` under the key the caller knows it by."""

    key: str
    args: tuple[Any, ...]
    needs: Needs = field(default_factory=Needs)
    #: items of one group go to the same worker of `run_on_workers` (a GRPO group shares its image and pool)
    group: str = ""
    #: on Ray, the node id this item must run on ('' for any: `images build --all-nodes` pins one per node)
    node: str = ""


@dataclass
class Outcome:
    """What came back for one item: its value, or the exception it (or the machinery, as TaskLost) raised."""

    key: str
    value: Any = None
    error: BaseException | None = None
    attempts: int = 1
    node: str = "local"


def _as_finished(futures: dict[concurrent.futures.Future, Item]) -> Iterator[Outcome]:
    """Each future's outcome as it finishes; an item's own exception comes back for the caller to label."""
    for future in concurrent.futures.as_completed(futures):
        key = futures[future].key
        try:
            yield Outcome(key, value=future.result())
        except Exception as exc:
            yield Outcome(key, error=exc)


class LocalExecutor:
    """Threads in this process: the default backend, and what `--workers N` always meant."""

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        self.workers = max(1, workers)

    def run(self, fn: Callable[..., Any], items: Iterable[Item],
            on_start: Callable[[str], None] | None = None) -> Iterator[Outcome]:
        """`fn(*item.args)` for every item on `workers` threads; outcomes in the order they finish; `on_start(key)`
        is called (on the item's thread) as each item starts."""
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.workers) as pool:
            futures = {pool.submit(_started, on_start, item.key, fn, *item.args): item for item in items}
            yield from _as_finished(futures)

    def run_on_workers(self, factory: Callable[..., Any], init: tuple[Any, ...], items: Iterable[Item], *,
                       workers: int, concurrency: int = 1, needs: Needs = Needs()) -> Iterator[Outcome]:
        """`workers` objects `factory(*init)` in this process, each calling `.run(*item.args)` on `concurrency`
        threads; a group's items all go to one object; each object's `close()` (if any) at the end."""
        items = list(items)
        objects = [factory(*init) for _ in range(max(1, workers))]
        pools = [concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) for _ in objects]
        try:
            futures = {pools[w].submit(objects[w].run, *item.args): item
                       for item, w in zip(items, assign_groups(items, len(objects)), strict=True)}
            yield from _as_finished(futures)
        finally:
            for pool in pools:
                pool.shutdown(wait=True, cancel_futures=True)
            for obj in objects:
                getattr(obj, "close", lambda: None)()

    def describe(self) -> str:
        return f"{self.workers} worker(s)"

    def node_ids(self) -> list[str]:
        """One machine: no node to name ('' places an item anywhere)."""
        return [""]

    def close(self) -> None:
        """Nothing to release: the threads end with `run`."""

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _started(on_start: Callable[[str], None] | None, key: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Runs on a local worker thread: says the item starts, then runs it."""
    if on_start is not None:
        on_start(key)
    return fn(*args)


def _call(fn: Callable[..., Any], args: tuple[Any, ...], key: str, ledger: Any) -> tuple[str, Any]:
    """Runs in a Ray worker: tells the ledger where the item runs (its node, this worker's pid and run id: what
    a retry avoids and what a reap removes), then runs it."""
    import ray
    from pinpoint.environments.labels import RUN_ID

    node = ray.get_runtime_context().get_node_id()
    ray.get(ledger.started.remote(key, node, os.getpid(), RUN_ID))
    return node, fn(*args)


@dataclass(frozen=True)
class Started:
    """Where an item last started: its node, the Ray worker's pid and the run id its boxes are labelled with."""

    node: str
    pid: int
    run_id: str


class _Ledger:
    """A Ray actor on the driver's node: where each item last started, because a crashed worker's error does
    not name it (and a lost item's boxes are found by that worker's pid)."""

    def __init__(self) -> None:
        self.started_at: dict[str, Started] = {}

    def started(self, key: str, node: str, pid: int, run_id: str) -> None:
        self.started_at[key] = Started(node, pid, run_id)

    def where(self, key: str) -> Started | None:
        return self.started_at.get(key)

    def keys(self) -> list[str]:
        return list(self.started_at)


class _Host:
    """The Ray actor of `run_on_workers`: one `factory(*init)`, and where it runs (its node, its pid, the run id
    its boxes carry), so that the boxes of an actor lost with its node can be reaped on that node's engine."""

    def __init__(self, factory: Callable[..., Any], init: tuple[Any, ...]) -> None:
        self.worker = factory(*init)

    def where(self) -> Started:
        import ray
        from pinpoint.environments.labels import RUN_ID

        return Started(ray.get_runtime_context().get_node_id(), os.getpid(), RUN_ID)

    def run(self, *args: Any) -> Any:
        return self.worker.run(*args)

    def close(self) -> None:
        close = getattr(self.worker, "close", None)
        if close is not None:
            close()


def _reap(boxes: list[tuple[str, int]]) -> int:
    """Runs on the node whose engine held a lost item's boxes: removes the containers of each (run id, pid)
    whose starting process is gone (`labels.prune_containers`); how many were removed."""
    from pinpoint.environments.engine import client
    from pinpoint.environments.labels import prune_containers

    engine = client()
    return sum(prune_containers(engine, run_id, pid, orphans_only=True) for run_id, pid in boxes)


def unreaped_lines(unreaped: list[tuple[tuple[str, str], str, int]]) -> list[str]:
    """One line per engine still holding boxes of lost items: where, which (run id, pids) and the command that
    removes them there (the engine's next join reaps them too)."""
    by_engine: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for engine, run_id, pid in unreaped:
        by_engine.setdefault(engine, []).append((run_id, pid))
    lines = []
    for (ip, docker_host), boxes in by_engine.items():
        prefix = "" if docker_host == "unix:///var/run/docker.sock" else f"DOCKER_HOST={docker_host} "
        pids = ", ".join(str(pid) for _, pid in boxes)
        for run_id in sorted({run_id for run_id, _ in boxes}):
            lines.append(f"pinpoint: node {ip} did not come back: its boxes of run {run_id} (started by pid {pids}) "
                         f"are left on its engine; on {ip} run `{prefix}pinpoint env prune --label {run_id}` "
                         "(or they are removed when that node next joins a run)")
    return lines


def assign_groups(items: list[Item], workers: int) -> list[int]:
    """The worker of each item: groups (else keys) round-robin in the order they first appear."""
    index: dict[str, int] = {}
    return [index.setdefault(item.group or item.key, len(index) % workers) for item in items] if workers else []


def node_engine() -> str:
    """The Docker engine tasks on this node use: the node's own DOCKER_HOST (from the environment `ray start`
    ran in: the driver never forwards its own), else the local default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _probe() -> tuple[str, str, str]:
    """Runs once on every node before any item (and on a node that joins mid-run): pinpoint imports there (else
    the items could never run), and the engine its boxes go to, as (node IP, DOCKER_HOST): a node that comes
    back after being lost has a new node id but the same engine. It also removes the boxes on that engine whose
    process is gone (a node lost in an earlier run and back now: what that run could only name)."""
    import pinpoint.environments
    import ray
    from pinpoint.environments.reaper import sweep_orphans

    sweep_orphans()
    return (os.path.dirname(pinpoint.environments.__file__), ray.util.get_node_ip_address(), node_engine())


class RayExecutor:
    """Each item a Ray task on the cluster at `address` (else `$RAY_ADDRESS`, else a new local instance with
    `docker_slots` boxes and this machine's CPUs); `retries` resubmissions after a lost worker or node."""

    name = "ray"
    #: how long calls lost with an actor wait for its restart (its node back, or room elsewhere) before TaskLost
    restart_limit_s = 300.0

    def __init__(self, address: str | None = None, *, docker_slots: int = 1, retries: int = 1,
                 env_names: Iterable[str] = ()) -> None:
        import ray

        self.ray, self.retries = ray, retries
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._owned = not ray.is_initialized()
        _keep_cluster_errors_out()
        if self._owned:
            self._init(docker_slots, tuple(env_names))
        self._remote = ray.remote(max_retries=0, retry_exceptions=False)(_call)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = ray.get_runtime_context().get_node_id()  # the ledger must not die with a worker node
        self._ledger = ray.remote(num_cpus=0)(_Ledger).options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False)).remote()
        #: node id -> (node IP, DOCKER_HOST): the engine each node's boxes go to
        self.engines: dict[str, tuple[str, str]] = {}
        #: boxes of lost items not yet reaped: (engine, run id, pid of the lost worker)
        self.unreaped: list[tuple[tuple[str, str], str, int]] = []
        #: (node id, containers removed) for every reap done
        self.reaped: list[tuple[str, int]] = []
        self._reaping: dict[Any, tuple[str, list[tuple[tuple[str, str], str, int]]]] = {}
        self._lost_on: dict[str, tuple[str, str] | None] = {}
        self.nodes: dict[str, dict[str, float]] = {}
        self._refresh_nodes(strict=True)

    def _init(self, docker_slots: int, env_names: tuple[str, ...]) -> None:
        import logging

        from pinpoint.environments.labels import RUN_ID, RUN_ID_ENV

        env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARDED_PREFIXES) or k in env_names}
        env[RUN_ID_ENV] = RUN_ID  # every worker's boxes carry the driver's run id: one `env prune --label` for all
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.ERROR, "runtime_env": {"env_vars": env}}
        if self.address is None:  # never join a cluster by accident: `ray start` ones need --address / RAY_ADDRESS
            options.update(address="local", num_cpus=os.cpu_count() or 1, resources={"docker": max(1, docker_slots)})
        else:
            _check_reachable(self.address)
            options["address"] = self.address
        try:
            self.ray.init(**options)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ClusterUnavailable(f"cannot reach the Ray cluster at {self.address}: {exc} (start one with "
                                     "`ray start --head`, or use --backend local)") from None

    def _refresh_nodes(self, strict: bool = False) -> None:
        """Probe every alive node not seen yet (pinpoint imports there; its engine); forget dead ones. `strict`
        (at start): a node where pinpoint does not import is an error; mid-run it is left out."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        alive = {n["NodeID"]: n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")}
        probe = self.ray.remote(num_cpus=0, max_retries=0)(_probe)
        refs = {probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(): node
                for node in alive if node not in self.nodes}
        for ref, node in refs.items():
            try:
                _, ip, engine = self.ray.get(ref, timeout=300)
            except self.ray.exceptions.RayError as exc:
                if not strict:
                    del alive[node]
                    continue
                raise ClusterUnavailable(f"pinpoint cannot run on Ray node {node[:12]}: "
                                         f"{str(exc).splitlines()[-1][:300]} (install pinpoint on every node, "
                                         "with the same Python: docs/cluster.md)") from None
            self.engines[node] = (ip, engine)
        self.nodes = {node: resources for node, resources in alive.items() if node in self.engines}

    def _lost(self, item: Item) -> tuple[str, str] | None:
        """An item's worker or node was lost: its boxes are to be reaped; the engine it ran on (for the retry
        to avoid), if it had started."""
        started = self.ray.get(self._ledger.where.remote(item.key))
        if started is None:
            return None
        engine = self.engines.get(started.node)
        if engine is not None:
            self.unreaped.append((engine, started.run_id, started.pid))
        return engine

    def _reap_where_back(self) -> None:
        """For each engine holding boxes of lost items, once a node using it is alive (the node itself when only
        a worker died; else the node that came back, under a new node id): remove them there."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if not self.unreaped:
            return
        self._refresh_nodes()
        reap = self.ray.remote(num_cpus=0, max_retries=1)(_reap)
        for node in self.nodes:
            boxes = [box for box in self.unreaped if box[0] == self.engines[node]]
            if boxes:
                self.unreaped = [box for box in self.unreaped if box not in boxes]
                ref = reap.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                    [(run_id, pid) for _, run_id, pid in boxes])
                self._reaping[ref] = (node, boxes)

    def _collect_reaps(self, timeout: float) -> None:
        """The reaps submitted so far, waited for up to `timeout` s; one that failed is tried again later."""
        if not self._reaping:
            return
        done, _ = self.ray.wait(list(self._reaping), num_returns=len(self._reaping), timeout=timeout)
        for ref in done:
            node, boxes = self._reaping.pop(ref)
            try:
                self.reaped.append((node, self.ray.get(ref)))
            except self.ray.exceptions.RayError:
                self.unreaped.extend(boxes)

    def node_ids(self) -> list[str]:
        """The alive nodes pinpoint runs on, for items pinned to each (`Item.node`)."""
        return list(self.nodes)

    def describe(self) -> str:
        cpus = sum(r.get("CPU", 0) for r in self.nodes.values())
        docker = sum(r.get("docker", 0) for r in self.nodes.values())
        return f"Ray: {len(self.nodes)} node(s), {cpus:g} CPUs, {docker:g} docker slot(s)"

    def _fits(self, needs: Needs) -> None:
        """A task no node can hold would wait forever: say so before submitting anything."""
        if not any(r.get("CPU", 0) >= needs.cpus and r.get("docker", 0) >= needs.docker
                   for r in self.nodes.values()):
            raise ClusterUnavailable(f"no node of the Ray cluster offers {needs.cpus:g} CPU(s) and {needs.docker} "
                                     "'docker' unit(s) (start each node with `ray start --resources "
                                     "'{\"docker\": N}'`, N the boxes its engine holds)")

    def _submit(self, fn: Callable[..., Any], item: Item, avoid: tuple[str, str] | None) -> Any:
        """`item` as a Ray task; a retry (`avoid`: the engine it was lost on) asks, softly, for a node on
        another engine: a full cluster still takes it, and a lost node that came back is not "another". A pinned item
        (`Item.node`) runs on its node only."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        options: dict[str, Any] = {"num_cpus": item.needs.cpus, "name": f"pinpoint {item.key}"}
        if item.needs.docker:
            options["resources"] = {"docker": item.needs.docker}
        other = next((n for n in self.nodes if self.engines.get(n) != avoid), None) if avoid else None
        if item.node:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(item.node, soft=False)
        elif other is not None:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(other, soft=True)
        return self._remote.options(**options).remote(fn, item.args, item.key, self._ledger)

    def run(self, fn: Callable[..., Any], items: Iterable[Item],
            on_start: Callable[[str], None] | None = None) -> Iterator[Outcome]:
        """Every item as a Ray task; outcomes in the order they finish; a lost one resubmitted `retries` times
        (its boxes reaped on its engine once a node using it is alive again); `on_start(key)` is called here
        once per item when its worker has started it (the ledger, polled each second)."""
        items = list(items)
        for needs in {i.needs for i in items}:
            self._fits(needs)
        pending = {self._submit(fn, item, None): (item, 1) for item in items}
        announced: set[str] = set()
        try:
            while pending:
                polling = on_start is not None or bool(self.unreaped) or bool(self._reaping)
                ready, _ = self.ray.wait(list(pending), num_returns=1, timeout=1.0 if polling else None)
                if on_start is not None:
                    self._announce(on_start, announced)
                self._reap_where_back()
                self._collect_reaps(timeout=0)
                if not ready:
                    continue
                item, attempt = pending.pop(ready[0])
                outcome = self._collect(ready[0], item, attempt)
                if outcome is None:  # lost: again, away from the engine it was lost on
                    pending[self._submit(fn, item, self._lost_on.get(item.key))] = (item, attempt + 1)
                else:
                    yield outcome
        finally:
            for ref in pending:  # the caller stopped early (Ctrl-C, an error): nothing keeps running for it
                self.ray.cancel(ref, force=True)
        self._finish_reaps()

    def _finish_reaps(self, limit_s: float = 60.0, return_grace_s: float = 30.0) -> None:
        """Before `run` returns: the reaps under way, and those whose engine has a live node now, done (up to
        `limit_s`); a lost node gets `return_grace_s` to come back (a restarted machine rejoins in seconds) before
        its boxes are left in `unreaped` (`pinpoint env prune --label RUN` removes them)."""
        started = time.monotonic()
        while time.monotonic() - started < limit_s:
            self._reap_where_back()
            if self._reaping:
                self._collect_reaps(timeout=2.0)
            elif self.unreaped and time.monotonic() - started < return_grace_s:
                time.sleep(1.0)
            else:
                break
        for line in unreaped_lines(self.unreaped):
            print(line, file=sys.stderr)

    def run_on_workers(self, factory: Callable[..., Any], init: tuple[Any, ...], items: Iterable[Item], *,
                       workers: int, concurrency: int = 1, needs: Needs = Needs()) -> Iterator[Outcome]:
        """`workers` Ray actors `factory(*init)`, each holding `needs` (its boxes count against its node's
        `docker`) and running `concurrency` calls `.run(*item.args)` at once; a group's items go to one actor.
        A call lost with its actor waits for Ray to restart it and is made again there, `retries` times, then
        it is TaskLost; the lost instance's boxes are reaped on its engine once a node using it is alive."""
        items = list(items)
        self._fits(needs)
        # SPREAD: Ray would pack the actors on the driver's node while it has room, leaving other nodes idle
        options: dict[str, Any] = {"num_cpus": needs.cpus, "max_concurrency": max(1, concurrency),
                                   "max_restarts": self.retries, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
        if needs.docker:
            options["resources"] = {"docker": needs.docker}
        remote = self.ray.remote(**options)(_Host)
        actors = [remote.remote(factory, init) for _ in range(max(1, workers))]
        homes = [self._where(actor) for actor in actors]  # where each actor's current instance runs
        pending = {actors[w].run.remote(*item.args): (item, w, 1)
                   for item, w in zip(items, assign_groups(items, len(actors)), strict=True)}
        parked: dict[int, tuple[float, list[tuple[Item, int]]]] = {}  # actor -> (since, calls awaiting its restart)
        try:
            while pending or parked:
                watched = list(pending) + [homes[w] for w in parked]
                polling = bool(parked) or bool(self.unreaped) or bool(self._reaping)
                ready, _ = self.ray.wait(watched, num_returns=1, timeout=1.0 if polling else None)
                self._reap_where_back()
                self._collect_reaps(timeout=0)
                yield from self._resume(parked, homes, actors, pending)
                if not ready or ready[0] not in pending:
                    continue
                item, w, attempt = pending.pop(ready[0])
                outcome = self._collect_call(ready[0], item, attempt)
                if outcome is not None:
                    yield outcome
                    continue
                if w not in parked:  # its actor was lost: its boxes to reap, its calls parked until it is back
                    homes[w] = self._actor_lost(actors[w], homes[w])
                    parked[w] = (time.monotonic(), [])
                parked[w][1].append((item, attempt + 1))
        except BaseException:  # Ctrl-C, an error, the caller stopping early: end the actors now, their reapers
            self._release(actors, pending, close_s=0)  # remove their boxes (a close would wait for their episodes)
            raise
        self._release(actors, pending)
        self._finish_reaps()

    def _where(self, actor: Any) -> Any:
        """The ref that answers where `actor` runs: retried by Ray through a restart, so it answers once the
        restarted instance is up (an error once the actor has no restart left)."""
        return actor.where.options(max_task_retries=-1).remote()

    def _actor_lost(self, actor: Any, home: Any) -> Any:
        """An actor was lost: the boxes of the instance that ran (as `home` says) are to be reaped on its engine
        once a node using it is alive; the ref that will say where its restart runs."""
        ready, _ = self.ray.wait([home], timeout=0)
        if not ready:
            return home  # that instance never answered (it died starting): its restart's answer is still to come
        with _suppress_ray(self.ray):
            started = self.ray.get(home)
            engine = self.engines.get(started.node)
            box = (engine, started.run_id, started.pid)
            if engine is not None and box not in self.unreaped:
                self.unreaped.append(box)
        return self._where(actor)

    def _resume(self, parked: dict[int, tuple[float, list[tuple[Item, int]]]], homes: list[Any],
                actors: list[Any], pending: dict[Any, Any]) -> list[Outcome]:
        """The calls parked while their actor restarts: made again once the restart answers (a call sent while
        Ray still deems the dead actor alive fails at once, ActorUnavailableError); TaskLost when the actor
        cannot restart (no restart left) or has not within `restart_limit_s`."""
        lost = []
        for w, (since, calls) in list(parked.items()):
            if self.ray.wait([homes[w]], timeout=0)[0]:
                try:
                    self.ray.get(homes[w])
                    why = ""
                except self.ray.exceptions.RayError as exc:
                    why = f"not restarted ({type(exc).__name__}: {' '.join(str(exc).split())[:300]})"
            elif time.monotonic() - since > self.restart_limit_s:
                why = f"not restarted within {self.restart_limit_s:.0f} s"
            else:
                continue
            del parked[w]
            for item, attempt in calls:
                if why:
                    lost.append(Outcome(item.key, attempts=attempt,
                                        error=TaskLost(f"{item.key}: its Ray worker was lost and {why}")))
                else:
                    pending[actors[w].run.remote(*item.args)] = (item, w, attempt)
        return lost

    def _collect_call(self, ref: Any, item: Item, attempt: int) -> Outcome | None:
        """An actor call's outcome, or None when its actor was lost and the call is to be made again."""
        try:
            return Outcome(item.key, value=self.ray.get(ref), attempts=attempt)
        except self.ray.exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            return Outcome(item.key, error=cause if isinstance(cause, Exception) else exc, attempts=attempt)
        except self.ray.exceptions.RayError as exc:
            if attempt <= self.retries:
                return None
            first = " ".join(str(exc).split())[:300]
            return Outcome(item.key, attempts=attempt, error=TaskLost(
                f"{item.key}: its Ray worker was lost {attempt} times ({type(exc).__name__}: {first})"))

    def _release(self, actors: list[Any], pending: dict[Any, Any], close_s: float = 60.0) -> None:
        """Cancel what is left, give each actor up to `close_s` to `close()` (its boxes, its gateway), then end it."""
        for ref in pending:
            self.ray.cancel(ref, force=False)
        if close_s > 0:
            closing = [a.close.remote() for a in actors if hasattr(a, "close")]
            with _suppress_ray(self.ray):
                self.ray.wait(closing, num_returns=len(closing), timeout=close_s)
        for actor in actors:
            with _suppress_ray(self.ray):
                self.ray.kill(actor)

    def _announce(self, on_start: Callable[[str], None], announced: set[str]) -> None:
        """`on_start` for every item the ledger has seen start since the last call."""
        for key in self.ray.get(self._ledger.keys.remote()):
            if key not in announced:
                announced.add(key)
                on_start(key)

    def _collect(self, ref: Any, item: Item, attempt: int) -> Outcome | None:
        """The item's outcome, or None when its worker or node was lost and it is to be submitted again."""
        try:
            node, value = self.ray.get(ref)
            return Outcome(item.key, value=value, attempts=attempt, node=node)
        except self.ray.exceptions.RayTaskError as exc:  # fn raised: hand back its own exception
            cause = getattr(exc, "cause", None)
            return Outcome(item.key, error=cause if isinstance(cause, Exception) else exc, attempts=attempt)
        except self.ray.exceptions.RayError as exc:  # the machinery: a worker crashed, a node died, an object lost
            self._lost_on[item.key] = self._lost(item)
            if attempt <= self.retries:
                return None
            first = " ".join(str(exc).split())[:300]
            return Outcome(item.key, attempts=attempt, error=TaskLost(
                f"{item.key}: its Ray task was lost {attempt} times ({type(exc).__name__}: {first}); "
                "nothing written for it; a rerun retries it"))

    def close(self) -> None:
        """Shut down the Ray instance this executor started (a cluster it joined keeps running)."""
        if self._owned and self.ray.is_initialized():
            self.ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _keep_cluster_errors_out() -> None:
    """Ray's driver prints the cluster's error messages on stdout whatever `log_to_driver` says: in ANSI colour,
    with a dead raylet's last log lines and one line per retried call. The executor says in its own words what was
    lost and redone, so those messages go to the `pinpoint.ray` logger (debug level) instead of the command's
    output."""
    import logging

    from ray._private import worker

    log = logging.getLogger("pinpoint.ray")

    def to_log(data: dict[str, Any], ignore_prefix: bool = False) -> None:
        for line in data.get("lines", []):
            log.debug("%s: %s", data.get("pid", "ray"), line)

    if hasattr(worker, "print_to_stdstream"):  # what Ray's error listener calls for each message
        worker.print_to_stdstream = to_log


def _suppress_ray(ray: Any) -> Any:
    """A context that ignores Ray's errors (an actor already dead while being released)."""
    import contextlib

    return contextlib.suppress(ray.exceptions.RayError, ValueError)


def _check_reachable(address: str) -> None:
    """A `host:port` that does not answer fails in seconds, not after Ray's own minutes of retries."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return  # "auto" and other forms Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ClusterUnavailable(f"cannot reach the Ray cluster at {address}: {exc} (start one with `ray start "
                                 "--head`, check --address / RAY_ADDRESS, or use --backend local)") from None


def executor_for(backend: str, address: str | None = None, workers: int = 1,
                 env_names: Iterable[str] = (), docker_slots: int | None = None) -> LocalExecutor | RayExecutor:
    """The backend a command's `--backend/--address/--workers` name; UsageError for a wrong combination.
    `docker_slots`: the boxes a new local Ray instance offers (default `workers`)."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "local":
        if address:
            raise UsageError("--address names a Ray cluster: use it with --backend ray")
        return LocalExecutor(workers)
    if (address or "").startswith("ray://"):
        raise UsageError(f"--address {address}: a Ray Client address, which pinpoint does not use; give the head's "
                         "GCS address, HOST:6379 (docs/cluster.md)")
    return RayExecutor(address, docker_slots=docker_slots or workers, env_names=env_names)


def executor_args(parser: Any) -> None:
    """`--backend` and `--address`, the same on every command that fans out."""
    parser.add_argument("--backend", choices=BACKENDS, default="local",
                        help="local: threads here (default); ray: one Ray task per item (docs/cluster.md)")
    parser.add_argument("--address", help="the Ray cluster to join (default: $RAY_ADDRESS, else a new local "
                        "instance); with --backend ray")
