"""`simroute calib import aiconfigurator` and `simroute calib diff --tables` on a tiny fake aiconfigurator tree
(systems/data/<system>/<op>/<framework>/<version>/*.parquet with the package's column names): the real package is
never needed. Row counts and the ms -> us conversion are checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from simroute.calib.optables import load_operator_tables
from simroute.calib.profile import shipped_dir
from simroute.model.optables import OpKind

SYSTEM = "h200_sxm"


def _parquet(root: Path, op: str, framework: str, version: str, stem: str, rows: list[dict]) -> Path:
    folder = root / "systems" / "data" / SYSTEM / op / framework / version
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.parquet"
    pd.DataFrame(rows).to_parquet(path)
    return path


def fake_tree(root: Path, scale: float = 1.0) -> Path:
    """A fake aiconfigurator data tree: sglang 0.5.14 (gemm, moe, decode attention, custom all-reduce) and an
    older 0.5.9 that alone has mla_bmm (read from it, and said so); NCCL rows beside. Latencies in ms x `scale`."""
    v = "0.5.14"
    _parquet(root, "gemm", "sglang", v, "gemm_perf", [
        {"gemm_dtype": "bfloat16", "m": m, "n": 4096, "k": 4096, "latency": 0.01 * m * scale} for m in (1, 2, 4)]
        + [{"gemm_dtype": "fp8_block", "m": 1, "n": 4096, "k": 4096, "latency": 0.007 * scale}])
    moe = {"moe_dtype": "bfloat16", "hidden_size": 2048, "inter_size": 1408, "topk": 6, "num_experts": 64,
           "moe_tp_size": 1, "moe_ep_size": 1, "distribution": "power_law_1.01"}
    _parquet(root, "moe", "sglang", v, "moe_perf", [
        {**moe, "num_tokens": 1, "latency": 0.05 * scale},
        {**moe, "num_tokens": 1, "latency": 0.04 * scale},            # a duplicate shape: the faster row is kept
        {**moe, "num_tokens": 8, "latency": 0.09 * scale}])
    att = {"batch_size": 4, "isl": 1024, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
           "kv_cache_dtype": "bfloat16", "attn_dtype": "bfloat16", "window_size": 0}
    _parquet(root, "attention", "sglang", v, "generation_attention_perf", [
        {**att, "step": 1, "kernel_source": "fa3", "latency": 0.02 * scale},
        {**att, "step": 1, "kernel_source": "flashinfer", "latency": 0.03 * scale},   # FA3 preferred: dropped
        {**att, "step": 1, "window_size": 128, "kernel_source": "fa3", "latency": 0.01},  # sliding window: dropped
        {**att, "step": 1025, "kernel_source": "fa3", "latency": 0.035 * scale}])
    _parquet(root, "comm", "sglang", v, "custom_allreduce_perf", [
        {"backend": "sglang_graph", "allreduce_dtype": "bfloat16", "num_gpus": 2, "message_size": 1024,
         "latency": 0.006 * scale}])
    nccl = root / "systems" / "data" / SYSTEM / "comm" / "nccl" / "2.21.5"
    nccl.mkdir(parents=True)
    pd.DataFrame([{"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 2, "message_size": 1024,
                   "latency": 0.012 * scale},
                  {"op_name": "all_gather", "nccl_dtype": "half", "num_gpus": 2, "message_size": 1024,
                   "latency": 0.5}]).to_parquet(nccl / "nccl_perf.parquet")
    _parquet(root, "mla_bmm", "sglang", "0.5.9", "mla_bmm_perf", [
        {"op_name": "mla_gen_pre", "bmm_dtype": "bfloat16", "num_tokens": t, "num_heads": 16, "latency": 0.003 * t}
        for t in (1, 2)])
    dsa = {"model": "deepseek-ai/DeepSeek-V3.2", "architecture": "DeepseekV32ForCausalLM", "gemm_type": "fp8_block",
           "num_heads": 16, "batch_size": 1, "isl": 1, "tp_size": 8}
    _parquet(root, "sparse_attention", "sglang", v, "dsa_generation_module_perf", [
        {**dsa, "op_name": "dsa_generation_module", "kv_cache_dtype": "bfloat16", "step": 2048, "latency": 0.0771},
        {**dsa, "op_name": "dsa_generation_module", "kv_cache_dtype": "fp8", "step": 2048, "latency": 0.0909},
        {**dsa, "op_name": "dsa_generation_module_skip_indexer", "kv_cache_dtype": "bfloat16", "step": 2048,
         "latency": 0.05}])                                      # without the indexer: not how the model runs
    (root / "systems" / "data" / SYSTEM / "gemm" / "sglang" / v / "collection_meta.yaml").write_text(
        "framework: sglang\nversion: 0.5.14\n")
    (root / "systems" / f"{SYSTEM}.yaml").write_text("gpu:\n  sm_version: 90\n")    # Hopper: SGLang runs fa3
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return fake_tree(tmp_path / "aic")


def _import(cli, tree: Path, out: Path, *extra: str):
    return cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--framework", "sglang", "--from", str(tree),
               "-o", str(out), *extra)


def test_import_converts_rows_and_latencies_and_says_where_they_come_from(cli, tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "ops" / "h200-sxm" / "sglang-0.5.14"
    code, text, err = _import(cli, tree, out)
    assert code == 0, err
    t = load_operator_tables(out)
    assert (t.gpu, t.framework, t.version) == ("h200-sxm", "sglang", "0.5.14")
    assert set(t.tables) == {OpKind.GEMM, OpKind.MOE, OpKind.ATTENTION_DECODE, OpKind.ALLREDUCE, OpKind.MLA_BMM,
                             OpKind.DSA_DECODE, OpKind.COLLECTIVE}
    gemm = t.get(OpKind.GEMM)
    assert gemm.rows == 4
    rows = sorted(zip(gemm.categorical["dtype"].tolist(), gemm.numeric["m"].tolist(), gemm.latency_us.tolist()))
    # 0.01 ms x m -> 10 us x m; bfloat16 -> bf16, fp8_block kept as is
    assert rows == [("bf16", 1.0, pytest.approx(10.0)), ("bf16", 2.0, pytest.approx(20.0)),
                    ("bf16", 4.0, pytest.approx(40.0)), ("fp8_block", 1.0, pytest.approx(7.0))]
    moe = t.get(OpKind.MOE)
    assert moe.rows == 2 and sorted(moe.latency_us.tolist()) == [pytest.approx(40.0), pytest.approx(90.0)]
    dec = t.get(OpKind.ATTENTION_DECODE)
    # window rows and the non-FA3 duplicate dropped; context = isl + step
    assert sorted(zip(dec.numeric["context"].tolist(), dec.latency_us.tolist())) == [
        (1025.0, pytest.approx(20.0)), (2049.0, pytest.approx(35.0))]
    ar = t.get(OpKind.ALLREDUCE)
    assert sorted(zip(ar.categorical["mode"].tolist(), ar.latency_us.tolist())) == [
        ("graph", pytest.approx(6.0)), ("nccl", pytest.approx(12.0))]
    assert t.get(OpKind.MLA_BMM).categorical["stage"].tolist() == ["pre", "pre"]
    dsa = t.get(OpKind.DSA_DECODE)            # the module with its indexer only; context = isl + step
    assert sorted(zip(dsa.categorical["kv_dtype"].tolist(), dsa.numeric["context"].tolist(),
                      dsa.latency_us.tolist())) == [("bf16", 2049.0, pytest.approx(77.1)),
                                                    ("fp8", 2049.0, pytest.approx(90.9))]
    assert set(dsa.categorical["architecture"].tolist()) == {"DeepseekV32ForCausalLM"}
    # the manifest: provenance of the whole and of each table
    assert t.provenance["kind"] == "measured" and t.provenance["package"] == "aiconfigurator-core"
    assert "Apache-2.0" in t.provenance["licence"] and "h200_sxm" in t.provenance["ref"]
    manifest = yaml.safe_load((out / "tables.yaml").read_text())
    assert manifest["tables"]["gemm"]["source_file"].endswith("h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet")
    gemm_entry = manifest["tables"]["gemm"]
    assert gemm_entry["rows"] == 4 and "version: 0.5.14" in gemm_entry["collection_meta"]
    assert manifest["tables"]["mla_bmm"]["framework_version"] == "0.5.9"      # taken from the older version
    assert manifest["tables"]["allreduce"]["nccl_file"].endswith("comm/nccl/2.21.5/nccl_perf.parquet")
    # the summary: rows per kind, versions read, skipped kinds, provenance, how to use them
    assert "gemm" in text and "0.5.9" in text and "skipped" in text and "attention_prefill" in text
    assert "provenance: measured" in text and "operator_tables" in text and str(out.resolve()) in text


def test_import_json_summary(cli, tree: Path, tmp_path: Path) -> None:
    code, text, err = _import(cli, tree, tmp_path / "o", "--json")
    assert code == 0, err
    s = json.loads(text)
    assert s["rows"] == {"gemm": 4, "moe": 2, "attention_decode": 2, "mla_bmm": 2, "allreduce": 2, "dsa_decode": 2,
                         "collective": 2}
    assert s["versions"]["mla_bmm"] == "0.5.9" and s["versions"]["gemm"] == "0.5.14"
    assert set(s["skipped"]) == {"attention_prefill", "mla_prefill", "mla_decode"}
    assert s["provenance"]["kind"] == "measured"


def test_expert_parallel_kinds_by_hand(cli, tree: Path, tmp_path: Path) -> None:
    """DeepEP's all-to-all (low-latency and normal mode, every version folder, the newest row of a shape), DeepEP's
    expert kernels, the WideEP MLA module and NCCL's collectives: renamed, ms / us converted, ep = nodes x 8."""
    shape = {"hidden_size": 7168, "num_topk": 8, "num_experts": 256, "kernel_source": "deepep"}
    _parquet(tree, "comm", "sglang", "0.5.12", "wideep_deepep_ll_perf", [
        {**shape, "node_num": 1, "num_token": 64, "dispatch_avg_t_us": 27.0, "combine_avg_t_us": 41.0}])
    _parquet(tree, "comm", "sglang", "0.5.6.post2", "wideep_deepep_ll_perf", [
        {**shape, "node_num": 1, "num_token": 64, "dispatch_avg_t_us": 99.0, "combine_avg_t_us": 99.0},  # older
        {**shape, "node_num": 2, "num_token": 64, "dispatch_avg_t_us": 58.0, "combine_avg_t_us": 102.0}])
    _parquet(tree, "comm", "sglang", "0.5.6.post2", "wideep_deepep_normal_perf", [
        {**shape, "node_num": 2, "num_token": 4096, "dispatch_sms": 20, "dispatch_transmit_us": 843.5,
         "dispatch_notify_us": 49.5, "combine_sms": 20, "combine_transmit_us": 2099.0, "combine_notify_us": 50.5}])
    moe = {"moe_dtype": "fp8_block", "hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 256,
           "moe_tp_size": 1, "moe_ep_size": 16}
    _parquet(tree, "moe", "sglang", "0.5.10", "wideep_generation_moe_perf", [
        {**moe, "num_tokens": 1024, "distribution": "power_law_1.01", "latency": 0.24},
        {**moe, "num_tokens": 1024, "distribution": "uniform", "latency": 0.2}])
    _parquet(tree, "mla", "sglang", "0.5.10", "wideep_generation_mla_perf", [
        {"kernel_source": "fa3", "kv_cache_dtype": "fp8", "num_heads": 128, "batch_size": 64, "isl": 4096,
         "step": 0, "latency": 0.2067}])
    out = tmp_path / "o"
    code, text, err = _import(cli, tree, out, "--json")
    assert code == 0, err
    t = load_operator_tables(out)
    a2a = t.get(OpKind.MOE_A2A)
    rows = sorted(zip(a2a.categorical["backend"].tolist(), a2a.categorical["phase"].tolist(),
                      a2a.numeric["nodes"].tolist(), a2a.numeric["ep"].tolist(), a2a.numeric["sms"].tolist(),
                      a2a.latency_us.tolist()))
    assert rows == [("deepep_ll", "combine", 1.0, 8.0, 0.0, 41.0), ("deepep_ll", "combine", 2.0, 16.0, 0.0, 102.0),
                    ("deepep_ll", "dispatch", 1.0, 8.0, 0.0, 27.0), ("deepep_ll", "dispatch", 2.0, 16.0, 0.0, 58.0),
                    ("deepep_normal", "combine", 2.0, 16.0, 20.0, pytest.approx(2149.5)),
                    ("deepep_normal", "dispatch", 2.0, 16.0, 20.0, pytest.approx(893.0))]
    deepep = t.get(OpKind.MOE_DEEPEP)
    assert sorted(zip(deepep.categorical["distribution"].tolist(), deepep.latency_us.tolist())) == [
        ("balanced", pytest.approx(200.0)), ("power_law_1.01", pytest.approx(240.0))]
    assert deepep.categorical["mode"].tolist() == ["ll", "ll"] and deepep.numeric["ep"].tolist() == [16.0, 16.0]
    module = t.get(OpKind.MLA_MODULE)
    assert module.categorical["phase"].tolist() == ["decode"] and module.latency_us.tolist() == [pytest.approx(206.7)]
    collective = t.get(OpKind.COLLECTIVE)
    assert sorted(zip(collective.categorical["op"].tolist(), collective.categorical["dtype"].tolist(),
                      collective.latency_us.tolist())) == [("all_gather", "bf16", pytest.approx(500.0)),
                                                           ("all_reduce", "bf16", pytest.approx(12.0))]
    manifest = yaml.safe_load((out / "tables.yaml").read_text())
    sources = manifest["tables"]["moe_a2a"]["source_files"]
    assert "0.5.12/wideep_deepep_ll_perf" in sources and "0.5.6.post2/wideep_deepep_normal_perf" in sources
    assert manifest["tables"]["collective"]["source_file"].endswith("comm/nccl/2.21.5/nccl_perf.parquet")


