"""The MoE and elementwise table probes (simroute.probes.gpu_tables) and probe tables filled from the shipped ones:
the dry run writes both kinds through the table writer, a GPU entry's `operator_tables.fill` answers the op kinds
the probes did not time (kind by kind, saying which table answered), and a bad table or fill is one line, exit 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import yaml

from simroute.calib import load_profile, shipped_dir
from simroute.calib.optables import load_operator_tables, merge_operator_tables, write_operator_tables
from simroute.errors import ConfigurationError
from simroute.model.geometry import get_model
from simroute.model.optables import OpKind
from simroute.model.steptime import BatchShape
from simroute.probes import gpu_tables
from simroute.probes.capability import Capability
from simroute.probes.registry import PROBES

SHIPPED_H200 = "h200-sxm/sglang-0.5.14"
DRY_BOX = Capability(hostname="drybox", cpu_model="Test CPU", cpus=2, python="3.12", gpus=1,
                     gpu_names=["NVIDIA H200"])


@pytest.fixture(scope="module")
def dry_cal(tmp_path_factory):
    """`simroute calibrate`'s pipeline, dry run (numpy on the CPU), of the two new table probes on V2-Lite."""
    from simroute.probes.calibrate import calibrate
    out = tmp_path_factory.mktemp("dry") / "drybox" / "profile.yaml"
    return calibrate(out, only=["moe", "elementwise"], quick=True, cap=DRY_BOX,
                     extra_args={"backend": "reference", "models": ["deepseek-v2-lite"]})


def test_the_probes_are_registered_as_gpu_table_probes():
    from simroute.probes.step_tables import TABLE_PROBES
    for name, function in (("moe", "probe_moe"), ("elementwise", "probe_elementwise")):
        assert PROBES[name].needs == "gpu1" and PROBES[name].deps == ("torch",)
        assert name in TABLE_PROBES
        assert getattr(gpu_tables, function) is not None


def test_moe_plan_and_balanced_routing_by_hand():
    plan = gpu_tables.moe_plan([get_model("deepseek-v3"), get_model("llama-2-7b")])
    assert [(shape.hidden, shape.inter, shape.topk, shape.experts, shape.moe_tp) for shape in plan] == [
        (7168, 2048, 8, 256, tp_size) for tp_size in (8, 4, 2, 1)]                     # the dense model has no experts
    routing = gpu_tables.balanced_routing(64, 8, 256)
    assert routing[1].tolist() == list(range(8, 16))
    assert np.bincount(gpu_tables.balanced_routing(256, 8, 256).ravel(), minlength=256).tolist() == [8] * 256


def test_elementwise_plan_is_steptimes_list():
    plan = gpu_tables.elementwise_plan([get_model("llama-3.1-8b")], tps=(1,))
    # Llama-3.1-8B at TP 1: norms over 4096, RoPE over (32 + 8) heads x 128 dims, the FFN activation over 14336
    geometry = get_model("llama-3.1-8b")
    assert plan == [("add_rmsnorm", 4096), ("rope", (32 + 8) * geometry.rope_dims), ("silu_mul", 14336)]


def test_reference_kernels_compute_what_they_say():
    states, residual = np.array([[3.0, 4.0]]), np.array([[1.0, 0.0]])
    summed = np.array([[4.0, 4.0]])
    assert np.allclose(gpu_tables.elementwise_reference("add_rmsnorm", states, residual),
                       summed / np.sqrt(16.0 + 1e-6))
    assert np.allclose(gpu_tables.elementwise_reference("silu_mul", states, residual), [[3.0 / (1 + np.exp(-3.0)) * 4]])
    rows = np.array([[1.0, 2.0], [3.0, 4.0]])
    routed = gpu_tables.moe_reference(rows, np.zeros((2, 2, 2)), np.zeros((2, 2, 1)),
                                      gpu_tables.balanced_routing(2, 1, 2), np.ones((2, 1)))
    assert np.array_equal(routed, np.zeros((2, 2)))                       # zero weights route nothing


