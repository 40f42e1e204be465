"""The inputs of issue 20's peer bench (bench/bench_peer_ratio.py): the shipped Azure 2023 conversation trace is
the file its NOTICE names and imports as the trace it is, and `--without KIND` removes exactly that op kind from
the tables (that term falls back to the roofline; every other term stays measured)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from simroute.calib import load_profile
from simroute.model.steptime import BatchShape
from simroute.workload.importers import import_trace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import bench_peer_ratio  # noqa: E402

CONVERSATION = ROOT / "bench" / "data" / "azure_llm_2023_conv.csv"


def test_the_shipped_conversation_trace_is_the_file_its_notice_names():
    notice = (ROOT / "bench" / "data" / "NOTICE").read_text()
    digest = hashlib.sha256(CONVERSATION.read_bytes()).hexdigest()
    assert f"File sha256:\n{digest}" in notice


def test_the_conversation_trace_imports_with_its_own_arrivals_and_token_counts(tmp_path):
    source = pd.read_csv(CONVERSATION)
    csv = bench_peer_ratio.azure_csv(CONVERSATION, tmp_path / "azure.csv")
    assert pd.read_csv(csv).columns.tolist() == ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    requests = pd.read_parquet(import_trace("azure", csv, tmp_path / "conv.parquet") / "requests.parquet")
    assert len(requests) == len(source) == 19366
    assert requests["arrival_s"].to_numpy() == pytest.approx(source["arrived_at"].to_numpy(), abs=1e-9)
    assert (requests["prompt_tokens"].to_numpy() == source["num_prefill_tokens"].to_numpy()).all()
    assert (requests["output_tokens"].to_numpy() == source["num_decode_tokens"].to_numpy()).all()


def test_a_file_with_azure_columns_is_read_as_it_is(tmp_path):
    azure = tmp_path / "azure_code.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n")
    assert bench_peer_ratio.azure_csv(azure, tmp_path / "unused.csv") == azure
    assert not (tmp_path / "unused.csv").exists()


def _attention(profile_path: Path | str) -> tuple[float, str, str]:
    """A decode batch's attention term on Llama-2-7b A100 (s, what it read) and what its linear term read."""
    profile = load_profile(str(profile_path))
    step = profile.step_model("llama-2-7b", tp=1, intra_host_fabric="a100-nvlink3",
                              gpu_spec=profile.gpu_spec("a100-80gb", tables=True))
    terms = step.iteration(BatchShape.uniform(decode_seqs=64, context=1024))
    return terms.attention_s_per_layer, terms.sources["attention"], terms.sources["linear"]


def test_tables_without_a_kind_put_that_term_on_the_roofline_and_keep_the_others(tmp_path):
    profile = tmp_path / "without.yaml"
    profile.write_text(yaml.safe_dump(bench_peer_ratio.tables_without("a100-80gb", ["attention_decode"],
                                                                      tmp_path / "tables")))
    kept = yaml.safe_load((tmp_path / "tables" / "tables.yaml").read_text())["tables"]
    assert "attention_decode" not in kept and {"gemm", "attention_prefill"} <= set(kept)
    assert not (tmp_path / "tables" / "attention_decode.parquet").exists()
    shipped_s, shipped_source, _ = _attention("paper-all")
    dropped_s, dropped_source, linear_source = _attention(profile)
    assert shipped_source.startswith("attention_decode") and dropped_source == "roofline"
    assert linear_source == "gemm"
    # the measured rows of this MHA decode (64 x 1k) are slower than the roofline: the kind the bench attributes
    assert dropped_s < shipped_s


def test_dropping_a_kind_the_tables_lack_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a table"):
        bench_peer_ratio.tables_without("a100-80gb", ["no_such_kind"], tmp_path / "tables")


def test_an_overhead_what_if_changes_the_overhead_term_only(tmp_path):
    profile = tmp_path / "overhead.yaml"
    profile.write_text(yaml.safe_dump(bench_peer_ratio.tables_with_overhead("h100-sxm", 4800.0)))
    loaded, shipped = load_profile(str(profile)), load_profile("paper-all")
    batch = BatchShape.uniform(decode_seqs=64, context=1024)
    what_if, base = (profile.step_model("llama-2-70b", tp=4, intra_host_fabric="h100-nvlink4",
                                        gpu_spec=profile.gpu_spec("h100-sxm", tables=True)).iteration(batch)
                     for profile in (loaded, shipped))
    assert what_if.overhead_s == pytest.approx(4800e-6)
    assert what_if.iteration_s - base.iteration_s == pytest.approx(4800e-6 - base.overhead_s)
    assert what_if.sources == base.sources
