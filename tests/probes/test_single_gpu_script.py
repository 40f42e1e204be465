"""The one-shot single-GPU script: arguments, the budget plan, the output limits, and the dry run of the whole
plan with the GPU probes replaced by their numpy reference implementations."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simroute.calib import load_profile
from simroute.probes.registry import PROBES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "probes" / "run_single_gpu.py"
CONTRACT = ("hbm_efficiency", "gemm_efficiency", "attention_efficiency", "iteration_overhead_us",
            "iteration_overhead_graph_us")


def _module():
    spec = importlib.util.spec_from_file_location("run_single_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_arguments() -> None:
    script = _module()
    args = script.parse_args(["out", "--budget-s", "300", "--quick", "--only", "gemm,hbm"])
    assert args.out_dir == Path("out") and args.budget_s == 300 and args.quick and not args.dry_run
    assert args.only == "gemm,hbm"
    assert args.wheels.name == ".whl"
    for bad in (["out", "--budget-s", "10"], [], ["out", "--only", "nosuchprobe"]):
        with pytest.raises(SystemExit):
            script.parse_args(bad)


def test_the_plan_covers_every_one_gpu_probe_and_fits_eight_minutes() -> None:
    script = _module()
    runnable = {name for name, probe in PROBES.items() if not probe.hidden and probe.needs in ("cpu", "gpu1")}
    assert {name for name, _ in script.PLAN} == runnable
    timeouts = script.plan_timeouts(480)
    total = sum(timeouts.values())
    assert total <= 480 * (1 - script.RESERVE_SHARE / 2)
    assert script.plan_lines(480, timeouts, False)[-1].endswith("fits")
    squeezed = {name: 60.0 for name in timeouts}                          # a plan over the budget says so
    assert script.plan_lines(480, squeezed, False)[-1].endswith("DOES NOT FIT")
    assert script.plan_timeouts(480, ["gemm"]) == {"gemm": pytest.approx(dict(script.PLAN)["gemm"] * 480)}


def test_install_plan_without_wheel_folder_says_so(tmp_path: Path) -> None:
    script = _module()
    reqs, line = script.install_plan(tmp_path / "nowheels")
    assert reqs == []
    assert ("no wheel folder" in line) or line == "all libraries present"


def test_missing_means_absent_or_older_than_the_pin() -> None:
    script = _module()
    import numpy
    have = numpy.__version__
    assert script.missing([(f"numpy=={have}", "numpy")]) == []
    assert script.missing([("numpy==999.0", "numpy")]) == ["numpy==999.0"]          # the box's is older
    assert script.missing([("numpy==0.1", "numpy")]) == []                          # newer than the pin: kept
    assert script.missing([("nosuchdist==1.0", "nosuchmodule_xyz")]) == ["nosuchdist==1.0"]


def test_the_documented_wheel_command_is_the_scripts() -> None:
    script = _module()
    cmd = script.wheel_command()
    assert "--no-deps" in cmd and "--python-version 3.12" in cmd
    assert all(req in cmd for req, _, _ in script.BRING_WHEELS)
    assert cmd in (ROOT / "docs" / "PROBES.md").read_text()


def test_output_limits_are_checked(tmp_path: Path) -> None:
    script = _module()
    out = tmp_path / "box"
    out.mkdir()
    (out / "profile.yaml").write_text("x")
    assert script.check_outputs(out) == []
    (out / "bad name.txt").write_text("x")
    (out / "a" / "b").mkdir(parents=True)
    (out / "a" / "b" / "deep.txt").write_text("x")
    with (out / "big.bin").open("wb") as handle:
        handle.truncate(script.MAX_FILE_BYTES + 1)
    for index in range(6):
        (out / f"f{index}").write_text("x")
    problems = " | ".join(script.check_outputs(out))
    assert "10 files" in problems and "bad name.txt" in problems and "deeper" in problems and "big.bin" in problems


def test_the_total_budget_caps_every_probe(tmp_path: Path) -> None:
    """A probe never gets more than what is left of the total: past it, the rest are skipped, saying so."""
    import time
    from simroute.probes.capability import detect
    script = _module()
    args = script.parse_args([str(tmp_path / "out"), "--only", "host-tcp,gemm"])
    lines: list[str] = []
    outcomes = script.run_plan(args, detect(query_gpus=False), script.plan_timeouts(480, ["host-tcp", "gemm"]),
                          time.monotonic() + 4.0, 0.0, lines.append)
    assert [outcome.status for outcome in outcomes] == ["skipped", "skipped"]
    assert all("no budget left" in outcome.message for outcome in outcomes) and len(lines) == 2


def _torch_like_outcomes() -> list:
    """Synthetic results of a torch run of the table probes (and one probe that makes no table)."""
    from simroute.probes.framework import ProbeOutcome
    base = {"backend": "torch 2.5.1+cu124 bf16 on NVIDIA H200", "measures_gpu": True, "framework": "torch",
            "framework_version": "2.5.1+cu124", "dtype": "bf16", "device": "NVIDIA H200"}
    gemm = {**base, "shapes": {"4096x12288": {"k": 4096, "n": 12288, "k_run": 4096, "n_run": 12288,
                                              "seconds": {1: 2e-5, 2: 3e-5}}}}
    dec = {**base, "kernels": {"mla-deepseek-v3": "FlashMLA"}, "points": [
        {"kind": "mla-deepseek-v3", "batch": 4, "context": 512, "seconds": 1e-5, "table": "mla_decode",
         "heads": 128}]}
    return [ProbeOutcome(PROBES["gemm"], "ok", "", 1.0, gemm),
            ProbeOutcome(PROBES["decode-attention"], "ok", "", 1.0, dec),
            ProbeOutcome(PROBES["hbm"], "ok", "", 1.0, {**base, "best_GBps": 4000.0}),
            ProbeOutcome(PROBES["prefill-attention"], "failed", "boom", 1.0, {})]


def test_results_json_holds_what_the_tables_are_made_of() -> None:
    """--write-tables rebuilds the outcomes from results.json: the same tables as from the run's own outcomes
    (JSON's string keys and lists included)."""
    from simroute.probes.step_tables import step_tables
    script = _module()
    outcomes = _torch_like_outcomes()
    back = script.outcomes_from_results(json.loads(script.results_json(outcomes)))
    assert ([(outcome.probe.name, outcome.status) for outcome in back]
            == [(outcome.probe.name, outcome.status) for outcome in outcomes])
    before, after = step_tables(outcomes), step_tables(back)
    assert ((after.framework, after.version, after.device, after.dry_run)
            == (before.framework, before.version, before.device, before.dry_run))
    assert after.tables == before.tables and after.entries == before.entries
    assert after.rows == {"gemm": 2, "mla_decode": 1}


def test_write_tables_refuses_bad_input_in_one_line_and_changes_nothing(tmp_path: Path, capsys) -> None:
    script = _module()
    out = tmp_path / "h200"
    out.mkdir()
    (out / "capability.json").write_text(json.dumps({"hostname": "h200box", "cpu_model": "Xeon", "cpus": 16,
                                                     "python": "3.12", "gpus": 1, "gpu_names": ["NVIDIA H200"]}))
    (out / "profile.yaml").write_text(yaml.safe_dump({"description": "no GPU entry", "gpus": {}}))

    def refused(what: str) -> None:
        before = {probe.name: probe.read_bytes() for probe in out.iterdir()}
        assert script.main(["--write-tables", str(out)]) == 2
        err = capsys.readouterr()
        assert err.out == "" and len(err.err.strip().splitlines()) == 1 and what in err.err, err.err
        assert "nothing changed" in err.err
        assert {probe.name: probe.read_bytes() for probe in out.iterdir()} == before

    refused("no results.json")
    only_hbm = [outcome for outcome in _torch_like_outcomes() if outcome.probe.name == "hbm"]
    (out / "results.json").write_text(script.results_json(only_hbm))
    refused("no step probe results")
    (out / "results.json").write_text(script.results_json(_torch_like_outcomes()))
    refused("no GPU entry")
    (out / "results.json").write_text("{not json")
    refused("unreadable")


DECODE_TABLES = {"mla_decode", "attention_decode"}      # decode-attention's sweep times both kinds


def _cut_by_the_load(out: Path) -> str | None:
    """Why a rehearsal's results say more about the box's load than about the probes, if they do: a probe
    killed before its first result (its set-up did not fit its share), or decode attention's sweep stopped by
    its deadline before it timed both kinds of table."""
    if not (out / "results.json").exists():
        return None
    results = json.loads((out / "results.json").read_text())
    killed = [name for name, res in results.items() if res["status"] == "timeout"]
    decode = {point.get("table") for point in results.get("decode-attention", {}).get("results", {}).get("points", [])}
    return (f"killed at their share: {killed}" if killed else
            None if DECODE_TABLES <= decode else f"decode attention timed {sorted(filter(None, decode))} only")


def _dry_run(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """The rehearsal at its default budget (each probe a share of 60 s, at least 10); where the box's load cut
    it short (`_cut_by_the_load`), the whole rehearsal again with ten times the budget, so that what the test
    judges is the probes and the script, not the box's speed (on a quiet box the first run is the only one).
    The subprocess timeouts are hang guards."""
    for rehearsal_s in (60, 600):
        out = tmp_path / f"rehearsal-{rehearsal_s}" / "h200"
        completed = subprocess.run([sys.executable, str(SCRIPT), str(out), "--dry-run", "--rehearsal-s",
                                    str(rehearsal_s)], capture_output=True, text=True, timeout=40 * rehearsal_s,
                                   cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""})
        if completed.returncode != 0 or _cut_by_the_load(out) is None:
            break
    return completed, out


@pytest.mark.slow
def test_dry_run_rehearses_the_whole_plan_and_reports_it_fits(tmp_path: Path, capsys) -> None:
    """Must show: the dry run of the one-shot script passes and reports a plan that fits 8 minutes; afterwards
    `--write-tables OUT_DIR` turns its results.json into the operator tables `simroute calibrate` writes."""
    script = _module()
    completed, out = _dry_run(tmp_path)
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert _cut_by_the_load(out) is None, completed.stdout[-3000:]
    total_line = next(line for line in completed.stdout.splitlines() if "plan total" in line)
    assert "480 s budget (8.0 min): fits" in total_line
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {name for name, _ in script.PLAN}
    for name, res in results.items():
        if name == "nvshmem-loopback":                       # no reference implementation: says what it needs
            assert res["status"] == "missing-dep" and "nvshmem" in res["message"]
            continue
        assert res["status"] == "ok", f"{name}: {res['status']}: {res['message']}"
        if PROBES[name].needs == "gpu1":                      # never passed off as a GPU measurement
            assert "reference" in res["results"]["backend"], name
    assert script.check_outputs(out) == [] and {probe.name for probe in out.iterdir()} == set(script.OUTPUTS)
    data = yaml.safe_load((out / "profile.yaml").read_text())
    assert data["description"].startswith("DRY RUN") and data["gpu"] == "h200-sxm"
    entry = data["gpus"]["h200-sxm"]
    for key in CONTRACT:
        assert entry[key]["provenance"]["kind"] == "measured", key
        assert "reference" in entry[key]["provenance"]["ref"], key
    prof = load_profile(out / "profile.yaml")
    prof.cost_params()
    assert prof.step_model("deepseek-v2-lite", gpu="h200-sxm").iteration_s(64, 64, 64 * 512, 64 * 512) > 0
    assert "--write-tables OUT_DIR" in completed.stdout.strip().splitlines()[-1]      # the last line says what is next
    _write_tables_after_the_dry_run(script, out, capsys)


def _write_tables_after_the_dry_run(script, out: Path, capsys) -> None:
    """--write-tables on the dry run's OUT_DIR (as it comes back from the box): the tables, named in the
    profile, marked as a dry run; a second run replaces its own directory; no results.json: exit 2, one line."""
    from simroute.calib.optables import load_operator_tables
    results = json.loads((out / "results.json").read_text())

    def write_tables(where: Path) -> tuple[int, str, str]:
        """In-process (the dry run above ran the script as a process from another directory): `main` is what
        `python probes/run_single_gpu.py --write-tables OUT_DIR` runs."""
        code = script.main(["--write-tables", str(where)])
        written = capsys.readouterr()
        return code, written.out, written.err

    code, said, err = write_tables(out)
    assert code == 0, said[-3000:] + err[-3000:]
    assert "dry run" in said and "wrote" in said
    dirs = list((out / "ops" / "h200-sxm").iterdir())
    assert len(dirs) == 1 and dirs[0].name.startswith("numpy-dry-run")
    timeouts = load_operator_tables(dirs[0])
    # every kind the probes timed a point of, and no other (the rehearsal's deadlines decide how far each sweep
    # gets on a loaded box, so the set is read from results.json, not fixed)
    timed = {"gemm"} | {point["table"] for name in ("decode-attention", "prefill-attention", "moe", "elementwise")
                        for point in results[name]["results"].get("points", []) if point.get("table")}
    assert {"gemm"} | DECODE_TABLES <= timed
    assert {kind.value for kind in timeouts.tables} == timed
    assert timeouts.provenance["kind"] == "measured" and timeouts.provenance["dry_run"] == "true"
    assert timeouts.provenance["device"] == "cpu (dry run)"
    raw = yaml.safe_load((out / "profile.yaml").read_text())
    assert raw["gpus"]["h200-sxm"]["operator_tables"]["path"] == f"ops/h200-sxm/{dirs[0].name}"
    assert "DRY RUN" in raw["gpus"]["h200-sxm"]["operator_tables"]["note"]
    assert raw["description"].startswith("DRY RUN") and raw["description"].count("operator tables are a dry run") == 1
    resolved = load_profile(out / "profile.yaml").operator_tables("h200-sxm")
    assert resolved is not None and resolved.provenance["dry_run"] == "true"
    # again: its own directory replaced, not a foreign one beside it; the profile the same but for nothing
    code, said, err = write_tables(out)
    assert code == 0, said[-3000:] + err[-3000:]
    assert [probe.name for probe in (out / "ops" / "h200-sxm").iterdir()] == [dirs[0].name]
    raw2 = yaml.safe_load((out / "profile.yaml").read_text())
    assert raw2 == raw
    # bad input: one line, exit 2
    empty = out.parent / "empty"
    empty.mkdir()
    code, said, err = write_tables(empty)
    assert code == 2 and said == "" and len(err.strip().splitlines()) == 1
    assert "results.json" in err and list(empty.iterdir()) == []