@pytest.mark.parametrize("args, field, words", [
    (("--gpu", "b200-sxm"), "--gpu", "no measurements for GPU 'b200-sxm'"),
    (("--gpu", "h200-sxm", "--framework", "vllm"), "--framework", "no 'vllm' measurements"),
    (("--gpu", "h200-sxm", "--version", "9.9"), "--version", "version '9.9' not measured"),
])
def test_unknown_gpu_framework_or_version_is_one_line_exit_2(cli, tree: Path, tmp_path: Path, args, field,
                                                             words) -> None:
    out = tmp_path / "o"
    code, text, err = cli("calib", "import", "aiconfigurator", *args, "--from", str(tree), "-o", str(out))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"field '{field}'" in err and words in err
    assert not out.exists()


def test_without_the_package_or_from_the_error_says_how(cli, tmp_path: Path) -> None:
    import importlib.util
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        pytest.skip("aiconfigurator-core is installed here")
    code, _, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "-o", str(tmp_path / "o"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "pip install aiconfigurator-core" in err and "--from" in err
    code, _, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--from", str(tmp_path / "nope"),
                       "-o", str(tmp_path / "o"))
    assert code == 2 and "field '--from'" in err and len(err.strip().splitlines()) == 1


def test_an_existing_output_is_not_overwritten(cli, tree: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes")
    code, _, err = _import(cli, tree, mine)
    assert code == 2 and "notes.txt" in err and len(err.strip().splitlines()) == 1
    assert (mine / "notes.txt").read_text() == "my notes" and not (mine / "tables.yaml").exists()
    # a directory simroute wrote is replaced (a re-import), atomically
    out = tmp_path / "ops"
    assert _import(cli, tree, out)[0] == 0
    assert _import(cli, tree, out)[0] == 0
    assert load_operator_tables(out).get(OpKind.GEMM).rows == 4
    # the output may not lie inside the data it reads
    code, _, err = _import(cli, tree, tree / "systems" / "out")
    assert code == 2 and "field '--out'" in err


# ---- calib diff --tables -------------------------------------------------------------------------------------
def test_diff_tables_op_by_op(cli, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert _import(cli, fake_tree(tmp_path / "aic1"), a)[0] == 0
    assert _import(cli, fake_tree(tmp_path / "aic2", scale=2.0), b)[0] == 0
    code, text, err = cli("calib", "diff", str(a), str(b), "--tables", "--json")
    assert code == 0, err
    doc = json.loads(text)
    assert doc["A"]["provenance"]["kind"] == doc["B"]["provenance"]["kind"] == "measured"
    rows = {(r["kind"], r["selection"]): r for r in doc["rows"]}
    gemm = rows[("gemm", "bf16")]
    assert gemm["shared_points"] == 3 and gemm["median_ratio"] == pytest.approx(2.0)
    assert gemm["worst_ratio"] == pytest.approx(2.0)
    assert rows[("gemm", "fp8_block")]["shared_points"] == 1
    assert rows[("mla_bmm", "pre,bf16")]["median_ratio"] == pytest.approx(1.0)    # unscaled in the fake
    assert rows[("allreduce", "nccl,bf16")]["median_ratio"] == pytest.approx(2.0)
    code, text, err = cli("calib", "diff", str(a), str(b), "--tables")
    assert code == 0 and "median B/A" in text and "selections compared" in text


def _profile_naming(tmp_path: Path, tables: Path) -> Path:
    """A profile whose h200-sxm entry (the shipped one) names `tables` (a path relative to the profile)."""
    doc = yaml.safe_load((shipped_dir() / "gpus" / "h200-sxm.yaml").read_text())
    doc["gpus"]["h200-sxm"]["operator_tables"] = {"path": tables.name, "note": "test tables"}
    path = tables.parent / "profile.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_diff_tables_of_profiles_names_the_gpu_entry(cli, tmp_path: Path) -> None:
    a = tmp_path / "pa" / "ops"
    b = tmp_path / "pb" / "ops"
    assert _import(cli, fake_tree(tmp_path / "aic1"), a)[0] == 0
    assert _import(cli, fake_tree(tmp_path / "aic2", scale=0.5), b)[0] == 0
    pa, pb = _profile_naming(tmp_path, a), _profile_naming(tmp_path, b)
    code, text, err = cli("calib", "diff", str(pa), str(pb), "--tables", "--gpu", "h200-sxm", "--json")
    assert code == 0, err
    rows = {(r["kind"], r["selection"]): r for r in json.loads(text)["rows"]}
    assert rows[("gemm", "bf16")]["median_ratio"] == pytest.approx(0.5)
    code, text, err = cli("calib", "diff", str(a), str(pb), "--tables", "--json")    # a directory and a profile
    assert code == 0, err                                                             # (one entry: no --gpu needed)
    for args, words in (((str(pa), str(pb), "--tables", "--gpu", "h100-sxm"), "'h100-sxm' is not in this profile"),
                        ((str(tmp_path), str(b), "--tables"), "without a tables.yaml"),
                        ((str(pa), str(b), "--tables", "--gpu", "b200"), "'b200' is not in this profile")):
        code, _, err = cli("calib", "diff", *args)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1, (args, err)


def test_diff_tables_of_an_entry_without_tables_is_a_clean_error(cli, tmp_path: Path) -> None:
    doc = yaml.safe_load((shipped_dir() / "gpus" / "h200-sxm.yaml").read_text())
    doc["gpus"]["h200-sxm"].pop("operator_tables", None)
    p = tmp_path / "plain.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, _, err = cli("calib", "diff", str(p), str(p), "--tables", "--gpu", "h200-sxm")
    assert code == 2 and "names no operator_tables" in err and len(err.strip().splitlines()) == 1


def test_diff_gpu_in_neither_profile_is_a_clean_error(cli) -> None:
    h200 = str(shipped_dir() / "gpus" / "h200-sxm.yaml")
    code, text, err = cli("calib", "diff", h200, h200, "--gpu", "no-such-gpu")
    assert code == 2 and "field '--gpu'" in err and "in neither profile" in err and "h200-sxm" in err
    assert "differing constants" not in text and len(err.strip().splitlines()) == 1


def test_a_file_of_another_schema_is_one_line_exit_2(cli, tree: Path, tmp_path: Path) -> None:
    gemm = tree / "systems" / "data" / SYSTEM / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet"
    pd.DataFrame([{"dtype": "bfloat16", "m": 1, "n": 8, "k": 8, "latency": 0.01}]).to_parquet(gemm)
    out = tmp_path / "o"
    code, text, err = _import(cli, tree, out)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "gemm_perf.parquet" in err and "lacks the column 'gemm_dtype'" in err and not out.exists()


def test_a_table_with_a_non_numeric_shape_column_is_one_line_exit_2(cli, tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "ops"
    assert _import(cli, tree, out)[0] == 0
    frame = pd.read_parquet(out / "gemm.parquet")
    frame["m"] = frame["m"].astype(str).replace({"1": "x"})
    frame.to_parquet(out / "gemm.parquet")
    code, text, err = cli("calib", "diff", str(out), str(out), "--tables")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "gemm.parquet" in err and "field 'm'" in err and "must hold numbers" in err


# ---- any system the database ships (issue 35): simroute names, the default version, --list, TRT-LLM files --------
def _system_file(root: Path, system: str, op: str, framework: str, version: str, stem: str, rows: list[dict]) -> None:
    folder = root / "systems" / "data" / system / op / framework / version
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(folder / f"{stem}.parquet")


def _gemm_rows(scale: float = 1.0) -> list[dict]:
    return [{"gemm_dtype": "bfloat16", "m": m, "n": 4096, "k": 4096, "latency": 0.01 * m * scale} for m in (1, 2)]


def test_a_simroute_gpu_name_maps_to_its_system(cli, tmp_path: Path) -> None:
    root = tmp_path / "aic"
    _system_file(root, "b200_sxm", "gemm", "sglang", "0.5.14", "gemm_perf", _gemm_rows())
    _system_file(root, "h100_pcie", "gemm", "vllm", "0.24.0", "gemm_perf", _gemm_rows())
    # a shipped entry's name, another simroute-style name (- for _), and the system's own name
    for gpu, system, framework in (("b200-sxm", "b200_sxm", "sglang"), ("h100-pcie", "h100_pcie", "vllm"),
                                   ("b200_sxm", "b200_sxm", "sglang")):
        out = tmp_path / gpu
        code, text, err = cli("calib", "import", "aiconfigurator", "--gpu", gpu, "--framework", framework, "--from",
                              str(root), "-o", str(out), "--json")
        assert code == 0, err
        assert json.loads(text)["system"] == system
        tables = load_operator_tables(out)
        assert tables.gpu == gpu and f"systems/data/{system}" in tables.provenance["ref"]


def test_an_unknown_gpu_is_one_line_naming_what_the_database_holds(cli, tree: Path, tmp_path: Path) -> None:
    _system_file(tree, "b200_sxm", "gemm", "sglang", "0.5.14", "gemm_perf", _gemm_rows())
    code, text, err = cli("calib", "import", "aiconfigurator", "--gpu", "z100", "--from", str(tree), "-o",
                          str(tmp_path / "o"))
    assert code == 2 and text == "" and len(err.strip().splitlines()) == 1 and "field '--gpu'" in err
    assert "no measurements for GPU 'z100'" in err and "b200-sxm (b200_sxm)" in err and "h200-sxm (h200_sxm)" in err
    assert "--list" in err and not (tmp_path / "o").exists()
    code, _, err = cli("calib", "import", "aiconfigurator", "--from", str(tree), "-o", str(tmp_path / "o"))
    assert code == 2 and "field '--gpu'" in err and "required" in err and len(err.strip().splitlines()) == 1


def test_the_default_version_is_the_databases_current_one_not_a_newer_unread_family(cli, tmp_path: Path) -> None:
    root = tmp_path / "aic"
    for version in ("0.5.9", "0.5.14"):
        _system_file(root, "h200_sxm", "gemm", "sglang", version, "gemm_perf", _gemm_rows())
    _system_file(root, "h200_sxm", "kda", "sglang", "0.5.16", "kda_perf", [{"x": 1}])   # a family never read
    code, text, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--from", str(root), "-o",
                          str(tmp_path / "a"), "--json")
    assert code == 0, err
    assert json.loads(text)["version"] == "0.5.14"          # newest holding the tables read, not kda's 0.5.16
    (root / "systems" / "query_versions.yaml").write_text(
        "defaults:\n  sglang: {current: '0.5.14'}\noverrides:\n  h200_sxm:\n    sglang: {current: '0.5.9'}\n")
    code, text, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--from", str(root), "-o",
                          str(tmp_path / "b"), "--json")
    assert code == 0, err
    assert json.loads(text)["version"] == "0.5.9"                         # the system's current one
    code, _, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--version", "0.5.16", "--from",
                       str(root), "-o", str(tmp_path / "c"))
    assert code == 2 and "version '0.5.16' not measured" in err and "0.5.9, 0.5.14" in err


