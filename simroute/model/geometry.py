"""Payload geometry of absorbed-MLA models (paper §3.2, §5.4; REFERENCE §1).

The cost model depends on a model only through bytes: the routed query row q, the returned partial row p
(o in bf16 plus the fp32 running max m and denominator l) and the cached c_KV per token-layer b_KV.
Every dimension cites where it comes from; values not in the reference sheet are marked `assumed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simroute.errors import UnknownNameError

WIRE_BYTES = 2          # bf16 on the wire (paper §3.2)
STAT_BYTES = 4          # m and l are fp32 (paper §3.2)
CACHE_DTYPE_BYTES = {"bf16": 2, "fp8": 1}


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
    token_compression: tuple[int, ...] = ()   # per-layer m:1 token-axis ratios, interleaved (V4)
    cache_dtype: str = "bf16"
    kv_heads: int = 1              # cached heads per token-layer: 1 latent for MLA, n_kv_heads for GQA
    kv_tensors: int = 1            # 1 for MLA (the latent serves K and V), 2 for GQA (K and V)
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
        """Cached c_KV bytes per token per layer (1152 B for V2-Lite in bf16; 2 x kv_heads x d for GQA)."""
        return self.kv_heads * self.kv_tensors * self.d_qk * CACHE_DTYPE_BYTES[self.cache_dtype]

    @property
    def token_fraction(self) -> float:
        """Mean fraction of tokens kept per layer under token-axis compression (1.0 without)."""
        if not self.token_compression:
            return 1.0
        return sum(1.0 / r for r in self.token_compression) / len(self.token_compression)

    def chunk_bytes(self, tokens: int, layers: int | None = None) -> float:
        """c_KV bytes of a chunk of `tokens` tokens over `layers` layers (all layers by default)."""
        return tokens * self.token_fraction * self.b_kv * (self.layers if layers is None else layers)

    def with_cache_dtype(self, dtype: str) -> "ModelGeometry":
        if dtype not in CACHE_DTYPE_BYTES:
            raise UnknownNameError("cache dtype", dtype, list(CACHE_DTYPE_BYTES))
        from dataclasses import replace
        return replace(self, cache_dtype=dtype)


_CFG = "HF config.json"
_MLA = {"d_qk": "kv_lora_rank 512 + qk_rope_head_dim 64 (REFERENCE §1)", "d_v": "kv_lora_rank 512 (REFERENCE §1)"}

MODELS: dict[str, ModelGeometry] = {m.name: m for m in [
    ModelGeometry("deepseek-v2-lite", 576, 512, 27, 16, sources={
        **_MLA, "layers": "27 (paper §3.2; DeepSeek-V2-Lite " + _CFG + ")", "heads_q": "16 (REFERENCE §1)"}),
    ModelGeometry("deepseek-v3", 576, 512, 61, 128, sources={
        **_MLA, "layers": "61 (REFERENCE §1)", "heads_q": "128 (REFERENCE §1)", "note": "R1 shares V3's geometry"}),
    ModelGeometry("deepseek-r1", 576, 512, 61, 128, sources={
        **_MLA, "layers": "61 (REFERENCE §1: V3/R1)", "heads_q": "128 (REFERENCE §1)"}),
    ModelGeometry("deepseek-v3.2", 576, 512, 61, 128, index_topk=2048, sources={
        **_MLA, "layers": "61 (V3 base, REFERENCE §1)", "heads_q": "128", "index_topk": "2048 DSA (paper §5.4)"}),
    ModelGeometry("deepseek-v4-pro", 576, 512, 61, 128, index_topk=1024, token_compression=(4, 128), sources={
        **_MLA, "layers": "assumed 61 (V3 lineage; not in the reference sheet)", "heads_q": "128 (REFERENCE §1)",
        "index_topk": "1024 (paper §5.4)", "token_compression": "4:1 and 128:1 interleaved (paper §5.4)"}),
    ModelGeometry("deepseek-v4-flash", 576, 512, 61, 128, index_topk=512, token_compression=(4, 128), sources={
        **_MLA, "layers": "assumed 61 (not in the reference sheet)", "heads_q": "assumed 128",
        "index_topk": "512 (paper §5.4)", "token_compression": "4:1 and 128:1 interleaved (paper §5.4)"}),
    ModelGeometry("glm-5.1", 576, 512, 61, 128, index_topk=2048, sources={
        **_MLA, "layers": "assumed 61 (not in the reference sheet)", "heads_q": "128 (REFERENCE §1: GLM-5.x)",
        "index_topk": "2048 DSA (paper §5.4)"}),
    # A dense GQA model for the prefill -> decode (ARK) scenario, whose KV transfers are the elephants of the ARK
    # paper; a routed "row" is one query head (d = 128), the cache holds K and V of 8 KV heads.
    ModelGeometry("llama-3.1-70b", 128, 128, 80, 64, rope_dims=128, kv_heads=8, kv_tensors=2, sources={
        "d_qk": "head_dim 128 (Llama 3.1 70B " + _CFG + ")", "d_v": "head_dim 128", "layers": "80 (" + _CFG + ")",
        "heads_q": "64 (" + _CFG + ")", "kv_heads": "8 (GQA, " + _CFG + ")"}),
    ModelGeometry("kimi-k2", 576, 512, 61, 64, sources={
        **_MLA, "layers": "61 (Kimi K2 " + _CFG + ")", "heads_q": "64 (Kimi K2 " + _CFG + ")"}),
]}


def get_model(name: str) -> ModelGeometry:
    """Look a model up by name; an unknown name lists the valid ones."""
    try:
        return MODELS[name.lower()]
    except KeyError:
        raise UnknownNameError("model", name, list(MODELS)) from None
