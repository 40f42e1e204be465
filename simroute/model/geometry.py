"""Geometry of the models simroute knows: absorbed-MLA (paper "Move the Query, Not the Cache" §3.2, §5.4) and
dense GQA models.

The cost model depends on a model only through bytes: the routed query row q, the returned partial row p
(o in bf16 plus the fp32 running max m and denominator l) and the cached c_KV per token-layer b_KV. The
step-time model (simroute.model.steptime) also needs the linear layers: hidden and FFN widths, heads, vocab
and, for MoE models, the experts; `linear_ops(tp)` lists each layer's GEMM shapes.
Every dimension cites where it comes from (the model's HF config.json, by name); values not verified against
a published config are marked `assumed`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

from simroute.errors import UnknownNameError

WIRE_BYTES = 2          # bf16 on the wire (paper §3.2)
STAT_BYTES = 4          # m and l are fp32 (paper §3.2)
WEIGHT_BYTES = 2        # bf16 activations (and bf16 weights)
CACHE_DTYPE_BYTES = {"bf16": 2, "fp8": 1}
# What a serving framework stores the KV cache in when told nothing (`--kv-cache-dtype auto`): the model's own dtype,
# unless the checkpoint's quantization config names a KV-cache scheme (SGLang's ModelRunner.configure_kv_cache_dtype:
# fp8 only when quant_config.kv_cache_quant_algo is "FP8"; vLLM's and TensorRT-LLM's `auto` likewise). No shipped
# checkpoint names one (DeepSeek-V3's quantization_config holds quant_method, fmt and weight_block_size only), so
# every shipped model's default is bf16.
DEFAULT_CACHE_DTYPE_SOURCE = ("bf16: the serving framework's default for the checkpoint (SGLang --kv-cache-dtype auto "
                              "stores the model's dtype, torch_dtype bfloat16, unless its quantization_config names a "
                              "KV-cache scheme; this one names none)")
# DeepSeek Sparse Attention's lightning indexer keeps one FP8 key of index_head_dim per token and layer with one fp32
# scale per 128 elements (DeepGEMM's fp8_paged_mqa_logits cache layout, [blocks, block_size, 1, head_dim + 4] bytes,
# which SGLang's and vLLM's DSA KV pools allocate beside the MLA latent), whatever the latent's dtype.
INDEX_KEY_BYTES = 1
INDEX_SCALE_BYTES = 4
INDEX_SCALE_BLOCK = 128
FP8_BLOCK = 128         # an FP8 checkpoint's weight blocks: one fp32 dequantisation scale per 128 x 128 weights
# Bytes per stored weight: bf16, or FP8 (e4m3) with its block scale (DeepSeek-V3's README_WEIGHTS.md, "FP8 Weights":
# 128x128 block scaling, a float32 weight_scale_inv per block).
WEIGHT_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0 + 4.0 / (FP8_BLOCK * FP8_BLOCK)}
# GEMMs an FP8 checkpoint keeps in bf16: the MoE gating (router). The embedding and the LM head are bf16 too
# (DeepSeek-V3 Technical Report, §3.3.1 "Mixed Precision Framework": the embedding module, the output head, the
# MoE gating modules, normalisation and attention operators stay in BF16 / FP32).
BF16_ONLY_OPS = frozenset({"router"})


@dataclass(frozen=True)
class LinearOp:
    """One GEMM of a layer on one GPU: tokens x k (input width) times k x n (weights).

    `experts` weight matrices of this shape exist (routed experts: E; otherwise 1); each token passes through
    `active` of them (experts per token; otherwise 1). Widths are per GPU at the given TP degree.
    """

    name: str
    k: int
    n: int
    experts: int = 1
    active: int = 1
    weight_dtype: str = "bf16"     # how the weights are stored ("fp8": FP8 GEMMs where the GPU has the rate)

    @property
    def weight_bytes(self) -> float:
        """Bytes of one weight matrix of this op (FP8 with its block scales)."""
        return self.k * self.n * WEIGHT_DTYPE_BYTES[self.weight_dtype]

    @property
    def fp8(self) -> bool:
        return self.weight_dtype == "fp8"


def _split(width: int, tp: int) -> int:
    """Width per GPU of a column- or row-parallel dimension (rounded up: a remainder still costs a slice)."""
    return math.ceil(width / tp)


@dataclass(frozen=True)
class ModelGeometry:
    """Published dimensions of one model; derived byte sizes are properties."""

    name: str
    d_qk: int                      # absorbed query / c_KV width: kv_lora_rank + qk_rope_head_dim
    d_v: int                       # partial output width: kv_lora_rank
    layers: int
    heads_q: int
    rope_dims: int = 64
    index_topk: int = 0            # selection budget of the sparse indexer (0 = dense)
    index_n_heads: int = 0         # the lightning indexer's query heads (DSA; 0 = no indexer charged)
    index_head_dim: int = 0        # and its key / query width (FP8)
    context_window: int = 0        # longest sequence (prompt + output tokens) the model is served with (0 = unknown)
    token_compression: tuple[int, ...] = ()   # per-layer m:1 token-axis ratios, interleaved (V4)
    cache_dtype: str = "bf16"
    weight_dtype: str = "bf16"     # the checkpoint's linear-layer weights ("fp8": DeepSeek-V3 family, Kimi K2)
    kv_heads: int = 1              # cached heads per token-layer: 1 latent for MLA, n_kv_heads for GQA
    kv_tensors: int = 1            # 1 for MLA (the latent serves K and V), 2 for GQA (K and V)
    # Linear layers (0 = unknown: the step-time model needs them, the closed form does not).
    hidden: int = 0
    intermediate: int = 0          # dense gated FFN width (the dense layers of a MoE model)
    vocab: int = 0
    q_lora_rank: int = 0           # MLA query down-projection rank (0 = a direct q projection)
    qk_nope_head_dim: int = 0      # MLA per-head non-rotary q/k width (uncompressed)
    v_head_dim: int = 0            # MLA per-head value width (uncompressed)
    routed_experts: int = 0        # 0 = dense FFN in every layer
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_intermediate: int = 0
    dense_layers: int = 0          # leading dense-FFN layers of a MoE model (first_k_dense_replace)
    published_active_params: float = 0.0   # as the model card states it (checked against active_params)
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def q_bytes(self) -> int:
        """Query row on the wire: d_qk x 2 B (1152 B for V2-Lite)."""
        return self.d_qk * WIRE_BYTES

    @property
    def p_bytes(self) -> int:
        """Partial row: d_v x 2 B + m, l in fp32 (1032 B for V2-Lite)."""
        return self.d_v * WIRE_BYTES + 2 * STAT_BYTES

    @property
    def qp_bytes(self) -> int:
        return self.q_bytes + self.p_bytes

    @property
    def b_kv(self) -> int:
        """Cached bytes per token per layer: the c_KV latent (1152 B for V2-Lite in bf16; 2 x kv_heads x d for
        GQA) in the cache dtype, plus a sparse model's index key (`index_key_bytes`): a copy carries both, since the
        requester's indexer scores every token it holds."""
        return self.kv_heads * self.kv_tensors * self.d_qk * CACHE_DTYPE_BYTES[self.cache_dtype] + self.index_key_bytes

    @property
    def has_indexer(self) -> bool:
        """DSA's lightning indexer: scores every context token per query token and keeps the top `index_topk`."""
        return self.index_topk > 0 and self.index_n_heads > 0 and self.index_head_dim > 0

    @property
    def index_key_bytes(self) -> int:
        """The indexer's cached key per token and layer: FP8 with one fp32 scale per 128 elements (132 B for
        DeepSeek-V3.2), whatever the latent's dtype; 0 without an indexer."""
        if not self.has_indexer:
            return 0
        return (self.index_head_dim * INDEX_KEY_BYTES
                + -(-self.index_head_dim // INDEX_SCALE_BLOCK) * INDEX_SCALE_BYTES)

    def indexer_ops(self) -> list[LinearOp]:
        """The indexer's projections of one layer (DeepSeek-V3.2-Exp's inference/model.py, `Indexer`): wq_b from the
        query latent to index_n_heads x index_head_dim, wk from the hidden state to one key, weights_proj to one
        weight per index head (bf16). Replicated on every TP rank (each rank selects for all its heads)."""
        if not self.has_indexer:
            return []
        width = self.index_n_heads * self.index_head_dim
        return [LinearOp("index_q", self.q_lora_rank or self.hidden, width, weight_dtype=self.weight_dtype),
                LinearOp("index_k", self.hidden, self.index_head_dim, weight_dtype=self.weight_dtype),
                LinearOp("index_weights", self.hidden, self.index_n_heads)]

    @cached_property
    def token_fraction(self) -> float:
        """Mean fraction of tokens kept per layer under token-axis compression (1.0 without)."""
        if not self.token_compression:
            return 1.0
        return sum(1.0 / ratio for ratio in self.token_compression) / len(self.token_compression)

    @property
    def kv_bytes_per_token(self) -> float:
        """Cached bytes of one token over all layers (token-axis compression included): the one definition
        the cost model, the step-time model and the simulator's HBM accounting share."""
        return self.chunk_bytes(1)

    def chunk_bytes(self, tokens: int, layers: int | None = None) -> float:
        """c_KV bytes of a chunk of `tokens` tokens over `layers` layers (all layers by default)."""
        return tokens * self.token_fraction * self.b_kv * (self.layers if layers is None else layers)

    def with_cache_dtype(self, dtype: str) -> "ModelGeometry":
        """The same model with its KV cache stored as `dtype` (bf16 or fp8); `sources["cache_dtype"]` says so."""
        if dtype not in CACHE_DTYPE_BYTES:
            raise UnknownNameError("cache dtype", dtype, list(CACHE_DTYPE_BYTES))
        if dtype == self.cache_dtype:
            return self
        return replace(self, cache_dtype=dtype,
                       sources={**self.sources, "cache_dtype": f"override: {dtype} (the default: {self.cache_dtype})"})

    def with_weight_dtype(self, dtype: str) -> "ModelGeometry":
        """The same model with its linear layers stored as `dtype` (bf16 or fp8); KV and activations unchanged."""
        if dtype not in WEIGHT_DTYPE_BYTES:
            raise UnknownNameError("weight dtype", dtype, list(WEIGHT_DTYPE_BYTES))
        if dtype == self.weight_dtype:
            return self
        was = self.sources.get("weight_dtype", self.weight_dtype)
        return replace(self, weight_dtype=dtype,
                       sources={**self.sources, "weight_dtype": f"override: {dtype} (the checkpoint's: {was})"})

    # ---- linear layers (the step-time model) -------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return self.kv_tensors == 1

    @property
    def is_moe(self) -> bool:
        return self.routed_experts > 0

    @property
    def has_linear_geometry(self) -> bool:
        return self.hidden > 0 and self.vocab > 0 and (self.intermediate > 0 or self.is_moe)

    def layer_kinds(self) -> dict[str, int]:
        """Layers of each kind: {"dense": n} for a dense model, {"dense": k, "moe": L - k} for MoE."""
        if not self.is_moe:
            return {"dense": self.layers}
        return {"dense": self.dense_layers, "moe": self.layers - self.dense_layers}

    def kv_heads_per_gpu(self, tp: int = 1) -> int:
        """Cached heads each GPU holds: GQA K/V heads split over TP (replicated past kv_heads); the MLA latent
        is replicated on every rank."""
        return _split(self.kv_heads, tp) if not self.is_mla else self.kv_heads

    def b_kv_per_gpu(self, tp: int = 1) -> float:
        """Cached bytes per token-layer on one GPU of a TP group."""
        return self.b_kv * self.kv_heads_per_gpu(tp) / self.kv_heads

    def _attention_ops(self, tp: int) -> list[LinearOp]:
        hidden, heads_q = self.hidden, _split(self.heads_q, tp)
        if not self.is_mla:
            kv_heads = self.kv_heads_per_gpu(tp)
            return [LinearOp("qkv", hidden, (heads_q + 2 * kv_heads) * self.d_qk),
                    LinearOp("o", heads_q * self.d_v, hidden)]
        qk_head = self.qk_nope_head_dim + self.rope_dims
        ops = [LinearOp("q_a", hidden, self.q_lora_rank), LinearOp("q_b", self.q_lora_rank, heads_q * qk_head)] \
            if self.q_lora_rank else [LinearOp("q", hidden, heads_q * qk_head)]
        # kv_a is replicated (the latent + rope key); kv_b (latent -> per-head k_nope, v) splits by heads. In
        # absorbed decode kv_b's halves are folded into q and o: the same weights are read, the same FLOPs done.
        return ops + [LinearOp("kv_a", hidden, self.d_qk), LinearOp("kv_b", self.d_v, heads_q * (self.qk_nope_head_dim +
                                                                                        self.v_head_dim)),
                      LinearOp("o", heads_q * self.v_head_dim, hidden)]

    def linear_ops(self, tp: int = 1, kind: str = "dense") -> list[LinearOp]:
        """The GEMMs of one layer of `kind` ("dense" or "moe") on one GPU at TP degree `tp`.

        Attention projections split by heads; FFN up (gate and up fused) / down split by the FFN width; MoE
        experts are tensor-parallel too (each GPU holds a 1/tp slice of every expert), the router replicated.
        Every op but the router carries the model's `weight_dtype`.
        """
        if not self.has_linear_geometry:
            raise UnknownNameError("model with linear geometry", self.name,
                                   [model.name for model in MODELS.values() if model.has_linear_geometry])
        return [linear if linear.name in BF16_ONLY_OPS else replace(linear, weight_dtype=self.weight_dtype)
                for linear in self._layer_ops(tp, kind)]

    def _layer_ops(self, tp: int, kind: str) -> list[LinearOp]:
        hidden = self.hidden
        ops = self._attention_ops(tp)
        if kind == "dense":
            ffn = _split(self.intermediate, tp)
            return ops + [LinearOp("ffn_up", hidden, 2 * ffn), LinearOp("ffn_down", ffn, hidden)]
        if kind != "moe" or not self.is_moe:
            raise UnknownNameError("layer kind", kind, list(self.layer_kinds()))
        expert = _split(self.expert_intermediate, tp)
        ops.append(LinearOp("router", hidden, self.routed_experts))
        if self.shared_experts:
            shared = _split(self.shared_experts * self.expert_intermediate, tp)
            ops += [LinearOp("shared_up", hidden, 2 * shared), LinearOp("shared_down", shared, hidden)]
        active, n_exp = self.experts_per_token, self.routed_experts
        return ops + [LinearOp("expert_up", hidden, 2 * expert, n_exp, active),
                      LinearOp("expert_down", expert, hidden, n_exp, active)]

    def lm_head_op(self, tp: int = 1) -> LinearOp:
        """The vocabulary projection (split by vocab over TP), applied to the sampled position of each sequence."""
        return LinearOp("lm_head", self.hidden, _split(self.vocab, tp))

    def _params_of(self, ops: list[LinearOp], active: bool) -> int:
        return sum(linear.k * linear.n * (linear.active if active else linear.experts) for linear in ops)

    def params(self, active: bool = False) -> float:
        """Parameters (all, or activated per token), from the linear geometry: layers + embedding + LM head."""
        total = sum(layers * self._params_of(self.linear_ops(1, kind), active)
                    for kind, layers in self.layer_kinds().items())
        return float(total + 2 * self.vocab * self.hidden)

    @property
    def active_params(self) -> float:
        return self.params(active=True)


def _cfg(repo: str) -> str:
    return f"HF config.json of {repo}"


def _sources(repo: str, keys: str, **extra: str) -> dict[str, str]:
    """Every listed dimension read from the model's published config; `extra` adds or overrides entries."""
    out = {key: _cfg(repo) for key in keys.split()}
    out["weight_dtype"] = f"bf16: torch_dtype of the {_cfg(repo)}"
    out["cache_dtype"] = DEFAULT_CACHE_DTYPE_SOURCE
    out.update(extra)
    return out


_MLA_KEYS = ("d_qk d_v layers heads_q rope_dims hidden intermediate vocab q_lora_rank qk_nope_head_dim v_head_dim "
             "routed_experts experts_per_token shared_experts expert_intermediate dense_layers")
_MLA_NOTE = "d_qk = kv_lora_rank 512 + qk_rope_head_dim 64; d_v = kv_lora_rank 512 (absorbed MLA, paper §3.2)"
_GQA_KEYS = "d_qk d_v layers heads_q kv_heads hidden intermediate vocab"
# The context window is the config's max_position_embeddings: what SGLang (ModelConfig.get_context_length) and vLLM
# (max_model_len) serve by default and refuse a longer request against (prompt + max_tokens). A YaRN config with
# original_max_position_embeddings is not scaled again by its factor (DeepSeek-V3: 4096 x 40 = 163840).
_WINDOW = "max_position_embeddings {value} (HF config.json of {repo}); {note}"
_V3_WINDOW_NOTE = ("served as is by SGLang and vLLM; the model card advertises 128K, the length it was evaluated at "
                   "(YaRN, rope_scaling factor 40 over original_max_position_embeddings 4096)")


def _window(repo: str, value: int, note: str = "served as is by SGLang and vLLM") -> dict[str, str]:
    return {"context_window": _WINDOW.format(value=value, repo=repo, note=note)}


# DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2-Exp HF config.json: index_n_heads 64, index_head_dim
# 128, index_topk 2048; aiconfigurator-core 0.12.0's DSA_MODEL_DIMS for DeepseekV32ForCausalLM agrees).
_V32_INDEXER = dict(index_topk=2048, index_n_heads=64, index_head_dim=128)
_ASSUMED_INDEXER = "assumed: DeepSeek-V3.2's indexer (64 heads of 128, FP8); this model's own was not verified"
# DeepSeek-V3's linear dimensions (V3, R1 and V3.2 share them; the V4 / GLM-5.1 entries borrow them, assumed).
_V3_LINEAR = dict(hidden=7168, intermediate=18432, vocab=129280, q_lora_rank=1536, qk_nope_head_dim=128,
                  v_head_dim=128, routed_experts=256, experts_per_token=8, shared_experts=1,
                  expert_intermediate=2048, dense_layers=3)
_V4_WINDOW = ("assumed: 1,048,576 (DeepSeek-V4: Towards Highly Efficient Million-Token Context Intelligence, the "
              "technical report's title); the served config was not verified")
_ASSUMED_V3 = ("assumed: DeepSeek-V3's (deepseek-ai/DeepSeek-V3 HF config.json); this model's own config was not "
               "verified")


_FP8_V3 = ("fp8: HF config.json of {repo}, quantization_config (quant_method fp8, fmt e4m3, weight_block_size "
           "[128, 128]); DeepSeek-V3's README ('Since FP8 training is natively adopted in our framework, we only "
           "provide FP8 weights') and DeepSeek-V3 Technical Report §3.3 (FP8 Training)")


def _fp8(repo: str) -> dict[str, str]:
    return {"weight_dtype": _FP8_V3.format(repo=repo)}


def _assumed_linear() -> dict[str, str]:
    return {**{key: _ASSUMED_V3 for key in _V3_LINEAR}, "weight_dtype": "assumed bf16 (this model's checkpoint was not "
                                                                    "verified)",
            "cache_dtype": DEFAULT_CACHE_DTYPE_SOURCE}


def _gqa(name: str, repo: str, layers: int, heads: int, kv_heads: int, hidden: int, ffn: int, vocab: int,
         params: float, params_text: str, window: int) -> "ModelGeometry":
    """A dense Llama-family GQA model (head_dim 128, rotary over the whole head), every dimension from its
    HF config.json and the parameter count from its safetensors metadata."""
    return ModelGeometry(name, 128, 128, layers, heads, rope_dims=128, kv_heads=kv_heads, kv_tensors=2,
                         hidden=hidden, intermediate=ffn, vocab=vocab, published_active_params=params,
                         context_window=window,
                         sources=_sources(repo, _GQA_KEYS + " rope_dims",
                                          published_active_params=f"{params_text} ({repo} safetensors metadata)",
                                          **_window(repo, window)))


MODELS: dict[str, ModelGeometry] = {model.name: model for model in [
    ModelGeometry("deepseek-v2-lite", 576, 512, 27, 16, hidden=2048, intermediate=10944, vocab=102400,
                  qk_nope_head_dim=128, v_head_dim=128, routed_experts=64, experts_per_token=6, shared_experts=2,
                  expert_intermediate=1408, dense_layers=1, published_active_params=2.4e9,
                  context_window=163840,
                  sources=_sources("deepseek-ai/DeepSeek-V2-Lite", _MLA_KEYS, note=_MLA_NOTE,
                                   published_active_params="2.4B activated (DeepSeek-V2-Lite model card)",
                                   **_window("deepseek-ai/DeepSeek-V2-Lite", 163840,
                                             "served as is by SGLang and vLLM; the model card lists 32k"))),
    ModelGeometry("deepseek-v3", 576, 512, 61, 128, **_V3_LINEAR, published_active_params=37e9, weight_dtype="fp8",
                  context_window=163840,
                  sources=_sources("deepseek-ai/DeepSeek-V3", _MLA_KEYS, note=_MLA_NOTE,
                                   **_fp8("deepseek-ai/DeepSeek-V3"),
                                   **_window("deepseek-ai/DeepSeek-V3", 163840, _V3_WINDOW_NOTE),
                                   published_active_params="37B activated per token (DeepSeek-V3 Technical Report, abstract)")),
    ModelGeometry("deepseek-r1", 576, 512, 61, 128, **_V3_LINEAR, published_active_params=37e9, weight_dtype="fp8",
                  context_window=163840,
                  sources=_sources("deepseek-ai/DeepSeek-R1", _MLA_KEYS, note="R1 shares V3's geometry; " + _MLA_NOTE,
                                   **_fp8("deepseek-ai/DeepSeek-R1"),
                                   **_window("deepseek-ai/DeepSeek-R1", 163840, _V3_WINDOW_NOTE),
                                   published_active_params="37B activated (DeepSeek-R1 model card)")),
    ModelGeometry("deepseek-v3.2", 576, 512, 61, 128, **_V32_INDEXER, **_V3_LINEAR, published_active_params=37e9,
                  weight_dtype="fp8", context_window=163840,
                  sources=_sources("deepseek-ai/DeepSeek-V3.2-Exp",
                                   _MLA_KEYS + " index_topk index_n_heads index_head_dim",
                                   note=_MLA_NOTE, **_fp8("deepseek-ai/DeepSeek-V3.2-Exp"),
                                   **_window("deepseek-ai/DeepSeek-V3.2-Exp", 163840, _V3_WINDOW_NOTE),
                                   published_active_params="37B (V3 base, DeepSeek-V3.2-Exp model card)")),
    ModelGeometry("deepseek-v4-pro", 576, 512, 61, 128, index_topk=1024, index_n_heads=64, index_head_dim=128,
                  token_compression=(4, 128), **_V3_LINEAR, context_window=1048576,
                  sources={"index_n_heads": _ASSUMED_INDEXER, "index_head_dim": _ASSUMED_INDEXER,
                           "context_window": _V4_WINDOW,
                           "d_qk": _MLA_NOTE, "d_v": _MLA_NOTE, "layers": "assumed 61 (V3 lineage)",
                           "heads_q": "assumed 128 (V3 lineage)", "index_topk": "1024 (paper §5.4)",
                           "token_compression": "4:1 and 128:1 interleaved (paper §5.4)", **_assumed_linear()}),
    ModelGeometry("deepseek-v4-flash", 576, 512, 61, 128, index_topk=512, index_n_heads=64, index_head_dim=128,
                  token_compression=(4, 128), **_V3_LINEAR, context_window=1048576,
                  sources={"index_n_heads": _ASSUMED_INDEXER, "index_head_dim": _ASSUMED_INDEXER,
                           "context_window": _V4_WINDOW,
                           "d_qk": _MLA_NOTE, "d_v": _MLA_NOTE, "layers": "assumed 61 (V3 lineage)",
                           "heads_q": "assumed 128", "index_topk": "512 (paper §5.4)",
                           "token_compression": "4:1 and 128:1 interleaved (paper §5.4)", **_assumed_linear()}),
    ModelGeometry("glm-5.1", 576, 512, 61, 128, index_topk=2048, index_n_heads=64, index_head_dim=128, **_V3_LINEAR,
                  context_window=202752,
                  sources={"index_n_heads": _ASSUMED_INDEXER, "index_head_dim": _ASSUMED_INDEXER,
                           "context_window": "assumed: GLM-5's 202,752 (aiconfigurator-core 0.12.0 measures "
                                             "zai-org/GLM-5's DSA decode to position 202,751); GLM-5.1's own "
                                             "config was not verified",
                           "d_qk": _MLA_NOTE, "d_v": _MLA_NOTE, "layers": "assumed 61", "heads_q": "assumed 128",
                           "index_topk": "2048 DSA (paper §5.4)", **_assumed_linear()}),
    ModelGeometry("kimi-k2", 576, 512, 61, 64, hidden=7168, intermediate=18432, vocab=163840, q_lora_rank=1536,
                  qk_nope_head_dim=128, v_head_dim=128, routed_experts=384, experts_per_token=8, shared_experts=1,
                  expert_intermediate=2048, dense_layers=1, published_active_params=32e9, weight_dtype="fp8",
                  context_window=131072,
                  sources=_sources("moonshotai/Kimi-K2-Instruct", _MLA_KEYS, note=_MLA_NOTE,
                                   **_window("moonshotai/Kimi-K2-Instruct", 131072),
                                   weight_dtype="fp8: HF config.json of moonshotai/Kimi-K2-Instruct, "
                                                "quantization_config (block-fp8, weight_block_size [128, 128])",
                                   published_active_params="32B activated (Kimi K2 model card)")),
    # Dense GQA models: a routed "row" is one query head (d = head_dim 128); the cache holds K and V of the KV
    # heads. llama-3.1-70b is also the prefill -> decode (ARK) scenario's model, whose KV transfers are elephants.
    _gqa("llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 32, 32, 4096, 11008, 32000, 6.74e9, "6.74B", 4096),
    _gqa("llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 64, 8, 8192, 28672, 32000, 68.98e9, "69.0B", 4096),
    _gqa("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 32, 8, 4096, 14336, 128256, 8.03e9, "8.03B", 131072),
    _gqa("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 64, 8, 8192, 28672, 128256, 70.6e9, "70.6B", 131072),
]}


def get_model(name: str) -> ModelGeometry:
    """Look a model up by name; an unknown name lists the valid ones."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise UnknownNameError("model", name, list(MODELS)) from None
