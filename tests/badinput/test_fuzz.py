"""Property-based fuzzing of every importer: any input gives a trace that readers accept, or a one-line user
error, never another exception and never a partial output. Bounded examples keep CI fast; set
SIMROUTE_FUZZ_EXAMPLES for a longer local run (the atheris harness in fuzz/ is for hours)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from seeds import SUFFIX, seeds  # noqa: E402

from simroute.errors import SimrouteError  # noqa: E402

FORMATS = ("mooncake", "azure", "burstgpt", "agent")
EXAMPLES = int(os.environ.get("SIMROUTE_FUZZ_EXAMPLES", "80"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])


def import_once(fmt: str, data: bytes, work: Path) -> None:
    """The property: a valid trace (re-read by `trace info`) or a SimrouteError with nothing written."""
    from simroute.workload import trace_info
    from simroute.workload.importers import import_trace
    if work.exists():
        shutil.rmtree(work)
    work.mkdir()
    src, out = work / f"in{SUFFIX[fmt]}", work / "out.parquet"
    src.write_bytes(data)
    try:
        import_trace(fmt, src, out, warn=lambda _m: None)
    except SimrouteError as exc:
        assert "\n" not in str(exc)
        assert sorted(p.name for p in work.iterdir()) == [src.name], "a failed import left files behind"
        return
    trace_info(out)          # what an importer writes, a reader accepts


# byte-level mutations of the seeds (the real traces' first lines among them)
MUTATION = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16)),
)


def mutate(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op, at, arg in ops:
        if not buf:
            break
        at %= len(buf)
        if op == "flip":
            buf[at] ^= arg
        elif op == "truncate":
            del buf[at:]
        elif op == "delete":
            del buf[at:at + arg]
        else:
            buf[at:at] = arg
    return bytes(buf)


@pytest.mark.parametrize("fmt", FORMATS)
def test_mutated_seeds_never_crash_an_importer(fmt, tmp_path):
    pool = seeds(fmt)

    @FUZZ
    @given(st.integers(0, len(pool) - 1), st.lists(MUTATION, min_size=1, max_size=4))
    def check(which, ops):
        import_once(fmt, mutate(pool[which], ops), tmp_path / "w")
    check()


# field-level: every value a JSON field might hold, in every field
ODD = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                st.text(max_size=6), st.lists(st.integers(-3, 3), max_size=3), st.just({}))


@FUZZ
@given(st.lists(st.fixed_dictionaries({}, optional={"timestamp": ODD, "input_length": ODD, "output_length": ODD,
                                                    "hash_ids": st.one_of(ODD, st.lists(ODD, max_size=4))}),
                min_size=1, max_size=4))
def test_mooncake_fields_of_any_type(tmp_path_factory, lines):
    data = "\n".join(json.dumps(x) for x in lines).encode()
    import_once("mooncake", data, tmp_path_factory.mktemp("m"))


@FUZZ
@given(st.fixed_dictionaries({"requests": st.lists(st.fixed_dictionaries(
    {}, optional={"t": ODD, "in": ODD, "out": ODD, "hash_ids": st.one_of(ODD, st.lists(ODD, max_size=3)),
                  "think_time": ODD, "api_time": ODD, "type": st.sampled_from(["n", "subagent"])}),
    max_size=4)}, optional={"block_size": ODD, "hash_id_scope": ODD}))
def test_agent_fields_of_any_type(tmp_path_factory, doc):
    import_once("agent", json.dumps(doc).encode(), tmp_path_factory.mktemp("a"))


CELL = st.one_of(st.from_regex(r"-?[0-9]{1,12}(\.[0-9]{1,3})?", fullmatch=True), st.sampled_from(
    ["nan", "inf", "-inf", "", "1e400", "0x10", " 7 ", "true", "2023-11-16 18:17:03", "9" * 30]), st.text(max_size=5))


@FUZZ
@given(st.sampled_from(["azure", "burstgpt"]), st.lists(st.lists(CELL, min_size=2, max_size=5), max_size=4))
def test_csv_cells_of_any_kind(tmp_path_factory, fmt, rows):
    header = seeds(fmt)[0].split(b"\n", 1)[0].decode()
    text = header + "\n" + "".join(",".join(c.replace(",", " ").replace("\n", " ") for c in r) + "\n" for r in rows)
    import_once(fmt, text.encode(), tmp_path_factory.mktemp("c"))


# structural mutations of the real traces themselves (the experiment): a field deleted, a value's type
# swapped, a line or row duplicated out of order, on the first lines of each shipped trace
SWAP = st.sampled_from([None, True, "7", 3.7, -1, float("nan"), float("inf"), 2**64, [], {}])


def _real_records(fmt: str) -> tuple[list, str] | None:
    from seeds import real_seed
    data = real_seed(fmt, max_bytes=20_000)
    if data is None:
        return None
    if fmt == "mooncake":
        return [json.loads(x) for x in data.splitlines() if x.strip()], fmt
    if fmt == "agent":
        return json.loads(data)["requests"], fmt
    return [r.split(",") for r in data.decode().splitlines()], fmt


def _serialise(fmt: str, records: list) -> bytes:
    if fmt == "mooncake":
        return "\n".join(json.dumps(r) for r in records).encode()
    if fmt == "agent":
        return json.dumps({"id": "real", "block_size": 64, "requests": records}).encode()
    return "\n".join(",".join(map(str, r)) for r in records).encode() + b"\n"


@pytest.mark.parametrize("fmt", ["mooncake", "agent", "azure"])
def test_real_traces_with_fields_deleted_or_swapped(fmt, tmp_path, shared_traces):
    found = _real_records(fmt)
    assert found is not None
    records = found[0]

    @FUZZ
    @given(st.lists(st.tuples(st.sampled_from(["delete", "swap", "duplicate"]), st.integers(0, 10**6),
                              st.integers(0, 10**6), SWAP), min_size=1, max_size=3))
    def check(ops):
        import copy
        recs = copy.deepcopy(records)
        for op, row, col, value in ops:
            i = row % len(recs)
            rec = recs[i]
            keys = list(rec) if isinstance(rec, dict) else list(range(len(rec)))
            if not keys:
                continue
            key = keys[col % len(keys)]
            if op == "delete":
                rec.pop(key)
            elif op == "swap":
                rec[key] = value if isinstance(rec, dict) else str(value)
            else:
                recs.insert(max(i - 1, 0), copy.deepcopy(rec))
        import_once(fmt, _serialise(fmt, recs), tmp_path / "w")
    check()


# operator tables (issue 38): any cell of a table a GPU entry names, and of an aiconfigurator file imported, gives
# a step time that is a finite positive number, or one line naming the file and the column; never a crash
# ("math domain error" on denormal latencies) and never a table directory left behind by a failed import
COLUMN = st.one_of(
    st.lists(st.integers(-5, 1 << 20), min_size=4, max_size=4),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=4, max_size=4),
    st.lists(st.sampled_from([1.0, 64.0, 4096.0, 5e-324, 1e-300, 1e300, 0.0, -1.0]), min_size=4, max_size=4),
    st.lists(st.text(max_size=4), min_size=4, max_size=4),
    st.lists(st.one_of(st.none(), st.just(2.0)), min_size=4, max_size=4),
)
TABLE_FUZZ = settings(FUZZ, max_examples=max(10, EXAMPLES // 2))    # each example times a step on its tables
GEMM_OK = {"dtype": ["bf16"] * 4, "m": [1, 16, 256, 4096], "n": [4096] * 4, "k": [4096] * 4,
           "latency_us": [5.0, 9.0, 40.0, 400.0]}


def _column_array(values: list):
    import pyarrow as pa
    try:
        return pa.array(values)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([str(value) for value in values])


def _step_or_refusal(directory: Path) -> None:
    """The property: load the tables and time a step on them (finite, > 0), or a one-line SimrouteError."""
    import dataclasses
    import math

    from simroute.calib import load_profile
    from simroute.calib.optables import load_operator_tables
    from simroute.model.steptime import BatchShape
    try:
        tables = load_operator_tables(directory)
    except SimrouteError as exc:
        assert "\n" not in str(exc) and str(directory) in str(exc)
        return
    profile = load_profile("paper-all")
    spec = dataclasses.replace(profile.gpu_spec("h100-sxm", tables=False), operator_tables=tables)
    step = profile.step_model("llama-3.1-8b", tp=1, gpu_spec=spec)
    for batch in (BatchShape.uniform(prefill_tokens=512), BatchShape.uniform(decode_seqs=8, context=2048)):
        seconds = step.iteration(batch).iteration_s
        assert math.isfinite(seconds) and seconds > 0


@TABLE_FUZZ
@given(st.dictionaries(st.sampled_from(sorted(GEMM_OK)), COLUMN, min_size=1, max_size=3))
def test_operator_table_cells_of_any_kind(tmp_path_factory, replaced):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simroute.calib.optables import write_operator_tables
    from simroute.model.optables import OpKind
    directory = write_operator_tables(tmp_path_factory.mktemp("t") / "ops", gpu="h100-sxm", framework="f",
                                      version="1", provenance={"kind": "measured"}, tables={OpKind.GEMM: GEMM_OK})
    table = pq.read_table(directory / "gemm.parquet")
    for column, values in replaced.items():
        table = table.set_column(table.schema.get_field_index(column), column, _column_array(values))
    pq.write_table(table, directory / "gemm.parquet")
    _step_or_refusal(directory)


@TABLE_FUZZ
@given(st.dictionaries(st.sampled_from(["gemm_dtype", "m", "n", "k", "latency"]), COLUMN, min_size=1, max_size=3))
def test_aiconfigurator_cells_of_any_kind(tmp_path_factory, replaced):
    """`calib import aiconfigurator`: tables that read back and time a step, or an error with nothing written."""
    import pandas as pd

    from simroute.calib.aiconfigurator import import_tables
    work = tmp_path_factory.mktemp("aic")
    folder = work / "systems" / "data" / "h100_sxm" / "gemm" / "sglang" / "0.5.14"
    folder.mkdir(parents=True)
    frame = pd.DataFrame({"gemm_dtype": ["bfloat16"] * 4, "m": [1, 16, 256, 4096], "n": [4096] * 4,
                          "k": [4096] * 4, "latency": [0.005, 0.009, 0.04, 0.4]})
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pandas(frame, preserve_index=False)
    for column, values in replaced.items():
        table = table.set_column(table.schema.get_field_index(column), column, _column_array(values))
    pq.write_table(table, folder / "gemm_perf.parquet")
    out = work / "out"
    try:
        import_tables("h100-sxm", "sglang", None, out, data_root=work)
    except SimrouteError as exc:
        assert "\n" not in str(exc)
        assert not out.exists() and not [p for p in work.iterdir() if p.name.startswith(".out")]
        return
    _step_or_refusal(out)
