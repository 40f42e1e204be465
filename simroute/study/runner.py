"""Run a study: expand it into points, skip the stored ones, stream the rest through a backend, store each.

Grid studies submit every point at once. Search studies run in rounds: each round submits the next probe of
every still-open group (times every seed) together, so the pool stays busy across groups; a rerun replays
the same search and finds every probe already stored.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError
from simroute.ioutil import (MANIFEST, missing_folders, check_output_path, dumps_json, lock_output,
                             write_text_atomic)
from simroute.study.backends import Backend, Task, make_backend
from simroute.study.resolve import materialise, prepare
from simroute.study.search import Refinement, SearchStatus, meets
from simroute.study.spec import Study, set_dotted
from simroute.study.store import Store


@dataclass
class Point:
    key: str
    labels: dict[str, Any]
    seed: int
    config: dict[str, Any]           # the payload (portable inputs)
    search: dict[str, Any] | None = None


@dataclass
class StudyRun:
    """What one `run_study` call did."""

    out_dir: Path
    total: int = 0
    executed: int = 0
    skipped: int = 0
    failed: int = 0
    stopped: bool = False             # max_points reached before the study was complete
    discarded: bool = False           # every point failed in a new directory: it was removed again
    first_error: str = ""             # the first failed point's error, its first line
    wall_s: float = 0.0
    searches: list[dict[str, Any]] = field(default_factory=list)


class _Executor:
    """Shared by grid and search: caching, the point limit, storing results and the progress bar."""

    def __init__(self, study: Study, store: Store, backend: Backend, run: StudyRun, *, retry_failed: bool,
                 max_points: int | None, progress: bool | None) -> None:
        self.study, self.store, self.backend, self.run = study, store, backend, run
        self.retry_failed, self.max_points = retry_failed, max_points
        show = sys.stderr.isatty() if progress is None else progress
        self.bar = None
        if show:
            from tqdm import tqdm
            self.bar = tqdm(total=0, unit="pt", desc=study.name, file=sys.stderr, dynamic_ncols=True)

    def grow(self, count: int) -> None:
        if self.bar is not None:
            self.bar.total += count
            self.bar.refresh()

    def execute(self, points: list[Point]) -> dict[str, dict[str, Any]]:
        """Run the points not stored yet; returns every point's row (stored or fresh) by key."""
        rows: dict[str, dict[str, Any]] = {}
        todo: list[Point] = []
        for point in points:
            status = self.store.status(point.key)
            if status == "ok" or (status == "failed" and not self.retry_failed):
                rows[point.key] = _row(self.store, point.key)
                self.run.skipped += 1
                if self.bar is not None:
                    self.bar.update(1)
            else:
                todo.append(point)
        if self.max_points is not None:
            room = max(0, self.max_points - self.run.executed)
            if len(todo) > room:
                self.run.stopped = True
                todo = todo[:room]
        self._inputs(todo)
        by_key = {point.key: point for point in todo}
        tasks: list[Task] = [{"key": point.key, "payload": point.config, "keep": self.study.keep} for point in todo]
        for res in self.backend.map_unordered(tasks):
            point = by_key[res["key"]]
            meta = {"seed": point.seed, "labels": point.labels, "config": point.config, "search": point.search}
            rows[point.key] = self.store.write(point.key, meta, res)
            self.run.executed += 1
            if res.get("error"):
                self.run.failed += 1
                self.run.first_error = self.run.first_error or str(res["error"]).strip().splitlines()[0]
            if self.bar is not None:
                self.bar.set_postfix_str(f"failed {self.run.failed}" if self.run.failed else "")
                self.bar.update(1)
        return rows

    def _inputs(self, todo: list[Point]) -> None:
        """Generate each distinct generated input once, here, before the workers need it."""
        seen: set[str] = set()
        for point in todo:
            for name in ("topology", "trace"):
                spec = point.config[name]
                if spec["kind"] == "generate" and spec["path"] not in seen:
                    seen.add(spec["path"])
                    try:
                        materialise(spec, name)
                    except Exception:   # noqa: BLE001 - the point itself will fail and record why
                        pass

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _row(store: Store, key: str) -> dict[str, Any]:
    import pyarrow.parquet as pq
    return pq.read_table(store.point_path(key)).to_pylist()[0]


def make_point(study: Study, out_dir: Path, labels: dict[str, Any], seed: int,
               search: dict[str, Any] | None = None, probe: tuple[str, Any] | None = None) -> Point:
    cfg = study.config(labels, seed)
    labels = dict(labels)
    if probe is not None:
        set_dotted(cfg, probe[0], probe[1])
        labels[probe[0]] = probe[1]
    payload, key = prepare(cfg, study.file, out_dir)
    return Point(key, labels, seed, payload, search)


