"""`simroute flows replay FLOWS -t TOPOLOGY`: replay a known set of bulk flows under max-min fairness.

A thin front over `simroute.network.replay` (the compiled whole-flow-set replay). The flow file is Parquet or
CSV, one row per flow: `start_s`, `nbytes`, and the path either as `links` (link ids of the topology; a list
in Parquet, space-separated in CSV) or as `src`, `dst` GPU names with an optional `path_index` (one of the
equal-cost paths; without it ECMP hashes the row's 5-tuple with `--seed`). Optional: `rate_cap_Bps`, and
`delay_s` (the flow enters the network at start_s + delay_s; its FCT still counts from start_s).

A run's flows (`net_flows.parquet`, or the run directory itself) carry all of these (network/schema.py
FLOW_COLUMNS) and the topology their link ids belong to, which is checked against `-t`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from simroute.cli.common import checked
from simroute.errors import ConfigurationError

FLOW_FILE_HELP = ("Parquet or CSV, one row per flow: start_s, nbytes, and links (link ids) or src, dst "
                  "[, path_index]; optional rate_cap_Bps, delay_s. Or a run directory (its net_flows.parquet).")
RUN_FLOWS = ("net_flows.parquet", "flows.parquet")    # in a run directory; in a telemetry export's
RUN_ONLY_COLUMNS = ("fid", "end_s", "sport")     # a run's flows table without `links` is from an older simroute


# The names in simroute.network.replay.REPLAY_BACKENDS, written out so that building the CLI (every command's
# `--help`) does not import the flow engine; tests/test_light_commands.py keeps the two equal.
BACKENDS_HELP = "auto (numba where available), engine, engine-numpy, numba"


def flow_file(path: Path) -> Path:
    """The flow file a FLOWS argument names: the file itself, or a run directory's net_flows.parquet (a
    telemetry export's flows.parquet)."""
    if path.is_dir():
        found = next((path / name for name in RUN_FLOWS if (path / name).is_file()), None)
        if found is None:
            raise ConfigurationError(f"is a directory without {' or '.join(RUN_FLOWS)} (a run written with "
                                     "telemetry has the first)", file=path)
        return found
    return path


def read_flow_table(path: Path) -> tuple[Any, dict[bytes, bytes] | None]:
    """The flow file as a DataFrame (Parquet or CSV by suffix) and its Parquet key-value metadata, or a
    ConfigurationError naming it."""
    import pandas as pd

    from simroute.ioutil import check_input_file
    check_input_file(path, what="flow file")
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path, dtype={"links": str}), None
        import pyarrow.parquet as pq
        table = pq.read_table(path)
        return table.to_pandas(), table.schema.metadata
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise ConfigurationError(f"not a readable {'CSV' if path.suffix.lower() == '.csv' else 'Parquet'} flow "
                                 f"file: {str(exc).splitlines()[0][:200]}", file=path) from None


MAX_FLOW_BYTES = 2.0 ** 60      # an exabyte: past it a size is corrupted, and the replay's time is unbounded
MAX_START_S = 1e9               # ~31 years


def _column(frame: Any, name: str, path: Path, *, dtype: type = float) -> Any:
    """A numeric column as `dtype`: text, booleans and (for integers) nulls are refused, not coerced."""
    import numpy as np
    if name not in frame:
        raise ConfigurationError(f"missing column (columns: {', '.join(map(str, frame.columns))})", file=path,
                                 field=name)
    column = frame[name]
    if column.dtype.kind not in "iuf":
        raise ConfigurationError(f"must be numeric, got a column of {column.dtype} (text, booleans or mixed "
                                 "values)", file=path, field=name)
    try:
        return np.asarray(column.to_numpy(), dtype=dtype)
    except (TypeError, ValueError):
        raise ConfigurationError(f"must be numeric ({dtype.__name__})", file=path, field=name) from None