def test_dry_run_writes_moe_and_elementwise_tables_with_a_fill(dry_cal):
    """The writer in the dry run: kinds, columns, provenance and the GPU entry's fill, never the timings."""
    assert dry_cal.profile_path is not None, dry_cal.notes
    assert {outcome.probe.name for outcome in dry_cal.outcomes if outcome.ok} == {"moe", "elementwise"}
    own = load_operator_tables(dry_cal.tables_path)
    assert set(own.tables) == {OpKind.MOE, OpKind.ELEMENTWISE}
    assert own.provenance["dry_run"] == "true" and own.provenance["device"] == "cpu (dry run)"
    moe = own.get(OpKind.MOE)
    assert moe.values("distribution") == ["balanced"] and moe.values("moe_ep") == [1.0]
    assert moe.values("moe_tp") == [1.0, 2.0, 4.0, 8.0] and moe.values("tokens") == [1.0, 4.0, 16.0, 64.0]
    assert moe.values("dtype") == ["fp32"] and moe.rows == 16
    assert moe.source["implementation"] == "numpy reference (dry run)"
    assert "balanced routing" in moe.source["note"] and "without expert parallelism" in moe.source["note"]
    elementwise = own.get(OpKind.ELEMENTWISE)
    assert set(elementwise.values("kernel")) == {"add_rmsnorm", "rmsnorm", "rope", "silu_mul"}
    assert elementwise.values("dtype") == ["fp32"]
    # the GPU entry names the tables and fills the kinds they lack from the shipped ones
    raw = yaml.safe_load(dry_cal.profile_path.read_text())
    ref = raw["gpus"]["h200-sxm"]["operator_tables"]
    assert ref["fill"] == SHIPPED_H200 and SHIPPED_H200 in ref["note"]
    merged = dry_cal.profile.operator_tables("h200-sxm")
    assert merged.get(OpKind.MOE).source["answered_by"] == str(dry_cal.tables_path.resolve())
    assert merged.get(OpKind.GEMM).source["answered_by"] == str((shipped_dir() / "ops" / SHIPPED_H200).resolve())
    assert merged.provenance["own_kinds"] == "moe, elementwise"
    assert merged.provenance["filled_kinds"] == ("gemm, attention_prefill, attention_decode, mla_prefill, "
                                                 "mla_decode, mla_bmm, allreduce, dsa_decode, moe_a2a, moe_deepep, "
                                                 "collective, mla_module")


def _probe_like_tables(directory: Path, gpu: str = "h200-sxm", kernel: str = "rope") -> Path:
    """A probe-written set holding one kind (elementwise RoPE of DeepSeek-V3 at TP 8: width 1088)."""
    tokens = [1.0, 16.0, 256.0, 4096.0]
    return write_operator_tables(
        directory, gpu=gpu, framework="torch", version="2.5.1", provenance={"kind": "measured", "box": "testbox"},
        tables={OpKind.ELEMENTWISE: {"kernel": [kernel] * 4, "dtype": ["bf16"] * 4, "tokens": tokens,
                                     "width": [1088.0] * 4, "latency_us": [5.0, 6.0, 9.0, 40.0]}})


def _profile_with(tmp_path: Path, operator_tables: dict) -> Path:
    shipped = yaml.safe_load((shipped_dir() / "gpus" / "h200-sxm.yaml").read_text())
    shipped["gpus"]["h200-sxm"]["operator_tables"] = operator_tables
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(shipped, sort_keys=False))
    return path


def test_fill_answers_the_kinds_the_probes_lack_kind_by_kind(tmp_path):
    own = _probe_like_tables(tmp_path / "ops" / "probe")
    profile = load_profile(_profile_with(tmp_path, {"path": "ops/probe", "fill": SHIPPED_H200}))
    tables = profile.operator_tables("h200-sxm")
    assert tables.get(OpKind.ELEMENTWISE).source["answered_by"] == str(own.resolve())
    assert all(tables.get(kind) is not None for kind in OpKind)
    spec = profile.gpu_spec("h200-sxm")
    step = load_profile("paper-all").step_model("deepseek-v3", tp=8, gpu_spec=spec, intra_host_fabric="h100-nvlink4")
    terms = step.iteration(BatchShape.uniform(8, 4096))
    # the linear term reads the shipped GEMM / MoE tables, the RoPE its probed row, the other kernels the roofline
    assert set(terms.sources["linear"].split(", ")) == {"gemm", "mla_bmm", "moe"}
    rope = [row for row in terms.elementwise_kernels if row["kernel"] == "rope"]
    assert {row["table"] for row in rope} == {"elementwise (h200-sxm/probe/elementwise.parquet)"}
    assert {row["lookup"] for row in rope} == {"interpolated"}
    assert {row["lookup"] for row in terms.elementwise_kernels if row["kernel"] != "rope"} == {"roofline"}
    # without the fill the probe set alone has no GEMM rows: the linear term drops to the roofline
    alone = load_profile(_profile_with(tmp_path, {"path": "ops/probe"})).gpu_spec("h200-sxm")
    roof = load_profile("paper-all").step_model("deepseek-v3", tp=8, gpu_spec=alone, intra_host_fabric="h100-nvlink4")
    assert roof.iteration(BatchShape.uniform(8, 4096)
                          ).sources["linear"] == "roofline"


