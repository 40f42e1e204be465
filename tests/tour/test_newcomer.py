"""A newcomer's first ten minutes (issue 39): the README's quoted default-run figures are the default run's, the
docs' references resolve, every `--help` example runs from any directory, and the natural first mistakes (a
mistyped shipped name, a mistyped `-p`) get one line naming the flag, the field and the problem, listing what
exists, exit 2, nothing written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from simroute.shipped import shipped_names

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# ---- the README's figures of the default run ----------------------------------------------------------------------
def test_the_readmes_default_run_figures_are_the_default_runs(tmp_path):
    """The two-commands paragraph quotes TTFT p50 / p99, TPOT p50 / p99 (ms, rounded), the SLO attainment (%, one
    decimal), whether p99 TPOT misses the SLO, and the request count: each as `simroute run` prints them now."""
    from simroute.cli.main import main
    text = " ".join((ROOT / "README.md").read_text().split("## A short tour")[0].split())
    quoted = re.search(r"([\d,]+) requests of .*?about ([\d.]+) / ([\d.]+) ms TTFT p50 / p99, ([\d.]+) / ([\d.]+) ms "
                       r"TPOT: the p99 TPOT (misses|meets) the default (\d+) ms SLO, ([\d.]+)% of requests", text)
    assert quoted, "the README's default-run sentence changed shape: update this test with it"
    requests, ttft50, ttft99, tpot50, tpot99, verdict, tpot_slo, attainment = quoted.groups()
    assert main(["run", "-o", str(tmp_path / "run")]) == 0
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    simulated = {"requests": f"{s['requests']:,}", "ttft p50": f"{s['ttft_ms']['p50']:.0f}",
                 "ttft p99": f"{s['ttft_ms']['p99']:.0f}", "tpot p50": f"{s['tpot_ms']['p50']:.0f}",
                 "tpot p99": f"{s['tpot_ms']['p99']:.0f}",
                 "p99 tpot verdict": "misses" if s["tpot_ms"]["p99"] > float(tpot_slo) else "meets",
                 "attainment %": f"{100 * s['slo']['attainment']:.1f}"}
    in_readme = dict(zip(simulated, (requests, ttft50, ttft99, tpot50, tpot99, verdict, attainment)))
    assert in_readme == simulated, "re-measure `simroute run` and update README.md's two-commands paragraph"
    assert f"p99 tpot_ms <= {tpot_slo}" in s["slo"]["conditions"]       # the SLO the README names is the run's


# ---- the docs' references -------------------------------------------------------------------------------------------
SECTION_REF = re.compile(r"((?:[\w.-]+/)*[A-Z][A-Z_]*\.md),?\s+\"([^\"\n]+)\"")
PATH_REF = re.compile(r"(?<![\w./-])((?:simroute|bench|tests)/[\w./-]*\w)")
# a dated review cites the files and lines of the commit it reviewed; a recipe or a benchmark's setup names what it
# creates (docs/EXTENDING.md's topology kind, docs/STUDIES.md's aiconfigurator venv)
HISTORICAL = {"REVIEW.md"}
CREATED = {"simroute/network/kinds/star.py", "bench/.venv-aic"}


def _target(doc: Path, name: str) -> Path | None:
    return next((path for path in (ROOT / name, ROOT / "docs" / name, doc.parent / name) if path.is_file()), None)


def _sections(path: Path) -> list[str]:
    """Headings and bold paragraph leads (`**Name.**`, `- **Name**`): what a "Section" reference may name."""
    lines = path.read_text().splitlines()
    heads = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    leads = [m.group(1) for line in lines if (m := re.match(r"\s*(?:- )?\*\*([^*]+)\*\*", line))]
    return heads + leads


def test_every_doc_the_readme_and_docs_name_exists():
    """`docs/NAME.md` anywhere in README.md or docs/ (not another repository's docs/, cited after its github.com)."""
    named = {(doc.name, m.group()) for doc in DOCS for line in doc.read_text().splitlines()
             for m in re.finditer(r"(?<![\w/])docs/[A-Za-z_]+\.md", line) if "github.com" not in line[:m.start()]}
    assert len(named) > 30
    missing = sorted((doc, path) for doc, path in named if not (ROOT / path).is_file())
    assert not missing, missing


# the project's own records (a review, mutation runs), not a user's reading
RECORDS = {"MUTATION.md", "REVIEW.md"}


def test_the_readmes_read_next_table_lists_every_users_doc():
    """A planner finds every guide from the README (docs/EXTENDING.md, the how-to for a model, a GPU, a topology
    kind, was reachable only through other docs)."""
    table = (ROOT / "README.md").read_text().split("## Read next", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| docs/([A-Z_]+\.md) \|", table, re.M))
    users = {path.name for path in (ROOT / "docs").glob("*.md")} - RECORDS
    assert "EXTENDING.md" in users and users <= listed, sorted(users - listed)


def test_every_section_the_readme_and_docs_cite_is_a_heading_or_a_bold_lead_there():
    """`docs/STEP_TIME.md, "DP attention in a run"`: the file exists and the quoted words begin one of its headings
    or bold paragraph leads (or, for bench/RESULTS.md's dated headings, stand inside one)."""
    refs = [(doc.name, name, section) for doc in DOCS for name, section in SECTION_REF.findall(doc.read_text())]
    assert len(refs) > 30
    bad = []
    for doc, name, section in refs:
        target = _target(ROOT / ("docs" if doc != "README.md" else "") / doc, name)
        if target is None:
            bad.append((doc, name, section, "no such file"))
            continue
        found = _sections(target)
        if not any(title.startswith(section) or (target.name == "RESULTS.md" and section in title)
                   for title in found):
            bad.append((doc, name, section, "no such heading or bold lead"))
    assert not bad, bad


def test_every_repository_path_the_readme_and_docs_name_exists():
    named = {(doc.name, m.rstrip(".")) for doc in DOCS if doc.name not in HISTORICAL
             for m in PATH_REF.findall(doc.read_text()) if "__pycache__" not in m}
    assert len(named) > 50
    missing = sorted((doc, path) for doc, path in named
                     if not (ROOT / path).exists() and path not in CREATED)
    assert not missing, missing


# ---- --help examples run from any directory --------------------------------------------------------------------------
def _leaf_helps() -> list[tuple[str, str]]:
    from tests.test_cli_errors import leaf_commands
    return [(" ".join(path), cmd.help or "") for path, cmd in leaf_commands()]


def test_no_help_example_names_a_shipped_input_by_its_repository_path():
    """`simroute run --topology topologies/fattree.yaml` fails outside a checkout; `--topology fattree` works
    anywhere (README, "A short tour")."""
    helps = _leaf_helps()
    assert len(helps) > 15
    shipped = [f"{folder}/{name}{suffix}" for folder, kind, suffix in
               (("topologies", "topology", ".yaml"), ("studies", "study", ".yaml"), ("calib", "calib", ".yaml"))
               for name in shipped_names(kind)]
    assert "topologies/fattree.yaml" in shipped
    found = [(cmd, path) for cmd, text in helps for path in shipped if path in text]
    assert not found, found


# ---- a newcomer's first mistakes -------------------------------------------------------------------------------------
MISTAKES = [
    # (argv, words the one line must hold: the flag or file, the problem, what exists)
    (("run", "--topology", "fatree", "-o", "out"), ("fatree", "field '--topology'", "neither a file", "fattree-1024")),
    (("run", "--trace", "agents-defualt", "-o", "out"), ("agents-defualt", "field '--trace'", "agents-default")),
    (("run", "--trace", "agents.parquet", "-o", "out"), ("agents.parquet", "trace not found", "simroute trace gen",
                                                        "agents-default")),
    (("run", "--gpu", "h300", "-o", "out"), ("field '--gpu'", "unknown gpu 'h300'", "h200-sxm")),
    (("run", "--engine", "sglang@9.9", "-o", "out"), ("field '--engine'", "sglang@9.9", "sglang@0.5.14")),
    (("run", "--slo", "p99 ttft <= 2000", "-o", "out"), ("field '--slo'", "unknown SLO metric 'p99 ttft'",
                                                          "p99 ttft_ms")),
    (("plan", "--topology", "fatree", "--qps", "4", "-o", "out"), ("field '--topology'", "'fatree'", "fattree-1024")),
    (("sweep", "ark-ecmp-vs-ar", "--quick", "-o", "out"), ("ark-ecmp-vs-ar", "shipped study", "ark-ecmp-vs-ark")),
    (("trace", "import", "mooncake", "mooncak-sample", "-o", "m.parquet"), ("mooncak-sample", "mooncake-sample")),
    (("trace", "gen", "agents", "-p", "document=1", "-o", "a.parquet"),
     ("field '--param'", "unknown 'agents' parameter 'document'", "documents")),
    (("trace", "gen", "agents", "-p", "documents=abc", "-o", "a.parquet"),
     ("field '--param'", "agents.documents", "must be an integer")),
    (("plan", "--workload", "agents", "-p", "subagent=3", "--qps", "4", "-o", "out"),
     ("-p", "unknown 'agents' parameter 'subagent'", "subagents")),
    (("predict", "--model", "deepseek-v4"), ("field '--model'", "unknown model 'deepseek-v4'", "deepseek-v4-pro")),
    (("predict", "--fabric", "nvlink"), ("field '--fabric'", "unknown fabric 'nvlink'", "h100-nvlink4")),
    (("model", "crossover", "--model", "deepseek-v4", "-o", "figs"), ("field '--model'", "deepseek-v4-flash")),
    (("model", "chunk", "--fabric", "nvlink", "-o", "figs"), ("field '--fabric'", "h100-ibgda")),
    (("model", "step", "--model", "deepseek-v4", "--tokens", "8"), ("field '--model'", "deepseek-v3")),
]


@pytest.mark.parametrize("argv, words", MISTAKES, ids=[" ".join(argv[:4]) for argv, _ in MISTAKES])
def test_a_newcomers_mistake_gets_one_line_naming_it_and_nothing_written(cli, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(*argv)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (code, out, err)
    assert all(word in lines[0] for word in words), (lines[0], words)
    assert list(tmp_path.iterdir()) == []


def test_plan_does_not_speak_of_a_study_the_user_never_wrote(cli, tmp_path, monkeypatch):
    """`plan` builds its study file itself: a name it cannot find is not "a file (relative to the study)"."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("plan", "--topology", "fatree", "--qps", "4", "-o", "out")
    assert code == 2 and "is neither a file nor a shipped topology" in err and "study" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_generator_is_not_blamed_on_param(cli, tmp_path, monkeypatch):
    """`trace gen agent -p documents=1`: the generator's name is the positional argument, not a `-p`."""
    monkeypatch.chdir(tmp_path)
    code, _, err = cli("trace", "gen", "agent", "-p", "documents=1", "-o", "a.parquet")
    assert code == 2 and "unknown trace generator 'agent'" in err and "--param" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_mistyped_preset_parameter_names_the_preset_file(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text("kind: agents\nparams: {document: 1}\n")
    code, _, err = cli("trace", "gen", "agents", "--config", "c.yaml", "-p", "subagents=4", "-o", "a.parquet")
    assert code == 2 and err.startswith("error: c.yaml") and "'document'" in err and "--param" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_one_host_run_says_one_instance(cli, tmp_path):
    """The tour's serving run on `--hosts 1` printed "(1 instances of 8 x h200-sxm)"."""
    code, out, err = cli("run", "--hosts", "1", "--max-requests", "3", "-o", tmp_path / "run")
    assert code == 0, err
    header = " ".join(out.split())
    assert "(1 instance of 8 x h200-sxm)" in header, header[:300]


# ---- plan: what binds where the mean over seeds meets the SLO and a seed does not ------------------------------------
def _summary(ttft_p99: float) -> dict:
    stats = {"mean": 1.0, "p50": 2.0, "p95": 3.0, "p99": ttft_p99, "max": ttft_p99}
    return {"requests": 10, "completed": 10, "dropped": 0, "ttft_ms": stats, "tpot_ms": dict(stats, p99=5.0),
            "e2e_ms": stats, "slo": {"attainment": 0.9}, "bytes": {}, "primitive_counts": {},
            "ttft_breakdown_ms": {"queueing": 1.0, "prefill_compute": 40.0 if ttft_p99 > 100 else 2.0}}


def test_plan_binding_names_the_seed_that_missed_when_the_mean_meets(tmp_path):
    """Two seeds at 90 and 106 ms p99 TTFT against `p99 ttft_ms <= 100`: the mean (98) holds, one seed misses;
    the binding says so and reads the missing seed's run (plan.md printed "-; compute ..." before)."""
    from simroute.study.plan import _binding
    from simroute.study.search import parse
    for key, ttft in (("s0", 90.0), ("s1", 106.0)):
        (tmp_path / "runs" / key).mkdir(parents=True)
        (tmp_path / "runs" / key / "summary.json").write_text(json.dumps(_summary(ttft)))
    probe = {"hosts": 21, "keys": ["s0", "s1"], "seeds": 2, "served": 2, "met": 1, "ttft_ms_p99": 98.0,
             "tpot_ms_p99": 5.0}
    binding = _binding(tmp_path, probe, parse("p99 ttft_ms <= 100 and p99 tpot_ms <= 50"))
    assert binding["violated"] == ["1 of 2 seeds missed ttft_ms_p99 <= 100 (the mean over seeds meets it)"]
    assert binding["resource"] == "compute: TTFT is mostly prefill compute (40 ms mean)"     # seed s1's, not s0's