def _paths(frame: Any, topology: Any, path: Path, seed: int) -> list[tuple[int, ...]]:
    """Each row's link ids: the `links` column, or the topology's path between `src` and `dst`."""
    from simroute.errors import UnknownNameError
    from simroute.network.hashing import SPORT_MAX, SPORT_MIN, flow_key, mix64
    if "links" in frame:
        out = []
        for row, value in enumerate(frame["links"].tolist()):
            try:
                items = value.split() if isinstance(value, str) else ([] if value is None else list(value))
                if any(isinstance(item, (bool, float)) and not float(item).is_integer() for item in items):
                    raise ValueError
                out.append(tuple(int(item) for item in items))
            except (TypeError, ValueError, OverflowError):
                raise ConfigurationError(f"row {row}: link ids must be integers, got {str(value)[:60]!r}",
                                         file=path, field="links") from None
            if not out[-1]:
                raise ConfigurationError(f"row {row}: a flow crosses at least one link; this one has none",
                                         file=path, field="links")
        return out
    if all(name in frame for name in RUN_ONLY_COLUMNS):
        raise ConfigurationError("a run's flows from before link ids were recorded: its src/dst rows would be "
                                 "hashed onto paths again, not the run's; rerun the run to replay it", file=path,
                                 field="links")
    if "src" not in frame or "dst" not in frame:
        raise ConfigurationError("give the path as a links column or as src and dst columns", file=path,
                                 field="links")
    choices = _column(frame, "path_index", path, dtype=float) if "path_index" in frame else None
    out = []
    for row, (src, dst) in enumerate(zip(frame["src"].tolist(), frame["dst"].tolist())):
        if not isinstance(src, str) or not isinstance(dst, str):
            raise ConfigurationError(f"row {row}: src and dst must be GPU names, got {str(src)[:40]!r} -> "
                                     f"{str(dst)[:40]!r}", file=path, field="src/dst")
        try:
            ia, ib = topology.index(src), topology.index(dst)
        except UnknownNameError as exc:
            raise ConfigurationError(f"row {row}: {exc}", file=path, field="src/dst") from None
        if ia == ib:
            raise ConfigurationError(f"row {row}: a flow from {src} to itself crosses no link", file=path,
                                     field="src/dst")
        if choices is not None:
            if not (choices[row] >= 0 and float(choices[row]).is_integer()):
                raise ConfigurationError(f"row {row}: must be an integer >= 0", file=path, field="path_index")
            count = topology.n_choices(ia, ib)
            if choices[row] >= count:
                raise ConfigurationError(f"row {row}: {int(choices[row])} is past the {count} equal-cost paths "
                                         f"from {src} to {dst} (0..{count - 1})", file=path, field="path_index")
            choice = int(choices[row])
        else:
            sport = SPORT_MIN + mix64(seed ^ row) % (SPORT_MAX - SPORT_MIN + 1)
            choice = topology.ecmp_choice(ia, ib, flow_key(ia, ib, sport), seed)
        out.append(topology.path_ids(ia, ib, choice)[0])
    return out


def load_flow_set(path: Path, topology: Any, seed: int) -> tuple[Any, Any, int]:
    """The flow file at `path` as a FlowSet on `topology` (checked), each flow's `start_s` (its FCT's
    origin: a flow with `delay_s` arrives at start_s + delay_s), and how many flows the run that wrote it
    left unfinished (absent from the file)."""
    import numpy as np

    from simroute.network.replay import FlowSet
    from simroute.network.schema import check_flows_topology, unfinished_flows
    frame, metadata = read_flow_table(path)
    if len(frame) == 0:
        raise ConfigurationError("holds no flows: nothing to replay", file=path)
    check_flows_topology(metadata, topology.name, topology.links, file=path)
    paths = _paths(frame, topology, path, seed)
    caps = _column(frame, "rate_cap_Bps", path) if "rate_cap_Bps" in frame else None
    start = _column(frame, "start_s", path)
    arrival = start
    if "delay_s" in frame:
        delay = _column(frame, "delay_s", path)
        bad = np.flatnonzero(~np.isfinite(delay) | (delay < 0))
        if bad.size:
            raise ConfigurationError(f"row {int(bad[0])}: must be finite and >= 0", file=path, field="delay_s")
        arrival = start + delay
    nbytes = _column(frame, "nbytes", path)
    for name, values, bound in (("start_s", arrival, MAX_START_S), ("nbytes", nbytes, MAX_FLOW_BYTES)):
        past = np.flatnonzero(np.isfinite(values) & (values > bound))
        if past.size:
            raise ConfigurationError(f"row {int(past[0])}: {values[past[0]]:g} is past {bound:g} (corrupted, or in "
                                     "other units?)", file=path, field=name)
    flows = FlowSet.from_paths(arrival, nbytes, paths, caps)
    flows.check(len(topology.links), source=str(path))
    return flows, start, unfinished_flows(metadata)


