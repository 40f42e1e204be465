"""The README's "A short tour", run verbatim from an empty temporary directory: every command exits 0.

bash reads the block as written (quotes, continuation lines, comments, redirections) with `simroute` defined as a
shell function that records the argv bash passes it and where its stdout and stderr go; each recorded command
then runs in-process (`simroute.cli.main.main`, this checkout's code) in the empty directory, its output written
where the shell would have sent it. A process per command added only start-up (imports: ~45 of the tour's 66 CPU
s); a process of `simroute` from an empty directory is still run once, for the first command.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tour_block() -> str:
    section = (ROOT / "README.md").read_text().split("## A short tour", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


def tour_commands() -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", tour_block())
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_tour_block_is_found_and_uses_no_repository_paths():
    cmds = tour_commands()
    assert len(cmds) >= 15 and all(c.startswith("simroute ") for c in cmds)
    for c in cmds:
        assert "../" not in c and "topologies/" not in c and "studies/" not in c and "calib/" not in c, c


# bash defines `simroute` as a function: each call writes its index, then its argv, NUL-separated, to fd 3, and
# a marker naming its index to its stdout and stderr (a file holding a marker is where that stream was redirected)
RECORDER = """exec 3>"$1"; n=0
simroute() { printf '%s\\0' "$n" "$@" >&3; printf '\\1' >&3; echo "[TOUR-OUT-$n]"; echo "[TOUR-ERR-$n]" >&2
             n=$((n+1)); }
"""


def recorded_commands(scratch: Path) -> list[tuple[list[str], str | None, str | None]]:
    """(argv after `simroute`, stdout's file or None, stderr's file or None) of each call, as bash runs the block."""
    scratch.mkdir()
    argv_file = scratch.parent / "argv.bin"
    res = subprocess.run(["bash", "-c", RECORDER + tour_block(), "tour", str(argv_file)], cwd=scratch,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    records = [rec.split("\0")[:-1] for rec in argv_file.read_text().split("\1")[:-1]]
    targets = {}
    for path in scratch.rglob("*"):
        if path.is_file():
            targets.update({m: path.relative_to(scratch).as_posix() for m in re.findall(r"\[TOUR-(?:OUT|ERR)-\d+\]",
                                                                                        path.read_text())})
    assert [int(rec[0]) for rec in records] == list(range(len(records)))
    for index in range(len(records)):        # each stream went to bash's own or to a file, never nowhere
        assert (f"[TOUR-OUT-{index}]" in res.stdout) != (f"[TOUR-OUT-{index}]" in targets), index
        assert (f"[TOUR-ERR-{index}]" in res.stderr) != (f"[TOUR-ERR-{index}]" in targets), index
    return [(rec[1:], targets.get(f"[TOUR-OUT-{n}]"), targets.get(f"[TOUR-ERR-{n}]")) for n, rec in enumerate(records)]


@pytest.mark.slow
def test_readme_tour_runs_from_an_empty_directory(tmp_path, monkeypatch, capsys):
    from simroute.cli.main import main
    commands = recorded_commands(tmp_path / "scratch")
    assert len(commands) == len(tour_commands())
    work = tmp_path / "work"
    work.mkdir()
    # the first command as a process of `simroute` in the empty directory (the checkout's, not an installed copy)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "simroute"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m simroute \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    first = tour_commands()[0]
    res = subprocess.run(["bash", "-c", first], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and res.stdout, f"{first}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
    monkeypatch.chdir(work)
    for argv, out_file, err_file in commands:
        code = main(argv)
        out = capsys.readouterr()
        assert code == 0, f"simroute {' '.join(argv)}\n{out.out[-2000:]}\n{out.err[-2000:]}"
        for name, text in ((out_file, out.out), (err_file, out.err)):
            if name is not None:
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                (work / name).write_text(text)
    assert (work / "results" / "agents" / "report" / "report.html").exists()
    assert (work / "results" / "ark" / "report" / "report.html").exists()
    assert (work / "topo.png").stat().st_size > 10_000 and (work / "run.json").exists()
    import json
    card = json.loads((work / "scorecard.json").read_text())
    assert card["rows"] and all(r["verdict"] in ("pass", "fail") for r in card["rows"])
