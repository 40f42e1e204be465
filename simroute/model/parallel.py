"""How a DeepSeek-class model is deployed over a group of GPUs: DP attention, expert parallelism, MTP.

Pure arithmetic, no tables (simroute.model.dpstep times it; simroute.model.limits.check_parallel checks it): the
shape of a deployment, what each GPU holds in HBM, the bytes of the expert-parallel all-to-all between every pair
of ranks (the flows the simulator puts on the fabric's links) and the multi-token-prediction arithmetic.
docs/STEP_TIME.md, "DP attention and expert parallelism", is the contract.

Vocabulary (SGLang's server arguments, which the measured tables were taken under):
- a **group** is `tp` GPUs serving one model copy (`--tp`); with DP attention (`--enable-dp-attention --dp N`)
  it runs `dp` attention **ranks**, each attending its own requests over its own MLA latent with `attn_tp =
  tp / dp` GPUs (1 in the usual `--tp 8 --dp 8`), while the dense and MoE layers process the tokens of the whole
  group;
- **expert parallelism** (`--ep`): the routed experts are split over `ep` GPUs (`experts / ep` each), the rest
  of the MoE group (`moe_tp = tp / ep`) slicing each expert;
- the **all-to-all** moving tokens to their experts and back: `allgather` (SGLang's default without an
  all-to-all backend: every GPU gathers the group's hidden states before the MLP, and the results are
  reduce-scattered after it) or `deepep` (`--moe-a2a-backend deepep`: DeepEP's dispatch / combine, normal mode
  for batches with prefill, low-latency mode for decode-only batches, SGLang's `--deepep-mode auto`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Sequence

from simroute.model.geometry import ModelGeometry

# Bytes of one hidden-state row on the wire. DeepEP's dispatch sends FP8 activations with one fp32 scale per 128
# values (SGLang quantises before dispatch for block-FP8 checkpoints: DeepEP `low_latency_dispatch(use_fp8=True)`
# and the normal-mode dispatch of per-token-group FP8); combine returns bf16; SGLang's all-gather / reduce-scatter
# move bf16.
FP8_GROUP = 128
BF16_BYTES = 2
FP32_BYTES = 4
# DeepEP normal mode's SM budget the measured rows are read at: SGLang's DeepEP buffer default (DeepEP
# `Buffer.num_sms = 20`; aiconfigurator's `ModelConfig.sms = 20`).
DEEPEP_NORMAL_SMS = 20
# Multi-token prediction modules a checkpoint ships (HF config.json `num_nextn_predict_layers`).
MTP_MODULES = {"deepseek-v3": 1, "deepseek-r1": 1, "deepseek-v3.2": 1}
MTP_SOURCE = "num_nextn_predict_layers: 1 in the HF config.json of deepseek-ai/DeepSeek-V3, -R1 and -V3.2-Exp"


class A2A(str, Enum):
    """How the MoE layer's tokens reach their experts (the module docstring)."""

    ALLGATHER = "allgather"
    DEEPEP = "deepep"