def test_list_shows_every_system_its_frameworks_and_default_versions(cli, tmp_path: Path) -> None:
    root = tmp_path / "aic"
    _system_file(root, "gb200", "gemm", "trtllm", "1.3.0rc20", "gemm_perf", _gemm_rows())
    _system_file(root, "gb200", "gemm", "trtllm", "1.3.0rc23", "gemm_perf", _gemm_rows())
    _system_file(root, "gb200", "attention", "sglang", "0.5.14", "generation_attention_perf", [])
    (root / "systems" / "query_versions.yaml").write_text("defaults:\n  trtllm: {current: '1.3.0rc20'}\n")
    code, text, err = cli("calib", "import", "aiconfigurator", "--list", "--from", str(root), "--json")
    assert code == 0, err
    systems = {entry["system"]: entry for entry in json.loads(text)["systems"]}
    assert systems["gb200"]["gpu"] == "gb200"
    assert systems["gb200"]["frameworks"]["trtllm"] == {"versions": ["1.3.0rc20", "1.3.0rc23"], "default": "1.3.0rc20"}
    assert set(systems["gb200"]["frameworks"]) == {"trtllm", "sglang"}
    code, text, err = cli("calib", "import", "aiconfigurator", "--list", "--from", str(root))
    assert code == 0 and "gb200" in text and "1.3.0rc20*" in text


