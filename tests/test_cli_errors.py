"""User mistakes at the command line: one clear message, a non-zero exit, no traceback, nothing lost."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("args", [
    ("predict", "--mq", "abc"), ("predict", "--mq", "0"), ("run", "--bogus"), ("topo", "show"), ("nosuch",),
    ("trace", "info"), ("sweep",), ("run", "--seed", "-1"), ("run", "--until", "-5"),
    ("run", "--policy", "magic"), ("calib", "show", "/no/such/profile.yaml"),
])
def test_usage_errors_exit_2_without_traceback(cli, args, tmp_path):
    code, out, err = cli(*args, *(("-o", str(tmp_path / "o")) if args[0] == "run" else ()))
    assert code == 2, (args, code, out, err)
    assert "Traceback" not in out + err
    assert (err or out).strip()


def test_run_refuses_to_replace_a_directory_that_is_not_a_run(cli, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("years of work")
    code, _, err = cli("run", "-o", str(home))
    assert code == 2 and "refusing" in err
    assert (home / "thesis.tex").read_text() == "years of work"
    code, _, err = cli("run", "-o", str(tmp_path / "run"))
    assert code == 0, err
    code, _, err = cli("run", "-o", str(tmp_path / "run"), "--seed", "2")   # a previous run is replaced
    assert code == 0, err


def test_trace_gen_refuses_to_replace_a_foreign_directory(cli, tmp_path):
    target = tmp_path / "x.parquet"
    target.mkdir()
    (target / "notes.txt").write_text("keep")
    code, _, err = cli("trace", "gen", "agents", "-o", str(target))
    assert code == 2 and (target / "notes.txt").exists()


def test_validate_exit_code_is_propagated(cli, monkeypatch):
    from simroute.scenarios import validate as v
    failing = v.Row("always-fails", "x", "y", 1.0, 2.0, "x", 0.0, 1.5, "at most 1.5", "none")
    monkeypatch.setattr(v, "SECTIONS", (lambda _ctx: [failing],))
    code, out, _ = cli("validate", "--strict")
    assert code == 1 and "FAIL" in out
    assert cli("validate")[0] == 0          # without --strict a failing row is reported, not an error


def test_calibrate_out_directory_is_rejected_before_probing(cli, tmp_path):
    code, out, err = cli("calibrate", "--quick", "--out", str(tmp_path))
    assert code == 2 and "is a directory" in err
    assert list(tmp_path.iterdir()) == []


def leaf_commands() -> list[tuple[list[str], Any]]:
    """(path, click command) of every command that takes no subcommand."""
    import typer.main
    from simroute.cli.main import app
    root = typer.main.get_command(app)

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, path + [name])
        else:
            yield path, cmd
    return list(walk(root, []))


def _leaf_commands() -> list[list[str]]:
    return [path for path, _ in leaf_commands()]


@pytest.mark.parametrize("path", _leaf_commands(), ids=lambda p: " ".join(p))
def test_every_command_has_help_with_an_example(cli, path):
    code, out, err = cli(*path, "--help")
    assert code == 0 and "example" in out.lower(), (path, out[:400])


def test_a_bug_is_one_line_with_the_log_path_not_a_traceback(cli, tmp_path, monkeypatch):
    import simroute.workload.stats as stats

    def broken(*_a, **_k):
        raise KeyError("a bug in simroute, not in the input")
    monkeypatch.setattr(stats, "trace_info", broken)
    monkeypatch.setenv("SIMROUTE_LOG_DIR", str(tmp_path / "logs"))
    code, out, err = cli("trace", "info", str(tmp_path))
    lines = err.strip().splitlines()
    assert code == 70 and len(lines) == 1 and "Traceback" not in out + err
    assert lines[0].startswith("internal error, please report: KeyError")
    log = tmp_path / "logs" / "internal-errors.log"
    assert str(log) in lines[0] and "Traceback" in log.read_text() and "a bug in simroute" in log.read_text()


def test_usage_errors_are_one_line_naming_the_flag(cli):
    code, _, err = cli("trace", "info", "--lru-capacity", "lots", "x.parquet")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--lru-capacity" in err


@pytest.mark.parametrize("flag, value", [("--engine", "bogus"), ("--engine", "sglang@0.1"), ("--rank-flows", "x"),
                                         ("--slo", "bogus"), ("--kv-cache", "fp3"), ("--qps", "-1"),
                                         ("--policy", "magic")])
def test_a_run_flag_s_bad_value_names_the_flag_not_the_config_field(cli, tmp_path, flag, value):
    code, out, err = cli("run", flag, value, "-o", str(tmp_path / "o"))
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and f"field '{flag}'" in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, flag", [(("--batch-wait-timeout-iters", "4"), "--batch-wait-timeout-iters"),
                                        (("--adp-timeout-iters", "60"), "--adp-timeout-iters"),
                                        (("--engine", "vllm", "--adp-balance"), "--adp-balance"),
                                        (("--engine", "vllm", "--mem-fraction", "0.8"), "--mem-fraction"),
                                        (("--engine", "trtllm", "--scheduler-recv-interval", "4"),
                                         "--scheduler-recv-interval")])
def test_a_run_flag_its_engine_lacks_names_the_flag(cli, tmp_path, args, flag):
    """Refused when the run resolves its engine preset (after the config's own checks), still naming the flag."""
    code, out, err = cli("run", *args, "-o", str(tmp_path / "o"))
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and f"field '{flag}'" in lines[0], lines
    assert "is not a setting of" in lines[0] and not (tmp_path / "o").exists()


def test_plan_s_unknown_engine_names_the_flag(cli, tmp_path):
    code, out, err = cli("plan", "--engine", "sglang,bogus", "-o", str(tmp_path / "p"))
    assert code == 2 and out == "" and err.strip().startswith("error: field '--engine': unknown engine 'bogus'")
    assert not (tmp_path / "p").exists()
