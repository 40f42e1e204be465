"""Capacity-planning studies: grids and SLO searches of runs, on a process pool or Ray, and their reports.

- `load_study(path, quick=False) -> Study` (validated YAML; see docs/STUDIES.md)
- `run_study(study, out_dir, jobs=, ray_address=, max_points=) -> StudyRun` (resumable; one stored file per point)
- `Store(out_dir).read()` -> the points as a DataFrame
- `write_report(dir, out=None, fmt="html"|"md")` for a study directory or a single run directory
"""

from __future__ import annotations

from simroute.study.runner import StudyRun, run_study
from simroute.study.spec import SearchSpec, Study, load_study
from simroute.study.store import Store

__all__ = ["SearchSpec", "Store", "Study", "StudyRun", "load_study", "run_study", "write_report"]


def __getattr__(name: str):   # the report pulls in matplotlib: load it only when asked
    if name == "write_report":
        from simroute.study.report import write_report
        return write_report
    raise AttributeError(name)