def test_tensorrt_llm_all_reduce_rows_without_a_backend_column_are_its_graph_mode(cli, tmp_path: Path) -> None:
    """TensorRT-LLM's custom_allreduce_perf has no `backend` column: its AUTO strategy timed under CUDA-graph
    capture, read as mode graph; NCCL's rows beside it as mode nccl."""
    root = tmp_path / "aic"
    _system_file(root, "h200_sxm", "gemm", "trtllm", "1.3.0rc20", "gemm_perf", _gemm_rows())
    _system_file(root, "h200_sxm", "comm", "trtllm", "1.3.0rc20", "custom_allreduce_perf", [
        {"allreduce_dtype": "bfloat16", "num_gpus": 8, "message_size": 1024, "latency": 0.005,
         "implementation": "trtllm"}])
    _system_file(root, "h200_sxm", "comm", "nccl", "2.29.2", "nccl_perf", [
        {"op_name": "all_reduce", "nccl_dtype": "half", "num_gpus": 8, "message_size": 1024, "latency": 0.02}])
    out = tmp_path / "o"
    code, _, err = cli("calib", "import", "aiconfigurator", "--gpu", "h200-sxm", "--framework", "trtllm", "--from",
                       str(root), "-o", str(out))
    assert code == 0, err
    ar = load_operator_tables(out).get(OpKind.ALLREDUCE)
    assert sorted(zip(ar.categorical["mode"].tolist(), ar.latency_us.tolist())) == [
        ("graph", pytest.approx(5.0)), ("nccl", pytest.approx(20.0))]