@dataclass(frozen=True)
class Deployment:
    """One serving group's parallelism. `hosts` and the GPUs per host place the group's ranks: rank r on host
    r // gpus_per_host (SGLang numbers ranks host by host). `a2a` None picks SGLang's: all-gather while the MoE
    group fits in one host, DeepEP once it spans hosts (aiconfigurator's choice for the same configurations).
    `distribution` is the routed-expert load the expert kernels are read at (the database's skewed
    `power_law_<alpha>` rows, or `balanced`); `redundant_experts` (EPLB) adds expert replicas per group, spread
    evenly, and reads the kernels at the balanced rows, the load EPLB aims for."""

    tp: int = 1
    dp: int = 1
    ep: int = 1
    gpus_per_host: int = 8
    a2a: A2A | None = None
    distribution: str = "power_law_1.01"
    redundant_experts: int = 0

    @property
    def attn_tp(self) -> int:
        """GPUs of one attention rank (its heads split over them)."""
        return self.tp // max(self.dp, 1)

    @property
    def moe_tp(self) -> int:
        """GPUs slicing each expert."""
        return self.tp // max(self.ep, 1)

    @property
    def hosts(self) -> int:
        return -(-self.tp // self.gpus_per_host)

    @property
    def a2a_mode(self) -> A2A:
        if self.a2a is not None:
            return A2A(self.a2a)
        return A2A.DEEPEP if self.hosts > 1 and self.ep > 1 else A2A.ALLGATHER

    @property
    def dp_attention(self) -> bool:
        return self.dp > 1

    @property
    def expert_distribution(self) -> str:
        return "balanced" if self.redundant_experts > 0 else self.distribution

    def host_of(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def experts_per_rank(self, geometry: ModelGeometry) -> int:
        """Expert slots each EP rank holds (routed + its share of the redundant ones)."""
        return (geometry.routed_experts + self.redundant_experts) // self.ep if geometry.is_moe else 0


# ---- DP padding (which tokens the MoE layer sees) -------------------------------------------------------------
def gathered_tokens(rank_tokens: Sequence[float], has_prefill: bool) -> float:
    """Rows of the all-gathered buffer the group's MLP runs on: SGLang's `DpPaddingMode` (dp_attention.py) pads
    every rank to the busiest one (MAX_LEN: dp x max, symmetric memory, what CUDA-graph decode uses) unless
    padding would more than double the traffic (sum x 2 < max x dp) or the batch has prefill (SUM_LEN: sum)."""
    width = len(rank_tokens)
    busiest, total = max(rank_tokens), sum(rank_tokens)
    if width == 1:
        return total
    if has_prefill or total * 2 < busiest * width:
        return total
    return busiest * width


# ---- expert-parallel traffic ----------------------------------------------------------------------------------
def dispatch_row_bytes(geometry: ModelGeometry) -> float:
    """Bytes of one hidden-state row DeepEP dispatches: FP8 values and an fp32 scale per 128 (7,392 B at 7168)."""
    return geometry.hidden * 1.0 + math.ceil(geometry.hidden / FP8_GROUP) * FP32_BYTES


def combine_row_bytes(geometry: ModelGeometry) -> float:
    """Bytes of one row combined back (bf16: 14,336 B at 7168) and of an all-gathered / reduce-scattered row."""
    return geometry.hidden * float(BF16_BYTES)


def rank_hit_probability(experts: int, rank_experts: int, topk: int) -> float:
    """Probability that a token's `topk` distinct experts, drawn uniformly from `experts`, include at least one of
    a rank's `rank_experts`: 1 - C(E - e, k) / C(E, k). DeepEP's normal mode sends a token once per such rank."""
    if rank_experts <= 0:
        return 0.0
    if experts - rank_experts < topk:
        return 1.0
    return 1.0 - math.comb(experts - rank_experts, topk) / math.comb(experts, topk)


def skewed_shares(ranks: int, hottest: float) -> tuple[float, ...]:
    """Shares of the token-expert pairs each of `ranks` EP ranks receives when rank 0 gets `hottest` x the mean
    (>= 1) and the others split the rest evenly (1 / ranks each when `hottest` is 1)."""
    if ranks == 1:
        return (1.0,)
    if not 1.0 <= hottest <= ranks:
        raise ValueError(f"the hottest rank's load must be 1 to {ranks} x the mean, got {hottest}")
    first = hottest / ranks
    return (first, *([(1.0 - first) / (ranks - 1)] * (ranks - 1)))


def power_law_hottest(alpha: float, tokens: int, experts: int, topk: int, ranks: int, *, draws: int = 64,
                      seed: int = 0) -> float:
    """How hot the busiest EP rank runs under the database's `power_law_<alpha>` routing: the mean over `draws`
    seeded draws of (busiest rank's token-expert pairs) / (the mean rank's). The collector's recipe
    (aiconfigurator's collector/helper.py, `_generate_power_law_distribution`): each expert's load drawn from a
    power law of exponent alpha on [1, 0.8 T] (on [0.01, 2] when T x topk <= E), scaled to T x topk pairs, capped
    at T per expert (the excess spread over the others), experts laid out contiguously over the ranks. The
    expert kernel rows of that distribution time this rank; `skewed_shares(ranks, power_law_hottest(...))` puts
    the same skew on the all-to-all's bytes."""
    import numpy as np

    if ranks <= 1 or tokens <= 0:
        return 1.0
    rng = np.random.default_rng(seed)
    low, high = (1.0, tokens * 0.8) if tokens * topk > experts else (0.01, 2.0)
    power = 1.0 - alpha
    total = tokens * topk
    ratios = []
    for _ in range(draws):
        uniform = rng.random(experts)
        loads = ((high ** power - low ** power) * uniform + low ** power) ** (1.0 / power)
        loads = loads / loads.sum() * total
        for _ in range(experts):                      # cap at T, spreading the excess over the uncapped
            excess = np.clip(loads - tokens, 0.0, None).sum()
            if excess <= 1e-9:
                break
            loads = np.minimum(loads, tokens)
            room = loads < tokens
            loads[room] += excess / room.sum()
        per_rank = loads.reshape(ranks, experts // ranks).sum(axis=1)
        ratios.append(per_rank.max() / per_rank.mean())
    return float(np.mean(ratios))


@dataclass(frozen=True)
class LayerTraffic:
    """One MoE layer's bytes between every pair of ranks (`dispatch[src][dst]`, `combine[src][dst]`; the
    diagonal stays on the GPU), and their split by the link they cross."""

    mode: A2A
    dispatch: tuple[tuple[float, ...], ...]
    combine: tuple[tuple[float, ...], ...]
    hosts: tuple[int, ...]                     # each rank's host
    relay: bool = False                        # DeepEP normal mode: cross-host bytes reach a host once, then NVLink
    # with `relay`: the share of the end-to-end bytes from a GPU to a host's GPUs that crosses the fabric (a token
    # goes once to the host, P(host hit) / the sum of its GPUs' P(GPU hit))
    relay_share: float = 1.0

    def _split(self, matrix: tuple[tuple[float, ...], ...]) -> dict[str, float]:
        out = {"local": 0.0, "nvlink": 0.0, "rdma": 0.0}
        for src, row in enumerate(matrix):
            for dst, nbytes in enumerate(row):
                kind = "local" if src == dst else "nvlink" if self.hosts[src] == self.hosts[dst] else "rdma"
                out[kind] += nbytes
        return out

    def by_link(self) -> dict[str, dict[str, float]]:
        """{dispatch, combine} -> {local, nvlink, rdma} bytes over the whole group (the matrix's own accounting:
        with `relay`, the NVLink legs of cross-host traffic are in `relay_nvlink_bytes`)."""
        return {"dispatch": self._split(self.dispatch), "combine": self._split(self.combine)}

    def legs(self) -> dict[tuple[int, int], float]:
        """Bytes per directed GPU pair on the links, dispatch and combine together: the matrices' own pairs, but
        with `relay` a cross-host token reaches the destination host once, on the source's rail peer there (the
        GPU of the same local index, as DeepEP's normal mode sends it), which forwards it over NVLink to each GPU
        it hits; combine reduces on the rail peer of the token's GPU and crosses the fabric once. What a
        simulator puts on its links (`simroute.sim.engine.group`). Computed once per object (a copy returned)."""
        return dict(self._leg_bytes)

    @functools.cached_property
    def _leg_bytes(self) -> dict[tuple[int, int], float]:
        """`legs`, kept on the (frozen) object: the pairs are a function of its fields."""
        hosts = self.hosts
        local: list[int] = []
        members: dict[int, list[int]] = {}
        for gpu, host in enumerate(hosts):
            local.append(len(members.setdefault(host, [])))
            members[host].append(gpu)

        def peer(gpu: int, host: int) -> int:
            ranks = members[host]
            return ranks[local[gpu]] if local[gpu] < len(ranks) else ranks[0]

        out: dict[tuple[int, int], float] = {}

        def add(src: int, dst: int, nbytes: float) -> None:
            if src != dst and nbytes > 0:
                out[(src, dst)] = out.get((src, dst), 0.0) + nbytes

        for src, row in enumerate(self.dispatch):
            for dst, nbytes in enumerate(row):
                if not self.relay or hosts[src] == hosts[dst]:
                    add(src, dst, nbytes)
                    continue
                via = peer(src, hosts[dst])
                add(src, via, nbytes * self.relay_share)
                add(via, dst, nbytes)
        for src, row in enumerate(self.combine):
            for dst, nbytes in enumerate(row):
                if not self.relay or hosts[src] == hosts[dst]:
                    add(src, dst, nbytes)
                    continue
                via = peer(dst, hosts[src])
                add(src, via, nbytes)
                add(via, dst, nbytes * self.relay_share)
        return out


def a2a_layer_traffic(geometry: ModelGeometry, deployment: Deployment, rank_tokens: Sequence[float],
                      shares: Sequence[float] | None = None, *, mode: A2A | None = None, prefill: bool = False,
                      placement: Sequence[object] | None = None) -> LayerTraffic:
    """The bytes one MoE layer moves between the group's GPUs for the given tokens per attention rank
    (`rank_tokens[r]`, one entry per DP rank; attention ranks of one GPU, `attn_tp` 1, under DeepEP).

    - `deepep`, decode (low-latency mode): every (token, expert) pair is one message to the expert's GPU:
      src -> dst carries tokens_src x topk x share_dst dispatch rows, and the same count of combine rows back.
    - `deepep`, prefill (normal mode): a token goes once to every GPU holding one of its experts (probability
      `rank_hit_probability`, or share-weighted under skew); cross-host it crosses the fabric once per host it
      hits and NVLink fans it out there (`relay`: the matrix holds the end-to-end bytes; `by_link` classifies
      them by the endpoints' hosts).
    - `allgather`: every GPU receives every other rank's rows (bf16) before the MLP and returns each rank's
      share of the reduced output after it: src -> dst carries tokens_src rows each way (the logical transfer;
      NCCL's ring realises it neighbour to neighbour).
    `shares[r]`: the fraction of token-expert pairs rank r's experts receive (default 1 / ep each).
    `placement[g]`: the host of the group's GPU g (any label; default host by host, `Deployment.host_of`).
    """
    mode = deployment.a2a_mode if mode is None else A2A(mode)
    gpus = deployment.tp
    if placement is not None and len(placement) != gpus:
        raise ValueError(f"placement must name the host of each of the {gpus} GPUs, got {len(placement)}")
    labels = list(placement) if placement is not None else [deployment.host_of(rank) for rank in range(gpus)]
    index = {label: number for number, label in enumerate(dict.fromkeys(labels))}
    hosts = tuple(index[label] for label in labels)
    if len(rank_tokens) != deployment.dp:
        raise ValueError(f"need one token count per attention rank ({deployment.dp}), got {len(rank_tokens)}")
    # tokens each GPU sends: its attention rank's, split over the rank's GPUs
    per_gpu = [rank_tokens[rank // deployment.attn_tp] / deployment.attn_tp for rank in range(gpus)]
    if mode is A2A.ALLGATHER:
        row = combine_row_bytes(geometry)
        gather = tuple(tuple(0.0 if src == dst else per_gpu[src] * row for dst in range(gpus)) for src in range(gpus))
        scatter = tuple(tuple(0.0 if src == dst else per_gpu[dst] * row for dst in range(gpus))
                        for src in range(gpus))
        return LayerTraffic(mode, gather, scatter, hosts)
    ep_ranks = deployment.ep
    if shares is None:
        shares = [1.0 / ep_ranks] * ep_ranks
    if len(shares) != ep_ranks or abs(sum(shares) - 1.0) > 1e-9:
        raise ValueError(f"shares must be {ep_ranks} fractions summing to 1")
    topk = geometry.experts_per_token
    out_row, back_row = dispatch_row_bytes(geometry), combine_row_bytes(geometry)
    if prefill:
        slots = geometry.routed_experts + deployment.redundant_experts
        # a rank's chance of being hit, its experts weighted by their share of the load
        hit = [rank_hit_probability(slots, round(share * slots), topk) for share in shares]
        counts = hit
    else:
        counts = [topk * share for share in shares]
    dispatch = tuple(tuple(per_gpu[src] * counts[dst] * out_row for dst in range(gpus)) for src in range(gpus))
    combine = tuple(tuple(per_gpu[dst] * counts[src] * back_row for dst in range(gpus)) for src in range(gpus))
    relay = prefill and len(set(hosts)) > 1
    share = 1.0
    if relay:       # a host of g GPUs: once per token that hits any of its g x e experts, not once per GPU hit
        per_host = max(hosts.count(host) for host in set(hosts))
        rank_slots = round(slots / ep_ranks)
        one = sum(hit) / len(hit)
        share = rank_hit_probability(slots, rank_slots * per_host, topk) / (per_host * one) if one > 0 else 1.0
    return LayerTraffic(mode, dispatch, combine, hosts, relay=relay, relay_share=share)


# ---- HBM -------------------------------------------------------------------------------------------------------
ATTENTION_OPS = frozenset({"q", "q_a", "q_b", "kv_a", "kv_b", "o", "qkv"})


@dataclass(frozen=True)
class HbmPerGpu:
    """What one GPU of the group holds (bytes), part by part, and one token's cached bytes on the GPU that
    attends it (the MTP module's layer included when it runs)."""

    parts: dict[str, float] = field(default_factory=dict)
    kv_bytes_per_token: float = 0.0
    kv_sources: str = ""

    @property
    def weights(self) -> float:
        return sum(self.parts.values())


def hbm_per_gpu(geometry: ModelGeometry, deployment: Deployment, *, mtp_layers: int = 0) -> HbmPerGpu:
    """Weights and KV per GPU. Attention projections split over the attention rank's GPUs (replicated on every
    rank: 11.4 GB of DeepSeek-V3 FP8 per GPU at attn_tp 1); dense FFNs and shared experts over the MLP's GPUs
    (the group under all-gather, one GPU under DeepEP: SGLang builds DeepEP's shared experts with tp 1 and the
    large-EP recipe runs dense layers with `--moe-dense-tp-size 1`); routed experts `experts_per_rank` whole
    experts sliced over moe_tp; embedding and LM head over the attention rank (SGLang's `--enable-dp-lm-head`).
    The MLA latent lives on the one rank that attends its request: a token costs one GPU `kv_bytes_per_token`
    of the TP-replicated layout's per-GPU figure, so a group holds dp x the tokens. `mtp_layers` adds the MTP
    module: one more MoE layer, its eh_proj (2 hidden -> hidden, bf16) and its layer of latent."""
    mlp_tp = 1 if deployment.a2a_mode is A2A.DEEPEP else deployment.tp
    if not deployment.dp_attention:
        mlp_tp = deployment.tp
    parts = {"attention": 0.0, "dense_ffn": 0.0, "shared_experts": 0.0, "router": 0.0, "routed_experts": 0.0}
    layer_counts = dict(geometry.layer_kinds())
    if mtp_layers and geometry.is_moe:
        layer_counts["moe"] = layer_counts.get("moe", 0) + mtp_layers
    for kind, count in layer_counts.items():
        if count <= 0:
            continue
        attention = geometry.linear_ops(deployment.attn_tp, kind)
        parts["attention"] += count * sum(gemm.weight_bytes for gemm in attention if gemm.name in ATTENTION_OPS)
        for gemm in geometry.linear_ops(mlp_tp, kind):
            if gemm.name in ATTENTION_OPS:
                continue
            if gemm.name.startswith("ffn_"):
                parts["dense_ffn"] += count * gemm.weight_bytes
            elif gemm.name.startswith("shared_"):
                parts["shared_experts"] += count * gemm.weight_bytes
            elif gemm.name == "router":
                parts["router"] += count * gemm.weight_bytes
        for gemm in geometry.linear_ops(deployment.moe_tp, kind):
            if gemm.experts > 1:
                parts["routed_experts"] += count * deployment.experts_per_rank(geometry) * gemm.weight_bytes
    vocab_slice = -(-geometry.vocab // deployment.attn_tp)
    parts["embedding_and_head"] = 2.0 * vocab_slice * geometry.hidden * BF16_BYTES
    if mtp_layers:
        parts["mtp_eh_proj"] = mtp_layers * 2.0 * geometry.hidden * geometry.hidden * BF16_BYTES
    layers = geometry.layers + mtp_layers
    per_token = geometry.kv_bytes_per_token * layers / geometry.layers
    per_token *= geometry.kv_heads_per_gpu(deployment.attn_tp) / geometry.kv_heads
    how = ("the whole latent on the one rank attending the token" if geometry.is_mla and deployment.dp_attention
           else "the TP layout's share")
    return HbmPerGpu(parts, per_token, f"{how}, {layers} layers")


# ---- MTP ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mtp:
    """Multi-token prediction (SGLang's EAGLE worker on the checkpoint's MTP module): `nextn` draft tokens per
    step, and either the per-draft acceptance rate (each draft kept only if every earlier one was) or the mean
    accepted length (tokens a step emits, the verify's own token included: 1 to nextn + 1). Checked by
    simroute.model.limits.check_mtp."""

    nextn: int
    accept_rate: float | None = None
    accepted_length: float | None = None

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens one step emits: 1 + a + a^2 + ... + a^nextn for acceptance rate a (the verify's token, then
        each draft accepted only after all before it), or the given accepted length."""
        if self.accepted_length is not None:
            return float(self.accepted_length)
        rate = float(self.accept_rate or 0.0)
        return sum(rate ** index for index in range(self.nextn + 1))

    @property
    def rate(self) -> float:
        """The per-draft acceptance rate: the given one, or the one whose `tokens_per_step` is the given accepted
        length (1 + a + ... + a^nextn rises with a from 1 to nextn + 1: bisection to 1e-12)."""
        if self.accept_rate is not None:
            return float(self.accept_rate)
        target = float(self.accepted_length if self.accepted_length is not None else 1.0)
        low, high = 0.0, 1.0
        for _ in range(60):
            mid = (low + high) / 2.0
            if sum(mid ** index for index in range(self.nextn + 1)) < target:
                low = mid
            else:
                high = mid
        return (low + high) / 2.0

    def length_probabilities(self) -> tuple[float, ...]:
        """P(a step emits j tokens) for j = 1 .. nextn + 1 at `rate` a: a^(j-1) (1 - a) below nextn + 1 (the
        j-th draft rejected after j - 1 accepted), a^nextn at it (all accepted). Their mean is `tokens_per_step`;
        a simulator draws a sequence's tokens per step from them with its own seeded generator."""
        rate = self.rate
        last = self.nextn + 1
        return tuple(rate ** (length - 1) * (1.0 - rate) if length < last else rate ** self.nextn
                     for length in range(1, last + 1))

    @property
    def draft_decode_passes(self) -> int:
        """MTP-layer passes at one token per sequence: SGLang's `draft_forward` runs the draft model
        speculative_num_steps - 1 times (the first draft token comes from the previous step's draft extend)."""
        return self.nextn - 1

    @property
    def verify_tokens(self) -> int:
        """Tokens per sequence the target model verifies (and the draft extend re-reads): nextn + 1."""
        return self.nextn + 1

    def tpot_s(self, step_s: float) -> float:
        """Time per output token: the step over the tokens it emits."""
        return step_s / self.tokens_per_step
