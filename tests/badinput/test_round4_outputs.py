"""Issue 38's guarantees beyond the corpus: a plan's answer appears only when the whole command succeeded (a disk
that fills while its report is written leaves no plan.json or plan.md), a plan needs no temporary directory,
`study.json` is a pure function of the plan, and the feasibility rules of `simroute.model.limits` against
hand counts."""

from __future__ import annotations

import errno
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_round4 import PLAN4  # noqa: E402


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _full_disk_in_the_report(monkeypatch) -> None:
    import simroute.study.figures as figures

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(figures, "page", full)


def test_a_disk_that_fills_while_the_report_is_written_leaves_no_answer(cli, tmp_path, monkeypatch):
    _full_disk_in_the_report(monkeypatch)
    out = tmp_path / "plan"
    code, stdout, err = cli(*PLAN4, "-o", out)
    assert code == 2 and "no space left" in one_line(err)
    left = sorted(p.name for p in out.iterdir())
    assert not {"plan.json", "plan.md", "plan.yaml", "report"} & set(left), left
    assert "points" in left                             # the study's points stay: a rerun resumes them
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]
    monkeypatch.undo()
    code, stdout, err = cli(*PLAN4, "-o", out)          # the rerun answers from the stored points
    assert code == 0, err
    assert "0 runs (0 failed), 2 stored" in stdout and (out / "plan.json").is_file()


def test_a_failed_rerun_keeps_the_previous_answer_as_it_was(cli, tmp_path, monkeypatch):
    out = tmp_path / "plan"
    assert cli(*PLAN4, "-o", out)[0] == 0
    before = {name: (out / name).read_bytes() for name in ("plan.json", "plan.md", "plan.yaml")}
    _full_disk_in_the_report(monkeypatch)
    code, _, err = cli(*PLAN4, "-o", out)
    assert code == 2 and "no space left" in one_line(err)
    assert {name: (out / name).read_bytes() for name in before} == before


def test_a_plan_needs_no_temporary_directory(cli, tmp_path, monkeypatch):
    """The study a plan runs is validated from memory: with no usable temporary directory a plan still runs,
    and `plan -o /` is one line (it used to be an 83-line traceback)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "nowhere"))
    monkeypatch.setattr(tempfile, "tempdir", None)       # gettempdir() searches again, and finds nothing usable
    monkeypatch.setattr(tempfile, "_candidate_tempdir_list", lambda: [str(tmp_path / "nowhere")])
    with pytest.raises(FileNotFoundError, match="No usable temporary directory"):
        tempfile.gettempdir()
    code, stdout, err = cli("plan", "-o", "/")
    assert code == 2 and stdout == "" and "--out" in one_line(err)
    code, _, err = cli(*PLAN4, "-o", tmp_path / "plan")
    assert code == 0, err


@pytest.mark.slow
def test_two_identical_plans_write_the_same_study_json_and_answer(cli, tmp_path):
    """study.json records the plan's own plan.yaml (no temporary path): two plans of one request, in two
    folders of the same name, are byte-identical in everything but the wall clock."""
    outs = [tmp_path / "a" / "plan", tmp_path / "b" / "plan"]
    for out in outs:
        code, _, err = cli(*PLAN4, "-o", out)
        assert code == 0, err
    for name in ("study.json", "plan.yaml", "plan.json", "plan.md", "search.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert json.loads((outs[0] / "study.json").read_text())["file"] == "plan.yaml"


def test_a_resumed_plan_checks_what_it_reads_before_it_writes(cli, tmp_path):
    """A damaged run summary is reported before study.json or the manifest is rewritten."""
    out = tmp_path / "plan"
    assert cli(*PLAN4, "-o", out)[0] == 0
    summary = sorted((out / "runs").glob("*/summary.json"))[0]
    summary.write_text('{"cut')
    before = {p.relative_to(out).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
              for p in out.rglob("*") if p.is_file()}
    code, stdout, err = cli(*PLAN4, "-o", out)
    assert code == 2 and stdout == "" and "summary.json" in one_line(err)
    after = {p.relative_to(out).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
             for p in out.rglob("*") if p.is_file()}
    assert after == before


# -- simroute.model.limits against hand counts ----------------------------------------------------------
def _step(model: str, gpu: str, tp: int, weights: str | None = None):
    from simroute.calib import load_profile, shipped_dir
    profile = load_profile(shipped_dir() / "gpus" / f"{gpu}.yaml")
    return profile.step_model(model, tp=tp, gpu_spec=profile.gpu_spec(gpu, tables=False), weight_dtype=weights)


def test_weights_past_hbm_are_refused_by_the_hand_count():
    """Llama 3.1 70B in bf16: 70.6 B parameters x 2 B = 141 GB, past one 80 GB A100, inside two."""
    from simroute.errors import ConfigurationError
    from simroute.model.limits import check_deployment
    from simroute.model.geometry import get_model
    hand = get_model("llama-3.1-70b").params() * 2
    assert 80e9 < hand < 2 * 80e9
    with pytest.raises(ConfigurationError) as caught:
        check_deployment(_step("llama-3.1-70b", "a100-80gb", 1))
    assert caught.value.field == "tp" and f"{hand / 1e9:.1f} GB" in str(caught.value)
    check_deployment(_step("llama-3.1-70b", "a100-80gb", 2))
    with pytest.raises(ConfigurationError, match="hbm|HBM"):        # a smaller --hbm-gb than the weights
        check_deployment(_step("llama-3.1-70b", "a100-80gb", 2), hbm_bytes=hand / 2 * 0.99)


def test_block_fp8_weights_need_fp8_tensor_cores():
    from simroute.errors import ConfigurationError
    from simroute.model.limits import Fields, check_deployment
    with pytest.raises(ConfigurationError) as caught:                # the checkpoint's FP8: the GPU is the cause
        check_deployment(_step("deepseek-v2-lite", "a100-80gb", 1, "fp8"), fields=Fields.flags())
    assert caught.value.field == "--weights"                        # asked for: the flag is
    check_deployment(_step("deepseek-v2-lite", "h100-sxm", 1, "fp8"))
    check_deployment(_step("deepseek-v2-lite", "a100-80gb", 1))


def test_a_batch_whose_kv_exceeds_what_the_weights_leave_is_refused():
    """DeepSeek-V2-Lite on one H100: (80 GB - its weights) / its KV bytes per token, by hand."""
    from simroute.errors import ConfigurationError
    from simroute.model.limits import check_kv
    from simroute.model.geometry import get_model
    step = _step("deepseek-v2-lite", "h100-sxm", 1)
    geometry = get_model("deepseek-v2-lite")
    per_token = geometry.layers * (geometry.d_qk) * 2                   # one latent of d_qk bf16 values per layer
    room = int((80e9 - step.weight_bytes_per_gpu) // per_token)
    assert step.kv_bytes_per_token_per_gpu == per_token and step.kv_capacity_tokens() == room
    check_kv(step, room, what="a batch", field="context")
    with pytest.raises(ConfigurationError, match="no engine could hold this batch"):
        check_kv(step, room + 1, what="a batch", field="context")


@pytest.mark.parametrize("tp, host, ok", [(8, 8, True), (4, 8, True), (3, 8, False), (16, 8, False), (2, 1, False)])
def test_a_tp_group_lives_inside_one_host(tp, host, ok):
    from simroute.errors import ConfigurationError
    from simroute.model.limits import check_tp_fits_host
    if ok:
        check_tp_fits_host(tp, host)
    else:
        with pytest.raises(ConfigurationError, match="does not divide"):
            check_tp_fits_host(tp, host)