STUDY_ENTRIES = {"study.json", "search.json", "points", "runs", "perf", "inputs", "report", MANIFEST,
                 "plan.yaml", "plan.json", "plan.md"}     # a plan's own files beside its study


def check_study_dir(study: Study, out: Path) -> None:
    """A sweep writes into a new or empty directory, or resumes one simroute made for this same study.

    Anything else (a user's folder, another study's results, a study.json simroute did not write, a link or
    anything but files and folders inside it) is refused, so `sweep -o` never overwrites or mixes into what it
    does not own. A plan's own study file (plan.yaml beside its results) is the one input inside it.
    """
    own_file = Path(study.file).name == "plan.yaml" and Path(study.file).parent.resolve() == out.resolve()
    inputs = [] if own_file else [study.file]
    for name in ("topology", "trace", "calib"):        # the study's own input files: never written into
        value = study.base.get(name)
        if isinstance(value, str) and value and (Path(study.file).parent / value).exists():
            inputs.append(str(Path(study.file).parent / value))
    check_output_path(out, directory=True, inputs=inputs, flag="--out")
    if not out.exists() or not any(out.iterdir()):
        return
    marker = out / MANIFEST
    doc = None
    if marker.is_file():
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(marker.read_text())
    if not isinstance(doc, dict) or doc.get("written_by") != "simroute" or doc.get("kind") != "study":
        raise ConfigurationError("exists and is not a simroute study directory: refusing to write into it "
                                 "(choose a new or empty directory)", file=out, field="--out")
    foreign = sorted(entry.name for entry in out.iterdir()
                     if entry.name not in STUDY_ENTRIES and not entry.name.startswith("."))
    if foreign:
        raise ConfigurationError(f"holds files simroute did not write there ({', '.join(foreign[:3])}): refusing "
                                 "to write into it", file=out, field="--out")
    if doc.get("name") != study.name:
        raise ConfigurationError(f"holds the results of study {doc.get('name')!r}, not {study.name!r}: choose "
                                 "another directory", file=out, field="--out")
    if doc.get("base") not in (None, study_fingerprint(study)):
        raise ConfigurationError(f"holds the results of another study named {study.name!r} (its base config "
                                 "differs): choose another directory, or rerun the study that made it",
                                 file=out, field="--out")
    for entry in sorted(out.rglob("*")):
        if entry.is_symlink() or not (entry.is_file() or entry.is_dir()):
            raise ConfigurationError("is a link or a special file, which simroute never writes into a study: "
                                     "refusing to resume into it", file=entry, field="--out")


def study_fingerprint(study: Study) -> str:
    """What makes two studies of one name the same study: the base config every point starts from (axes and
    seeds may grow between reruns; points are keyed by their own configs)."""
    from simroute.study.resolve import digest
    return digest({"base": study.base, "search_field": study.search.field if study.search else None})


def _plan(study: Study, out: Path) -> list[Point] | None:
    """Every grid point (or, for a search, the first probes): resolving them validates the inputs before
    anything is written."""
    if study.search is None:
        return [make_point(study, out, group, seed) for group in study.groups() for seed in study.seeds]
    search = study.search
    for group in study.groups():
        for bound in (search.lo, search.hi):
            value = int(bound) if search.integer else bound
            make_point(study, out, group, study.seeds[0], {"group": 0}, (search.field, value))
    return None


