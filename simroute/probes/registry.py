"""The probes `simroute calibrate` knows, what each needs, and how long it may take."""

from __future__ import annotations

from simroute.probes.framework import Probe

_H = "simroute.probes.host:probe_host"
_G = "simroute.probes.gpu_single"
_A = "simroute.probes.gpu_attn"
_N = "simroute.probes.nvshmem_probes"
_S = "simroute.probes.gpu_step"
_T = "simroute.probes.gpu_tables"

PROBES: dict[str, Probe] = {probe.name: probe for probe in [
    Probe("host-shm", _H, "cpu", "round trip + BW, two processes over shared memory (q 1152 B / p 1032 B rows)",
          timeout_s=120),
    Probe("host-tcp", _H, "cpu", "round trip + BW, two processes over loopback TCP 127.0.0.1", timeout_s=120),
    Probe("splice", f"{_G}:probe_splice", "gpu1", "delta-rotation of the 64 RoPE dims (YaRN) + scatter into "
          "the paged pool, 27 layers, ct 55..4096", deps=("cupy",), timeout_s=240),
    Probe("holder", f"{_A}:probe_holder", "gpu1", "holder partial attention (FlashMLA or fallback), N 1..256, "
          "h_q 16/128, ct 2048; sparse top-k; merge", deps=("cupy",), timeout_s=300),
    Probe("staging", f"{_G}:probe_staging", "gpu1", "K-stream D2D staging (K 1/4/8/16); single- vs multi-block "
          "copy rate", deps=("cupy",), timeout_s=180),
    Probe("nvshmem-loopback", f"{_N}:probe_loopback", "gpu1", "1-PE NVSHMEM put+signal loopback (software floor; "
          "never a fabric constant)", deps=("cupy", "nvshmem"), timeout_s=180),
    Probe("nvshmem-pes", f"{_N}:probe_pes", "gpus-host", "2+ PEs: sig_rt, full_rt over Mq, payload sweep "
          "900-8736 B/row, block-count sweep", deps=("cupy", "nvshmem"), timeout_s=420),
    Probe("nic-qp-sweep", "simroute.probes.nic_probes:probe_nic_qp_sweep", "gpus-host", "3+ PEs, P2P off "
          "(NVSHMEM_DISABLE_P2P=1): payload-free exchanges rotated over Q queue pairs -> the NIC's context capacity "
          "and miss cost (the message model's nic_qp_contexts, nic_context_miss_us)", deps=("cupy", "nvshmem"),
          timeout_s=300),
    # step-time constants (docs/STEP_TIME.md): torch bf16 on the GPU, numpy reference in a dry run
    Probe("hbm", f"{_S}:probe_hbm", "gpu1", "device-to-device copy bandwidth (achievable HBM) -> hbm_efficiency",
          deps=("torch",), timeout_s=60),
    Probe("gemm", f"{_S}:probe_gemm", "gpu1", "bf16 GEMM of every model's linear shapes, TP 1/2/4/8, 1..8192 "
          "tokens -> gemm_efficiency", deps=("torch",), timeout_s=180),
    Probe("decode-attention", f"{_S}:probe_decode_attention", "gpu1", "decode attention over context x batch: "
          "MLA (FlashMLA or torch, (out, lse)) and GQA (SDPA)", deps=("torch",), timeout_s=120),
    Probe("prefill-attention", f"{_S}:probe_prefill_attention", "gpu1", "causal prefill attention FLOP rate -> "
          "attention_efficiency", deps=("torch",), timeout_s=60),
    Probe("moe", f"{_T}:probe_moe", "gpu1", "fused routed experts (vLLM / SGLang fused_experts, else torch), "
          "balanced routing, moe_tp 1/2/4/8 without EP, 1..8192 tokens -> the moe table", deps=("torch",),
          timeout_s=180),
    Probe("elementwise", f"{_T}:probe_elementwise", "gpu1", "add + RMSNorm, RMSNorm, RoPE, silu x up (sgl_kernel, "
          "else torch) at every model width, 1..16384 tokens -> the elementwise table", deps=("torch",),
          timeout_s=90),
    Probe("decoder-layer", f"{_S}:probe_decoder_layer", "gpu1", "one decoder layer (DeepSeek-V2-Lite dense + MoE, "
          "Llama-2-7b), random weights, per operator over tokens", deps=("torch",), timeout_s=120),
    Probe("launch-overhead", f"{_S}:probe_launch_overhead", "gpu1", "one iteration's launches, eager and CUDA graph "
          "-> iteration_overhead_us / _graph_us", deps=("torch",), timeout_s=45),
    # framework self-tests (hidden; run with --only)
    Probe("selftest-hang", "simroute.probes.selftest:hang", "cpu", "a probe that never answers", hidden=True,
          timeout_s=2),
    Probe("selftest-missing", "simroute.probes.selftest:needs_missing", "cpu", "a probe lacking a library",
          hidden=True, timeout_s=30),
    Probe("selftest-crash", "simroute.probes.selftest:crash", "cpu", "a probe that raises", hidden=True,
          timeout_s=30),
]}

HOST_TRANSPORT = {"host-shm": "shm", "host-tcp": "tcp"}