def test_trim_says_so_in_the_manifest(cli, tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "trimmed"
    code, text, err = _import(cli, tree, out, "--trim", "--json")
    assert code == 0, err
    summary = json.loads(text)
    assert summary["trimmed"] and summary["rows_measured"]["gemm"] == 4 and summary["rows"]["gemm"] <= 4
    manifest = yaml.safe_load((out / "tables.yaml").read_text())
    assert "without --trim" in manifest["provenance"]["trimmed"]
    assert manifest["tables"]["gemm"]["rows_measured"] == 4


def test_calib_list_shows_profiles_not_operator_table_manifests(cli) -> None:
    code, text, err = cli("calib", "list")
    assert code == 0, err
    assert "INVALID" not in text and "tables.yaml" not in text and "ops/" not in text
    assert "gpus/b200-sxm" in text and "fabrics/gb200-nvlink5" in text


_MOE_SHAPE = {"moe_dtype": "nvfp4", "hidden_size": 7168, "inter_size": 2048, "topk": 8, "num_experts": 256,
              "moe_tp_size": 1, "moe_ep_size": 8, "distribution": "power_law_1.01"}


_SM_VERSIONS = {"h200_sxm": 90, "b200_sxm": 100, "b300_sxm": 103, "rtx_pro_6000_server": 120}


def _import_system(cli, root: Path, system: str, framework: str, version: str, out: Path) -> dict:
    """Import one system's tables, its architecture stated as the database states it (systems/<system>.yaml)."""
    _system_file(root, system, "gemm", framework, version, "gemm_perf", _gemm_rows())
    (root / "systems" / f"{system}.yaml").write_text(f"gpu:\n  sm_version: {_SM_VERSIONS[system]}\n")
    code, _, err = cli("calib", "import", "aiconfigurator", "--gpu", system, "--framework", framework, "--from",
                       str(root), "-o", str(out))
    assert code == 0, err
    return yaml.safe_load((out / "tables.yaml").read_text())


@pytest.mark.parametrize(("system", "framework", "version", "default", "faster"), [
    # TensorRT-LLM runs min-latency MoE only under enable_min_latency (default False): the CUTLASS rows
    ("b200_sxm", "trtllm", "1.3.0rc20", "moe_torch_flow_cutlass", "moe_torch_flow_min_latency"),
    # SGLang's 'auto' MoE runner off SM100 runs the Triton fused MoE, not FlashInfer's CUTLASS kernels
    ("h200_sxm", "sglang", "0.5.14", "sglang_fused_moe_triton", "sglang_flashinfer_cutlass_moe"),
    # on SM100 (B300's SM103 too) it runs flashinfer_trtllm for DeepSeek-V3-architecture experts, not Triton's
    ("b200_sxm", "sglang", "0.5.14", "sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton"),
    ("b300_sxm", "sglang", "0.5.14", "sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton"),
    # and on Hopper the Triton kernel even where the flashinfer_trtllm one was timed
    ("h200_sxm", "sglang", "0.5.14", "sglang_fused_moe_triton", "sglang_flashinfer_trtllm_moe")])
def test_moe_reads_the_frameworks_default_kernel_not_the_fastest(cli, tmp_path: Path, system: str, framework: str,
                                                                 version: str, default: str, faster: str) -> None:
    """A shape timed under two kernels, the framework's default the slower (listed second, so neither the file's
    order nor the latency picks it): the default's row is read, and the manifest says which kernels it kept."""
    root = tmp_path / "aic"
    _system_file(root, system, "moe", framework, version, "moe_perf", [
        {**_MOE_SHAPE, "num_tokens": 8, "kernel_source": faster, "latency": 0.05},
        {**_MOE_SHAPE, "num_tokens": 8, "kernel_source": default, "latency": 0.09},
        {**_MOE_SHAPE, "num_tokens": 8, "kernel_source": default, "latency": 0.08},   # timed twice: the faster
        {**_MOE_SHAPE, "num_tokens": 16, "kernel_source": faster, "latency": 0.06}])  # the faster kernel alone
    manifest = _import_system(cli, root, system, framework, version, tmp_path / "o")
    moe = load_operator_tables(tmp_path / "o").get(OpKind.MOE)
    assert sorted(zip(moe.numeric["tokens"].tolist(), moe.latency_us.tolist())) == [
        (8.0, pytest.approx(80.0)), (16.0, pytest.approx(60.0))]
    choice = manifest["tables"]["moe"]["kernel_choice"]
    assert choice["kernels_kept"] == {default: 1, faster: 1} and choice["shapes_with_several_kernels"] == 1
    assert f"{framework if framework != 'trtllm' else 'TensorRT-LLM'}" in choice["rule"]


def test_a_framework_without_an_established_default_keeps_the_files_first_kernel_and_says_so(
        cli, tmp_path: Path) -> None:
    root = tmp_path / "aic"
    _system_file(root, "h200_sxm", "moe", "vllm", "0.24.0", "moe_perf", [
        {**_MOE_SHAPE, "num_tokens": 8, "kernel_source": "vllm_b", "latency": 0.09},
        {**_MOE_SHAPE, "num_tokens": 8, "kernel_source": "vllm_a", "latency": 0.05}])
    manifest = _import_system(cli, root, "h200_sxm", "vllm", "0.24.0", tmp_path / "o")
    assert load_operator_tables(tmp_path / "o").get(OpKind.MOE).latency_us.tolist() == [pytest.approx(90.0)]
    assert manifest["tables"]["moe"]["kernel_choice"]["rule"] == \
        "no vllm default established for moe: the kernel the file lists first"


@pytest.mark.parametrize(("system", "default", "other"), [
    ("h200_sxm", "fa3", "triton"), ("h200_sxm", "fa3", "trtllm_mha"), ("b200_sxm", "trtllm_mha", "flashinfer"),
    ("b300_sxm", "trtllm_mha", "fa3"), ("rtx_pro_6000_server", "flashinfer", "triton"),
    ("rtx_pro_6000_server", "flashinfer", "trtllm_mha")])
def test_attention_reads_sglangs_default_backend_on_each_architecture(cli, tmp_path: Path, system: str, default: str,
                                                                      other: str) -> None:
    """SGLang 0.5.14's _get_default_attn_backend for an MHA model: fa3 on Hopper, trtllm_mha on SM100/103,
    flashinfer on SM120 (RTX PRO 6000, where trtllm_mha does not run); the other backend listed first."""
    root = tmp_path / "aic"
    att = {"batch_size": 4, "isl": 1024, "num_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
           "kv_cache_dtype": "bfloat16", "attn_dtype": "bfloat16", "window_size": 0, "step": 0}
    _system_file(root, system, "attention", "sglang", "0.5.14", "context_attention_perf", [
        {**att, "kernel_source": other, "latency": 0.02}, {**att, "kernel_source": default, "latency": 0.04}])
    manifest = _import_system(cli, root, system, "sglang", "0.5.14", tmp_path / "o")
    assert load_operator_tables(tmp_path / "o").get(OpKind.ATTENTION_PREFILL).latency_us.tolist() == [
        pytest.approx(40.0)]
    choice = manifest["tables"]["attention_prefill"]["kernel_choice"]
    assert choice["kernels_kept"] == {default: 1} and choice["defaults"] == [default]
    assert choice["sm_version"] == _SM_VERSIONS[system]


def test_the_framework_defaults_are_pinned_to_their_sources() -> None:
    """Each default names the source it was read from; changing one is a deliberate edit of both."""
    from simroute.calib.aiconfigurator import DEFAULT_KERNELS
    assert set(DEFAULT_KERNELS) == {("sglang", "attention"), ("sglang", "moe"), ("trtllm", "moe")}
    attention, moe, trt = (DEFAULT_KERNELS[key] for key in sorted(DEFAULT_KERNELS))
    # sglang 0.5.14 server_args._get_default_attn_backend, by compute-capability major
    assert [attention.defaults(sm) for sm in (90, 100, 103, 120, 80, None)] == [
        ("fa3",), ("trtllm_mha",), ("trtllm_mha",), ("flashinfer",), ("flashinfer",), ("flashinfer",)]
    assert "sglang 0.5.14" in attention.source and "_get_default_attn_backend" in attention.source
    # its moe_runner_backend 'auto': flashinfer_trtllm on SM100, the Triton fused MoE elsewhere
    assert moe.defaults(100)[0] == moe.defaults(103)[0] == "sglang_flashinfer_trtllm_moe"
    assert moe.defaults(90) == moe.defaults(120) == ("sglang_fused_moe_triton",)
    assert "server_args.py" in moe.source and "moe_runner_backend" in moe.source
    # TensorRT-LLM: min-latency MoE only under enable_min_latency (default False), on every GPU
    assert trt.defaults(100) == () and trt.opt_in == ("moe_torch_flow_min_latency",)
    assert "enable_min_latency default False" in trt.source
    assert trt.rank("moe_torch_flow_cutlass", 100) < trt.rank("moe_torch_flow_min_latency", 100)
    assert attention.rank("flashinfer", 120) < attention.rank("triton", 120)
    for entry in DEFAULT_KERNELS.values():
        assert entry.source.startswith("published: ")
