"""The bad-input corpus: one table of malformed inputs and command lines, each a `Case`.

Every case writes its input files into a fresh directory, runs one command line in-process, and the test
(test_corpus.py) asserts: exit 2, one line on stderr, no traceback and no "internal error", the named file or
flag in that line, and every byte under the directory unchanged (so no output was written, replaced or
damaged). `{d}` in an argument is that directory; `{trace}` a valid small simroute trace copied into it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import simroute


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    names: str                                       # what the error line must name (a file or a flag)
    files: dict[str, bytes | str | None] = field(default_factory=dict)   # None: an (empty) directory
    damage: Callable[[Any], None] | None = None      # edits the copied {trace} (Parquet damage)
    needs_trace: bool = False
    pending: str = ""                                # the owner whose file must still change (xfail until then)
    needs_run: bool = False                          # a valid small run copied to {d}/run
    needs_study: bool = False                        # a valid one-point study (STUDY3) copied to {d}/study
    setup: Callable[[Path], None] | None = None      # edits the materialised directory (damage, links)
    needs_plan: bool = False                         # a valid small plan (corpus_round4.PLAN4) copied to {d}/plan


def _yaml(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def _set(doc: dict, dotted: str, value: Any) -> dict:
    """A deep copy of `doc` with `dotted` set (value `DELETE` removes the key)."""
    out = copy.deepcopy(doc)
    cur = out
    parts = dotted.split(".")
    for p in parts[:-1]:
        cur = cur[int(p)] if isinstance(cur, list) else cur[p]
    last = parts[-1]
    if value is DELETE:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return out


DELETE = object()
NAN, INF = float("nan"), float("inf")

# Values no numeric field may take: NaN, inf, a bool, a numeric string, null, a list.
BAD_NUMBERS: list[tuple[str, Any]] = [("nan", NAN), ("inf", INF), ("bool", True), ("str", "8"), ("null", None),
                                      ("list", [1])]

# -- file-level damage every text format gets ----------------------------------------------------------------
RAW_DAMAGE: list[tuple[str, bytes | None]] = [
    ("latin1", "name: caf\xe9\n".encode("latin-1")),
    ("binary", bytes(range(256)) * 4),
    ("nul", b"name: x\x00\n"),
    ("empty", b""),
    ("dir", None),
]

# -- topologies ----------------------------------------------------------------------------------------------
TOPOLOGY = {
    "name": "t", "description": "test",
    "hosts": {"count": 2, "gpus_per_host": 2, "gpu": "h100",
              "intra": {"kind": "nvswitch", "link_GBps": 450, "latency_us": 0.7, "fabric": "h100-nvlink4"}},
    "nic": {"per": "gpu", "rate_GBps": 50, "latency_us": 1.0, "fabric": "h100-ibgda"},
    "network": {"tiers": 2, "hosts_per_leaf": 2, "spines": 2, "oversubscription": 1.0, "latency_us": 0.6},
}
TOPO_NUMBERS = ["hosts.count", "hosts.gpus_per_host", "hosts.intra.link_GBps", "nic.rate_GBps",
                "network.spines", "network.latency_us"]


def topology_cases() -> list[Case]:
    cases = []
    for path in TOPO_NUMBERS:
        for tag, value in BAD_NUMBERS[:4]:
            cases.append(Case(f"topo-{path}-{tag}", ("topo", "show", "{d}/t.yaml"), "t.yaml",
                              {"t.yaml": _yaml(_set(TOPOLOGY, path, value))}))
    for tag, path, value in [("count-huge", "hosts.count", 100_000_000), ("count-zero", "hosts.count", 0),
                             ("count-float", "hosts.count", 2.0), ("rate-neg", "nic.rate_GBps", -1),
                             ("k-huge", "network.k", 10_000), ("unknown-key", "hosts.colour", "red"),
                             ("no-nic", "nic", DELETE), ("tiers-4", "network.tiers", 4),
                             ("kind-bad", "hosts.intra.kind", "ethernet"), ("gpus-65", "hosts.gpus_per_host", 65),
                             ("spines-huge", "network.spines", 10**6), ("name-int", "name", 5)]:
        cases.append(Case(f"topo-{tag}", ("topo", "show", "{d}/t.yaml"), "t.yaml",
                          {"t.yaml": _yaml(_set(TOPOLOGY, path, value))}))
    for tag, raw in RAW_DAMAGE + [("list", b"- 1\n- 2\n"), ("nested", b"[" * 5000 + b"]" * 5000),
                                  ("syntax", b"name: [unclosed\n")]:
        cases.append(Case(f"topo-raw-{tag}", ("topo", "show", "{d}/t.yaml"), "t.yaml", {"t.yaml": raw}))
    cases.append(Case("topo-missing", ("topo", "show", "{d}/none.yaml"), "none.yaml"))
    cases.append(Case("run-topology-nan", ("run", "--topology", "{d}/t.yaml", "-o", "{d}/out"), "t.yaml",
                      {"t.yaml": _yaml(_set(TOPOLOGY, "nic.rate_GBps", NAN))}))
    return cases


# -- calibration profiles ------------------------------------------------------------------------------------
def _profile(constant: dict) -> dict:
    return {"schema": "simroute.calib/1", "name": "p", "description": "test",
            "constants": {"merge_us": constant}}


GOOD_CONSTANT = {"value": 25, "unit": "us", "provenance": {"kind": "paper", "ref": "§4.2"}}


def profile_cases() -> list[Case]:
    cases = []
    for tag, value in BAD_NUMBERS[:4] + [("neg", -1)]:
        cases.append(Case(f"calib-value-{tag}", ("calib", "validate", "{d}/p.yaml"), "p.yaml",
                          {"p.yaml": _yaml(_profile({**GOOD_CONSTANT, "value": value}))}))
    for tag, pts in [("nan-x", [[NAN, 1.0]]), ("inf-y", [[1, INF]]), ("str", [["1", 2]]), ("bool", [[True, 2]]),
                     ("triple", [[1, 2, 3]]), ("unsorted", [[2, 1], [1, 1]]), ("empty", [])]:
        c = {k: v for k, v in GOOD_CONSTANT.items() if k != "value"}
        cases.append(Case(f"calib-points-{tag}", ("calib", "validate", "{d}/p.yaml"), "p.yaml",
                          {"p.yaml": _yaml(_profile({**c, "points": pts, "x": "chunk_tokens"}))}))
    for tag, const in [("range-nan", {**GOOD_CONSTANT, "range": [NAN, 1]}),
                       ("range-str", {**GOOD_CONSTANT, "range": ["a", "b"]}),
                       ("prov-kind", {**GOOD_CONSTANT, "provenance": {"kind": "rumour"}}),
                       ("prov-paper-noref", {**GOOD_CONSTANT, "provenance": {"kind": "paper"}}),
                       ("prov-measured-nobox", {**GOOD_CONSTANT, "provenance": {"kind": "measured"}}),
                       ("no-prov", {"value": 1}), ("unknown-key", {**GOOD_CONSTANT, "colour": 1}),
                       ("both", {**GOOD_CONSTANT, "points": [[1, 1]]})]:
        cases.append(Case(f"calib-{tag}", ("calib", "validate", "{d}/p.yaml"), "p.yaml",
                          {"p.yaml": _yaml(_profile(const))}))
    for tag, raw in RAW_DAMAGE:
        cases.append(Case(f"calib-raw-{tag}", ("calib", "validate", "{d}/p.yaml"), "p.yaml", {"p.yaml": raw}))
    cases.append(Case("calib-show-binary", ("calib", "show", "{d}/p.yaml"), "p.yaml", {"p.yaml": b"\x00\xff" * 9}))
    cases.append(Case("calib-schema-version", ("calib", "validate", "{d}/p.yaml"), "p.yaml",
                      {"p.yaml": _yaml({**_profile(GOOD_CONSTANT), "schema": "simroute.calib/9"})}))
    return cases


# -- studies ---------------------------------------------------------------------------------------------------
STUDY = {"name": "tiny", "base": {"topology": "fattree", "calib": "h100-ibgda",
                                  "trace": {"generate": "corpus", "params": {"requests": 20, "instances": 64}}},
         "axes": {"policy": ["paper", "always-fetch"]}, "seeds": 1, "slo": "p99 ttft_ms <= 60"}
SEARCH = {"field": "trace.params.qps", "lo": 1, "hi": 10, "slo": "p99 ttft_ms <= 60"}


def _sweep(doc: Any, tag: str, names: str = "s.yaml", extra: tuple[str, ...] = ()) -> Case:
    text = doc if isinstance(doc, (str, bytes)) else _yaml(doc)
    return Case(f"study-{tag}", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "1", *extra), names, {"s.yaml": text})


def study_cases() -> list[Case]:
    cases = [
        _sweep(_set(STUDY, "seeds", 100_000_000_000), "seeds-huge"),
        _sweep(_set(STUDY, "seeds", "1e11"), "seeds-str"),
        _sweep(_set(STUDY, "seeds", True), "seeds-bool"),
        _sweep(_set(STUDY, "seeds", -1), "seeds-neg"),
        _sweep(_set(STUDY, "seeds", [1, 1]), "seeds-repeat"),
        _sweep(_set(STUDY, "seeds", [1.5]), "seeds-float"),
        _sweep(_set(STUDY, "name", "../escape"), "name-path"),
        _sweep(_set(STUDY, "colour", 1), "unknown-key"),
        _sweep(_set(STUDY, "base.seed", 3), "base-seed"),
        _sweep(_set(STUDY, "base.nonsense", 3), "base-field"),
        _sweep(_set(STUDY, "axes.policy", []), "axis-empty"),
        _sweep(_set(STUDY, "axes.policy", ["magic"]), "axis-unknown-policy"),
        _sweep(_set(STUDY, "axes.policy", "paper"), "axis-not-list"),
        _sweep(_set(STUDY, "axes", {"trace.params.requests": list(range(400)), "seed_x": [1]}), "axis-bad-field"),
        _sweep(_set(STUDY, "axes", {"trace.params.requests": list(range(1, 1001)),
                                    "trace.params.qps": list(range(1, 1001))}), "grid-huge"),
        _sweep(_set(STUDY, "slo", "p99 ttft <= 5"), "slo-metric"),
        _sweep(_set(STUDY, "slo", "p99 ttft_ms <= nan"), "slo-nan"),
        _sweep(_set(STUDY, "keep", "everything"), "keep-bad"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "params": {"requests": "20"}}), "gen-numeric-str"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "params": {"qps": NAN}}), "gen-nan"),
        _sweep(_set(STUDY, "base.trace", {"generate": "nosuch"}), "gen-unknown"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "seed": "x"}), "gen-seed-str"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "seed": NAN}), "gen-seed-nan"),
        _sweep(_set(STUDY, "base.trace", {"generate": ["corpus"]}), "gen-name-list"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "params": [1]}), "gen-params-list"),
        _sweep(_set(STUDY, "base.topology", "no-such-topology"), "topology-missing"),
        _sweep({**STUDY, "search": {**SEARCH, "tolerance": NAN}}, "search-tol-nan"),
        _sweep({**STUDY, "search": {**SEARCH, "tolerance": 0}}, "search-tol-zero"),
        _sweep({**STUDY, "search": {**SEARCH, "lo": INF}}, "search-lo-inf"),
        _sweep({**STUDY, "search": {**SEARCH, "lo": "1"}}, "search-lo-str"),
        _sweep({**STUDY, "search": {**SEARCH, "hi": 0}}, "search-hi-below-lo"),
        _sweep({**STUDY, "search": {**SEARCH, "integer": "yes"}}, "search-integer-str"),
        _sweep({**STUDY, "search": {**SEARCH, "goal": "median"}}, "search-goal"),
        _sweep({**STUDY, "search": {**SEARCH, "field": "policy"}, "axes": {"policy": ["paper"]}}, "search-axis"),
        _sweep(_set(STUDY, "report", {"x": "trace.params.qps"}), "report-axis-unknown"),
        _sweep(_set(STUDY, "report", {"series": ["policy", "colour"]}), "report-series-unknown"),
        _sweep(_set(STUDY, "report", {"y": "policy"}), "report-key-unknown"),
        _sweep(_set(STUDY, "base.trace", {"generate": "corpus", "params": {"requests": 2_000_000_000}}),
               "gen-requests-huge"),
        _sweep(_set(STUDY, "base.until_s", NAN), "base-until-nan", names="until"),
        _sweep(_set(STUDY, "base.hbm_gb", INF), "base-hbm-inf", names="hbm"),
    ]
    for tag, raw in RAW_DAMAGE:
        cases.append(_sweep(raw if raw is not None else "", f"raw-{tag}") if raw is not None else
                     Case("study-raw-dir", ("sweep", "{d}/s.yaml", "-o", "{d}/out"), "s.yaml", {"s.yaml": None}))
    # output guards: a user's folder (with its own study.json), a file, another study's directory
    cases += [
        Case("sweep-o-user-dir", ("sweep", "{d}/s.yaml", "-o", "{d}/mine", "-j", "1"), "mine",
             {"s.yaml": _yaml(STUDY), "mine/study.json": '{"mine": true}\n', "mine/notes.txt": "keep"}),
        Case("sweep-o-file", ("sweep", "{d}/s.yaml", "-o", "{d}/f.txt", "-j", "1"), "f.txt",
             {"s.yaml": _yaml(STUDY), "f.txt": "a file"}),
        Case("sweep-o-other-study", ("sweep", "{d}/s.yaml", "-o", "{d}/old", "-j", "1"), "old",
             {"s.yaml": _yaml(STUDY), "old/.simroute-manifest.json":
              json.dumps({"written_by": "simroute", "kind": "study", "name": "other"}), "old/study.json": "{}"}),
        Case("sweep-o-under-file", ("sweep", "{d}/s.yaml", "-o", "{d}/f.txt/sub", "-j", "1"), "f.txt",
             {"s.yaml": _yaml(STUDY), "f.txt": "a file"}),
        Case("sweep-j-neg", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "-1"), "--jobs", {"s.yaml": _yaml(STUDY)}),
        Case("sweep-j-zero", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "-j", "0"), "--jobs", {"s.yaml": _yaml(STUDY)}),
        Case("sweep-max-points-neg", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "--max-points", "-2"), "--max-points",
             {"s.yaml": _yaml(STUDY)}),
        Case("sweep-ray-bogus", ("sweep", "{d}/s.yaml", "-o", "{d}/out", "--ray-address", "nowhere"),
             "--ray-address", {"s.yaml": _yaml(STUDY)}),
    ]
    return cases


# -- importers -------------------------------------------------------------------------------------------------
MOONCAKE_LINE = {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}


def _mooncake(tag: str, lines: list[Any] | bytes, extra: tuple[str, ...] = (), names: str = "m.jsonl") -> Case:
    raw = lines if isinstance(lines, bytes) else "\n".join(
        ln if isinstance(ln, str) else json.dumps(ln) for ln in lines) + "\n"
    return Case(f"mooncake-{tag}", ("trace", "import", "mooncake", "{d}/m.jsonl", "-o", "{d}/o.parquet", *extra),
                names, {"m.jsonl": raw})


def mooncake_cases() -> list[Case]:
    ok = MOONCAKE_LINE
    cases = [
        _mooncake("float-id", [{**ok, "hash_ids": [0, 3.7]}]),
        _mooncake("bool-id", [{**ok, "hash_ids": [0, True]}]),
        _mooncake("str-id", [{**ok, "hash_ids": [0, "1"]}]),
        _mooncake("neg-id", [{**ok, "hash_ids": [0, -1]}]),
        _mooncake("id-over-int64", ['{"timestamp": 0, "input_length": 1000, "output_length": 5, '
                                    '"hash_ids": [0, 99999999999999999999999]}']),
        _mooncake("in-1e400", ['{"timestamp": 0, "input_length": 1e400, "output_length": 5, "hash_ids": [0, 1]}']),
        _mooncake("in-NaN", ['{"timestamp": 0, "input_length": NaN, "output_length": 5, "hash_ids": [0, 1]}']),
        _mooncake("ts-Infinity", ['{"timestamp": Infinity, "input_length": 1000, "output_length": 5, '
                                  '"hash_ids": [0, 1]}']),
        _mooncake("ts-str", [{**ok, "timestamp": "0"}]),
        _mooncake("in-bool", [{**ok, "input_length": True}]),
        _mooncake("in-float", [{**ok, "input_length": 1000.5}]),
        _mooncake("in-neg", [{**ok, "input_length": -1, "hash_ids": []}]),
        _mooncake("in-huge", [{**ok, "input_length": 2**40, "hash_ids": [0]}]),
        _mooncake("ts-neg", [{**ok, "timestamp": -5}]),
        _mooncake("count-mismatch", [{**ok, "hash_ids": [0]}]),
        _mooncake("missing-field", [{k: v for k, v in ok.items() if k != "output_length"}]),
        _mooncake("not-object", [[1, 2, 3]]),
        _mooncake("ids-not-list", [{**ok, "hash_ids": 7}]),
        _mooncake("truncated-line", [ok, '{"timestamp": 1, "input_len']),
        _mooncake("nested", [{**ok, "x": 1}, "[" * 100000 + "]" * 100000]),
        _mooncake("unsorted-strict", [{**ok, "timestamp": 5}, ok], extra=("--strict",)),
        _mooncake("no-requests", b"\n\n"),
        _mooncake("block-tokens-0", [ok], extra=("--block-tokens", "0"), names="--block-tokens"),
        _mooncake("time-scale-nan", [ok], extra=("--time-scale", "nan"), names="--time-scale"),
        _mooncake("time-scale-zero", [ok], extra=("--time-scale", "0"), names="--time-scale"),
        _mooncake("load-scale-inf", [ok], extra=("--load-scale", "inf"), names="--load-scale"),
        _mooncake("load-scale-neg", [ok], extra=("--load-scale", "-2"), names="--load-scale"),
    ]
    for tag, raw in RAW_DAMAGE[:2] + [("nonutf8-line", json.dumps(ok).encode() + b"\n\xff\xfe{}\n")]:
        cases.append(_mooncake(f"raw-{tag}", raw))
    cases.append(Case("mooncake-dir-empty", ("trace", "import", "mooncake", "{d}/in", "-o", "{d}/o.parquet"), "in",
                      {"in": None}))
    return cases


AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE_ROW = "2023-11-16 18:17:03.9799600,4808,10\n"
BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURST_ROW = "5,ChatGPT,472,18,490,Conversation log\n"


def _csv(fmt: str, tag: str, text: str | bytes, extra: tuple[str, ...] = ()) -> Case:
    return Case(f"{fmt}-{tag}", ("trace", "import", fmt, "{d}/t.csv", "-o", "{d}/o.parquet", *extra), "t.csv",
                {"t.csv": text})


def csv_cases() -> list[Case]:
    cases = []
    for fmt, header, row, cols in (("azure", AZURE_HEADER, AZURE_ROW, ("2023-11-16 18:17:03.9799600", "4808", "10")),
                                   ("burstgpt", BURST_HEADER, BURST_ROW, ("5", "472", "18"))):
        ts, ctx, gen = cols
        cases += [
            _csv(fmt, "header-only", header),
            _csv(fmt, "no-header", row),
            _csv(fmt, "missing-column", header.replace(header.split(",")[-1 if fmt == "azure" else 2], "X"
                                                       + ("\n" if fmt == "azure" else "")) + row),
            _csv(fmt, "tokens-text", header + row.replace(ctx, "many")),
            _csv(fmt, "tokens-neg", header + row.replace(ctx, "-4")),
            _csv(fmt, "tokens-float", header + row.replace(ctx, "48.5")),
            _csv(fmt, "tokens-huge", header + row.replace(ctx, "99999999999")),
            _csv(fmt, "tokens-nan", header + row.replace(gen, "nan")),
            _csv(fmt, "tokens-inf", header + row.replace(gen, "inf")),
            _csv(fmt, "tokens-empty", header + row.replace("," + gen, ",")),
            _csv(fmt, "extra-field", header + row.rstrip("\n") + ",1,2,3\n"),
            _csv(fmt, "binary", bytes(range(256)) * 8),
            _csv(fmt, "latin1", (header + row).encode() + "caf\xe9,1,2\n".encode("latin-1")),
            _csv(fmt, "empty", b""),
            _csv(fmt, "unsorted-strict", header + row + row.replace(ts, "2023-11-16 18:17:02" if fmt == "azure"
                                                                    else "1"), extra=("--strict",)),
        ]
    cases += [_csv("azure", "bad-timestamp", AZURE_HEADER + "yesterday,4808,10\n"),
              _csv("burstgpt", "ts-nan", BURST_HEADER + BURST_ROW.replace("5,", "nan,", 1)),
              _csv("burstgpt", "ts-neg", BURST_HEADER + BURST_ROW.replace("5,", "-5,", 1))]
    return cases


AGENT_DOC = {"id": "a", "block_size": 64, "requests": [
    {"t": 0.0, "type": "n", "in": 130, "out": 5, "hash_ids": [1, 2], "api_time": 1.0},
    {"t": 3.0, "type": "n", "in": 200, "out": 5, "hash_ids": [1, 2, 3], "api_time": 1.0, "think_time": 2.0}]}


def _agent(tag: str, doc: Any, extra: tuple[str, ...] = (), names: str = "a.json") -> Case:
    raw = doc if isinstance(doc, (bytes, str)) else json.dumps(doc)
    return Case(f"agent-{tag}", ("trace", "import", "agent", "{d}/a.json", "-o", "{d}/o.parquet", *extra), names,
                {"a.json": raw})


def agent_cases() -> list[Case]:
    d = AGENT_DOC
    cases = [_agent(f"block-size-{tag}", _set(d, "block_size", v)) for tag, v in
             [("str", "64"), ("null", None), ("zero", 0), ("neg", -64), ("float", 6.5), ("bool", True)]]
    cases += [_agent("block-size-inf", json.dumps(d).replace('"block_size": 64', '"block_size": Infinity'))]
    cases += [_agent(f"in-{tag}", _set(d, "requests.0.in", v)) for tag, v in
              [("str", "130"), ("bool", True), ("neg", -1), ("float", 130.5), ("huge", 2**40)]]
    cases += [
        _agent("in-1e400", json.dumps(d).replace('"in": 130', '"in": 1e400')),
        _agent("think-nan", json.dumps(d).replace('"think_time": 2.0', '"think_time": NaN')),
        _agent("t-nan", json.dumps(d).replace('"t": 3.0', '"t": NaN')),
        _agent("t-neg", _set(d, "requests.1.t", -1.0)),
        _agent("out-of-order", _set(d, "requests.1.t", 0.0) | {"requests": [d["requests"][1] | {"t": 5.0},
                                                                              d["requests"][0] | {"t": 1.0}]}),
        _agent("out-of-order-strict", {**d, "requests": [d["requests"][1] | {"t": 5.0}, d["requests"][0]]},
               extra=("--strict",)),
        _agent("hash-float", _set(d, "requests.0.hash_ids", [1, 2.5])),
        _agent("hash-huge", json.dumps(d).replace('"hash_ids": [1, 2]', '"hash_ids": [1, 123456789012345678901234]')),
        _agent("hash-count", _set(d, "requests.0.hash_ids", [1])),
        _agent("entry-not-object", _set(d, "requests.0", 5)),
        _agent("requests-not-list", _set(d, "requests", {"a": 1})),
        _agent("no-requests-key", {"id": "a"}),
        _agent("not-object", [1, 2]),
        _agent("scope-bad", {**d, "hash_id_scope": "planet"}),
        _agent("subagent-not-list", {**d, "requests": d["requests"] + [{"t": 4.0, "type": "subagent",
                                                                         "requests": 7}]}),
        _agent("deep-subagents", '{"requests": [' + '{"t": 0, "type": "subagent", "requests": [' * 400
               + ']}' * 400 + ']}'),
        _agent("nested-json", "[" * 100000 + "]" * 100000),
        _agent("truncated", json.dumps(d)[:-7]),
        _agent("empty-requests", {**d, "requests": []}),
        _agent("block-strict", _set(d, "block_size", 32), extra=("--strict",)),
        _agent("block-tokens-neg", d, extra=("--block-tokens", "-3"), names="--block-tokens"),
    ]
    for tag, raw in RAW_DAMAGE[:4]:
        cases.append(_agent(f"raw-{tag}", raw))
    cases.append(Case("agent-dir-no-json", ("trace", "import", "agent", "{d}/in", "-o", "{d}/o.parquet"), "in",
                      {"in/readme.txt": "no json here"}))
    cases.append(Case("import-unknown-format", ("trace", "import", "sharegpt", "{d}/a.json", "-o", "{d}/o.parquet"),
                      "sharegpt", {"a.json": "{}"}))
    cases.append(Case("import-missing-input", ("trace", "import", "agent", "{d}/none.json", "-o", "{d}/o.parquet"),
                      "none.json"))
    cases.append(Case("import-output-inside-input", ("trace", "import", "agent", "{d}/in", "-o", "{d}/in/o.parquet"),
                      "o.parquet", {"in/a.json": json.dumps(AGENT_DOC)}))
    cases.append(Case("import-output-not-parquet", ("trace", "import", "agent", "{d}/a.json", "-o", "{d}/o"),
                      "{d}/o", {"a.json": json.dumps(AGENT_DOC)}))
    cases.append(Case("import-output-foreign-dir", ("trace", "import", "agent", "{d}/a.json", "-o", "{d}/o.parquet"),
                      "o.parquet", {"a.json": json.dumps(AGENT_DOC), "o.parquet/README": "my notes"}))
    return cases


# -- simroute traces (Parquet), damaged after a valid write --------------------------------------------------
def _rewrite(trace, name: str, edit) -> None:
    import pyarrow.parquet as pq
    path = trace / name
    table = pq.read_table(path)
    pq.write_table(edit(table), path)


def _with_column(name: str, values_fn, nullable: bool = False):
    import pyarrow as pa

    def edit(table):
        i = table.schema.get_field_index(name)
        col = values_fn(table.column(name))
        fld = table.schema.field(i).with_nullable(nullable or table.schema.field(i).nullable)
        return table.set_column(i, fld.with_type(col.type), col)
    return edit


def _null_first(col):
    import pyarrow as pa
    vals = col.to_pylist()
    vals[0] = None
    return pa.array(vals, type=col.type)


def _map(fn):
    import pyarrow as pa

    def edit(col):
        return pa.array([fn(i, v) for i, v in enumerate(col.to_pylist())], type=col.type)
    return edit


def _flip_bytes(trace, name: str) -> None:
    path = trace / name
    data = bytearray(path.read_bytes())
    for k in range(len(data) // 3, len(data) // 3 + 64):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(trace, name: str) -> None:
    path = trace / name
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])


def _strip_meta(trace, name: str) -> None:
    import pyarrow.parquet as pq
    table = pq.read_table(trace / name)
    pq.write_table(table.replace_schema_metadata({}), trace / name)


def _version(trace, name: str) -> None:
    import pyarrow.parquet as pq
    table = pq.read_table(trace / name)
    md = dict(table.schema.metadata)
    md[b"simroute.schema"] = b"simroute.trace/99"
    pq.write_table(table.replace_schema_metadata(md), trace / name)


REQ, CHK = "requests.parquet", "chunks.parquet"
TRACE_DAMAGE: list[tuple[str, str, Callable[[Any], None]]] = [
    ("null-arrival", REQ, lambda t: _rewrite(t, REQ, _with_column("arrival_s", _null_first, nullable=True))),
    ("null-prompt", REQ, lambda t: _rewrite(t, REQ, _with_column("prompt_tokens", _null_first, nullable=True))),
    ("null-chunk-tokens", CHK, lambda t: _rewrite(t, CHK, _with_column("tokens", _null_first, nullable=True))),
    ("nan-arrival", REQ, lambda t: _rewrite(t, REQ, _with_column("arrival_s", _map(
        lambda i, v: float("nan") if i == 3 else v)))),
    ("unsorted", REQ, lambda t: _rewrite(t, REQ, _with_column("arrival_s", _map(lambda i, v: -float(i))))),
    ("inf-think", REQ, lambda t: _rewrite(t, REQ, _with_column("think_s", _map(
        lambda i, v: float("inf") if i == 2 else v)))),
    ("neg-output", REQ, lambda t: _rewrite(t, REQ, _with_column("output_tokens", _map(
        lambda i, v: -1 if i == 1 else v)))),
    ("list-length", REQ, lambda t: _rewrite(t, REQ, _with_column("chunk_at_cached_offset", _map(
        lambda i, v: v + [True] if i == 1 else v)))),
    ("requester-hint", REQ, lambda t: _rewrite(t, REQ, _with_column("requester_hint", _map(
        lambda i, v: -7 if i == 0 else v)))),
    ("holder-hint", CHK, lambda t: _rewrite(t, CHK, _with_column("holder_hint", _map(
        lambda i, v: -3 if i == 0 else v)))),
    ("after-later", REQ, lambda t: _rewrite(t, REQ, _with_column("after_id", _map(
        lambda i, v: i + 5 if i == 1 else v)))),
    ("request-id", REQ, lambda t: _rewrite(t, REQ, _with_column("request_id", _map(
        lambda i, v: 7 if i == 0 else v)))),
    ("unknown-chunk", REQ, lambda t: _rewrite(t, REQ, _with_column("chunk_ids", _map(
        lambda i, v: [10**12] if i == 1 else v)))),
    ("dup-chunk", CHK, lambda t: _rewrite(t, CHK, _with_column("chunk_id", _map(lambda i, v: 0)))),
    ("chunk-tokens-zero", CHK, lambda t: _rewrite(t, CHK, _with_column("tokens", _map(lambda i, v: 0)))),
    ("flip-requests", REQ, lambda t: _flip_bytes(t, REQ)),
    ("flip-chunks", CHK, lambda t: _flip_bytes(t, CHK)),
    ("truncate-requests", REQ, lambda t: _truncate(t, REQ)),
    ("no-metadata", REQ, lambda t: _strip_meta(t, REQ)),
    ("version", CHK, lambda t: _version(t, CHK)),
    ("missing-chunks", "", lambda t: (t / CHK).unlink()),
    ("chunks-is-dir", CHK, lambda t: ((t / CHK).unlink(), (t / CHK).mkdir())),
    ("wrong-type", REQ, lambda t: _rewrite(t, REQ, _with_column("prompt_tokens", lambda c: c.cast("float64")))),
]


def trace_cases() -> list[Case]:
    cases = []
    for tag, file, damage in TRACE_DAMAGE:
        names = f"trace.parquet/{file}" if file else "trace.parquet"
        cases.append(Case(f"trace-info-{tag}", ("trace", "info", "{trace}"), names, damage=damage, needs_trace=True))
    for tag in ("null-arrival", "list-length", "holder-hint", "flip-requests", "missing-chunks", "unknown-chunk"):
        _, file, damage = next(x for x in TRACE_DAMAGE if x[0] == tag)
        names = f"trace.parquet/{file}" if file else "trace.parquet"
        cases.append(Case(f"run-trace-{tag}", ("run", "--trace", "{trace}", "-o", "{d}/out"), names, damage=damage,
                          needs_trace=True))
    testbed = str(Path(simroute.__file__).parent / "data" / "topologies" / "paper-testbed.yaml")   # 8 GPUs
    cases += [Case("run-hints-exceed-tp2-instances", ("run", "--trace", "{trace}", "--topology", testbed, "--tp", "2",
                                                      "--model", "deepseek-v2-lite", "-o", "{d}/out"), "holder_hint",
                   needs_trace=True)]
    cases += [Case("trace-info-file", ("trace", "info", "{d}/x.parquet"), "x.parquet", {"x.parquet": "not a dir"}),
              Case("trace-info-missing", ("trace", "info", "{d}/none.parquet"), "none.parquet"),
              Case("trace-info-lru-neg", ("trace", "info", "{trace}", "--lru-capacity", "-1"), "--lru-capacity",
                   needs_trace=True)]
    return cases


# -- command-line arguments ----------------------------------------------------------------------------------
def _run(tag: str, *args: str, names: str, files: dict | None = None) -> Case:
    return Case(f"run-{tag}", ("run", "--max-requests", "5", *args) + (() if "-o" in args else ("-o", "{d}/out")),
                names, files or {})


def cli_cases() -> list[Case]:
    prev_run = {"prev/.simroute-manifest.json": json.dumps({"written_by": "simroute", "files": {}}),
                "prev/summary.json": "{}", "prev/my-notes.txt": "mine"}
    cases = [
        _run("until-nan", "--until", "nan", names="until"),
        _run("until-neg", "--until", "-5", names="until"),
        _run("hbm-nan", "--hbm-gb", "nan", names="hbm"),
        _run("hbm-neg", "--hbm-gb", "-1", names="hbm"),
        _run("staging-rate-inf", "--staging-copy-GBps", "inf", names="staging"),
        _run("interference-nan", "--holder-interference", "nan", names="interference"),
        _run("seed-neg", "--seed", "-1", names="seed"),
        _run("tp-zero", "--tp", "0", names="tp"),
        _run("prefill-neg", "--prefill-us", "-1", names="prefill"),
        _run("max-requests-neg", "--max-requests", "-1", names="max"),
        _run("hot-fraction-2", "--hot-fraction", "2", names="hot"),
        _run("replicas-zero", "--replicas", "0", names="replicas"),
        _run("staging-zero", "--staging-streams", "0", names="staging"),
        _run("decode-steps-zero", "--decode-steps-per-event", "0", names="decode"),
        _run("slo-nan", "--slo", "p99 ttft_ms <= nan", names="slo"),
        _run("policy-unknown", "--policy", "magic", names="magic"),
        _run("routing-unknown", "--routing", "teleport", names="teleport"),
        _run("model-unknown", "--model", "gpt-9", names="gpt-9"),
        _run("calib-missing", "--calib", "{d}/none.yaml", names="none.yaml"),
        _run("seed-text", "--seed", "abc", names="seed"),
        _run("o-is-file", "-o", "{d}/f.txt", names="f.txt", files={"f.txt": "x"}),
        _run("o-under-file", "-o", "{d}/f.txt/out", names="f.txt", files={"f.txt": "x"}),
        _run("o-user-dir", "-o", "{d}/home", names="home", files={"home/thesis.tex": "years"}),
        _run("o-user-summary", "-o", "{d}/home", names="home", files={"home/summary.json": "{}"}),
        _run("o-prev-run-plus-notes", "-o", "{d}/prev", names="prev", files=prev_run),
        _run("timeline-is-dir", "--timeline", "{d}/tl", "-o", "{d}/prev", names="tl",
             files={"tl": None, **{k: v for k, v in prev_run.items() if "notes" not in k}}),
        _run("o-holds-trace", "--trace", "{d}/out/t.parquet", "-o", "{d}/out", names="out",
             files={"out/t.parquet/requests.parquet": "x"}),
        Case("gen-seed-neg", ("trace", "gen", "agents", "--seed", "-1", "-o", "{d}/g.parquet"), "--seed"),
        Case("gen-param-nan", ("trace", "gen", "corpus", "-p", "qps=nan", "-o", "{d}/g.parquet"), "qps"),
        Case("gen-param-bool", ("trace", "gen", "corpus", "-p", "requests=true", "-o", "{d}/g.parquet"), "requests"),
        Case("gen-param-float", ("trace", "gen", "corpus", "-p", "requests=2.5", "-o", "{d}/g.parquet"), "requests"),
        Case("gen-param-huge", ("trace", "gen", "corpus", "-p", "requests=1e400", "-o", "{d}/g.parquet"), "requests"),
        Case("gen-param-no-eq", ("trace", "gen", "corpus", "-p", "requests", "-o", "{d}/g.parquet"), "--param"),
        Case("gen-param-unknown", ("trace", "gen", "corpus", "-p", "colour=1", "-o", "{d}/g.parquet"), "colour"),
        Case("gen-requests-huge", ("trace", "gen", "corpus", "-p", "requests=2000000000", "-o", "{d}/g.parquet"),
             "requests"),
        Case("gen-chunks-huge", ("trace", "gen", "corpus", "-p", "chunks=99999999", "-o", "{d}/g.parquet"), "chunks"),
        Case("gen-kind-unknown", ("trace", "gen", "nosuch", "-o", "{d}/g.parquet"), "nosuch"),
        Case("gen-o-foreign", ("trace", "gen", "corpus", "-p", "requests=5", "-o", "{d}/g.parquet"), "g.parquet",
             {"g.parquet/README": "notes"}),
        Case("gen-o-file", ("trace", "gen", "corpus", "-p", "requests=5", "-o", "{d}/g.parquet"), "g.parquet",
             {"g.parquet": "a file"}),
        Case("gen-config-bad", ("trace", "gen", "corpus", "--config", "{d}/c.yaml", "-o", "{d}/g.parquet"), "c.yaml",
             {"c.yaml": "kind: corpus\nseed: -4\n"}),
        Case("gen-config-params", ("trace", "gen", "corpus", "--config", "{d}/c.yaml", "-o", "{d}/g.parquet"),
             "c.yaml", {"c.yaml": "kind: corpus\nparams: [1, 2]\n"}),
        Case("report-missing", ("report", "{d}/none"), "none"),
        Case("report-run-bad-summary", ("report", "{d}/run"), "summary.json", {"run/summary.json": "{bad"}),
        Case("report-study-junk", ("report", "{d}/st"), "study.json", {"st/study.json": '{"name": 3}'}),
        Case("predict-mq-text", ("predict", "--mq", "abc"), "--mq"),
        Case("predict-mq-zero", ("predict", "--mq", "0"), "--mq"),
        Case("model-chunk-mq-zero", ("model", "chunk", "--mq", "0", "-o", "{d}/figs"), "--mq"),
        Case("model-chunk-bw-nan", ("model", "chunk", "--bw-gbps", "nan", "-o", "{d}/figs"), "bw"),
        Case("unknown-command", ("teleport",), "teleport"),
        Case("unknown-option", ("trace", "info", "--colour"), "--colour"),
    ]
    return cases


def all_cases() -> list[Case]:
    from corpus_round3 import round3_cases
    from corpus_round4 import round4_cases
    cases = (topology_cases() + profile_cases() + study_cases() + mooncake_cases() + csv_cases() + agent_cases()
             + trace_cases() + cli_cases() + round3_cases() + round4_cases())
    ids = [c.id for c in cases]
    dup = {i for i in ids if ids.count(i) > 1}
    assert not dup, f"duplicate case ids: {sorted(dup)}"
    return cases
