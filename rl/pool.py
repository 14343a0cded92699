"""A warm pool of runtimes: per key (an image and its box settings), containers started ahead and handed out
already reset, so an episode starts in milliseconds instead of the seconds a container start costs.

- `acquire(key, factory)` hands out an idle runtime of `key` after a liveness probe (a dead one is closed, replaced
  and never handed out); when none is idle it waits for one being reset, else starts one.
- `release(runtime)` resets it in the background (`Runtime.reset()`: in place, milliseconds) and makes it idle again;
  `release(runtime, broken=True)` closes it and starts a replacement.
- At most `max_containers` runtimes live at once (idle, leased and starting): the bound on what one process asks of
  the Docker engine. An idle runtime of another key is closed to make room before a caller waits.
- After each hand-out the pool tops `key` up to `idle_per_key` idle runtimes in the background.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pinpoint.environments.errors import PinpointError
from pinpoint.environments.runtime import Runtime, RuntimeFailure

RuntimeFactory = Callable[[], Runtime]
#: seconds the liveness probe of a handed-out runtime may take
PROBE_TIMEOUT_S = 10.0


class PoolExhausted(PinpointError, RuntimeError):
    """No runtime became free within the wait; every slot of the pool is leased."""


@dataclass
class PoolStats:
    """What the pool did, for benchmarks and for the rollout's summary."""

    started: int = 0
    handed_out: int = 0
    replaced_dead: int = 0
    reset_failures: int = 0
    handout_s: list[float] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)


