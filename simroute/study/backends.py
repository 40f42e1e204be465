"""Where points run: inline, a local process pool (default, all cores) or Ray; results stream back as they finish.

Every backend runs the same pure function, `run_point(task)`, so a point's result depends only on its config
and seed, never on the backend, the worker or the order. A point that raises comes back as an error record.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any, Protocol

from simroute.checks import check_number
from simroute.errors import ConfigurationError

MAX_JOBS = 1024


class Keep(StrEnum):
    """What a study keeps of each run (a study's `keep`); the values are the YAML's words."""

    FULL = "full"           # every run's output files
    SUMMARY = "summary"     # summary.json only (a plan's many probes)


Task = dict[str, Any]       # {"key": str, "payload": dict, "keep": a `Keep`}
Result = dict[str, Any]     # {"key", "summary", "perf", "tables", "error"}


def run_point(task: Task) -> Result:
    """Simulate one point; never raises (a failure is a result with `error` set)."""
    try:
        from simroute.sim.runner import simulate
        from simroute.study.resolve import run_config
        res = simulate(run_config(task["payload"]))
        tables = res.tables if task.get("keep", Keep.FULL) == Keep.FULL else {}
        return {"key": task["key"], "summary": res.summary, "perf": res.perf, "tables": tables, "error": None}
    except Exception as exc:   # noqa: BLE001 - recorded, the study goes on
        trace_text = traceback.format_exc(limit=4)
        return {"key": task["key"], "summary": None, "perf": None, "tables": None,
                "error": f"{type(exc).__name__}: {exc}\n{trace_text}"}


class Backend(Protocol):
    name: str

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]: ...

    def close(self) -> None: ...


class InlineBackend:
    """In this process, one after the other (jobs = 1; debugging and the smallest tests)."""

    name = "inline"

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        for task in tasks:
            yield run_point(task)

    def close(self) -> None:
        pass


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat): with the pid it names one process, reuse-proof."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            return stat_file.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _watch_driver(pid: int, started: str | None, period_s: float = 0.5) -> None:
    """Worker initializer: exit as soon as the driver is gone (killed, crashed), even mid-point.

    Pool workers are children of the forkserver, not of the driver, so neither the pool nor the kernel
    ends them when the driver dies; without this a killed sweep leaves workers simulating for nobody.
    """
    import threading
    import time

    def watch() -> None:
        while True:
            time.sleep(period_s)
            alive = _start_time(pid) == started if started is not None else _pid_alive(pid)
            if not alive:
                os._exit(1)
    threading.Thread(target=watch, name="simroute-driver-watch", daemon=True).start()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ProcessBackend:
    """A `concurrent.futures.ProcessPoolExecutor` over all cores; the pool lives across search rounds.

    Workers watch the driver and exit when it dies (`_watch_driver`).
    """

    name = "process"

    def __init__(self, jobs: int | None = None) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor
        self.jobs = jobs or os.cpu_count() or 1
        # forkserver: workers fork from a clean server that imported the simulator once (fast, and safe when
        # the driver holds threads such as Ray's or tqdm's).
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["simroute.study.backends", "simroute.sim.runner"])
        own_pid = os.getpid()
        self.pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_watch_driver,
                                        initargs=(own_pid, _start_time(own_pid)))

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        from concurrent.futures import as_completed
        futures = {self.pool.submit(run_point, task): task for task in tasks}
        for fut in as_completed(futures):
            try:
                yield fut.result()
            except Exception as exc:   # a worker died (e.g. out of memory): record it, keep going
                yield {"key": futures[fut]["key"], "summary": None, "perf": None, "tables": None,
                       "error": f"worker failed: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayBackend:
    """One Ray task per point, gathered with `ray.wait` as they finish.

    `address`: "local" starts a private local Ray (`num_cpus` CPUs; what the tests use), "auto" joins the
    cluster this machine belongs to, "ray://host:port" connects a client. Workers need simroute installed;
    inputs given as shipped names or generator specs need no shared disk.
    """

    name = "ray"

    def __init__(self, address: str = "local", num_cpus: int | None = 2) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigurationError("the Ray backend needs ray: pip install 'simroute[dist]'",
                                     field="--ray-address") from None
        self.ray = ray
        self._started = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
            try:
                if address == "local":
                    self._start_local(num_cpus, options)
                else:
                    ray.init(address=address, **options)
            except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
                raise ConfigurationError(f"cannot reach a Ray cluster at {address!r}: "
                                         f"{' '.join(str(exc).split())[:200]}", field="--ray-address") from None
            self._started = True
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_point)

    LOCAL_START_TRIES = 4

    def _start_local(self, num_cpus: int | None, options: dict[str, Any]) -> None:
        """Start a private local Ray. Ray gives its raylet a fixed 30 s of wall time to register and raises a bare
        Exception past it, which a loaded machine meets (tests/study/test_ray.py at load 25 on 2 cores): such a
        start is retried from scratch, a few times, before it is reported."""
        ray = self.ray
        for attempt in range(self.LOCAL_START_TRIES):
            try:
                ray.init(num_cpus=num_cpus, **options)
                return
            except Exception as exc:      # ray raises a bare Exception for this one
                if "timed out during startup" not in str(exc):
                    raise
                if attempt == self.LOCAL_START_TRIES - 1:
                    raise TimeoutError(str(exc)) from exc
                ray.shutdown()

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        ray = self.ray
        refs = {self._remote.remote(task): task for task in tasks}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except Exception as exc:   # the task's worker died
                    yield {"key": refs[ref]["key"], "summary": None, "perf": None, "tables": None,
                           "error": f"ray task failed: {type(exc).__name__}: {exc}"}

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()


def make_backend(jobs: int | None = None, ray_address: str | None = None) -> Backend:
    """Ray when an address is given, else inline for jobs = 1, else the process pool."""
    if jobs is not None:
        check_number(jobs, "--jobs", integer=True, minimum=1, maximum=MAX_JOBS)
    if ray_address is not None and not (ray_address in ("auto", "local") or ray_address.startswith("ray://")
                                        or ":" in ray_address):
        raise ConfigurationError(f"must be auto, local, ray://host:port or host:port, got {ray_address!r}",
                                 field="--ray-address")
    if ray_address:
        return RayBackend(ray_address)
    if jobs == 1:
        return InlineBackend()
    return ProcessBackend(jobs)
