"""Round 3 of the bad-input corpus (issue 22): the commands that read or write files beyond run / import /
sweep, and the bounds every input must keep. Same `Case` table and the same assertions as corpus.py: exit 2,
one line naming the file or flag, no traceback, nothing under the case's directory changed.

Classes (the id's first word): `out` output safety (model figures, topo --png, report -o), `report` a damaged
run or study, `step` / `calib` / `flows` / `validate` / `predict` the newer commands' nonsense, `bound`
unbounded work (alias bombs, endless lines, memory), `sweep3` studies that would fail at run time or resume
into another study, `sem` semantics that used to be accepted silently.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import yaml

from corpus import AGENT_DOC, AZURE_HEADER, AZURE_ROW, BURST_HEADER, BURST_ROW, MOONCAKE_LINE, Case, _rewrite, \
    _set, _with_column, _yaml

# The study the `needs_study` fixture sweeps (one point, a few requests): its directory is {d}/study.
STUDY3 = {"name": "tiny3", "base": {"topology": "fattree", "calib": "h100-ibgda",
                                    "trace": {"generate": "corpus", "params": {"requests": 12, "instances": 64}}},
          "axes": {"policy": ["paper"]}, "seeds": 1}


# -- helpers that edit the materialised directory -------------------------------------------------------------
def _truncate(rel: str):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return edit


def _empty(rel: str):
    return lambda root: _one(root, rel).write_bytes(b"")


def _garbage(rel: str):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        data = bytearray(path.read_bytes())
        for k in range(len(data) // 3, min(len(data), len(data) // 3 + 96)):
            data[k] ^= 0x5A
        path.write_bytes(bytes(data))
    return edit


def _remove(rel: str):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        if path.is_dir():
            import shutil
            shutil.rmtree(path)
        else:
            path.unlink()
    return edit


def _dangling(rel: str):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        path.unlink()
        os.symlink(root / "nowhere.parquet", path)
    return edit


def _as_dir(rel: str):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        path.unlink()
        path.mkdir()
    return edit


def _replace_parquet(rel: str, columns: dict[str, list]):
    def edit(root: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table(columns), _one(root, rel))
    return edit


def _column_to(rel: str, column: str, value: Any, rows: int | None = None):
    """Set every value of one column of a Parquet table (added if absent) to `value` (its type follows)."""
    def edit(root: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        path = _one(root, rel)
        table = pq.read_table(path)
        array = pa.array([value] * table.num_rows)
        i = table.schema.get_field_index(column)
        table = table.append_column(column, array) if i < 0 else table.set_column(i, column, array)
        pq.write_table(table, path)
    return edit


def _json_edit(rel: str, fn):
    def edit(root: Path) -> None:
        path = _one(root, rel)
        path.write_text(json.dumps(fn(json.loads(path.read_text()))))
    return edit


def _one(root: Path, rel: str) -> Path:
    """`rel` under root; a `*` picks the first match (a study's point or run key)."""
    if "*" not in rel:
        return root / rel
    return sorted(root.glob(rel))[0]


def _record_all(directory: Path, files: dict[str, str]) -> None:
    """Write files into a folder and list them in its manifest, as simroute's own run would."""
    from simroute.ioutil import record_files
    for name, text in files.items():
        (directory / name).write_text(text)
    record_files(directory, list(files))


def _kinded(directory: Path, kind: str) -> None:
    """A folder as simroute writes one of `kind` (a manifest listing its one file)."""
    directory.mkdir()
    (directory / "summary.json").write_text("{}")
    st = (directory / "summary.json").stat()
    (directory / ".simroute-manifest.json").write_text(json.dumps(
        {"written_by": "simroute", "kind": kind, "files": {"summary.json": [st.st_size, st.st_mtime_ns]}}))


def _link(name: str, target: str):
    return lambda root: os.symlink(root / target, root / name)


def _both(*edits):
    def edit(root: Path) -> None:
        for e in edits:
            e(root)
    return edit


# -- output safety ------------------------------------------------------------------------------------------
FIGURES = {"crossover": ("model", "crossover"), "chunk": ("model", "chunk"), "bandwidth": ("model", "bandwidth")}


def output_cases() -> list[Case]:
    cases = []
    for name, argv in FIGURES.items():
        for ext in ("csv", "png"):
            cases.append(Case(f"out-{name}-user-{ext}", (*argv, "-o", "{d}/figs"), f"{name}.{ext}",
                              {f"figs/{name}.{ext}": "the user's own file", "figs/notes.txt": "keep"}))
        cases.append(Case(f"out-{name}-o-file", (*argv, "-o", "{d}/f.txt"), "f.txt", {"f.txt": "a file"}))
        cases.append(Case(f"out-{name}-o-under-file", (*argv, "-o", "{d}/f.txt/figs"), "f.txt", {"f.txt": "a file"}))
        cases.append(Case(f"out-{name}-csv-is-dir", (*argv, "-o", "{d}/figs"), f"{name}.csv",
                          {f"figs/{name}.csv/inside.txt": "a folder where the CSV goes"}))
    stale = json.dumps({"written_by": "simroute", "files": {"crossover.csv": [3, 1], "crossover.png": [3, 1]}})
    cases += [
        Case("out-crossover-edited-since", ("model", "crossover", "-o", "{d}/figs"), "crossover.csv",
             {"figs/.simroute-manifest.json": stale, "figs/crossover.csv": "edited by the user",
              "figs/crossover.png": "png"}),
        Case("out-crossover-png-symlink", ("model", "crossover", "-o", "{d}/figs"), "crossover.png",
             {"figs/x": None, "mine.png": "the user's picture"}, setup=_link("figs/crossover.png", "mine.png")),
        Case("out-chunk-bad-flag-first", ("model", "chunk", "--bw-gbps", "-3", "-o", "{d}/new/figs"), "bw"),
        Case("out-bandwidth-bad-model", ("model", "bandwidth", "--model", "gpt-9", "-o", "{d}/new/figs"), "gpt-9"),
        Case("out-crossover-bad-calib", ("model", "crossover", "--calib", "{d}/c.yaml", "-o", "{d}/figs"), "c.yaml",
             {"c.yaml": "schema: [unclosed\n"}),
        Case("out-topo-png-user-file", ("topo", "show", "fattree", "--png", "{d}/mine.png"), "mine.png",
             {"mine.png": "the user's picture"}),
        Case("out-topo-png-dir", ("topo", "show", "fattree", "--png", "{d}/pics"), "pics", {"pics/a.png": "x"}),
        Case("out-topo-png-under-file", ("topo", "show", "fattree", "--png", "{d}/f.txt/t.png"), "f.txt",
             {"f.txt": "a file"}),
        Case("out-topo-png-is-input", ("topo", "show", "{d}/t.yaml", "--png", "{d}/t.yaml"), "t.yaml",
             {"t.yaml": (Path(__file__).resolve().parents[2] / "simroute" / "data" / "topologies"
                         / "fattree.yaml").read_text()}),
        Case("out-topo-png-symlink", ("topo", "show", "fattree", "--png", "{d}/t.png"), "t.png",
             {"mine.png": "the user's picture"}, setup=_link("t.png", "mine.png")),
        Case("out-report-into-its-run", ("report", "{d}/run", "-o", "{d}/run"), "run", needs_run=True),
        Case("out-report-into-parent", ("report", "{d}/run", "-o", "{d}"), "--out", needs_run=True),
        Case("out-report-onto-requests", ("report", "{d}/run", "-o", "{d}/run/requests.parquet"),
             "requests.parquet", needs_run=True),
        Case("out-report-user-dir", ("report", "{d}/run", "-o", "{d}/mine"), "mine",
             {"mine/notes.txt": "my notes"}, needs_run=True),
        Case("out-report-o-file", ("report", "{d}/run", "-o", "{d}/f.txt"), "f.txt", {"f.txt": "x"},
             needs_run=True),
        Case("out-report-default-holds-notes", ("report", "{d}/run"), "report",
             {"run/report/notes.txt": "the user's notes"}, needs_run=True),
        Case("out-report-study-into-itself", ("report", "{d}/study", "-o", "{d}/study"), "study", needs_study=True),
        Case("out-report-study-onto-points", ("report", "{d}/study", "-o", "{d}/study/points"), "points",
             needs_study=True),
        Case("out-report-over-another-run", ("report", "{d}/run", "-o", "{d}/other"), "other",
             {"other/.simroute-manifest.json": json.dumps({"written_by": "simroute", "files": {}})}, needs_run=True,
             setup=lambda root: _record_all(root / "other", {"summary.json": "{}", "requests.parquet": "x"})),
        Case("out-run-over-a-trace", ("run", "--max-requests", "3", "-o", "{trace}"), "trace.parquet",
             needs_trace=True),
        Case("out-gen-over-a-run", ("trace", "gen", "corpus", "-p", "requests=5", "-o", "{d}/r.parquet"), "r.parquet",
             setup=lambda root: _kinded(root / "r.parquet", "simroute run")),
        Case("out-report-format", ("report", "{d}/run", "--format", "pdf"), "--format", needs_run=True),
        Case("out-run-timeline-user-file", ("run", "--max-requests", "5", "--timeline", "{d}/tl.json", "-o",
                                            "{d}/out"), "tl.json", {"tl.json": '{"mine": 1}'}),
        Case("out-run-timeline-is-trace", ("run", "--max-requests", "5", "--trace", "{trace}", "--timeline",
                                           "{trace}/requests.parquet", "-o", "{d}/out"), "requests.parquet",
             needs_trace=True),
        Case("out-run-timeline-dir", ("run", "--max-requests", "5", "--timeline", "{d}/tl", "-o", "{d}/out"), "tl",
             {"tl/x": "x"}),
        Case("out-calibrate-user-profile", ("calibrate", "--quick", "--only", "host-shm", "--out", "{d}/p.yaml"),
             "p.yaml", {"p.yaml": "name: my own profile\n"}),
        Case("out-calibrate-user-samples", ("calibrate", "--quick", "--only", "host-shm", "--out", "{d}/m/p.yaml"),
             "samples.parquet", {"m/samples.parquet": "the user's samples"}),
        Case("out-flows-o-exists", ("flows", "replay", "{d}/run", "-t", "fattree", "-o", "{d}/f.parquet"),
             "f.parquet", {"f.parquet": "the user's file"}, needs_run=True),
        Case("out-flows-o-is-input", ("flows", "replay", "{d}/run", "-t", "fattree", "-o",
                                      "{d}/run/net_flows.parquet"), "net_flows.parquet", needs_run=True),
    ]
    return cases


# -- report on a damaged run or study ----------------------------------------------------------------------
def report_cases() -> list[Case]:
    run = lambda tag, setup, names, *extra: Case(f"report-run-{tag}", ("report", "{d}/run", *extra), names,
                                                 needs_run=True, setup=setup)
    study = lambda tag, setup, names, *extra: Case(f"report-study-{tag}", ("report", "{d}/study", *extra), names,
                                                   needs_study=True, setup=setup)
    req = "run/requests.parquet"
    point = "study/points/*.parquet"
    cases = [
        run("requests-truncated", _truncate(req), "requests.parquet"),
        run("requests-empty", _empty(req), "requests.parquet"),
        run("requests-corrupted", _garbage(req), "requests.parquet"),
        run("requests-missing", _remove(req), "requests.parquet"),
        run("requests-dangling", _dangling(req), "requests.parquet"),
        run("requests-is-dir", _as_dir(req), "requests.parquet"),
        run("requests-other-schema", _replace_parquet(req, {"colour": ["red"]}), "requests.parquet"),
        run("links-truncated", _truncate("run/net_links.parquet"), "net_links.parquet"),
        run("links-empty", _empty("run/net_links.parquet"), "net_links.parquet"),
        run("spines-corrupted", _garbage("run/net_spines.parquet"), "net_spines.parquet"),
        run("spines-other-schema", _replace_parquet("run/net_spines.parquet", {"x": [1]}), "net_spines.parquet"),
        run("holders-empty", _empty("run/holders.parquet"), "holders.parquet"),
        run("summary-empty", _empty("run/summary.json"), "summary.json"),
        run("summary-no-bytes", _json_edit("run/summary.json", lambda s: {k: v for k, v in s.items()
                                                                            if k != "bytes"}), "summary.json"),
        run("summary-list", _json_edit("run/summary.json", lambda s: [s]), "summary.json"),
        run("md-requests-truncated", _truncate(req), "requests.parquet", "--format", "md"),
        run("md-requests-missing", _remove(req), "requests.parquet", "--format", "md"),
        study("points-missing", _remove("study/points"), "points"),
        study("point-truncated", _truncate(point), ".parquet"),
        study("point-empty", _empty(point), ".parquet"),
        study("point-other-schema", _replace_parquet(point, {"colour": ["red"]}), ".parquet"),
        study("point-two-rows", _replace_parquet(point, {"key": ["a", "b"], "status": ["ok", "ok"],
                                                         "error": ["", ""], "seed": [0, 0],
                                                         "labels_json": ["{}", "{}"]}), ".parquet"),
        study("points-is-file", _both(_remove("study/points"),
                                      lambda root: (root / "study" / "points").write_text("x")), "points"),
        study("json-list", lambda root: (root / "study" / "study.json").write_text("[]"), "study.json"),
        study("search-object", lambda root: (root / "study" / "search.json").write_text("{}"), "search.json"),
        study("run-links-truncated", _truncate("study/runs/*/net_links.parquet"), "net_links.parquet"),
        study("md-point-corrupted", _garbage(point), ".parquet", "--format", "md"),
        run("requests-zero-rows", lambda root: _rewrite(root / "run", "requests.parquet",
                                                        lambda t: t.slice(0, 0)), "requests.parquet"),
        run("ttft-text", _column_to(req, "ttft_s", "fast"), "ttft_s"),
        run("ttft-infinite", _column_to(req, "ttft_s", float("inf")), "ttft_s"),
        run("status-number", _column_to(req, "status", 1), "status"),
        run("links-utilisation-text", _column_to("run/net_links.parquet", "mean_utilisation", "high"),
            "mean_utilisation"),
        run("spines-flows-text", _column_to("run/net_spines.parquet", "active_flows", "many"), "active_flows"),
        run("iterations-instance-text", _column_to("run/iterations.parquet", "instance", "i0"), "instance"),
        run("holders-work-text", _column_to("run/holders.parquet", "work_s", "lots"), "work_s"),
        run("summary-bytes-text", _json_edit("run/summary.json", lambda s: {**s, "bytes": {**s["bytes"],
                                                                                          "route": "x"}}), "bytes"),
        run("summary-config-empty", _json_edit("run/summary.json", lambda s: {**s, "config": {}}), "config"),
        run("summary-ttft-text", _json_edit("run/summary.json", lambda s: {**s, "ttft_ms": {"p50": "x"}}),
            "ttft_ms"),
        run("summary-network-list", _json_edit("run/summary.json", lambda s: {**s, "network": [1]}), "network"),
        study("labels-not-json", _column_to(point, "labels_json", "{bad"), "labels_json"),
        study("labels-list", _column_to(point, "labels_json", "[1]"), "labels_json"),
        study("metric-text", _column_to(point, "ttft_ms_p99", "x"), "ttft_ms_p99"),
        study("status-unknown", _column_to(point, "status", "maybe"), "status"),
        study("seed-text", _column_to(point, "seed", "0"), "seed"),
        study("slo-unreadable", _json_edit("study/study.json", lambda m: {**m, "slo": ["p99 ttft_ms <= "]}), "slo"),
        study("slo-number", _json_edit("study/study.json", lambda m: {**m, "slo": [5]}), "slo"),
        study("search-entry-number", lambda root: (root / "study" / "search.json").write_text("[1]"), "search.json"),
        study("search-labels-number", lambda root: (root / "study" / "search.json").write_text(json.dumps(
            [{"labels": 1, "field": "x", "status": "ok", "slo": [], "probes": {}}])), "labels"),
        Case("report-a-file", ("report", "{d}/f.txt"), "f.txt", {"f.txt": "not a directory"}),
        Case("report-empty-dir", ("report", "{d}/e"), "e", {"e": None}),
    ]
    return cases


# -- the newer commands ----------------------------------------------------------------------------------
def _gpu_entry(edit) -> str:
    root = Path(__file__).resolve().parents[2] / "simroute" / "data" / "calib" / "gpus" / "h100-sxm.yaml"
    doc = yaml.safe_load(root.read_text())
    edit(doc["gpus"]["h100-sxm"])
    return _yaml(doc)


def _flows_csv(header: str, *rows: str) -> str:
    return header + "\n" + "".join(r + "\n" for r in rows)


def _flows_parquet(columns: dict[str, Any], types: dict[str, str] | None = None):
    def edit(root: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        kinds = {"float": pa.float64(), "str": pa.string(), "int": pa.int64(), "links": pa.list_(pa.int64())}
        schema = pa.schema([(k, kinds[(types or {}).get(k, "float")]) for k in columns])
        pq.write_table(pa.table(columns, schema=schema), root / "f.parquet")
    return edit


def newer_command_cases() -> list[Case]:
    step = lambda tag, names, *args: Case(f"step-{tag}", ("model", "step", *args), names)
    cases = [
        step("tp-not-dividing-heads", "tp", "--tokens", "64", "--tp", "3"),
        step("tp-7-kv-heads", "tp", "--model", "llama-3.1-8b", "--tokens", "64", "--tp", "7"),
        step("tokens-huge", "tokens", "--tokens", "99999999999"),
        step("context-huge", "context", "--tokens", "8", "--decode-seqs", "8", "--context", "1000000000"),
        step("prefill-context-huge", "prefill-context", "--tokens", "8", "--prefill-context", "999999999"),
        step("tokens-zero", "--tokens", "--tokens", "0"),
        step("decode-seqs-above-tokens", "decode-seqs", "--tokens", "8", "--decode-seqs", "9"),
        step("gpu-unknown", "nosuch", "--tokens", "8", "--gpu", "nosuch"),
        step("weights-unknown", "int3", "--tokens", "8", "--weights", "int3"),
        step("kv-cache-unknown", "fp4", "--tokens", "8", "--kv-cache", "fp4"),
        step("kv-layout-unknown", "kv-layout", "--tokens", "8", "--kv-layout", "bogus"),
        step("model-unknown", "gpt-9", "--tokens", "8", "--model", "gpt-9"),
        step("fabric-unknown", "nosuch", "--tokens", "8", "--tp", "2", "--fabric", "nosuch"),
        Case("calib-diff-gpu-unknown", ("calib", "diff", "h100-ibgda", "paper-all", "--gpu", "nosuch"), "--gpu"),
        Case("calib-diff-gpu-empty", ("calib", "diff", "h100-ibgda", "paper-all", "--gpu", ""), "--gpu"),
        Case("calib-diff-gpu-absent-from-one", ("calib", "diff", "h100-ibgda", "paper-all", "--gpu", "a40"), "--gpu"),
        Case("calib-diff-missing-profile", ("calib", "diff", "h100-ibgda", "{d}/none.yaml"), "none.yaml"),
        Case("calib-diff-tables-not-tables", ("calib", "diff", "{d}/e", "{d}/e", "--tables"), "e", {"e": None}),
        Case("calib-curve-negative-x", ("calib", "validate", "{d}/p.yaml"), "p.yaml", {"p.yaml": _yaml({
            "schema": "simroute.calib/1", "name": "p", "description": "t", "constants": {"merge_us": {
                "points": [[-4, 1.0], [2, 2.0]], "x": "chunk_tokens", "unit": "us",
                "provenance": {"kind": "paper", "ref": "§4.2"}}}})}),
        Case("calib-efficiency-negative-x", ("calib", "validate", "{d}/g.yaml"), "g.yaml", {"g.yaml": _gpu_entry(
            lambda e: e["gemm_efficiency"].update(points=[[-256, 0.5], [512, 0.7]]))}),
        Case("calib-efficiency-zero-x", ("calib", "validate", "{d}/g.yaml"), "g.yaml", {"g.yaml": _gpu_entry(
            lambda e: e["gemm_efficiency"].update(points=[[0, 0.5], [512, 0.7]]))}),
        Case("calib-efficiency-above-one", ("calib", "validate", "{d}/g.yaml"), "g.yaml", {"g.yaml": _gpu_entry(
            lambda e: e["hbm_efficiency"].update(value=1.5))}),
        Case("step-calib-efficiency-negative-x", ("model", "step", "--tokens", "8", "--calib", "{d}/g.yaml",
                                                  "--gpu", "h100-sxm"), "g.yaml", {"g.yaml": _gpu_entry(
            lambda e: e["gemm_efficiency"].update(points=[[-256, 0.5], [512, 0.7]]))}),
    ]
    flows = lambda tag, text, names="f.csv", *extra: Case(
        f"flows-{tag}", ("flows", "replay", "{d}/f.csv", "-t", "fattree", *extra), names, {"f.csv": text})
    pair = "start_s,nbytes,src,dst"
    cases += [
        flows("path-index-past", _flows_csv(pair + ",path_index", "0,1000,h0.g0,h1.g0,999"), "path_index"),
        flows("path-index-negative", _flows_csv(pair + ",path_index", "0,1000,h0.g0,h1.g0,-1"), "path_index"),
        flows("path-index-null", _flows_csv(pair + ",path_index", "0,1000,h0.g0,h1.g0,"), "path_index"),
        flows("self-flow", _flows_csv(pair, "0,1000,h0.g0,h0.g0"), "src/dst"),
        flows("unknown-gpu", _flows_csv(pair, "0,1000,h0.g0,h99.g0"), "h99.g0"),
        flows("nbytes-text", _flows_csv(pair, "0,many,h0.g0,h1.g0"), "nbytes"),
        flows("start-null", _flows_csv(pair, ",1000,h0.g0,h1.g0"), "start_s"),
        flows("start-nan", _flows_csv(pair, "nan,1000,h0.g0,h1.g0"), "start_s"),
        flows("start-1e300", _flows_csv(pair, "1e300,1000,h0.g0,h1.g0"), "start_s"),
        flows("nbytes-negative", _flows_csv(pair, "0,-5,h0.g0,h1.g0"), "nbytes"),
        flows("nbytes-1e300", _flows_csv(pair, "0,1e300,h0.g0,h1.g0"), "nbytes"),
        flows("rate-cap-negative", _flows_csv(pair + ",rate_cap_Bps", "0,1000,h0.g0,h1.g0,-1"), "rate_cap_Bps"),
        flows("delay-negative", _flows_csv(pair + ",delay_s", "0,1000,h0.g0,h1.g0,-1"), "delay_s"),
        flows("no-rows", _flows_csv(pair)),
        flows("link-out-of-range", _flows_csv("start_s,nbytes,links", "0,1000,99999"), "links"),
        flows("link-repeated", _flows_csv("start_s,nbytes,links", "0,1000,1 1"), "links"),
        flows("link-text", _flows_csv("start_s,nbytes,links", "0,1000,up"), "links"),
        flows("no-links", _flows_csv("start_s,nbytes,links", "0,1000,"), "links"),
        flows("no-dst", _flows_csv("start_s,nbytes,src", "0,1000,h0.g0"), "links"),
        flows("no-nbytes", _flows_csv("start_s,src,dst", "0,h0.g0,h1.g0"), "nbytes"),
        flows("binary", bytes(range(256)) * 4),
        flows("seed-negative", _flows_csv(pair, "0,1000,h0.g0,h1.g0"), "--seed", "--seed", "-1"),
        flows("backend-unknown", _flows_csv(pair, "0,1000,h0.g0,h1.g0"), "warp", "--backend", "warp"),
        flows("topology-missing", _flows_csv(pair, "0,1000,h0.g0,h1.g0"), "none.yaml", "-t", "{d}/none.yaml"),
    ]
    pq_case = lambda tag, columns, names, types=None: Case(
        f"flows-parquet-{tag}", ("flows", "replay", "{d}/f.parquet", "-t", "fattree"), names,
        setup=_flows_parquet(columns, types))
    cases += [
        pq_case("start-text", {"start_s": ["0"], "nbytes": [1.0], "src": ["h0.g0"], "dst": ["h1.g0"]}, "start_s",
                {"start_s": "str", "src": "str", "dst": "str"}),
        pq_case("start-null", {"start_s": [0.0, None], "nbytes": [1.0, 2.0], "src": ["h0.g0"] * 2,
                               "dst": ["h1.g0"] * 2}, "start_s", {"src": "str", "dst": "str"}),
        pq_case("src-null", {"start_s": [0.0], "nbytes": [1.0], "src": [None], "dst": ["h1.g0"]}, "src",
                {"src": "str", "dst": "str"}),
        pq_case("path-index-null", {"start_s": [0.0], "nbytes": [1.0], "src": ["h0.g0"], "dst": ["h1.g0"],
                                    "path_index": [None]}, "path_index",
                {"src": "str", "dst": "str", "path_index": "int"}),
        pq_case("links-null", {"start_s": [0.0], "nbytes": [1.0], "links": [None]}, "links", {"links": "links"}),
        pq_case("links-null-entry", {"start_s": [0.0], "nbytes": [1.0], "links": [[1, None]]}, "links",
                {"links": "links"}),
        Case("flows-dir-without-flows", ("flows", "replay", "{d}/e", "-t", "fattree"), "e", {"e/x.txt": "x"}),
        Case("flows-missing", ("flows", "replay", "{d}/none.csv", "-t", "fattree"), "none.csv"),
    ]
    cases += [
        Case("validate-only-empty", ("validate", "--only", ""), "--only"),
        Case("validate-only-commas", ("validate", "--only", ",,"), "--only"),
        Case("validate-only-unknown", ("validate", "--only", "table1,nosuch"), "nosuch"),
        Case("validate-ark-qps-text", ("validate", "--only", "table1", "--ark", "--ark-qps", "5,abc"), "--ark-qps"),
        Case("validate-ark-qps-negative", ("validate", "--only", "table1", "--ark-qps", "-5"), "--ark-qps"),
        Case("validate-ark-qps-nan", ("validate", "--only", "table1", "--ark-qps", "nan"), "--ark-qps"),
        Case("validate-ark-qps-empty", ("validate", "--only", "table1", "--ark-qps", ""), "--ark-qps"),
        Case("validate-ark-duration-nan", ("validate", "--only", "table1", "--ark-duration", "nan"),
             "--ark-duration"),
        Case("validate-ark-duration-negative", ("validate", "--only", "table1", "--ark-duration", "-1"),
             "--ark-duration"),
        Case("validate-ark-duration-huge", ("validate", "--only", "table1", "--ark-duration", "1e12"),
             "--ark-duration"),
        Case("validate-seed-negative", ("validate", "--only", "table1", "--seed", "-1"), "--seed"),
        Case("predict-topk-above-ct", ("predict", "--topk", "5000", "--ct", "2048"), "--topk"),
        Case("predict-ct-zero", ("predict", "--ct", "0"), "--ct"),
        Case("predict-prefill-nan", ("predict", "--prefill-us", "nan"), "--prefill-us"),
    ]
    return cases


# -- unbounded work ----------------------------------------------------------------------------------------
def _alias_bomb(levels: int = 7, width: int = 10) -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _agents_config(**params: Any) -> str:
    return _yaml({"kind": "agents", "params": params})


LONG_LINE = 65 << 20           # past the importers' 64 MiB line cap


def bound_cases() -> list[Case]:
    bomb = _alias_bomb()
    nested_bomb = "name: t\nhosts: &h {count: 2, gpus_per_host: 2}\n" + _alias_bomb()
    cases = [
        Case("bound-topo-alias-bomb", ("topo", "show", "{d}/t.yaml"), "t.yaml", {"t.yaml": bomb}),
        Case("bound-topo-alias-bomb-keys", ("topo", "show", "{d}/t.yaml"), "t.yaml", {"t.yaml": nested_bomb}),
        Case("bound-calib-alias-bomb", ("calib", "validate", "{d}/p.yaml"), "p.yaml", {"p.yaml": bomb}),
        Case("bound-calib-show-alias-bomb", ("calib", "show", "{d}/p.yaml"), "p.yaml", {"p.yaml": bomb}),
        Case("bound-study-alias-bomb", ("sweep", "{d}/s.yaml", "-o", "{d}/out"), "s.yaml", {"s.yaml": bomb}),
        Case("bound-gen-config-alias-bomb", ("trace", "gen", "corpus", "--config", "{d}/c.yaml", "-o",
                                             "{d}/g.parquet"), "c.yaml", {"c.yaml": bomb}),
        Case("bound-run-calib-alias-bomb", ("run", "--calib", "{d}/p.yaml", "-o", "{d}/out"), "p.yaml",
             {"p.yaml": bomb}),
        Case("bound-run-topology-alias-bomb", ("run", "--topology", "{d}/t.yaml", "-o", "{d}/out"), "t.yaml",
             {"t.yaml": bomb}),
        Case("bound-step-calib-alias-bomb", ("model", "step", "--tokens", "8", "--calib", "{d}/p.yaml"), "p.yaml",
             {"p.yaml": bomb}),
        Case("bound-mooncake-endless-line", ("trace", "import", "mooncake", "{d}/m.jsonl", "-o", "{d}/o.parquet"),
             "m.jsonl", {"m.jsonl": json.dumps(MOONCAKE_LINE) + "\n" + '{"timestamp": 1, "pad": "'
                         + "x" * LONG_LINE + '"}\n'}),
        Case("bound-azure-endless-line", ("trace", "import", "azure", "{d}/t.csv", "-o", "{d}/o.parquet"), "t.csv",
             {"t.csv": AZURE_HEADER + AZURE_ROW + "9" * LONG_LINE + ",1,1\n"}),
        Case("bound-agent-file-huge", ("trace", "import", "agent", "{d}/a.json", "-o", "{d}/o.parquet"), "a.json",
             {"a.json": json.dumps(AGENT_DOC)}, setup=lambda root: os.truncate(root / "a.json", 65 << 20)),
        Case("bound-gen-corpus-references", ("trace", "gen", "corpus", "-p", "requests=50000000", "-p",
                                             "max_chunks_per_request=2147483647", "-p", "chunks_per_request=1000000",
                                             "-o", "{d}/g.parquet"), "corpus"),
        Case("bound-gen-sparse-references", ("trace", "gen", "sparse", "-p", "requests=50000000", "-p", "holders=1000",
                                             "-p", "spanned=1000", "-p", "chunks_per_holder=100", "-p",
                                             "chunks_per_holder_request=100", "-o", "{d}/g.parquet"), "sparse"),
        Case("bound-gen-agents-references", ("trace", "gen", "agents", "-p", "documents=100", "-p", "subagents=100",
                                             "-p", "requests_per_agent=40", "-p", "doc_tokens=100000", "-p",
                                             "chunk_tokens=128", "-o", "{d}/g.parquet"), "agents"),
        Case("bound-gen-config-agents-memory", ("trace", "gen", "agents", "--config", "{d}/c.yaml", "-o",
                                                "{d}/g.parquet"), "c.yaml",
             {"c.yaml": _agents_config(documents=1000, subagents=1000, requests_per_agent=40,
                                       doc_tokens=1000000, chunk_tokens=128)}),
        Case("bound-study-agents-memory", ("sweep", "{d}/s.yaml", "-o", "{d}/out"), "s.yaml",
             {"s.yaml": _yaml(_set(STUDY3, "base.trace", {"generate": "agents", "params": {
                 "documents": 1000, "subagents": 1000, "requests_per_agent": 40, "doc_tokens": 1000000,
                 "chunk_tokens": 128}}))}),
    ]
    return cases


# -- studies that would fail at run time, or resume into another study ------------------------------------
def study_runtime_cases() -> list[Case]:
    other = {"written_by": "simroute", "kind": "study", "name": "tiny3", "base": "0123456789abcdef"}
    return [
        Case("sweep3-base-model-unknown", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "gpt-9",
             {"s.yaml": _yaml(_set(STUDY3, "base.model", "gpt-9"))}),
        Case("sweep3-axis-model-unknown", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "gpt-9",
             {"s.yaml": _yaml(_set(STUDY3, "axes", {"model": ["deepseek-v2-lite", "gpt-9"]}))}),
        Case("sweep3-same-name-other-base", ("sweep", "{d}/s.yaml", "-o", "{d}/old", "-j", "1"), "old",
             {"s.yaml": _yaml(STUDY3), "old/.simroute-manifest.json": json.dumps(other),
              "old/study.json": '{"name": "tiny3"}'}),
        Case("sweep3-resumes-a-different-base", ("sweep", "{d}/s.yaml", "-o", "{d}/study", "-j", "1"), "study",
             {"s.yaml": _yaml(_set(STUDY3, "base.trace.params.requests", 13))}, needs_study=True),
        Case("sweep3-resume-point-corrupted", ("sweep", "{d}/s.yaml", "-o", "{d}/study", "-j", "1"), ".parquet",
             {"s.yaml": _yaml(STUDY3)}, needs_study=True, setup=_truncate("study/points/*.parquet")),
        Case("sweep3-trace-zero-rows", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "requests.parquet",
             {"s.yaml": _yaml(_set(STUDY3, "base.trace", "trace.parquet"))}, needs_trace=True, damage=_zero_rows),
        Case("sweep3-trace-truncated", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "requests.parquet",
             {"s.yaml": _yaml(_set(STUDY3, "base.trace", "trace.parquet"))}, needs_trace=True,
             damage=lambda t: (t / "requests.parquet").write_bytes(b"PAR1")),
        Case("sweep3-topology-file-bad", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "t.yaml",
             {"s.yaml": _yaml(_set(STUDY3, "base.topology", "t.yaml")), "t.yaml": "hosts: [unclosed\n"}),
        Case("sweep3-calib-file-bomb", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "p.yaml",
             {"s.yaml": _yaml(_set(STUDY3, "base.calib", "p.yaml")), "p.yaml": _alias_bomb()}),
        Case("sweep3-token-budget-below-chunk", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "prefill_chunk",
             {"s.yaml": _yaml(_set(_set(STUDY3, "base.token_budget", 512), "base.prefill_chunk", 2048))}),
        Case("sweep3-max-requests-zero", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1"), "max_requests",
             {"s.yaml": _yaml(_set(STUDY3, "base.max_requests", 0))}),
    ]


# -- semantics that used to pass silently --------------------------------------------------------------------
def _agent_file(doc: dict) -> str:
    return json.dumps(doc)


def _agent(tag: str, doc: Any, names: str = "a.json", extra_files: dict | None = None,
           inputs: tuple[str, ...] = ("{d}/a.json",)) -> Case:
    files = {"a.json": doc if isinstance(doc, str) else json.dumps(doc), **(extra_files or {})}
    return Case(f"sem-agent-{tag}", ("trace", "import", "agent", *inputs, "-o", "{d}/o.parquet"), names, files)


def _requests_edit(name: str, fn, nullable: bool = False):
    """A trace damage (corpus.TRACE_DAMAGE style): rewrite one requests column with fn(row, value)."""
    import pyarrow as pa

    def values(col):
        return pa.array([fn(i, v) for i, v in enumerate(col.to_pylist())], type=col.type)
    return lambda t: _rewrite(t, "requests.parquet", _with_column(name, values, nullable))


def _chunks_edit(name: str, fn):
    import pyarrow as pa

    def values(col):
        return pa.array([fn(i, v) for i, v in enumerate(col.to_pylist())], type=col.type)
    return lambda t: _rewrite(t, "chunks.parquet", _with_column(name, values))


def _zero_rows(trace) -> None:
    _rewrite(trace, "requests.parquet", lambda table: table.slice(0, 0))


def _string_edit(file: str, name: str, value: str):
    """Replace a (dictionary-encoded) string column of the trace with plain strings, the first set to value."""
    import pyarrow as pa

    def edit(table):
        i = table.schema.get_field_index(name)
        col = table.column(name).cast(pa.string()).to_pylist()
        col[0] = value
        field = table.schema.field(i)
        return table.set_column(i, field.with_type(pa.string()), pa.array(col, pa.string()))
    return lambda t: _rewrite(t, file, edit)


def semantics_cases() -> list[Case]:
    d = AGENT_DOC
    other = copy.deepcopy(d)
    cases = [
        _agent("same-file-twice", d, inputs=("{d}/a.json", "{d}/a.json")),
        _agent("same-id-two-files", d, "b.json", {"b.json": json.dumps(other)}, inputs=("{d}/a.json", "{d}/b.json")),
        _agent("id-null", {**d, "id": None}, "id"),
        _agent("id-empty", {**d, "id": ""}, "id"),
        _agent("id-number", {**d, "id": 7}, "id"),
        _agent("id-control", {**d, "id": "a\x00b"}, "id"),
        _agent("in-zero", _set(d, "requests.0", {**d["requests"][0], "in": 0, "hash_ids": []}), "in"),
        _agent("type-unknown", _set(d, "requests.1.type", "x"), "type"),
        _agent("type-null", _set(d, "requests.1.type", None), "type"),
        _agent("t-1e300", _set(d, "requests.1.t", 1e300), "requests[1].t"),
        _agent("think-1e300", _set(d, "requests.1.think_time", 1e300), "think_time"),
        _agent("api-1e300", _set(d, "requests.0.api_time", 1e300), "api_time"),
        Case("sem-mooncake-zero-tokens", ("trace", "import", "mooncake", "{d}/m.jsonl", "-o", "{d}/o.parquet"),
             "m.jsonl", {"m.jsonl": json.dumps({**MOONCAKE_LINE, "input_length": 0, "hash_ids": []}) + "\n"}),
        Case("sem-mooncake-ts-1e300", ("trace", "import", "mooncake", "{d}/m.jsonl", "-o", "{d}/o.parquet"),
             "m.jsonl", {"m.jsonl": json.dumps(MOONCAKE_LINE) + "\n"
                         + json.dumps({**MOONCAKE_LINE, "timestamp": 1e300}) + "\n"}),
        Case("sem-azure-zero-tokens", ("trace", "import", "azure", "{d}/t.csv", "-o", "{d}/o.parquet"), "t.csv",
             {"t.csv": AZURE_HEADER + AZURE_ROW.replace("4808", "0")}),
        Case("sem-azure-header-twice", ("trace", "import", "azure", "{d}/t.csv", "-o", "{d}/o.parquet"), "t.csv",
             {"t.csv": "TIMESTAMP,ContextTokens,context_tokens,GeneratedTokens\n2023-11-16 18:17:03,4808,1,10\n"}),
        Case("sem-burstgpt-zero-tokens", ("trace", "import", "burstgpt", "{d}/t.csv", "-o", "{d}/o.parquet"),
             "t.csv", {"t.csv": BURST_HEADER + BURST_ROW.replace("472", "0")}),
        Case("sem-burstgpt-ts-1e300", ("trace", "import", "burstgpt", "{d}/t.csv", "-o", "{d}/o.parquet"), "t.csv",
             {"t.csv": BURST_HEADER + BURST_ROW.replace("5,", "1e300,", 1)}),
        Case("sem-burstgpt-header-twice", ("trace", "import", "burstgpt", "{d}/t.csv", "-o", "{d}/o.parquet"),
             "t.csv", {"t.csv": BURST_HEADER.rstrip("\n") + ",Request tokens\n" + BURST_ROW.rstrip("\n") + ",9\n"}),
    ]
    damage = [
        ("zero-rows", _zero_rows, "requests.parquet"),
        ("zero-token-requests", _both_trace(
            _requests_edit("prompt_tokens", lambda i, v: 0),
            _requests_edit("chunk_ids", lambda i, v: []),
            _requests_edit("chunk_at_cached_offset", lambda i, v: [])), "prompt_tokens"),
        ("arrival-1e300", _requests_edit("arrival_s", lambda i, v: 1e300 if i == 39 else v), "arrival_s"),
        ("think-1e300", _requests_edit("think_s", lambda i, v: 1e300 if i == 3 else v), "think_s"),
        ("nul-in-tenant", _string_edit("requests.parquet", "tenant", "ten\x00ant"), "tenant"),
        ("nul-in-corpus", _string_edit("chunks.parquet", "corpus", "cor\x00pus"), "corpus"),
    ]
    for tag, edit, names in damage:
        cases.append(Case(f"sem-trace-info-{tag}", ("trace", "info", "{trace}"), names, damage=edit,
                          needs_trace=True))
        cases.append(Case(f"sem-run-trace-{tag}", ("run", "--trace", "{trace}", "-o", "{d}/out"), names,
                          damage=edit, needs_trace=True))
    for kind, name in (("corpus", "prefix_sigma"), ("sparse", "prompt_sigma"), ("disagg", "output_sigma")):
        cases.append(Case(f"sem-gen-{kind}-{name}-negative", ("trace", "gen", kind, "-p", f"{name}=-1", "-o",
                                                               "{d}/g.parquet"), name))
    run = lambda tag, names, *args: Case(f"sem-run-{tag}", ("run", *args, "-o", "{d}/out"), names)
    cases += [
        run("max-requests-zero", "max", "--max-requests", "0"),
        run("decode-steps-1e12", "decode", "--max-requests", "5", "--decode-steps-per-event", "1000000000000"),
        run("decode-steps-float", "decode", "--max-requests", "5", "--decode-steps-per-event", "1e12"),
        run("budget-below-chunk", "prefill_chunk", "--max-requests", "5", "--token-budget", "512",
            "--prefill-chunk", "2048"),
        run("token-budget-zero", "token", "--max-requests", "5", "--token-budget", "0"),
    ]
    return cases


def _both_trace(*edits):
    def edit(trace) -> None:
        for e in edits:
            e(trace)
    return edit


LONG = "n" * 300            # past any file system's 255-byte name


def path_cases() -> list[Case]:
    """Paths the file system cannot take (too long, a symlink loop): one line, exit 2, like any bad input."""
    loop = _both(lambda root: os.symlink(root / "loop2", root / "loop1"),
                 lambda root: os.symlink(root / "loop1", root / "loop2"))
    return [
        Case("path-run-o-too-long", ("run", "--max-requests", "3", "-o", f"{{d}}/{LONG}"), LONG),
        Case("path-crossover-o-too-long", ("model", "crossover", "-o", f"{{d}}/{LONG}"), LONG),
        Case("path-png-too-long", ("topo", "show", "fattree", "--png", f"{{d}}/{LONG}.png"), LONG),
        Case("path-gen-o-too-long", ("trace", "gen", "corpus", "-o", f"{{d}}/{LONG}.parquet"), LONG),
        Case("path-topology-too-long", ("topo", "show", f"{{d}}/{LONG}.yaml"), LONG),
        Case("path-trace-too-long", ("trace", "info", f"{{d}}/{LONG}.parquet"), LONG),
        Case("path-report-too-long", ("report", f"{{d}}/{LONG}"), LONG),
        Case("path-topology-loop", ("topo", "show", "{d}/loop1"), "loop1", setup=loop),
        Case("path-run-o-loop", ("run", "--max-requests", "3", "-o", "{d}/loop1/out"), "loop1", setup=loop),
        Case("path-trace-loop", ("trace", "info", "{d}/loop1"), "loop1", setup=loop),
    ]


def round3_cases() -> list[Case]:
    return (output_cases() + report_cases() + newer_command_cases() + bound_cases() + study_runtime_cases()
            + semantics_cases() + path_cases())
