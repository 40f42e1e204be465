"""Byte-level fingerprints of the shipped scenarios' outputs, to show a refactor changes no behaviour.

Runs each scenario below, hashes every Parquet table (file bytes) and summary.json with the fields that
legitimately differ between code versions removed (`versions`, which holds the source fingerprint), and
prints one JSON object {scenario: {file: sha256}}. With `--compare BEFORE.json` it reports every scenario
whose fingerprints differ, and the headline figures of both runs, then exits 1 if any differ.
`--ignore config.extra` leaves a summary key out on both sides (for a field removed on purpose: the saved
file keeps every summary, so the summary hash is recomputed without it). Several keys may follow one `--ignore`
or several `--ignore`s. Two checkouts in different folders record different absolute paths: compare them with
`--ignore config.trace config.calib config.topology inputs`.

    python3 bench/output_hashes.py --save /tmp/before.json           # on the old code
    python3 bench/output_hashes.py --compare /tmp/before.json        # on the new code

The traces are generated with `simroute trace gen` into a work directory (default /tmp/simroute-hashes) and
reused when present, so both sides replay the same bytes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

TRACES = {   # name -> (generator, parameters): small enough to run in seconds on a shared machine
    "sparse": ("sparse", ["requests=400"]),
    "disagg": ("disagg", ["requests=300", "prompt_tokens=2048"]),
    "corpus": ("corpus", ["requests=400"]),
}

SCENARIOS = {   # name -> (trace name or None for the shipped one, extra `simroute run` options)
    "default": (None, []),
    "always-route": (None, ["--policy", "always-route"]),
    "always-fetch": (None, ["--policy", "always-fetch"]),
    "always-local": (None, ["--policy", "always-local"]),
    "adaptive": (None, ["--policy", "adaptive"]),
    "popularity-locality": (None, ["--placement", "popularity", "--replicas", "2", "--router", "locality"]),
    "staging-k1": (None, ["--policy", "always-fetch", "--staging-streams", "1"]),
    "staging-k16": (None, ["--policy", "always-fetch", "--staging-streams", "16"]),
    "sparse-paper": ("sparse", []),
    "sparse-adaptive": ("sparse", ["--policy", "adaptive"]),
    "disagg": ("disagg", []),
    "corpus": ("corpus", []),
    "corpus-adaptive-tp2": ("corpus", ["--policy", "adaptive", "--model", "deepseek-v2-lite", "--tp", "2"]),
    "dp8-ep8": (None, ["--dp-attention", "8", "--ep", "8"]),
}

DROPPED_SUMMARY_KEYS = ("versions",)


def _run(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "simroute", *args], check=True, stdout=subprocess.DEVNULL)


def summary_hash(summary: dict, ignore: list[str]) -> str:
    summary = json.loads(json.dumps(summary))
    for dotted in ignore:
        *parents, leaf = dotted.split(".")
        node = summary
        for key in parents:
            node = node.get(key, {})
        node.pop(leaf, None)
    return hashlib.sha256(json.dumps(summary, sort_keys=True).encode()).hexdigest()


def fingerprint(run_dir: Path) -> tuple[dict[str, str], dict]:
    """sha256 of each Parquet file and of the summary without its version fields; the summary itself."""
    out = {}
    for path in sorted(run_dir.glob("*.parquet")):
        out[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in DROPPED_SUMMARY_KEYS:
        summary.pop(key, None)
    out["summary.json"] = summary_hash(summary, [])
    return out, summary


def headline(run_dir: Path) -> dict[str, object]:
    s = json.loads((run_dir / "summary.json").read_text())
    return {"completed": s["completed"], "ttft_mean_ms": s["ttft_ms"]["mean"], "ttft_p95_ms": s["ttft_ms"]["p95"],
            "tpot_mean_ms": s["tpot_ms"]["mean"], "primitives": s["primitive_counts"]}


def run_all(work: Path, only: list[str] | None) -> tuple[dict, dict]:
    work.mkdir(parents=True, exist_ok=True)
    for name, (kind, params) in TRACES.items():
        trace = work / f"{name}.parquet"
        if not trace.exists():
            _run(["trace", "gen", kind, "--seed", "1", "-o", str(trace)] + [a for p in params for a in ("-p", p)])
    prints, heads, summaries = {}, {}, {}
    for name, (trace, extra) in SCENARIOS.items():
        if only and name not in only:
            continue
        out = work / "runs" / name
        if out.exists():
            shutil.rmtree(out)          # this script's own scratch output from an earlier invocation
        args = ["run", "-o", str(out), "--json", "--seed", "1", *extra]
        if trace is not None:
            args += ["--trace", str(work / f"{trace}.parquet")]
        _run(args)
        prints[name], summaries[name] = fingerprint(out)
        heads[name] = headline(out)
    return prints, heads, summaries


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/simroute-hashes"))
    ap.add_argument("--save", type=Path, help="write {fingerprints, headlines} here")
    ap.add_argument("--compare", type=Path, help="compare against a file written by --save")
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--ignore", nargs="*", action="extend", default=[], help="summary keys (dotted) left out on both sides")
    a = ap.parse_args()
    prints, heads, summaries = run_all(a.work, a.only)
    if a.save:
        a.save.write_text(json.dumps({"fingerprints": prints, "headlines": heads, "summaries": summaries},
                                     indent=1) + "\n")
    if not a.compare:
        print(json.dumps(prints, indent=1))
        return 0
    before = json.loads(a.compare.read_text())
    changed = 0
    for name, files in prints.items():
        old = dict(before["fingerprints"].get(name) or {})
        if a.ignore and name in before.get("summaries", {}):
            old["summary.json"] = summary_hash(before["summaries"][name], a.ignore)
            files = {**files, "summary.json": summary_hash(summaries[name], a.ignore)}
        if old == files:
            print(f"{name:24s} identical")
            continue
        changed += 1
        diff = sorted(k for k in set(files) | set(old) if old.get(k) != files.get(k))
        print(f"{name:24s} CHANGED: {', '.join(diff)}")
        print(f"    before {before['headlines'].get(name)}")
        print(f"    after  {heads[name]}")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
