"""The README starts with exactly two shell commands (install and run the default; install the test extras and run
the tests), and CI runs the second one verbatim (.ci/run)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "```bash" and lines[3] == "```", lines[:4]
    install_and_run, test = lines[1], lines[2]
    assert install_and_run.startswith("pip install . ") and install_and_run.endswith("simroute run")
    assert "[test]" in test and "pytest" in test
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci[-1] == test


def test_every_doc_the_readme_links_exists():
    text = (ROOT / "README.md").read_text()
    linked = {word.strip("`|,.();:") for word in text.split() if word.strip("`|,.();:").startswith("docs/")}
    assert linked and all((ROOT / path).is_file() for path in linked), sorted(linked)