def run_study(study: Study, out_dir: str | Path, *, jobs: int | None = None, ray_address: str | None = None,
              backend: Backend | None = None, max_points: int | None = None, retry_failed: bool = True,
              progress: bool | None = None, before_writing: Callable[[], None] | None = None) -> StudyRun:
    """Run (or resume) `study` into `out_dir`. `max_points` stops after that many new points (resumable).

    The directory is checked (`check_study_dir`), the points resolved, what a resume reads checked
    (`Store.check`) and the directory locked before the first byte is written; `before_writing()` (a caller's
    own checks, then its header) is called then, under the lock. A concurrent sweep into the same directory
    fails at once.
    """
    check_output_path(out_dir, directory=True, flag="--out")     # as given: a dangling link is not followed
    out = Path(out_dir).resolve()
    check_study_dir(study, out)
    points = _plan(study, out)
    Store(out).check()                       # a damaged point or run stops the resume before anything is written
    chosen = backend or make_backend(jobs, ray_address)
    created = missing_folders(out)           # before the lock, whose file lands in out's parent
    try:
        with lock_output(out, flag="--out"):
            fresh = bool(created) or not any(out.iterdir())
            if before_writing is not None:
                before_writing()
            out.mkdir(parents=True, exist_ok=True)
            try:
                _write_manifest(study, out)
                run = _run(study, out, chosen, points, max_points=max_points, retry_failed=retry_failed,
                           progress=progress)
            except Exception:
                if fresh:
                    _discard(out, created)
                raise
            if fresh and run.executed and run.failed == run.executed:
                _discard(out, created)         # nothing but failures: no study directory for them
                run.discarded = True
    except Exception:
        _remove_empty(created[1:])
        raise
    finally:
        if backend is None:
            chosen.close()
    if run.discarded:
        _remove_empty(created[1:])            # the folders made for it, now that the lock file is gone
    return run


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _discard(out: Path, created: list[Path]) -> None:
    """Empty a study directory this sweep started: remove it (the caller removes the folders made for it once
    the lock is released), or, where it was an empty directory already, its contents."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()


def _run(study: Study, out: Path, backend: Backend, points: list[Point] | None, *, max_points: int | None,
         retry_failed: bool, progress: bool | None) -> StudyRun:
    run = StudyRun(out)
    started = time.perf_counter()
    executor = _Executor(study, Store(out), backend, run, retry_failed=retry_failed, max_points=max_points,
                   progress=progress)
    try:
        if points is not None:
            run.total = len(points)
            executor.grow(len(points))
            executor.execute(points)
        else:
            _search(study, out, executor, run)
    finally:
        executor.close()
    run.wall_s = time.perf_counter() - started
    return run


def _search(study: Study, out: Path, executor: _Executor, run: StudyRun) -> None:
    search = study.search
    assert search is not None
    groups = study.groups()
    states = [Refinement(search.goal, search.lo, search.hi, search.integer, search.tolerance, search.coarse)
              for _ in groups]
    executor.grow(sum(state.max_probes() for state in states) * len(study.seeds))
    while not run.stopped:
        round_points: list[tuple[int, float, list[Point]]] = []
        for group_index, (group, state) in enumerate(zip(groups, states)):
            for bound in state.probes():
                value = int(bound) if search.integer else bound
                pts = [make_point(study, out, group, seed, {"group": group_index}, (search.field, value))
                       for seed in study.seeds]
                round_points.append((group_index, bound, pts))
        if not round_points:
            break
        allp = [point for _, _, pts in round_points for point in pts]
        run.total += len(allp)
        rows = executor.execute(allp)
        for group_index, bound, pts in round_points:
            got = [rows[point.key] for point in pts if point.key in rows]
            if len(got) < len(pts):      # stopped by max_points mid-round: resume later
                continue
            states[group_index].observe(bound, meets(got, search.slo))
    run.searches = []
    for group, state in zip(groups, states):
        ans = None if state.answer is None else (int(state.answer) if search.integer else state.answer)
        number = (lambda value: int(value)) if search.integer else (lambda value: value)
        run.searches.append({"labels": group, "field": search.field, "goal": search.goal, "slo": list(search.slo),
                             "answer": ans, "status": state.status if state.done else SearchStatus.INCOMPLETE,
                             "probes": {str(number(probe)): feasible
                                        for probe, feasible in sorted(state.seen.items())},
                             "grid": [number(value) for value in state.grid()],
                             "nonmonotone": [[number(good), number(bad)] for good, bad in state.nonmonotone()]})
    write_text_atomic(out / "search.json", dumps_json(run.searches, indent=2, default=str) + "\n")


def _write_manifest(study: Study, out: Path) -> None:
    """study.json: what the report needs to know about the study (axes, seeds, SLO, search), no results."""
    inside = Path(study.file).parent == out        # a plan's own plan.yaml: named as it lies beside the results
    doc = {"name": study.name, "description": study.description,
           "file": Path(study.file).name if inside else study.file, "axes": study.axes,
           "cases": study.cases, "seeds": list(study.seeds), "slo": list(study.slo), "report": study.report,
           "search": None if study.search is None else study.search.__dict__, "base": study.base,
           **({"plan": study.plan} if study.plan else {})}
    write_text_atomic(out / "study.json", dumps_json(doc, indent=2, default=str) + "\n")
    marker = {"written_by": "simroute", "kind": "study", "name": study.name, "base": study_fingerprint(study),
              "files": listed_files(out)}      # the files simroute put beside the study (a plan's), kept
    write_text_atomic(out / MANIFEST, json.dumps(marker, sort_keys=True) + "\n")


def listed_files(out: Path) -> dict[str, Any]:
    """The `files` a study directory's manifest lists (a plan's plan.yaml, plan.json, plan.md), {} if none."""
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((out / MANIFEST).read_text())
        if isinstance(doc, dict) and isinstance(doc.get("files"), dict):
            return doc["files"]
    return {}
