"""Coverage-guided fuzzing of the trace importers, and of the operator-table reader (`optables`: the bytes are a
table directory's gemm.parquet, read and timed by a step model), with atheris (libFuzzer for Python).

    pip install 'simroute[fuzz]'
    python fuzz/fuzz_importers.py mooncake -max_total_time=600 -max_len=8192 fuzz/corpus/mooncake

A crash is any exception other than simroute's own `SimrouteError` (the one-line user error): a traceback a
user would have seen. Seeds come from the real traces beside the repository (../shared/traces) when present,
cut to their first lines, and from the small examples in `fuzz/seeds.py`; libFuzzer mutates them (byte flips,
truncations, insertions, splices). Every input is imported into a scratch directory that is emptied each time.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "fuzz")]     # this checkout's simroute, not an installed one

import numpy  # noqa: F401  (third-party modules first: only simroute's own code is instrumented)
import pandas  # noqa: F401
import pyarrow.compute  # noqa: F401
import pyarrow.parquet  # noqa: F401
import yaml  # noqa: F401

with atheris.instrument_imports(include=["simroute"]):    # coverage feedback from every module an import runs through
    import simroute.workload.importers.agent
    import simroute.workload.importers.common
    import simroute.workload.importers.csv_traces
    import simroute.workload.importers.mooncake
    import simroute.workload.validate
    import simroute.workload.writer  # noqa: F401
    import simroute.calib.optables
    import simroute.model.optables  # noqa: F401
    from simroute.errors import SimrouteError
    from simroute.workload.importers import import_trace

from seeds import SUFFIX, write_seeds  # noqa: E402

FORMATS = ("mooncake", "azure", "burstgpt", "agent", "optables")


def make_table_target(scratch: Path):
    """The bytes as gemm.parquet of a table directory: loaded, then a prefill and a decode step timed on it. A
    crash is any exception but SimrouteError, and a step time that is not a finite positive number."""
    import math

    from simroute.calib import load_profile
    from simroute.calib.optables import load_operator_tables, write_operator_tables
    from simroute.model.optables import OpKind
    from simroute.model.steptime import BatchShape
    directory = write_operator_tables(scratch / "ops", gpu="h100-sxm", framework="f", version="1",
                                      provenance={"kind": "measured"},
                                      tables={OpKind.GEMM: {"dtype": ["bf16"] * 2, "m": [1, 2], "n": [8, 8],
                                                            "k": [8, 8], "latency_us": [5.0, 6.0]}})
    profile = load_profile("paper-all")
    roofline = profile.gpu_spec("h100-sxm", tables=False)
    batches = (BatchShape.uniform(prefill_tokens=512), BatchShape.uniform(decode_seqs=8, context=2048))

    def one_input(data: bytes) -> None:
        import dataclasses
        (directory / "gemm.parquet").write_bytes(data)
        try:
            tables = load_operator_tables(directory)
        except SimrouteError:
            return
        step = profile.step_model("llama-3.1-8b", tp=1,
                                  gpu_spec=dataclasses.replace(roofline, operator_tables=tables))
        for batch in batches:
            seconds = step.iteration(batch).iteration_s
            if not (math.isfinite(seconds) and seconds > 0):
                raise AssertionError(f"step time {seconds!r} from an accepted table")
    return one_input


def make_target(fmt: str, scratch: Path):
    if fmt == "optables":
        return make_table_target(scratch)
    source = scratch / f"input{SUFFIX[fmt]}"
    output = scratch / "out.parquet"

    def one_input(data: bytes) -> None:
        source.write_bytes(data)
        if output.exists():
            shutil.rmtree(output)
        try:
            import_trace(fmt, source, output, warn=lambda _msg: None)
        except SimrouteError:
            pass               # a user error reported in one line: what bad input should give
    return one_input


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in FORMATS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(FORMATS)}}} [libFuzzer options] [corpus dir]")
    fmt = sys.argv.pop(1)
    corpus = next((Path(a) for a in sys.argv[1:] if not a.startswith("-")), None)
    if corpus is not None and not corpus.is_file():      # a file argument is a crash to reproduce
        corpus.mkdir(parents=True, exist_ok=True)
        write_seeds(fmt, corpus)
    scratch = Path(tempfile.mkdtemp(prefix=f"simroute-fuzz-{fmt}-"))
    try:
        atheris.Setup(sys.argv, make_target(fmt, scratch))
        atheris.Fuzz()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
