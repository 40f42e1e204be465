"""A seeded random sample of mutmut's mutants, each checked against a test command: a mutation score in
minutes rather than hours (the full set over simroute/sim is ~1,400 mutants at ~20 s a test run).

Prepare once in a copy of the repository (mutmut edits sources in place while it works):

    git archive HEAD | tar -x -C /tmp/mut && cd /tmp/mut
    mutmut run --paths-to-mutate simroute/sim/holder.py,... --disable-mutation-types string,fstring,decorator \
        --runner true --tests-dir tests/sim        # lists every mutant (all "survive" the no-op runner)

then sample and check:

    python3 bench/mutation_sample.py --dir /tmp/mut --n 40 --seed 1 \
        --runner "python3 -m pytest -x -q -p no:cacheprovider tests/sim/test_servers.py ..."

`--commits SHA,...` (with `--repo`, the checkout the copy was archived from) samples only the mutants on lines that
`git blame` at HEAD attributes to those commits: a score for what a change added, not for the whole file.

Prints each sampled mutant (file:line, status, the mutated line) and the score = killed / (killed +
survived), timeouts counted as killed (as mutmut does). Docs/MUTATION.md records the runs.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import subprocess
from pathlib import Path


def mutants(cache: Path) -> list[tuple[int, str, int, str]]:
    """(mutant id, file, line number, source line) of every mutant in mutmut's cache."""
    with sqlite3.connect(cache) as db:
        return db.execute('SELECT m.id, f.filename, l.line_number, l.line FROM Mutant m JOIN Line l ON m.line = '
                          'l.id JOIN SourceFile f ON l.sourcefile = f.id ORDER BY m.id').fetchall()


def blamed_lines(repo: Path, filenames: set[str], commits: list[str]) -> set[tuple[str, int]]:
    """(file, 0-based line) of every line that `git blame` at HEAD in `repo` attributes to one of `commits`
    (abbreviated or full hashes). The copy is `git archive HEAD` of `repo`, so its line numbers are these."""
    full = {subprocess.run(["git", "-C", str(repo), "rev-parse", c], capture_output=True, text=True,
                           check=True).stdout.strip() for c in commits}
    lines = set()
    for filename in filenames:
        out = subprocess.run(["git", "-C", str(repo), "blame", "--porcelain", "HEAD", "--", filename],
                             capture_output=True, text=True, check=True).stdout
        for row in out.splitlines():
            head = row.split(" ")
            # a header line: <40-hex commit> <original line> <final line> [<group size>]
            if len(head) >= 3 and len(head[0]) == 40 and head[0] in full and head[2].isdigit():
                lines.add((filename, int(head[2]) - 1))
    return lines


def set_baseline(cache: Path, seconds: float) -> None:
    """The no-op runner's baseline (~0 s) would time every real test run out: use the real test time."""
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE MiscData SET value = ? WHERE key = 'baseline_time_elapsed'", (str(seconds),))


def reset(cache: Path, mutant: int) -> None:
    """Forget the no-op runner's verdict so that `mutmut run ID` tests the mutant for real."""
    with sqlite3.connect(cache) as db:
        db.execute("UPDATE Mutant SET status = 'untested', tested_against_hash = '' WHERE id = ?", (mutant,))


def status(cache: Path, mutant: int) -> str:
    with sqlite3.connect(cache) as db:
        return db.execute("SELECT status FROM Mutant WHERE id = ?", (mutant,)).fetchone()[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="the repository copy holding .mutmut-cache")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--runner", required=True)
    ap.add_argument("--baseline-s", type=float, default=20.0, help="the runner's time on unmutated code")
    ap.add_argument("--paths-to-mutate", default="simroute/sim", help="as given to the preparing `mutmut run`")
    ap.add_argument("--ids", default="", help="comma-separated mutant ids to check instead of a sample (e.g. a "
                    "sample's survivors, against a runner with the tests added for them)")
    ap.add_argument("--commits", default="", help="comma-separated: sample only mutants on lines these commits wrote")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the checkout whose HEAD the copy was archived from (for --commits)")
    a = ap.parse_args()
    cache = a.dir / ".mutmut-cache"
    set_baseline(cache, a.baseline_s)
    population = mutants(cache)
    if a.commits:
        keep = blamed_lines(a.repo, {m[1] for m in population}, a.commits.split(","))
        population = [m for m in population if (m[1], m[2]) in keep]
    if a.ids:
        wanted = {int(i) for i in a.ids.split(",")}
        sample = [m for m in population if m[0] in wanted]
    else:
        # random order: a cut-short run is still a sample
        sample = random.Random(a.seed).sample(population, min(a.n, len(population)))
    killed = survived = 0
    for mutant, filename, line, source in sample:
        reset(cache, mutant)
        subprocess.run(["mutmut", "run", str(mutant), "--paths-to-mutate", a.paths_to_mutate, "--tests-dir", "tests",
                        "--runner", a.runner], cwd=a.dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state = status(cache, mutant)
        alive = state == "bad_survived"
        survived += alive
        killed += not alive
        print(f"{mutant:5d} {filename}:{line + 1:<5d} {state:14s} {source.strip()[:90]}", flush=True)
    print(f"population {len(population)}, sampled {len(sample)} (seed {a.seed}): killed {killed}, "
          f"survived {survived}, score {killed / max(1, killed + survived):.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