def test_a_fill_of_another_gpu_is_refused(tmp_path):
    own = load_operator_tables(_probe_like_tables(tmp_path / "probe", gpu="h100-sxm"))
    with pytest.raises(ConfigurationError, match="fill tables are for GPU 'h200-sxm', these for 'h100-sxm'"):
        merge_operator_tables(own, load_operator_tables(shipped_dir() / "ops" / SHIPPED_H200))


def test_an_unknown_elementwise_kernel_is_one_line_naming_file_and_field(tmp_path):
    """Refused by the writer before anything is written, and by the reader in a file written by hand."""
    with pytest.raises(ConfigurationError) as caught:
        _probe_like_tables(tmp_path / "bad", kernel="layernorm")
    assert caught.value.field == "kernel" and caught.value.file.endswith("elementwise.parquet")
    assert "unknown elementwise kernel(s) layernorm" in str(caught.value)
    assert not (tmp_path / "bad").exists()
    directory = _probe_like_tables(tmp_path / "good")
    import pyarrow.parquet as pq
    table = pq.read_table(directory / "elementwise.parquet")
    kernels = table.column("kernel").cast("string").to_pylist()
    index = table.schema.get_field_index("kernel")
    pq.write_table(table.set_column(index, "kernel", pa_strings(["layernorm"] * len(kernels))),
                   directory / "elementwise.parquet")
    with pytest.raises(ConfigurationError) as caught:
        load_operator_tables(directory)
    assert caught.value.field == "kernel" and caught.value.file.endswith("elementwise.parquet")
    assert "unknown elementwise kernel(s) layernorm" in str(caught.value)


def pa_strings(values: list[str]):
    import pyarrow as pa
    return pa.array(values, pa.string())


@pytest.mark.parametrize("operator_tables, field, problem", [
    ({"path": "ops/probe", "fill": "h200-sxm/sglang-9.9"}, "gpus.h200-sxm.operator_tables.fill",
     "names no operator-table directory"),
    ({"path": "ops/probe", "fil": SHIPPED_H200}, "fil", "Extra inputs are not permitted"),
])
def test_a_bad_fill_is_one_line_exit_2(cli, tmp_path, operator_tables, field, problem):
    _probe_like_tables(tmp_path / "ops" / "probe")
    profile = _profile_with(tmp_path, operator_tables)
    code, out, err = cli("model", "step", "--calib", str(profile), "--gpu", "h200-sxm", "--model", "deepseek-v3",
                         "--tp", "1", "--tokens", "8", "--decode-seqs", "8", "--context", "1024")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(profile) in err and field in err and problem in err


HAS_GPU = importlib.util.find_spec("torch") is not None and __import__("torch").cuda.is_available() \
    if importlib.util.find_spec("torch") is not None else False


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with torch: the moe and elementwise probes time GPU "
                                        "kernels (the dry-run tests above cover the writer)")
@pytest.mark.parametrize("probe", ["probe_moe", "probe_elementwise"])
def test_gpu_table_probe_checks_then_measures(probe):
    found = getattr(gpu_tables, probe)({"quick": True, "models": ["deepseek-v2-lite"], "deadline_s": 60})
    results = found["results"]
    assert results["measures_gpu"] and results["points"] and results["implementation"]
    assert all(point["seconds"] > 0 for point in results["points"])
