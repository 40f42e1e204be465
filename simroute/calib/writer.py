"""Writing measured profiles so that a bad one is never half-written: the YAML goes to a temporary file
beside the target, is loaded back (includes resolved, schema and provenance validated, `cost_params()` built)
and only then renamed onto the target. Raw samples go to Parquet the same way."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from simroute.calib.profile import Profile, load_profile
from simroute.ioutil import atomic_path


def write_profile_checked(data: dict[str, Any], path: str | Path, *, model: str = "deepseek-v2-lite",
                          require_complete: bool = True,
                          before_commit: Callable[[], Any] | None = None) -> Profile:
    """Write `data` as the profile at `path` only if it loads back (and simulates, if `require_complete`).

    `before_commit` runs after the check and before the rename (e.g. writing the samples beside it), so a
    failure there also leaves the previous profile untouched.
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True))
        prof = load_profile(tmp)
        if require_complete:
            prof.cost_params(model)
        if before_commit is not None:
            before_commit()
    return load_profile(path)


def write_samples(rows: list[dict[str, Any]], path: str | Path, *, metadata: dict[str, str] | None = None) -> Path:
    """Raw probe samples as one long Parquet table: probe, series, x, value, unit, params (JSON of the rest)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    core = ("probe", "series", "x", "value", "unit")
    cols: dict[str, list] = {k: [] for k in (*core, "params")}
    for r in rows:
        cols["probe"].append(str(r.get("probe", "")))
        cols["series"].append(str(r.get("series", "")))
        cols["x"].append(float(r.get("x", float("nan"))))
        cols["value"].append(float(r["value"]))
        cols["unit"].append(str(r.get("unit", "")))
        cols["params"].append(json.dumps({k: v for k, v in r.items() if k not in core}, sort_keys=True))
    schema = pa.schema([("probe", pa.string()), ("series", pa.string()), ("x", pa.float64()),
                        ("value", pa.float64()), ("unit", pa.string()), ("params", pa.string())],
                       metadata={k.encode(): v.encode() for k, v in (metadata or {}).items()})
    table = pa.table(cols, schema=schema)
    path = Path(path)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path