def summary(result: Any, fct_s: Any) -> dict[str, Any]:
    import numpy as np
    fct = fct_s[np.isfinite(fct_s)]
    return {"flows": int(len(result.finish_s)), "events": result.events, "steps": result.steps,
            "solves": result.solves, "groups_per_solve": result.solved_groups / max(result.solves, 1),
            "backend": result.backend, "wall_s": result.wall_s,
            "events_per_s": result.events / result.wall_s if result.wall_s > 0 else None,
            "makespan_s": float(result.finish_s.max(initial=0.0)),
            "fct_p50_s": float(np.percentile(fct, 50)) if fct.size else None,
            "fct_p99_s": float(np.percentile(fct, 99)) if fct.size else None,
            "fct_max_s": float(fct.max()) if fct.size else None}


def register(app: typer.Typer) -> None:
    flows_app = typer.Typer(help="Bulk flow sets on a fabric: replay them under max-min fairness.",
                            no_args_is_help=True)

    @flows_app.command("replay")
    def replay_cmd(
        flows_file: Path = typer.Argument(..., metavar="FLOWS", help=FLOW_FILE_HELP),
        topology: str = typer.Option("fattree", "-t", "--topology", help="Topology YAML or a shipped name."),
        output: Path = typer.Option(None, "-o", "--output", help="Write per-flow finish_s / fct_s here (a Parquet "
                                                                 "file: new, or one simroute wrote there)."),
        backend: str = typer.Option("auto", "--backend", help="Replay backend: " + BACKENDS_HELP + "."),
        seed: int = typer.Option(0, "--seed", help="ECMP hash seed for rows given as src/dst without path_index.",
                                 callback=checked("--seed", integer=True, minimum=0, maximum=2**63 - 1)),
        as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    ) -> None:
        """Replay a known flow set with pinned paths (compiled event loop): finish time of every flow.

        Example: simroute flows replay flows.parquet -t fattree-1024 -o finished.parquet
        """
        import numpy as np

        from simroute.cli.common import echo_json, table
        from simroute.ioutil import atomic_files, check_new_file
        from simroute.network import load_topology
        from simroute.network.replay import replay
        from simroute.shipped import resolve_input

        path = flow_file(flows_file)
        if output is not None:      # never over a user's file: new, or the one simroute wrote there before
            check_new_file(output, inputs=[path], flag="--output")
        topo = load_topology(resolve_input("topology", topology, strict=True))
        flows, start, unfinished = load_flow_set(path, topo, seed)
        if unfinished:
            typer.echo(f"note: {path}: the run stopped with {unfinished} flows still running; they are not in "
                       "the file, so the flows they shared links with replay faster than they ran", err=True)
        result = replay(flows, [link.capacity_Bps for link in topo.links],
                        latency_s=[link.latency_s for link in topo.links], backend=backend)
        fct = result.finish_s - start
        if output is not None:
            import pandas as pd
            import pyarrow as pa
            import pyarrow.parquet as pq
            out = pd.DataFrame({"flow": np.arange(len(flows)), "start_s": start, "nbytes": flows.nbytes,
                                "finish_s": result.finish_s, "fct_s": fct})
            with atomic_files(output.parent, [output.name], flag="--output", inputs=[path]) as tmp:
                pq.write_table(pa.Table.from_pandas(out, preserve_index=False), tmp[output.name])
        figures = summary(result, fct)
        if as_json:
            echo_json(figures)
        else:
            table(f"replay of {path.name} on {topo.summary()['name']}", ["figure", "value"],
                  [[key, f"{value:.6g}" if isinstance(value, float) else value] for key, value in figures.items()])
        if output is not None and not as_json:
            typer.echo(f"wrote {output}")

    app.add_typer(flows_app, name="flows")
