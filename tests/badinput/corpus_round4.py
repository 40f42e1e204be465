"""Round 4 of the bad-input corpus (issue 38): `plan`, operator tables, `calib import`, shapes and deployments that
cannot exist, and checks before any write or header. Same `Case` table and assertions as corpus.py (exit 2, one
line naming the file or flag, no traceback, nothing under the case's directory changed), and nothing on stdout.

Classes (the id's first word): `plan` a plan refused after its header or with its answer half written, `aic` a
published operator database that does not hold what it should (`calib import aiconfigurator`), `name` flag values
that are paths or patterns, `tables` damaged operator tables wherever they are read (`calib validate`, `model
step`, `run`, `plan`, studies), `feas` shapes and deployments that cannot exist, `load` loads that overflow, `slo`
SLOs and plan flags that mean nothing, `where` errors that must name the file or flag, `resume` a damaged plan
resumed, `hosts` studies whose host counts or TP cannot be built.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from corpus import Case, _set, _yaml
from corpus_round3 import STUDY3, _link, _one, _requests_edit, _string_edit, _truncate, _zero_rows

SHIPPED = Path(__file__).resolve().parents[2] / "simroute" / "data" / "calib"
H200_TABLES = SHIPPED / "ops" / "h200-sxm" / "sglang-0.5.14"
A100_TABLES = SHIPPED / "ops" / "a100-80gb" / "sglang-0.5.10"
# the valid plan the `needs_plan` fixture makes (a few seconds): its directory is {d}/plan
PLAN4 = ("plan", "--workload", "corpus", "-p", "requests=12", "--qps", "4", "--hosts-max", "2", "--seeds", "1",
         "--compare", "", "-j", "1")


# -- operator tables ---------------------------------------------------------------------------------------------
def _tables(root: Path, source: Path = H200_TABLES, kinds: tuple[str, ...] = ("gemm",)) -> Path:
    """{d}/ops/t: a copy of shipped tables holding `kinds` only (their manifest cut to them)."""
    target = root / "ops" / "t"
    target.mkdir(parents=True)
    manifest = yaml.safe_load((source / "tables.yaml").read_text())
    manifest["tables"] = {kind: entry for kind, entry in manifest["tables"].items() if kind in kinds}
    (target / "tables.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    import pyarrow.parquet as pq
    for kind in kinds:         # the first rows only: every check reads the whole file, and a case stays fast
        pq.write_table(pq.read_table(source / f"{kind}.parquet").slice(0, TABLE_ROWS), target / f"{kind}.parquet")
    return target


TABLE_ROWS = 3000


def _profile(root: Path, *, include: bool = False, path: str = "ops/t") -> None:
    """{d}/p.yaml: the shipped h200-sxm GPU entry with its operator_tables at `path` (relative to p.yaml);
    with `include`, on top of the shipped h100-ibgda profile (what a run needs besides the GPU)."""
    doc = yaml.safe_load((SHIPPED / "gpus" / "h200-sxm.yaml").read_text())
    doc["gpus"]["h200-sxm"]["operator_tables"] = {"path": path, "note": "a damaged copy"}
    if include:
        doc["include"] = ["shipped:h100-ibgda"]
    (root / "p.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _gemm_column(column: str, value: Any, kind: str | None = None):
    """Set every value of gemm.parquet's `column` (an Arrow type `kind`, else inferred)."""
    def edit(root: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = root / "ops" / "t" / "gemm.parquet"
        table = pq.read_table(path)
        array = pa.array([value] * table.num_rows, type=getattr(pa, kind)() if kind else None)
        index = table.schema.get_field_index(column)
        pq.write_table(table.set_column(index, column, array), path)
    return edit


def _damaged(edit=None, *, source: Path = H200_TABLES, include: bool = False, path: str = "ops/t"):
    def setup(root: Path) -> None:
        _tables(root, source)
        _profile(root, include=include, path=path)
        if edit is not None:
            edit(root)
    return setup


def _manifest_gpu(value: str):
    def edit(root: Path) -> None:
        manifest = root / "ops" / "t" / "tables.yaml"
        doc = yaml.safe_load(manifest.read_text())
        doc["gpu"] = value
        manifest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return edit


def _garbage(root: Path) -> None:
    path = root / "ops" / "t" / "gemm.parquet"
    data = bytearray(path.read_bytes())
    for k in range(len(data) // 3, len(data) // 3 + 256):
        data[k] ^= 0x5A
    path.write_bytes(bytes(data))


def _self_loop(root: Path) -> None:
    shutil.rmtree(root / "ops" / "t")
    os.symlink(root / "ops" / "t", root / "ops" / "t")


TABLE_DAMAGE: list[tuple[str, Any, str]] = [
    ("latency-nan", _gemm_column("latency_us", float("nan")), "latency_us"),
    ("latency-negative", _gemm_column("latency_us", -3.0), "latency_us"),
    ("latency-zero", _gemm_column("latency_us", 0.0), "latency_us"),
    ("latency-denormal", _gemm_column("latency_us", 5e-324), "latency_us"),
    ("latency-huge", _gemm_column("latency_us", 1e300), "latency_us"),
    ("latency-text", _gemm_column("latency_us", "fast"), "latency_us"),
    ("latency-null", _gemm_column("latency_us", None, "float64"), "latency_us"),
    ("dtype-null", _gemm_column("dtype", None, "string"), "dtype"),
    ("dtype-integer", _gemm_column("dtype", 7), "dtype"),
    ("dtype-empty", _gemm_column("dtype", " "), "dtype"),
    ("m-negative", _gemm_column("m", -4), "'m'"),
    ("m-zero", _gemm_column("m", 0), "'m'"),
    ("m-text", _gemm_column("m", "four"), "'m'"),
    ("n-inf", _gemm_column("n", float("inf")), "'n'"),
    ("missing", lambda root: (root / "ops" / "t" / "gemm.parquet").unlink(), "gemm.parquet"),
    ("garbage", _garbage, "gemm.parquet"),
    ("empty-file", lambda root: (root / "ops" / "t" / "gemm.parquet").write_bytes(b""), "gemm.parquet"),
    ("huge-sparse", lambda root: os.truncate(root / "ops" / "t" / "gemm.parquet", 300 << 20), "gemm.parquet"),
    ("zero-rows", lambda root: _gemm_rows(root, 0), "gemm.parquet"),
    ("manifest-gpu-path", _manifest_gpu("../h200-sxm"), "tables.yaml"),
    ("manifest-other-gpu", _manifest_gpu("a100-80gb"), "operator_tables"),
    ("manifest-missing", lambda root: (root / "ops" / "t" / "tables.yaml").unlink(), "operator_tables"),
    ("path-loops", _self_loop, "operator_tables"),
]


def _gemm_rows(root: Path, rows: int) -> None:
    import pyarrow.parquet as pq
    path = root / "ops" / "t" / "gemm.parquet"
    pq.write_table(pq.read_table(path).slice(0, rows), path)


def table_cases() -> list[Case]:
    step = ("model", "step", "--calib", "{d}/p.yaml", "--gpu", "h200-sxm", "--model", "llama-3.1-8b", "--tp", "1",
            "--tokens", "8", "--decode-seqs", "8", "--context", "1024")
    cases = []
    for tag, edit, names in TABLE_DAMAGE:
        cases.append(Case(f"tables-validate-{tag}", ("calib", "validate", "{d}/p.yaml"), names,
                          setup=_damaged(edit)))
        cases.append(Case(f"tables-step-{tag}", step, names, setup=_damaged(edit)))
    for tag, edit, names in TABLE_DAMAGE[::4]:          # the same reader under run, plan and a study: a sample
        cases.append(Case(f"tables-run-{tag}", ("run", "--calib", "{d}/p.yaml", "--max-requests", "3", "-o",
                                                "{d}/out"), names, setup=_damaged(edit, include=True)))
        cases.append(Case(f"tables-plan-{tag}", ("plan", "--calib", "{d}/p.yaml", "--max-requests", "3", "-o",
                                                 "{d}/out"), names, setup=_damaged(edit, include=True)))
    cases += [
        Case("tables-step-another-gpus", step, "operator_tables", setup=_damaged(source=A100_TABLES)),
        Case("tables-run-another-gpus", ("run", "--calib", "{d}/p.yaml", "--max-requests", "3", "-o", "{d}/out"),
             "operator_tables", setup=_damaged(source=A100_TABLES, include=True)),
        Case("tables-plan-another-gpus", ("plan", "--calib", "{d}/p.yaml", "-o", "{d}/out"), "operator_tables",
             setup=_damaged(source=A100_TABLES, include=True)),
        Case("tables-sweep-another-gpus", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "operator_tables",
             {"s.yaml": _yaml(_set(_set(STUDY3, "base.calib", "p.yaml"), "base.gpu", "h200-sxm"))},
             setup=_damaged(source=A100_TABLES, include=True)),
        Case("tables-sweep-latency-nan", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "latency_us",
             {"s.yaml": _yaml(_set(_set(STUDY3, "base.calib", "p.yaml"), "base.gpu", "h200-sxm"))},
             setup=_damaged(_gemm_column("latency_us", float("nan")), include=True)),
        Case("tables-path-missing", step, "operator_tables", setup=_damaged(path="ops/nowhere")),
        Case("tables-path-a-file", step, "operator_tables", setup=_damaged(path="ops/t/gemm.parquet")),
        Case("tables-diff-latency-nan", ("calib", "diff", "{d}/ops/t", str(H200_TABLES), "--tables"), "latency_us",
             setup=_damaged(_gemm_column("latency_us", float("nan")))),
    ]
    return cases


# -- calib import aiconfigurator -----------------------------------------------------------------------------
AIC_GEMM = [{"gemm_dtype": "bfloat16", "m": m, "n": 4096, "k": 4096, "latency": 0.01 * m} for m in (1, 2, 4)]


def _aic(rows: list[dict] | None = None, edit=None):
    """{d}/aic: a tiny aiconfigurator data tree (systems/data/h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet)."""
    def setup(root: Path) -> None:
        import pandas as pd
        folder = root / "aic" / "systems" / "data" / "h200_sxm" / "gemm" / "sglang" / "0.5.14"
        folder.mkdir(parents=True)
        frame = pd.DataFrame(rows if rows is not None else AIC_GEMM)
        (edit(frame) if edit is not None else frame).to_parquet(folder / "gemm_perf.parquet")
    return setup


def _aic_set(column: str, value: Any):
    return _aic(edit=lambda frame: frame.assign(**{column: value}))


def aic_cases() -> list[Case]:
    argv = ("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--from", "{d}/aic", "-o", "{d}/out")
    damage = [("latency-nan", "latency", float("nan")), ("latency-negative", "latency", -1.0),
              ("latency-zero", "latency", 0.0), ("latency-inf", "latency", float("inf")),
              ("latency-denormal", "latency", 5e-324), ("latency-text", "latency", "x"),
              ("m-negative", "m", -4), ("m-text", "m", "four"), ("m-zero", "m", 0), ("k-nan", "k", float("nan")),
              ("dtype-null", "gemm_dtype", None), ("dtype-number", "gemm_dtype", 7)]
    cases = [Case(f"aic-{tag}", argv, "gemm_perf.parquet", setup=_aic_set(column, value))
             for tag, column, value in damage]
    cases += [
        Case("aic-column-missing", argv, "gemm_perf.parquet", setup=_aic(edit=lambda f: f.drop(columns=["k"]))),
        Case("aic-into-user-dir", argv, "out", {"out/notes.txt": "mine"}, setup=_aic()),
        Case("aic-from-a-file", argv[:5] + ("--from", "{d}/f.txt", "-o", "{d}/out"), "--from", {"f.txt": "x"}),
    ]
    for tag, args in [("gpu-root", ("--gpu", "/etc")), ("gpu-empty", ("--gpu", "")), ("gpu-dot", ("--gpu", ".")),
                      ("gpu-dotdot", ("--gpu", "..")), ("gpu-subdir", ("--gpu", "h200_sxm/gemm")),
                      ("framework-glob", ("--gpu", "h200-sxm", "--framework", "*")),
                      ("framework-path", ("--gpu", "h200-sxm", "--framework", "../sglang")),
                      ("version-dotdot", ("--gpu", "h200-sxm", "--version", ".."))]:
        flag = args[-2]
        cases.append(Case(f"name-aic-{tag}", ("calib", "import", "aiconfigurator", *args, "--from", "{d}/aic", "-o",
                                              "{d}/out"), flag, setup=_aic()))
    return cases


# -- flag values that are paths or patterns ------------------------------------------------------------------
BAD_NAMES = [("root", "/etc"), ("empty", ""), ("dot", "."), ("dotdot", ".."), ("relative", "../gpus/h200-sxm"),
             ("glob", "h200*"), ("blank", " ")]


def name_cases() -> list[Case]:
    cases = []
    for tag, value in BAD_NAMES:
        cases += [
            Case(f"name-step-gpu-{tag}", ("model", "step", "--gpu", value, "--tokens", "8"), "--gpu"),
            Case(f"name-run-gpu-{tag}", ("run", "--gpu", value, "--max-requests", "3", "-o", "{d}/out"), "gpu"),
            Case(f"name-plan-gpu-{tag}", ("plan", "--gpu", value, "-o", "{d}/out"), "--gpu"),
        ]
    cases += [
        Case("name-diff-gpu-path", ("calib", "diff", "h100-ibgda", "paper-all", "--gpu", "../h100-sxm"), "--gpu"),
        Case("name-plan-workload-path", ("plan", "--workload", "../agents", "-o", "{d}/out"), "--workload"),
        Case("name-plan-workload-empty", ("plan", "--workload", "", "-o", "{d}/out"), "--workload"),
        Case("name-plan-policy-empty", ("plan", "--policy", "", "-o", "{d}/out"), "--policy"),
        Case("name-plan-compare-glob", ("plan", "--compare", "always-*", "-o", "{d}/out"), "--compare"),
        Case("name-plan-model-path", ("plan", "--model", "../deepseek-v3", "-o", "{d}/out"), "--model"),
        Case("name-step-calib-empty", ("model", "step", "--calib", "", "--tokens", "8"), "--calib"),
        Case("name-run-calib-empty", ("run", "--calib", "", "-o", "{d}/out"), "--calib"),
        Case("name-run-topology-blank", ("run", "--topology", " ", "-o", "{d}/out"), "--topology"),
        Case("name-run-trace-empty", ("run", "--trace", "", "-o", "{d}/out"), "--trace"),
        Case("name-plan-calib-empty", ("plan", "--calib", "", "-o", "{d}/out"), "--calib"),
        Case("name-plan-topology-empty", ("plan", "--topology", "", "-o", "{d}/out"), "--topology"),
        Case("name-plan-trace-empty", ("plan", "--trace", "", "-o", "{d}/out"), "--trace"),
        Case("name-sweep-gpu-path", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "gpu",
             {"s.yaml": _yaml(_set(STUDY3, "base.gpu", "/etc"))}),
    ]
    return cases


# -- shapes and deployments that cannot exist ---------------------------------------------------------------
def feasibility_cases() -> list[Case]:
    step = lambda tag, names, *args: Case(f"feas-step-{tag}", ("model", "step", *args), names)
    run = lambda tag, names, *args: Case(f"feas-run-{tag}", ("run", *args, "--max-requests", "3", "-o", "{d}/out"),
                                         names)
    plan = lambda tag, names, *args: Case(f"feas-plan-{tag}", ("plan", *args, "-o", "{d}/out"), names)
    return [
        step("kv-tens-of-tb", "--decode-seqs", "--tokens", "4096", "--decode-seqs", "4096", "--context", "131072"),
        step("kv-past-hbm", "--decode-seqs", "--tokens", "64", "--decode-seqs", "64", "--context", "20000"),
        step("kv-past-hbm-prefill", "--tokens", "--tokens", "120000", "--decode-seqs", "16", "--context", "2048",
             "--model", "llama-3.1-70b", "--tp", "2", "--gpu", "h100-sxm"),
        step("past-the-window", "--context", "--tokens", "1", "--decode-seqs", "1", "--context", "163840"),
        step("prefill-kv-past-hbm", "--prefill-context", "--tokens", "4096", "--prefill-context", "5000000"),
        step("v3-on-a40", "--gpu", "--model", "deepseek-v3", "--gpu", "a40", "--tokens", "8"),
        step("v3-on-a100", "--gpu", "--model", "deepseek-v3", "--gpu", "a100-80gb", "--tokens", "8"),
        step("fp8-asked-on-a100", "--weights", "--model", "llama-3.1-8b", "--gpu", "a100-80gb", "--tp", "1",
             "--weights", "fp8", "--tokens", "8"),
        step("bf16-v3-past-8-h200", "--tp", "--weights", "bf16", "--tokens", "8"),
        step("70b-on-one-a100", "--tp", "--model", "llama-3.1-70b", "--gpu", "a100-80gb", "--tp", "1", "--tokens",
             "8"),
        step("tp-splits-no-head", "--tp", "--tp", "3", "--tokens", "8"),
        step("tp-above-heads", "--tp", "--model", "deepseek-v2-lite", "--tp", "32", "--tokens", "8"),
        # DP attention / expert parallelism / MTP (simroute.model.limits.check_parallel, check_mtp, check_group)
        step("ep-splits-no-experts", "--ep", "--tp", "8", "--dp-attention", "8", "--ep", "8", "--redundant-experts",
             "4", "--tokens", "8"),
        step("dp-splits-no-gpus", "--dp-attention", "--tp", "8", "--dp-attention", "3", "--tokens", "8"),
        step("nextn-without-acceptance", "--accept-rate", "--tp", "8", "--nextn", "1", "--tokens", "8"),
        step("dp-rank-kv-past-hbm", "--decode-seqs", "--tp", "8", "--dp-attention", "8", "--ep", "8", "--tokens",
             "64", "--decode-seqs", "64", "--context", "100000"),
        run("v3-on-a40", "gpu", "--gpu", "a40"),
        run("v3-on-a100", "gpu", "--gpu", "a100-80gb"),
        run("fp8-asked-on-a100", "weights", "--gpu", "a100-80gb", "--model", "llama-3.1-8b", "--weights", "fp8"),
        run("tp-16-on-8-gpu-hosts", "tp", "--tp", "16"),
        run("tp-3", "tp", "--tp", "3"),
        run("hbm-below-weights", "hbm_gb", "--hbm-gb", "40"),
        run("hbm-above-the-gpus", "hbm_gb", "--hbm-gb", "1e308"),
        run("hbm-above-the-gpus-141", "hbm_gb", "--hbm-gb", "142"),
        run("bf16-v3", "tp", "--weights", "bf16"),
        # DP attention / EP / MTP in a run and a plan (the same limits, named by the run's and the plan's flags)
        run("dp-splits-no-gpus", "--dp-attention", "--tp", "8", "--dp-attention", "3"),
        run("ep-splits-no-experts", "--ep", "--tp", "8", "--dp-attention", "8", "--ep", "3"),
        run("nextn-without-acceptance", "--accept-rate", "--nextn", "1"),
        run("deepep-without-ep", "--ep", "--tp", "8", "--dp-attention", "8", "--a2a", "deepep"),
        run("dp-group-past-the-hosts", "hosts", "--hosts", "1", "--tp", "16", "--dp-attention", "16", "--ep", "16"),
        plan("parallel-word", "--parallel", "--parallel", "tp8,dp8xp8"),
        plan("parallel-and-tp", "--parallel", "--tp", "4", "--parallel", "tp8,dp8ep8"),
        plan("tp-3", "--tp", "--tp", "3"),
        plan("tp-16", "--tp", "--tp", "16"),
        plan("v3-on-a40", "--gpu", "--gpu", "a40"),
        plan("v3-on-a100", "--gpu", "--gpu", "a100-80gb"),
        plan("bf16-v3", "tp", "--model", "llama-3.1-70b", "--tp", "1"),
        Case("feas-sweep-gpu-axis-a40", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "gpu",
             {"s.yaml": _yaml(_set(STUDY3, "axes", {"gpu": ["h200-sxm", "a40"]}))}),
        Case("feas-sweep-hbm-axis", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "hbm_gb",
             {"s.yaml": _yaml(_set(STUDY3, "axes", {"hbm_gb": [141, 20]}))}),
        Case("feas-sweep-weights-fp8-a100", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "weights",
             {"s.yaml": _yaml(_set(_set(_set(STUDY3, "base.gpu", "a100-80gb"), "base.model", "llama-3.1-8b"),
                                   "base.weights", "fp8"))}),
    ]


# -- loads that overflow ------------------------------------------------------------------------------------
def load_cases() -> list[Case]:
    run = lambda tag, names, *args: Case(f"load-run-{tag}", ("run", *args, "--max-requests", "5", "-o", "{d}/out"),
                                         names)
    return [
        run("time-scale-1e308", "--time-scale", "--time-scale", "1e308"),
        run("time-scale-1e12", "--time-scale", "--time-scale", "1e12"),
        run("qps-denormal", "qps", "--qps", "5e-324"),
        run("qps-1e-12", "qps", "--qps", "1e-12"),
        Case("load-run-trace-time-scale-1e308", ("run", "--trace", "{trace}", "--time-scale", "1e308", "-o",
                                                 "{d}/out"), "--time-scale", needs_trace=True),
        Case("load-plan-time-scale-1e308", ("plan", "--time-scale", "1e308", "-o", "{d}/out"), "--time-scale"),
        Case("load-plan-qps-denormal", ("plan", "--qps", "5e-324", "-o", "{d}/out"), "--qps"),
        Case("load-plan-trace-time-scale", ("plan", "--trace", "{trace}", "--time-scale", "1e300", "-o", "{d}/out"),
             "--time-scale", needs_trace=True),
        Case("load-sweep-time-scale", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "time_scale",
             {"s.yaml": _yaml(_set(_set(STUDY3, "base.trace", "agents-default"), "base.time_scale", 1e308))}),
        Case("load-sweep-qps-axis", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "qps",
             {"s.yaml": _yaml(_set(_set(STUDY3, "base.trace", "agents-default"), "axes", {"qps": [4, 1e-300]}))}),
    ]


# -- SLOs and plan flags that mean nothing -----------------------------------------------------------------------
def slo_cases() -> list[Case]:
    plan = lambda tag, names, *args: Case(f"slo-plan-{tag}", ("plan", *args, "-o", "{d}/out"), names)
    return [
        plan("qps-twice", "--qps", "--workload", "agents", "-p", "qps=5", "--qps", "4"),
        plan("concurrency-twice", "--concurrency", "--workload", "serving", "-p", "concurrency=4", "--concurrency",
             "8"),
        plan("param-twice", "--param", "--workload", "agents", "-p", "subagents=4", "-p", "subagents=8"),
        plan("workload-empty", "--workload", "--workload", ""),
        plan("workload-unknown", "--workload", "--workload", "nosuch"),
        plan("workload-param-unknown", "--workload", "--workload", "agents", "-p", "nosuch=1"),
        plan("slo-empty", "--slo", "--slo", ""),
        plan("threshold-1e999", "--slo", "--slo", "p99 ttft_ms <= 1e999"),
        plan("threshold-nan", "--slo", "--slo", "p99 ttft_ms <= nan"),
        plan("negative-latency", "--slo", "--slo", "p99 ttft_ms <= -5"),
        plan("below-zero-strict", "--slo", "--slo", "p99 tpot_ms < 0"),
        plan("attainment-above-one", "--slo", "--slo", "slo_attainment >= 1.5"),
        plan("attainment-strict-one", "--slo", "--slo", "slo_attainment > 1"),
        plan("unknown-metric", "--slo", "--slo", "p99 ttfb_ms <= 5"),
        plan("compare-twice", "--compare", "--compare", "always-route,always-route"),
        plan("compare-unknown", "--policy / --compare", "--compare", "always-teleport"),
        plan("trace-and-workload", "--workload", "--trace", "agents-default", "--workload", "agents"),
        Case("slo-sweep-negative", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "slo",
             {"s.yaml": _yaml({**STUDY3, "slo": "p99 ttft_ms <= -1"})}),
        Case("slo-sweep-search-attainment", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "search.slo",
             {"s.yaml": _yaml({**STUDY3, "axes": {}, "search": {"field": "hosts", "goal": "min", "lo": 1, "hi": 4,
                                                                 "slo": "slo_attainment >= 2"}})}),
        Case("slo-gen-param-twice", ("trace", "gen", "corpus", "-p", "requests=5", "-p", "requests=6", "-o",
                                     "{d}/g.parquet"), "--param"),
    ]


# -- errors that must name the file or the flag ----------------------------------------------------------------
def where_cases() -> list[Case]:
    plan = lambda tag, names, files, *args: Case(f"where-plan-{tag}", ("plan", *args, "-o", "{d}/out"), names, files)
    return [
        plan("trace-plain-dir", "requests.parquet", {"plain/notes.txt": "x"}, "--trace", "{d}/plain"),
        plan("trace-garbage-parquet", "g.parquet", {"g.parquet": "garbage"}, "--trace", "{d}/g.parquet"),
        plan("trace-empty-dir", "e.parquet", {"e.parquet": None}, "--trace", "{d}/e.parquet"),
        plan("topology-empty-yaml", "e.yaml", {"e.yaml": ""}, "--topology", "{d}/e.yaml"),
        plan("topology-text-file", "t.txt", {"t.txt": "hello"}, "--topology", "{d}/t.txt"),
        plan("topology-a-study", "s.yaml", {"s.yaml": _yaml(STUDY3)}, "--topology", "{d}/s.yaml"),
        plan("calib-empty-yaml", "e.yaml", {"e.yaml": ""}, "--calib", "{d}/e.yaml"),
        plan("calib-a-topology", "t.yaml", {"t.yaml": _yaml({"name": "x", "hosts": {}})}, "--calib", "{d}/t.yaml"),
        plan("model-unknown", "--model", {}, "--model", "gpt-9"),
        plan("policy-unknown", "--policy", {}, "--policy", "teleport"),
        plan("trace-missing", "nowhere.parquet", {}, "--trace", "{d}/nowhere.parquet"),
        *[Case(f"where-plan-trace-{tag}", ("plan", "--trace", "{trace}", "-o", "{d}/out"), names, damage=edit,
               needs_trace=True) for tag, edit, names in (
            ("arrival-1e300", _requests_edit("arrival_s", lambda i, v: 1e300 if i == 39 else v), "arrival_s"),
            ("think-1e300", _requests_edit("think_s", lambda i, v: 1e300 if i == 3 else v), "think_s"),
            ("zero-rows", _zero_rows, "requests.parquet"),
            ("nul-in-tenant", _string_edit("requests.parquet", "tenant", "ten\x00ant"), "tenant"))],
        Case("where-sweep-trace-arrival-1e300", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "arrival_s",
             {"s.yaml": _yaml(_set(STUDY3, "base.trace", "trace.parquet"))}, needs_trace=True,
             damage=_requests_edit("arrival_s", lambda i, v: 1e300 if i == 39 else v)),
        Case("where-plan-workload-qps-past-horizon", ("plan", "--workload", "corpus", "--qps", "1e-300", "-o",
                                                      "{d}/out"), "--workload"),
        Case("where-plan-workload-interval-past-horizon", ("plan", "--workload", "agents", "-p",
                                                           "doc_interval_s=1e300", "-o", "{d}/out"), "--workload"),
        Case("where-sweep-generated-qps-past-horizon", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "qps",
             {"s.yaml": _yaml(_set(STUDY3, "axes", {"trace.params.qps": [4, 1e-300]}))}),
        *[Case(f"where-fifo-{tag}", argv, "fifo", setup=lambda root: os.mkfifo(root / "fifo")) for tag, argv in (
            ("calib-validate", ("calib", "validate", "{d}/fifo")), ("topo-show", ("topo", "show", "{d}/fifo")),
            ("step-calib", ("model", "step", "--calib", "{d}/fifo", "--tokens", "8")),
            ("run-calib", ("run", "--calib", "{d}/fifo", "-o", "{d}/out")),
            ("run-topology", ("run", "--topology", "{d}/fifo", "-o", "{d}/out")),
            ("plan-calib", ("plan", "--calib", "{d}/fifo", "-o", "{d}/out")),
            ("sweep", ("sweep", "{d}/fifo", "-o", "{d}/out")),
            ("gen-config", ("trace", "gen", "corpus", "--config", "{d}/fifo", "-o", "{d}/g.parquet")),
            *((f"import-{fmt}", ("trace", "import", fmt, "{d}/fifo", "-o", "{d}/i.parquet"))
              for fmt in ("mooncake", "azure", "burstgpt", "agent")))],
        Case("where-step-gpu-relative", ("model", "step", "--gpu", "../gpus/h200-sxm", "--tokens", "8"), "--gpu"),
        Case("where-step-gpu-unknown", ("model", "step", "--gpu", "b300", "--tokens", "8"), "--gpu"),
        Case("where-run-gpu-unknown", ("run", "--gpu", "b300", "--max-requests", "3", "-o", "{d}/out"), "gpu"),
    ]


# -- plan outputs, and a plan resumed -------------------------------------------------------------------------
def _edit_plan(rel: str, text: str):
    return lambda root: (root / "plan" / rel).write_text(text)


def plan_cases() -> list[Case]:
    out = lambda tag, names, files, *args, **kw: Case(f"plan-o-{tag}", ("plan", "--max-requests", "3", *args),
                                                      names, files, **kw)
    cases = [
        out("user-dir", "mine", {"mine/notes.txt": "my notes"}, "-o", "{d}/mine"),
        out("a-file", "f.txt", {"f.txt": "a file"}, "-o", "{d}/f.txt"),
        out("under-a-file", "f.txt", {"f.txt": "a file"}, "-o", "{d}/f.txt/plan"),
        out("dot", "--out", {"notes.txt": "mine"}, "-o", "."),
        out("the-trace", "trace.parquet", {}, "--trace", "{trace}", "-o", "{trace}", needs_trace=True),
        out("inside-the-trace", "trace.parquet", {}, "--trace", "{trace}", "-o", "{trace}/plan", needs_trace=True),
        out("a-run", "run", {}, "-o", "{d}/run", needs_run=True),
        out("another-study", "study", {}, "-o", "{d}/study", needs_study=True),
        out("too-long", "n" * 300, {}, "-o", "{d}/" + "n" * 300),
        out("symlink-to-user-dir", "--out", {"mine/notes.txt": "my notes"}, "-o", "{d}/link",
            setup=_link("link", "mine")),
        out("dangling-parent", "gone", {}, "-o", "{d}/gone/plan", setup=_link("gone", "nowhere")),
    ]
    resume = lambda tag, names, setup, *extra: Case(f"resume-{tag}", (*PLAN4, *extra, "-o", "{d}/plan"), names,
                                                    needs_plan=True, setup=setup)
    cases += [
        resume("plan-md-edited", "plan.md", _edit_plan("plan.md", "my edits")),
        resume("plan-json-edited", "plan.json", _edit_plan("plan.json", "{}")),
        resume("plan-yaml-edited", "plan.yaml", _edit_plan("plan.yaml", "name: mine\n")),
        resume("plan-json-a-dir", "plan.json", lambda root: ((root / "plan" / "plan.json").unlink(),
                                                            (root / "plan" / "plan.json").mkdir())),
        resume("plan-md-a-link", "plan.md", lambda root: ((root / "plan" / "plan.md").unlink(),
                                                         os.symlink("/etc/hostname", root / "plan" / "plan.md"))),
        resume("summary-truncated", "summary.json", _truncate("plan/runs/*/summary.json")),
        resume("summary-a-list", "summary.json", lambda root: _one(root, "plan/runs/*/summary.json").write_text("[]")),
        resume("summary-a-system-link", "summary.json", lambda root: (
            _one(root, "plan/runs/*/summary.json").unlink(),
            os.symlink("/etc/passwd", sorted((root / "plan" / "runs").glob("*"))[0] / "summary.json"))),
        resume("point-truncated", ".parquet", _truncate("plan/points/*.parquet")),
        resume("notes-beside", "notes.txt", _edit_plan("notes.txt", "mine")),
        resume("report-notes", "report", _edit_plan("report/notes.txt", "mine")),
        resume("manifest-garbage", "plan", _edit_plan(".simroute-manifest.json", "{garbage")),
        resume("other-base", "plan", None, "--model", "deepseek-v2-lite"),
        Case("resume-sweep-report-notes", ("sweep", "{d}/s.yaml", "-o", "{d}/study", "-j", "1", "--report"),
             "report", {"s.yaml": _yaml({**STUDY3, "axes": {"policy": ["paper", "always-fetch"]}}),
                        "study/report/notes.txt": "mine"}, needs_study=True),
    ]
    return cases


# -- studies whose host counts or TP cannot be built --------------------------------------------------------
def hosts_cases() -> list[Case]:
    sweep = lambda tag, names, doc: Case(f"hosts-sweep-{tag}", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"),
                                         names, {"s.yaml": _yaml(doc)})
    search = lambda **kw: {**STUDY3, "axes": {}, "search": {"field": "hosts", "goal": "min", "lo": 1, "hi": 4,
                                                            "slo": "p99 ttft_ms <= 500", **kw}}
    return [
        sweep("axis-1e8", "hosts", _set(STUDY3, "axes", {"hosts": [100000000]})),
        sweep("axis-zero", "hosts", _set(STUDY3, "axes", {"hosts": [0, 2]})),
        sweep("axis-fraction", "hosts", _set(STUDY3, "axes", {"hosts": [1.5]})),
        sweep("base-1e8", "hosts", _set(STUDY3, "base.hosts", 100000000)),
        sweep("search-to-1e9", "hosts", search(hi=1000000000)),
        sweep("search-real-valued", "search.integer", search(integer=False)),
        sweep("tp-16-over-hosts", "tp", {**_set(STUDY3, "base.tp", 16), "axes": {"hosts": [2, 4]}}),
        sweep("tp-axis-3", "tp", _set(STUDY3, "axes", {"tp": [8, 3]})),
        sweep("generated-topology-hosts", "hosts", _set(_set(STUDY3, "base.topology", {
            "generate": "fabric-pair", "params": {"fabric": "h100-ibgda"}}), "axes", {"hosts": [2]})),
    ]


def round4_cases() -> list[Case]:
    return (table_cases() + aic_cases() + name_cases() + feasibility_cases() + load_cases() + slo_cases()
            + where_cases() + plan_cases() + hosts_cases())


def plan_fixture(root: Path, main) -> Path:
    """The valid plan the `needs_plan` cases copy: PLAN4 into root/plan."""
    assert main([*PLAN4, "-o", str(root / "plan")]) == 0
    assert json.loads((root / "plan" / "plan.json").read_text())["deployments"]
    return root / "plan"
