"""The study's result store: `points/<key>.parquet`, one single-row file per finished point (the Parquet dataset
of the study), plus `runs/<key>/` with that run's own output files and `perf/<key>.json` with its wall-clock
figures (kept out of the points, so a study's results are a pure function of its inputs).

A point's file is written last and atomically, so its existence means the point is done: a killed study
leaves no half-points and a rerun skips exactly the finished ones. Failed points store their error.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from simroute.ioutil import atomic_path
from simroute.sim.slo import METRICS, STATS, flatten  # noqa: F401 - the columns a point stores


class Store:
    """Points of one study directory."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.points_dir = self.root / "points"
        self.runs_dir = self.root / "runs"
        self.perf_dir = self.root / "perf"

    def point_path(self, key: str) -> Path:
        return self.points_dir / f"{key}.parquet"

    def status(self, key: str) -> str | None:
        """'ok', 'failed' or None (not run)."""
        path = self.point_path(key)
        if not path.exists():
            return None
        return _read_point(path, ["status"]).column(0)[0].as_py()

    def write(self, key: str, meta: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """Store a finished point (its run outputs first, then the point row that marks it done)."""
        succeeded = result.get("error") is None
        if succeeded and result.get("tables") is not None:
            from simroute.sim.metrics import write_outputs
            write_outputs(self.runs_dir / key, result["summary"], result["tables"], result.get("perf"))
        metrics = flatten(result["summary"]) if succeeded else {column: math.nan for column in METRICS}
        row = {"key": key, "status": "ok" if succeeded else "failed", "error": result.get("error") or "",
               "seed": int(meta["seed"]), "labels_json": json.dumps(meta["labels"], sort_keys=True, default=str),
               "search_json": json.dumps(meta.get("search"), sort_keys=True, default=str),
               "config_json": json.dumps(meta["config"], sort_keys=True, default=str),
               **metrics}
        if result.get("perf"):      # wall-clock figures apart: a point's row is a pure function of its inputs
            from simroute.ioutil import dumps_json, write_text_atomic
            write_text_atomic(self.perf_dir / f"{key}.json", dumps_json(result["perf"], indent=2, default=str) + "\n")
        table = pa.table({column: [value] for column, value in row.items()})
        with atomic_path(self.point_path(key)) as tmp:
            pq.write_table(table, tmp)
        return row

    def check(self) -> None:
        """Every stored point readable, and every stored run's summary.json a JSON object (what a resumed
        study, a plan's answer and a report read): a one-line error naming the first that is not, before a
        resume writes anything."""
        from simroute.errors import ConfigurationError
        from simroute.ioutil import load_json
        if self.points_dir.is_dir():
            for path in sorted(self.points_dir.glob("*.parquet")):
                _read_point(path, ["status"])
        if self.runs_dir.is_dir():
            for run in sorted(self.runs_dir.iterdir()):
                summary = run / "summary.json"
                if summary.is_symlink() or not isinstance(load_json(summary, what="run summary"), dict):
                    raise ConfigurationError("not a run summary simroute wrote (a JSON object)", file=summary)

    def read(self):
        """Every stored point as a pandas DataFrame (labels expanded into `axis:<name>` columns)."""
        import pandas as pd
        files = sorted(self.points_dir.glob("*.parquet")) if self.points_dir.exists() else []
        if not files:
            return pd.DataFrame(columns=["key", "status", "error", "seed", "labels_json", *METRICS])
        frame = pa.concat_tables([_read_point(file) for file in files], promote_options="permissive").to_pandas()
        for column in METRICS:          # a point stored before a metric existed has none (NaN), not a KeyError
            if column not in frame:
                frame[column] = math.nan
        labels = [json.loads(text) for text in frame["labels_json"]]
        for name in sorted({key for point_labels in labels for key in point_labels}):
            frame[f"axis:{name}"] = [point_labels.get(name) for point_labels in labels]
        return frame


POINT_COLUMNS = ("key", "status", "error", "seed", "labels_json")


def _read_point(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One stored point, or a one-line error naming its file (truncated, empty, another file's schema)."""
    from simroute.errors import ConfigurationError
    try:
        table = pq.read_table(path, columns=columns)
    except (OSError, ValueError, TypeError, pa.ArrowException) as exc:
        raise ConfigurationError(f"not a readable point of this study: {' '.join(str(exc).split())[:160]}",
                                 file=path) from None
    for name in columns or POINT_COLUMNS:
        if name not in table.column_names:
            raise ConfigurationError("missing column: not a point of a simroute study", file=path, field=name)
    if table.num_rows != 1:
        raise ConfigurationError(f"holds {table.num_rows} rows; a stored point holds one", file=path)
    for name in table.column_names:
        kind = table.schema.field(name).type
        text = name in ("key", "status", "error") or name.endswith("_json")
        if text and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise ConfigurationError(f"must be text, got {kind}", file=path, field=name)
        if (name in METRICS or name == "seed") and not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise ConfigurationError(f"must be numeric, got {kind}", file=path, field=name)
    if "status" in table.column_names and table.column("status")[0].as_py() not in ("ok", "failed"):
        raise ConfigurationError("must be 'ok' or 'failed'", file=path, field="status")
    if "labels_json" in table.column_names:
        try:
            labels = json.loads(table.column("labels_json")[0].as_py() or "")
        except ValueError:
            labels = None
        if not isinstance(labels, dict):
            raise ConfigurationError("must be a JSON object of axis labels", file=path, field="labels_json")
    return table
