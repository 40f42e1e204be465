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

STATS = ("mean", "p50", "p95", "p99", "max")
METRICS: tuple[str, ...] = (
    "requests", "completed", "dropped",
    *[f"{metric}_{stat}" for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "itl_ms") for stat in STATS],
    # the serving benchmark clients' throughput (summary.json `serving`): over the first send to the last completion
    "request_throughput", "output_tokens_per_s", "total_tokens_per_s", "input_tokens_per_s_per_gpu",
    "output_tokens_per_s_per_gpu", "total_tokens_per_s_per_gpu",
    "slo_attainment", "bytes_route", "bytes_fetch", "bytes_local", "bytes_pd_transfer",
    "n_route", "n_fetch", "n_local", "n_resident", "n_first_touch",
    "instances", "max_link_utilisation", "peak_spine_flows", "fct_pd_mean_ms", "fct_pd_p95_ms",
    "fct_fetch_mean_ms", "holder_queries_per_call", "holder_max_fan_in", "holder_mean_wait_us",
    "busiest_holder_work_share", "evictions",
    "copies_refused", "overflow_chunks", "sim_time_s", "overloaded", "ttft_growth",
)


def flatten(summary: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of one run's summary.json as flat columns (NaN where a run has none)."""
    row: dict[str, Any] = {"requests": summary["requests"], "completed": summary["completed"],
                           "dropped": summary["dropped"]}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for stat in STATS:
            row[f"{metric}_{stat}"] = summary[metric].get(stat)
    serving = summary.get("serving") or {}
    itl = serving.get("itl_ms") or {}
    for stat in STATS:
        row[f"itl_ms_{stat}"] = itl.get("median" if stat == "p50" else stat)
    rate, per_gpu = serving.get("throughput") or {}, serving.get("throughput_per_gpu") or {}
    row["request_throughput"] = rate.get("requests_per_s")
    for key in ("output_tokens_per_s", "total_tokens_per_s"):
        row[key] = rate.get(key)
    for key in ("input_tokens_per_s", "output_tokens_per_s", "total_tokens_per_s"):
        row[f"{key}_per_gpu"] = per_gpu.get(key)
    row["slo_attainment"] = summary["slo"]["attainment"]
    for key in ("route", "fetch", "local", "pd_transfer"):
        row[f"bytes_{key}"] = summary["bytes"].get(key, 0.0)
    for key, count in summary["primitive_counts"].items():
        row[f"n_{key.replace('-', '_')}"] = count
    net, hold = summary.get("network", {}), summary.get("holders", {})
    row["instances"] = summary.get("instances")
    row["max_link_utilisation"] = net.get("max_link_utilisation")
    row["peak_spine_flows"] = max(net.get("peak_spine_concurrency", {}).values(), default=0)
    row["fct_pd_mean_ms"] = net.get("fct_ms_pd", {}).get("mean")
    row["fct_pd_p95_ms"] = net.get("fct_ms_pd", {}).get("p95")
    row["fct_fetch_mean_ms"] = net.get("fct_ms_fetch", {}).get("mean")
    row["holder_queries_per_call"] = hold.get("queries_per_call")
    row["holder_max_fan_in"] = hold.get("max_fan_in")
    row["holder_mean_wait_us"] = hold.get("mean_wait_us")
    row["busiest_holder_work_share"] = (hold.get("busiest") or {}).get("work_share")
    row["evictions"] = hold.get("evictions")
    row["copies_refused"] = hold.get("copies_refused")
    row["overflow_chunks"] = summary.get("placement", {}).get("overflow_chunks")
    row["sim_time_s"] = summary.get("sim_time_s")
    load = summary.get("load") or {}
    row["overloaded"] = None if load.get("overloaded") is None else float(bool(load["overloaded"]))
    row["ttft_growth"] = load.get("ttft_growth")
    return {key: (math.nan if row.get(key) is None else float(row[key])) for key in METRICS}


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