class WarmPool:
    """Runtimes per key, started ahead and reset between leases. Thread-safe; `close()` releases everything."""

    def __init__(self, idle_per_key: int = 1, max_containers: int = 16, wait_s: float = 600.0,
                 reuse: bool = True) -> None:
        if max_containers < 1 or idle_per_key < 0:
            raise ValueError("max_containers must be >= 1 and idle_per_key >= 0")
        #: False: every released runtime is closed, a fresh container per episode (the baseline benchmarks use)
        self.reuse = reuse
        self.idle_per_key = idle_per_key if reuse else 0
        self.max_containers = max_containers
        self.wait_s = wait_s
        self.stats = PoolStats()
        self._idle: dict[Hashable, list[Runtime]] = defaultdict(list)
        self._busy: dict[Hashable, int] = defaultdict(int)  # starting or resetting, per key
        self._keys: dict[int, Hashable] = {}  # id(runtime) -> key, for every live runtime
        self._factories: dict[Hashable, RuntimeFactory] = {}
        self._live = 0
        self._cond = threading.Condition()
        self._workers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="pinpoint-pool")
        self._closed = False

    def configure(self, max_containers: int, wait_s: float) -> None:
        """New bounds for a pool in use (a trainer's config read after the pool started): later hand-outs obey them;
        runtimes alive over a lowered bound are closed as they come back idle."""
        if max_containers < 1 or wait_s <= 0:
            raise ValueError("max_containers must be >= 1 and wait_s > 0")
        with self._cond:
            self.max_containers, self.wait_s = max_containers, wait_s
            self._cond.notify_all()

    # -- leasing ------------------------------------------------------------------------------------------------
    def acquire(self, key: Hashable, factory: RuntimeFactory) -> Runtime:
        """A reset, live runtime of `key` (made by `factory` when none is idle). Raises what `factory` raises."""
        started = time.monotonic()
        deadline = started + self.wait_s
        with self._cond:
            self._factories[key] = factory
        while True:
            runtime = self._take_idle(key, deadline)
            if runtime is None:
                runtime = self._start(key)
            elif not _alive(runtime):
                self._discard(runtime)
                self.stats.replaced_dead += 1
                continue
            self.stats.handed_out += 1
            self.stats.handout_s.append(time.monotonic() - started)
            self._top_up(key)
            return runtime

    def release(self, runtime: Runtime, *, broken: bool = False) -> None:
        """Give a leased runtime back: reset in the background and idle again, or (broken) closed and replaced."""
        with self._cond:
            key = self._keys.get(id(runtime))
            if key is None:
                raise ValueError("release() of a runtime this pool did not hand out")
            if broken or self._closed or not self.reuse:
                self._discard_locked(runtime)
                self._top_up_locked(key)
                return
            self._busy[key] += 1
        self._workers.submit(self._reset_and_idle, key, runtime)

    def warm(self, key: Hashable, factory: RuntimeFactory, count: int | None = None) -> None:
        """Start `count` (default `idle_per_key`) runtimes of `key` ahead of the first episode and wait for them."""
        want = self.idle_per_key if count is None else count
        with self._cond:
            self._factories[key] = factory
            need = min(max(0, want - len(self._idle[key]) - self._busy[key]), self.max_containers - self._live)
            self._live += need
            self._busy[key] += need
        for done in range(need):
            try:
                runtime = self._start(key)
            except BaseException:
                with self._cond:  # give back the slots reserved for the starts that will not happen
                    self._live -= need - done - 1
                    self._busy[key] -= need - done - 1
                    self._cond.notify_all()
                raise
            self._idle_up(key, runtime)

    # -- internals ----------------------------------------------------------------------------------------------
    def _take_idle(self, key: Hashable, deadline: float) -> Runtime | None:
        """An idle runtime of `key`; waits while one is being reset or no slot is free; None: start one."""
        with self._cond:
            while True:
                if self._closed:
                    raise RuntimeFailure("the pool is closed")
                if self._idle[key]:
                    return self._idle[key].pop()
                if self._busy[key] == 0 and self._make_room_locked(key):
                    self._live += 1  # the caller starts one in this slot
                    self._busy[key] += 1
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PoolExhausted(f"no runtime of {key} became free within {self.wait_s:g}s "
                                        f"({self._live}/{self.max_containers} live)")
                self._cond.wait(min(remaining, 1.0))

    def _make_room_locked(self, key: Hashable) -> bool:
        """True when a slot is free, closing an idle runtime of another key if that is what it takes."""
        if self._live < self.max_containers:
            return True
        for other, idle in self._idle.items():
            if other != key and idle:
                self._discard_locked(idle.pop())
                return True
        return False

    def _start(self, key: Hashable) -> Runtime:
        """Make a runtime of `key` in a slot already counted in `_live` and `_busy` (by `_take_idle`/`_top_up`)."""
        try:
            runtime = self._factories[key]()
        except BaseException:
            with self._cond:
                self._live -= 1
                self._busy[key] -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._busy[key] -= 1
            self._keys[id(runtime)] = key
            self.stats.started += 1
        return runtime

    def _reset_and_idle(self, key: Hashable, runtime: Runtime) -> None:
        started = time.monotonic()
        try:
            runtime.reset()
        except Exception:  # noqa: BLE001 - any failure to reset means the runtime is not handed out again
            with self._cond:
                self.stats.reset_failures += 1
                self._busy[key] -= 1
                self._discard_locked(runtime)
                self._top_up_locked(key)
            return
        self.stats.reset_s.append(time.monotonic() - started)
        with self._cond:
            self._busy[key] -= 1
        self._idle_up(key, runtime)

    def _idle_up(self, key: Hashable, runtime: Runtime) -> None:
        with self._cond:
            if self._closed or self._live > self.max_containers:  # closed, or over a bound lowered by configure()
                self._discard_locked(runtime)
                return
            self._idle[key].append(runtime)
            self._cond.notify_all()

    def _top_up(self, key: Hashable) -> None:
        with self._cond:
            self._top_up_locked(key)

    def _top_up_locked(self, key: Hashable) -> None:
        """Start runtimes of `key` in the background until `idle_per_key` are idle or coming."""
        if self._closed or key not in self._factories:
            return
        while (len(self._idle[key]) + self._busy[key] < self.idle_per_key
               and self._live < self.max_containers):
            self._live += 1
            self._busy[key] += 1
            self._workers.submit(self._start_idle, key)

    def _start_idle(self, key: Hashable) -> None:
        with contextlib.suppress(Exception):  # a failed warm start costs nothing: acquire() starts one itself
            self._idle_up(key, self._start(key))

    def _discard(self, runtime: Runtime) -> None:
        with self._cond:
            self._discard_locked(runtime)

    def _discard_locked(self, runtime: Runtime) -> None:
        if self._keys.pop(id(runtime), None) is not None:
            self._live -= 1
        with contextlib.suppress(Exception):
            runtime.close()
        self._cond.notify_all()

    @property
    def live(self) -> int:
        """Runtimes alive now (idle, leased or starting)."""
        with self._cond:
            return self._live

    def idle(self, key: Hashable) -> int:
        with self._cond:
            return len(self._idle[key])

    def wait_idle(self, key: Hashable, count: int = 1, timeout: float = 60.0) -> bool:
        """Block until `count` runtimes of `key` are idle (reset and ready); False at the timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._idle[key]) >= count, timeout=timeout)

    def close(self) -> None:
        """Close every idle runtime now and every leased one when it comes back. Safe twice."""
        with self._cond:
            self._closed = True
            for idle in self._idle.values():
                while idle:
                    self._discard_locked(idle.pop())
            self._cond.notify_all()
        self._workers.shutdown(wait=True)
        with self._cond:
            for idle in self._idle.values():
                while idle:
                    self._discard_locked(idle.pop())

    def __enter__(self) -> WarmPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _alive(runtime: Runtime) -> bool:
    """A cheap probe: the runtime's own `alive()` where it has one (no command started), else one command through
    its channel. A killed container fails either."""
    try:
        probe = getattr(runtime, "alive", None)
        if callable(probe):
            return bool(probe())
        return runtime.run("true", timeout=PROBE_TIMEOUT_S).exit_code == 0
    except (RuntimeFailure, OSError):
        return False
