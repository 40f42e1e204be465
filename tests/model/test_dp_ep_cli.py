"""`simroute model step` with --dp-attention, --ep, --hosts and --nextn: the group's step, its sources, its HBM and
all-to-all bytes, and one-line refusals of shapes no engine runs."""

from __future__ import annotations

import json

import pytest

GROUP = ("--model", "deepseek-v3", "--gpu", "h200-sxm", "--tokens", "64", "--decode-seqs", "64", "--context", "4096")


def _json(cli, *args):
    code, out, err = cli("model", "step", *GROUP, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_two_hosts_with_mtp(cli):
    doc = _json(cli, "--tp", "16", "--dp-attention", "16", "--ep", "16", "--nextn", "2", "--accept-rate", "0.6")
    assert doc["inputs"]["a2a"] == "deepep" and doc["inputs"]["hosts"] == 2 and doc["inputs"]["attn_tp"] == 1
    assert doc["tokens_per_step"] == pytest.approx(1 + 0.6 + 0.36)
    assert doc["tpot_ms"] == pytest.approx(doc["iteration_ms"] / doc["tokens_per_step"])
    assert doc["iteration_ms"] == pytest.approx(sum(doc["terms_ms"].values()))
    assert doc["term_sources"]["collective"] == "moe_a2a" and doc["term_sources"]["experts"] == "moe_deepep"
    assert set(doc["mtp_ms"]) == {"verify", "draft_decode", "draft_extend"}
    # 64 tokens x 8 experts x 7,392 B from each of 16 GPUs, 8 of every 16 copies across the fabric
    assert doc["a2a_bytes_per_layer"]["dispatch"]["rdma"] == pytest.approx(16 * 64 * 8 * 7392 * 8 / 16)
    # the MTP module's layer of latent: 62 layers of 576 bf16 values on the one GPU attending the token
    assert doc["kv_bytes_per_token_per_gpu"] == 62 * 576 * 2
    assert doc["kv_capacity_tokens_per_group"] == 16 * doc["kv_capacity_tokens_per_gpu"]


def test_one_host_table(cli):
    code, out, err = cli("model", "step", *GROUP, "--tp", "8", "--dp-attention", "8", "--ep", "8")
    assert code == 0, err
    assert "dp-attention 8" in out and "allgather" in out and "collective" in out and "per MoE layer" in out
    assert "KV 70,272 B per token" in out and "capacity" in out


@pytest.mark.parametrize("args, words", [
    (("--tp", "8", "--dp-attention", "3"), "--dp-attention 3 does not divide --tp 8"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "7"), "--ep 7 does not divide --tp 8"),
    (("--tp", "16", "--dp-attention", "16", "--ep", "16", "--hosts", "3"), "--hosts 3 must divide --tp 16"),
    (("--tp", "8", "--dp-attention", "8", "--a2a", "nvshmem"), "unknown all-to-all 'nvshmem'"),
    (("--tp", "8", "--dp-attention", "8", "--a2a", "deepep"), "--a2a deepep needs --ep > 1"),
    (("--tp", "8", "--nextn", "1"), "give one of --accept-rate and --accept-length"),
    (("--tp", "8", "--accept-rate", "0.5"), "--accept-rate needs --nextn >= 1"),
    (("--tp", "8", "--nextn", "2", "--accept-length", "4"), "--accept-length must be in [1, nextn + 1 = 3]"),
    (("--tp", "8", "--dp-attention", "8", "--kv-layout", "tpla"), "tpla is a TP layout"),
    (("--tp", "16", "--ep", "16", "--hosts", "2"), "TP attention across hosts"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "8", "--redundant-experts", "4"), "256 routed experts + 4"),
    (("--tp", "8", "--dp-attention", "8", "--redundant-experts", "8"), "--redundant-experts needs --ep > 1"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "8", "--moe-load", "zipf"), "unknown expert load 'zipf'"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "8", "--weights", "bf16"), "GB of weights per GPU"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "8", "--tokens", "64", "--decode-seqs", "64", "--context",
      "100000"), "each DP rank's --decode-seqs 64 at --context 100,000"),
    (("--tp", "8", "--dp-attention", "8", "--ep", "8", "--tokens", "1", "--decode-seqs", "1", "--context",
      "163840"), "context window"),
    (("--model", "deepseek-v3", "--gpu", "a100-80gb", "--tp", "8", "--dp-attention", "8", "--ep", "8"),
     "FP8 tensor cores"),
])
def test_impossible_shapes_are_refused_in_one_line(cli, args, words):
    """Every refusal from simroute.model.limits (the one feasibility module): one line naming the flag, exit 2,
    nothing on stdout."""
    code, out, err = cli("model", "step", *GROUP, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert words in err and "'--" in err


def test_mtp_on_a_model_without_a_module_is_refused(cli):
    code, out, err = cli("model", "step", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "1", "--tokens", "8",
                         "--decode-seqs", "8", "--context", "1024", "--nextn", "1", "--accept-rate", "0.5")
    assert code == 2 and out == "" and "ships no MTP module" in err and len(err.strip().splitlines()) == 1
