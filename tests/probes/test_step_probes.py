"""Step-time probes on the CPU: the GEMM plan comes from the model geometry, each correctness check catches a
wrong operator, sweeps stop at their deadline with what they measured, and the probe results become the GPU
entry the step-time model reads."""

from __future__ import annotations

import importlib.util
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from simroute.model.geometry import get_model
from simroute.probes import gpu_step as gs
from simroute.probes import step_constants as sc
from simroute.probes.capability import Capability
from simroute.probes.framework import run_probe
from simroute.probes import gpu_common
from simroute.probes.gpu_common import BACKEND_ENV
from simroute.probes.registry import PROBES
from simroute.probes.step_backend import NumpyBackend


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKEND_ENV, "reference")


def test_gemm_plan_is_the_geometry_linear_ops_at_every_tp() -> None:
    plan = gs.gemm_plan()
    keys = [(s.k, s.n) for s in plan]
    assert len(keys) == len(set(keys))                        # one entry per distinct weight shape
    llama = get_model("llama-2-7b")
    for tp in gs.TPS:
        for op in llama.linear_ops(tp, "dense"):
            assert (op.k, op.n) in keys, (tp, op)
    assert (4096, 3 * 4096 // 2) in keys                      # TP 2 splits the fused QKV by heads
    uses = {u for s in plan for u in s.uses}
    v2 = get_model("deepseek-v2-lite")
    for op in v2.linear_ops(1, "moe"):
        assert f"deepseek-v2-lite/moe/{op.name}/tp1" in uses
    first = {u.split("/")[0] for u in plan[0].uses}
    assert first & set(gs.FIRST_MODELS) and plan[0].uses[0].endswith("/tp1")


def test_aggregate_gemm_rate_is_total_flops_over_total_seconds() -> None:
    shapes = {"a": {"seconds": {"8": 1.0}, "TFLOPs": {"8": 2.0}}, "b": {"seconds": {"8": 3.0}, "TFLOPs": {"8": 6.0}}}
    assert gs.gemm_rate_by_tokens(shapes)["8"] == pytest.approx((2.0 * 1 + 6.0 * 3) / 4)


class _WrongLse(NumpyBackend):
    def mla_decode(self, q, kv, scale):
        out, lse = super().mla_decode(q, kv, scale)
        return out, lse * 1.5


class _WrongSilu(NumpyBackend):
    def silu(self, x):
        return x


class _WrongGemm(NumpyBackend):
    def upload(self, x):
        return super().upload(x) * 1.1


def test_the_correctness_checks_catch_a_wrong_operator() -> None:
    assert gs._check_attention(NumpyBackend()) < 1e-5
    assert gs._check_layer(NumpyBackend()) < 1e-4
    with pytest.raises(AssertionError, match="attention disagrees"):
        gs._check_attention(_WrongLse())
    with pytest.raises(AssertionError, match="decoder layer disagrees"):
        gs._check_layer(_WrongSilu())
    with pytest.raises(AssertionError, match="GEMM disagrees"):
        gs._check_gemm(_WrongGemm())


def test_decoder_layer_pieces_compute_what_they_say() -> None:
    be = NumpyBackend(np.float64)
    geom = gs.shrunk(get_model("llama-2-7b"))
    w = gs.DecoderLayer.random_weights(geom, "dense", seed=1)
    w["o"][:] = 0.0
    w["ffn_down"][:] = 0.0
    x = np.random.default_rng(2).standard_normal((5, geom.hidden))
    np.testing.assert_allclose(gs.DecoderLayer(be, geom, "dense", host_weights=w).forward(x), x)  # residuals only
    moe = gs.shrunk(get_model("deepseek-v2-lite"))
    layer = gs.DecoderLayer(be, moe, "moe", host_weights=gs.DecoderLayer.random_weights(moe, "moe", seed=3))
    routes = layer.routing(np.random.default_rng(4).standard_normal((9, moe.hidden)))
    assert sum(len(r) for _, r, _ in routes) == 9 * moe.experts_per_token
    q = np.random.default_rng(5).standard_normal((1, 2, 4, 8))
    causal = be.attention(q, q, q, True, 1.0)
    np.testing.assert_allclose(causal[0, :, 0], q[0, :, 0])   # the first token attends only itself


def test_every_step_probe_runs_on_the_reference_backend(reference: None) -> None:
    """Whole quick sweeps (the deadline is an hour away: how far a sweep gets by a deadline is the ticking-clock
    test's, not the box's speed)."""
    for fn in (gs.probe_hbm, gs.probe_decode_attention, gs.probe_prefill_attention, gs.probe_launch_overhead):
        out = fn({"quick": True, "deadline_unix": time.time() + 3600})
        assert out["results"]["measures_gpu"] is False and out["samples"], fn.__name__
        assert out["results"].get("sweep", "complete") == "complete", fn.__name__
    lo = gs.probe_launch_overhead({"quick": True, "launches": 50, "deadline_unix": time.time() + 3600})["results"]
    assert lo["launches"] == 50 and lo["iteration_us"] > 0


class TickingClock:
    """A stand-in for the `time` module the probes' deadlines read: every reading advances one tick, so where a
    sweep stops depends on how often the code asks the time, not on how fast the box is (a real-clock version
    of this test failed in CI when the first, uncut sweep ran slower than the cut one)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now

    time = monotonic


def test_a_sweep_stops_at_its_deadline_and_keeps_what_it_measured(reference: None,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole quick plan's own length in clock readings sets the deadline (a third of it), so the cut is the
    same on every box; the runner path (a subprocess with a kill time) is covered by the dry run."""
    clock = TickingClock()
    with monkeypatch.context() as patched:
        patched.setattr(gpu_common, "time", clock)
        start = clock.now
        # one model's shapes (16 of the 99): a sweep long enough to cut, at a sixth of the CPU
        one_model = {"quick": True, "models": ["llama-2-7b"]}
        full = gs.probe_gemm({**one_model, "deadline_unix": clock.now + 1e9})["results"]
        ticks = clock.now - start
        r = gs.probe_gemm({**one_model, "deadline_unix": clock.now + ticks / 3})["results"]
    assert len(full["shapes"]) == full["planned_shapes"] and full["sweep"] == "complete"
    assert 0 < len(r["shapes"]) < r["planned_shapes"] and "deadline after" in r["sweep"]
    assert list(r["shapes"]) == list(full["shapes"])[:len(r["shapes"])]    # it keeps the points it measured
    assert set(r["TFLOPs_by_tokens"]) <= {str(t) for t in gs.TOKENS}
    # the runner path (a fresh interpreter, results through a file) hands back a whole sweep (hbm's: ~0.4 CPU s,
    # gemm's is ~4); its timeout is a hang guard, so the box's load decides nothing
    o = run_probe(PROBES["hbm"], {"quick": True, "backend": "reference"}, timeout_s=600)
    assert o.ok and o.results["sweep"] == "complete" and o.samples, o.message


# ---- results -> GPU entry ------------------------------------------------------------------------------------
def test_device_names_match_their_gpu_entry() -> None:
    entries = ["a100-80gb", "a40", "h100-sxm", "h200-sxm", "rtxpro6000"]
    assert sc.match_gpu_entry("NVIDIA H200", entries) == "h200-sxm"
    assert sc.match_gpu_entry("NVIDIA A100-SXM4-80GB", entries) == "a100-80gb"
    assert sc.match_gpu_entry("NVIDIA RTX PRO 6000 Blackwell Server Edition", entries) == "rtxpro6000"
    assert sc.match_gpu_entry("NVIDIA A40", entries) == "a40"
    assert sc.match_gpu_entry("Tesla V100-SXM2-16GB", entries) is None
    # the Blackwell entries: a GB200's device name holds "b200" too, and the longer token wins
    entries += ["b200-sxm", "gb200", "b300-sxm", "gb300"]
    assert sc.match_gpu_entry("NVIDIA B200", entries) == "b200-sxm"
    assert sc.match_gpu_entry("NVIDIA GB200", entries) == "gb200"
    assert sc.match_gpu_entry("NVIDIA B300 SXM6 AC", entries) == "b300-sxm"
    assert sc.match_gpu_entry("NVIDIA GB300", entries) == "gb300"


RESULTS = {
    "hbm": {"best_GBps": 4000.0, "backend": "torch"},
    "gemm": {"TFLOPs_by_tokens": {"1": 9.89, "64": 494.5, "8192": 1200.0}, "shapes": {"a": {}}, "backend": "torch"},
    "prefill-attention": {"best_TFLOPs": 494.5, "backend": "torch"},
    "launch-overhead": {"iteration_us": 2000.0, "iteration_graph_us": 120.0, "launches": 432, "graphs": "graph",
                        "backend": "torch"},
    "decode-attention": {"best_GBps": 2400.0, "kernels": {"mla": "FlashMLA"}, "backend": "torch"},
}


def _measured(ref: str) -> dict:
    return {"kind": "measured", "ref": ref, "box": "h200box"}


def test_probe_rates_become_fractions_of_the_datasheet() -> None:
    c = sc.step_entry_constants(RESULTS, peak_TFLOPs=989.0, hbm_GBps=4800.0, measured=_measured)
    assert c["hbm_efficiency"]["value"] == pytest.approx(4000 / 4800)
    assert c["gemm_efficiency"]["points"] == [[1.0, pytest.approx(0.01)], [64.0, pytest.approx(0.5)], [8192.0, 1.0]]
    assert "clipped" not in c["hbm_efficiency"]["note"]
    assert c["attention_efficiency"]["value"] == pytest.approx(0.5)
    assert c["iteration_overhead_us"]["value"] == 2000.0 and c["iteration_overhead_graph_us"]["value"] == 120.0
    assert all(v["provenance"]["kind"] == "measured" for v in c.values())
    extra = sc.step_shared_constants(RESULTS, 4800.0, _measured)
    assert extra["decode_attention_hbm_fraction"]["value"] == pytest.approx(0.5)


def test_layer_vs_model_weights_the_layer_kinds_like_the_model(tmp_path: Path) -> None:
    from simroute.calib.profile import load_profile, shipped_dir
    prof = load_profile(shipped_dir() / "gpus" / "h200-sxm.yaml")
    r = {"linear_s": 1e-3, "attention_s": 1e-4, "layer_s": 1.5e-3}
    moe = {"linear_s": 2e-3, "attention_s": 1e-4, "layer_s": 2.5e-3}
    layers = {"v2/dense": {"model": "deepseek-v2-lite", "kind": "dense", "tokens": {"64": r, "128": r}},
              "v2/moe": {"model": "deepseek-v2-lite", "kind": "moe", "tokens": {"64": moe}}}
    rows = sc.layer_vs_model(layers, prof, "h200-sxm")
    assert [row["tokens"] for row in rows] == [64]            # T=128 lacks the MoE layer: not compared
    assert rows[0]["measured_linear_ms"] == pytest.approx((1 * 1.0 + 26 * 2.0) / 27)
    from simroute.model.steptime import BatchShape
    want = prof.step_model("deepseek-v2-lite", gpu="h200-sxm").iteration(BatchShape.uniform(prefill_tokens=64))
    assert rows[0]["model_linear_ms"] == pytest.approx(want.linear_s_per_layer * 1e3)
    assert math.isfinite(rows[0]["model_layer_ms"])
    json.dumps(rows)


# ---- on a GPU (skipped elsewhere) ---------------------------------------------------------------------------
def _torch_gpu() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch
    return None if torch.cuda.is_available() else "torch sees no CUDA GPU"


NO_TORCH_GPU = _torch_gpu()


@pytest.mark.skipif(NO_TORCH_GPU is None, reason="a torch GPU is present: the probes run for real below")
def test_step_probe_without_torch_or_gpu_says_why() -> None:
    o = run_probe(PROBES["hbm"], {"quick": True}, timeout_s=60)
    assert o.status in ("missing-dep", "skipped")
    assert "torch" in o.message


@pytest.mark.gpu
@pytest.mark.skipif(NO_TORCH_GPU is not None, reason=f"needs a CUDA GPU with torch: {NO_TORCH_GPU}")
@pytest.mark.parametrize("name", sc.STEP_PROBES)
def test_gpu_step_probe_checks_then_measures(name: str) -> None:
    o = run_probe(PROBES[name], {"quick": True}, timeout_s=90)
    assert o.ok, f"{name}: {o.status}: {o.message}"
    assert o.results["measures_gpu"] is True


class SteppedClock:
    """A stand-in for the `time` module that moves only when the test says: a point "takes" exactly its
    seconds, whatever the box's load."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now

    time = monotonic


def test_deadline_points_stop_before_a_point_that_would_not_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    from simroute.probes.gpu_common import Deadline
    clock = SteppedClock()
    monkeypatch.setattr(gpu_common, "time", clock)
    dl = Deadline(0.35)
    ran = []
    for p in dl.points("growing", [0.02, 0.08, 0.32, 1.28]):      # each point 4x the last
        clock.now += p
        ran.append(p)
    assert ran == [0.02, 0.08] and "deadline after 2 of 4" in dl.note()   # 0.32 predicted, and it would not fit
    assert dl.left() == pytest.approx(0.25)                       # stopped early, not overrun


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed (the GPU box has it; this checks the torch code on the CPU)")
def test_torch_backend_operators_agree_with_numpy_on_the_cpu() -> None:
    """The torch code the GPU will run, on the CPU in bf16: every correctness check passes and every timed
    callable runs (API misuse shows here, not on the lease)."""
    from simroute.probes.gpu_common import Deadline
    from simroute.probes.step_backend import TorchBackend
    be = TorchBackend("cpu")
    assert not be.measures_gpu
    assert gs._check_gemm(be) < gs.BF16_TOL
    assert gs._check_attention(be) < gs.BF16_TOL
    assert gs._check_layer(be) < 2 * gs.BF16_TOL
    step, counter = be.launch_chain(10, graph=False)
    before = counter()
    step()
    assert counter() - before == 10
    dl = Deadline(60)
    for model, kind in gs.LAYER_CASES:
        layer = gs.DecoderLayer(be, gs.shrunk(get_model(model)), kind, seed=1)
        r = gs._time_layer(be, layer, 8, dl, 1, 1)
        assert r["layer_s"] > 0 and set(r["ops_s"]) == set(layer.ops)
    for kind in gs.decode_kinds():
        fn, _ = gs._decode_call(be, kind, 2, 64, seed=1)
        out = fn()
        assert (out[0] if isinstance(out, tuple) else out).shape[-1] == kind.d_v
    for kind in gs.prefill_kinds():
        q, k, v = (be.randn((1, kind.heads, 16, d), seed=i) for i, d in enumerate((kind.d_qk, kind.d_qk, kind.d_v)))
        assert tuple(be.attention(q, k, v, True, 0.1).shape) == (1, kind.heads, 16, kind.d_v)
    a = be.randn((1000,), seed=1)
    b = be.empty_like(a)
    be.copy(b, a)
    assert np.array_equal(be.host(a), be.host(b))


# ---- the probes' operator tables (simroute.probes.step_tables) ---------------------------------------------------
DRY_BOX = Capability(hostname="drybox", cpu_model="Test CPU", cpus=2, python="3.12", gpus=1,
                     gpu_names=["NVIDIA H200"])


@pytest.fixture(scope="module")
def dry_cal(tmp_path_factory):
    """`simroute calibrate`'s pipeline in a dry run (numpy on the CPU) of the three table probes, one model."""
    from simroute.probes.calibrate import calibrate
    out = tmp_path_factory.mktemp("dry") / "drybox" / "profile.yaml"
    # timeout_s: a hang guard, so the quick sweeps finish on any box (the probes' own minutes cut prefill
    # attention's sweep before its MLA shapes at load 14 on 2 cores)
    return calibrate(out, only=["gemm", "decode-attention", "prefill-attention"], quick=True, cap=DRY_BOX,
                     extra_args={"backend": "reference", "models": ["llama-2-7b"]}, timeout_s=1800)


def test_dry_run_writes_the_probes_operator_tables_and_the_gpu_entry_names_them(dry_cal) -> None:
    """The writer runs in the dry run; the tests look at kinds, shapes and provenance, never at the numbers."""
    import yaml
    from simroute.calib.optables import load_operator_tables
    from simroute.model.optables import OpKind
    assert dry_cal.profile_path is not None, dry_cal.notes
    assert {o.probe.name for o in dry_cal.outcomes if o.ok} == {"gemm", "decode-attention", "prefill-attention"}
    tables_dir = dry_cal.tables_path
    assert tables_dir.parent == dry_cal.profile_path.parent / "ops" / "h200-sxm"
    assert tables_dir.name.startswith("numpy-dry-run-")
    t = load_operator_tables(tables_dir)
    assert (t.gpu, t.framework) == ("h200-sxm", "numpy-dry-run")
    assert set(t.tables) == {OpKind.GEMM, OpKind.MLA_DECODE, OpKind.ATTENTION_DECODE, OpKind.ATTENTION_PREFILL,
                             OpKind.MLA_PREFILL}
    # provenance: measured, on this box, and unmistakably not a GPU's
    assert t.provenance["kind"] == "measured" and t.provenance["box"] == "drybox"
    assert t.provenance["device"] == "cpu (dry run)" and t.provenance["dry_run"] == "true"
    assert "DRY RUN" in t.provenance["warning"]
    # GEMM rows: every planned llama-2-7b shape (as timed: narrowed) at every dry-run token count
    gemm = t.get(OpKind.GEMM)
    plan = gs.gemm_plan(("llama-2-7b",))
    from simroute.probes.step_backend import NumpyBackend
    shapes = {gs.run_shape(NumpyBackend(), s) for s in plan}
    tokens = {float(m) for m in gs.TOKENS if m <= gs.REF_MAX_TOKENS}
    got = set(zip(gemm.numeric["m"].tolist(), gemm.numeric["k"].tolist(), gemm.numeric["n"].tolist()))
    assert got == {(m, float(k), float(n)) for m in tokens for k, n in shapes}
    assert gemm.values("dtype") == ["fp32"]                     # what ran: the model's bf16 rows find none
    # decode attention: MLA (V2-Lite's 16 heads, V3's 128) and Llama's GQA over the dry run's grid
    mla = t.get(OpKind.MLA_DECODE)
    assert mla.values("heads") == [16.0, 128.0] and mla.values("context") == [64.0, 256.0]
    assert mla.values("batch") == [1.0, 4.0] and mla.rows == 8
    gqa = t.get(OpKind.ATTENTION_DECODE)
    assert (gqa.values("heads"), gqa.values("kv_heads"), gqa.values("head_dim")) == ([32.0], [32.0], [128.0])
    assert gqa.rows == 4
    pre = t.get(OpKind.ATTENTION_PREFILL)
    assert pre.values("isl") == [64.0, 128.0] and pre.values("batch") == [1.0]
    assert t.get(OpKind.MLA_PREFILL).values("heads") == [16.0]
    # the profile's GPU entry names the tables, relative to the profile, and says they are a dry run
    raw = yaml.safe_load(dry_cal.profile_path.read_text())
    ref = raw["gpus"]["h200-sxm"]["operator_tables"]
    assert ref["path"] == f"ops/h200-sxm/{tables_dir.name}" and "DRY RUN" in ref["note"]
    assert "dry run" in raw["description"]
    prof = dry_cal.profile
    assert prof.operator_tables_dir("h200-sxm") == tables_dir.resolve()
    resolved = prof.operator_tables("h200-sxm")
    assert resolved is not None and resolved.provenance["device"] == "cpu (dry run)"
    assert any("dry run" in n for n in dry_cal.notes)


def test_probe_results_become_table_rows(tmp_path: Path) -> None:
    """Synthetic results of a torch run: units (s -> us), kinds, columns, provenance and the entry's reference."""
    from simroute.calib.optables import load_operator_tables
    from simroute.model.optables import OpKind
    from simroute.probes import step_tables as st
    from simroute.probes.framework import ProbeOutcome
    base = {"backend": "torch 2.5.1+cu124 bf16 on NVIDIA H200", "measures_gpu": True, "framework": "torch",
            "framework_version": "2.5.1+cu124", "dtype": "bf16", "device": "NVIDIA H200"}
    gemm = {**base, "shapes": {"4096x12288": {"k": 4096, "n": 12288, "k_run": 4096, "n_run": 12288,
                                              "seconds": {"1": 2e-5, "2": 3e-5}}}}
    dec = {**base, "kernels": {"mla-deepseek-v3": "FlashMLA", "gqa-llama-2-7b": "sdpa"}, "points": [
        {"kind": "mla-deepseek-v3", "batch": 4, "context": 512, "seconds": 1e-5, "table": "mla_decode",
         "heads": 128},
        {"kind": "gqa-llama-2-7b", "batch": 4, "context": 512, "seconds": 4e-6, "table": "attention_decode",
         "heads": 32, "kv_heads": 32, "head_dim": 128}]}
    hbm = {**base, "best_GBps": 4000.0}
    outcomes = [ProbeOutcome(PROBES["gemm"], "ok", "", 1.0, gemm), ProbeOutcome(PROBES["hbm"], "ok", "", 1.0, hbm),
                ProbeOutcome(PROBES["decode-attention"], "ok", "", 1.0, dec),
                ProbeOutcome(PROBES["prefill-attention"], "failed", "boom", 1.0, {})]
    tables = st.step_tables(outcomes)
    assert (tables.framework, tables.version, tables.device, tables.dry_run) == ("torch", "2.5.1+cu124",
                                                                                  "NVIDIA H200", False)
    assert set(tables.tables) == {OpKind.GEMM, OpKind.MLA_DECODE, OpKind.ATTENTION_DECODE}   # only what ran
    profile = tmp_path / "box" / "profile.yaml"
    w = st.write_step_tables(tables, box="h200box", box_description="h200box (Xeon)", gpu="h200-sxm",
                             profile_path=profile)
    assert w.path == tmp_path / "box" / "ops" / "h200-sxm" / "torch-2.5.1-cu124" and w.created
    assert w.ref["path"] == "ops/h200-sxm/torch-2.5.1-cu124" and "DRY RUN" not in w.ref["note"]
    t = load_operator_tables(w.path)
    assert (t.framework, t.version) == ("torch", "2.5.1+cu124")
    assert t.provenance["kind"] == "measured" and t.provenance["box"] == "h200box"
    assert t.provenance["device"] == "NVIDIA H200" and "dry_run" not in t.provenance
    g = t.get(OpKind.GEMM)
    assert sorted(zip(g.numeric["m"].tolist(), g.latency_us.tolist())) == [(1.0, pytest.approx(20.0)),
                                                                            (2.0, pytest.approx(30.0))]
    assert g.values("dtype") == ["bf16"] and g.values("n") == [12288.0] and g.values("k") == [4096.0]
    assert t.get(OpKind.MLA_DECODE).latency_us.tolist() == [pytest.approx(10.0)]
    assert t.get(OpKind.MLA_DECODE).source["kernel"] == "FlashMLA"
    assert t.get(OpKind.ATTENTION_DECODE).values("kv_dtype") == ["bf16"]
    # a directory there that simroute did not write is never replaced: a fresh name is taken
    (w.path / "notes.txt").write_text("mine")
    w2 = st.write_step_tables(tables, box="h200box", box_description="h200box", gpu="h200-sxm", profile_path=profile)
    assert w2.path.name == "torch-2.5.1-cu124-2" and (w.path / "notes.txt").read_text() == "mine"
    # a directory simroute wrote (the previous run's) is replaced
    w3 = st.write_step_tables(tables, box="h200box", box_description="h200box", gpu="h200-sxm", profile_path=profile)
    assert w3.path == w2.path and not w3.created
    assert st.step_tables([ProbeOutcome(PROBES["hbm"], "ok", "", 1.0, hbm)]) is None
