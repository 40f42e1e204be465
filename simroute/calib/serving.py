"""Measured serving benchmarks of real deployments (`calib/serving/measured.csv`), read as typed rows.

Each row is one published measurement of a serving framework (SGLang, TensorRT-LLM, vLLM) under a serving
benchmark client (a closed loop of N clients or an open request rate, random or ShareGPT prompts), with its
source, setup and the metrics as the source printed them (calib/serving/README.md says what each column means and
where each source's rows come from). `simroute validate --serving` compares simulated runs with these rows; this
module only reads and checks them.

Every row is checked at load: the header is the documented one, names map to simroute's (GPU entries, models,
the frameworks of `--engine`), units are the column's, metrics are positive and finite, a derived figure is
marked and agrees with the figures it comes from. A bad row is one `ConfigurationError` naming the file, the CSV
line and the field.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from simroute.errors import ConfigurationError
from simroute.model.geometry import MODELS

SERVING_TABLE = Path(__file__).resolve().parent.parent / "data" / "calib" / "serving" / "measured.csv"

FRAMEWORKS = ("sglang", "trtllm", "vllm")               # the names `--engine` takes (issue 35 item 1)
# GPU names as simroute's GPU entries (calib/gpus/NAME.yaml) spell them. A GPU named here with no entry yet goes
# in PENDING_GPUS: its rows load, and a run of them waits for the entry (b200-sxm has one since issue 35 item 6).
GPUS = ("a100-80gb", "b200-sxm", "h100-sxm", "h200-sxm")
PENDING_GPUS: tuple[str, ...] = ()
DEPLOYMENTS = ("baseline", "mtp", "dp-attention", "mtp+dp-attention")
SPECULATIVE = ("none", "mtp")
WEIGHT_DTYPES = ("bf16", "fp8")
KV_DTYPES = ("bf16", "fp8", "unstated")
DATASETS = ("random", "sharegpt")
# How the client drew each request's input and output lengths from the nominal L and the range ratio r.
LENGTH_RULES = ("uniform[r*L,L]", "uniform[max(1,r*L),L]", "fixed", "sharegpt")

# Metric columns, each in the unit its name ends with.
METRICS = ("ttft_median_ms", "ttft_mean_ms", "ttft_p99_ms", "tpot_mean_ms", "tpot_median_ms", "itl_mean_ms",
           "itl_median_ms", "e2e_median_s", "e2e_mean_s", "request_throughput_req_s", "output_throughput_tok_s",
           "total_throughput_tok_s", "output_throughput_per_gpu_tok_s", "total_throughput_per_gpu_tok_s")
# Per-GPU figures and the totals they are per GPU of.
PER_GPU = {"output_throughput_per_gpu_tok_s": "output_throughput_tok_s",
           "total_throughput_per_gpu_tok_s": "total_throughput_tok_s"}
DATE = re.compile(r"^\d{4}-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?$")     # a day, or a month where only that is known


@dataclass(frozen=True)
class ServingRow:
    """One measured point: who measured what, on what, under which load, and what they printed."""

    id: str
    source: str                     # a section of calib/serving/README.md
    source_url: str
    source_ref: str
    date: str                       # YYYY-MM-DD, or YYYY-MM where the source gives only the month
    author: str
    framework: str
    framework_version: str
    image: str
    gpu: str
    gpus: int
    nodes: int
    model: str
    checkpoint: str
    weight_dtype: str
    kv_cache_dtype: str
    kv_cache_default: str           # what the framework would use, where the source does not say
    tp: int
    ep: int
    dp_attention: bool
    speculative: str
    deployment: str
    chunked_prefill_tokens: int | None
    max_num_tokens: int | None
    max_running_requests: int | None
    cuda_graph_max_bs: int | None
    mem_fraction: float | None
    stream_interval: int | None
    scheduler_recv_interval: int | None     # SGLang --scheduler-recv-interval (iterations between input polls)
    prefill_graph_max_tokens: int | None    # SGLang's prefill CUDA graphs at the version's default (0: none)
    batch_wait_timeout_iters: int | None    # TensorRT-LLM's batch waiting: iterations context requests may wait
    batch_wait_max_tokens_ratio: float | None   # ... until the batch holds this share of max_num_tokens
    adp_balance: bool | None                # TensorRT-LLM's attention-DP balancing (attention_dp_config) where the
    adp_timeout_iters: int | None           # launch sets it: enable_balance, timeout_iters, batching_wait_iters;
    adp_batching_wait_iters: int | None     # empty: the framework's default (off)
    moe_backend: str | None                 # TensorRT-LLM's moe_config backend where the launch sets it
    fp8_gemm_backend: str | None            # SGLang's FP8 block-scaled GEMM backend where the launch picks one
                                            # other than the default (--fp8-gemm-backend, or the env it reads)
    mtp_draft_tokens: int | None            # MTP rows: draft tokens per step the launch sets (simroute's --nextn)
    mtp_accept_length: float | None         # MTP rows: mean tokens a step emits, as the source printed it; empty:
                                            # the source records none (then the row cannot be replayed)
    server_flags: str
    client: str
    dataset: str
    isl: int | None
    osl: int | None
    range_ratio: float | None
    length_rule: str
    ignore_eos: bool
    num_prompts: int
    warmups: int | None
    client_seed: int | None         # the client's --seed where simroute reproduces its length draws (SGLang's)
    concurrency: int | None         # closed loop of this many clients; None: open loop at request_rate_req_s
    request_rate_req_s: float       # inf: every request as soon as the loop (or nothing) allows
    metrics: dict[str, float] = field(default_factory=dict)    # METRICS present in the row
    derived: dict[str, str] = field(default_factory=dict)      # metric -> formula, for figures not printed
    holdout: bool = False           # suggested split: judge fitted constants on these
    notes: str = ""

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    def metric(self, name: str) -> float | None:
        """A metric's value in its column's unit, None where the source did not print it."""
        if name not in METRICS:
            raise KeyError(name)
        return self.metrics.get(name)


# TensorRT-LLM's moe_config.backend names (tensorrt_llm/llmapi/llm_args.py MoeConfig.backend, stored copies of the
# 1.1-1.3 era; AUTO from later copies)
# SGLang's --fp8-gemm-backend values (sglang 0.5.12 python/sglang/srt/layers/quantization/fp8_utils.py
# Fp8GemmRunnerBackend); a row names the one its launch runs where that is not the default (DeepGEMM on B200)
SGLANG_FP8_GEMM_BACKENDS = ("auto", "flashinfer_trtllm", "flashinfer_cutlass", "flashinfer_deepgemm", "cutlass",
                            "deep_gemm", "triton", "aiter")
TRTLLM_MOE_BACKENDS = ("AUTO", "CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON")

_SCALARS = [f.name for f in fields(ServingRow) if f.name not in ("metrics", "derived")]
COLUMNS = tuple(_SCALARS[:_SCALARS.index("request_rate_req_s") + 1]) + METRICS + ("derived", "holdout", "notes")


class _Row:
    """One CSV line being parsed: each accessor raises a ConfigurationError naming file, line and field."""

    def __init__(self, raw: dict[str, str], path: Path, line: int) -> None:
        self.raw, self.path, self.line = raw, path, line

    def fail(self, column: str, problem: str) -> ConfigurationError:
        return ConfigurationError(problem, file=self.path, field=column, line=self.line)

    def text(self, column: str, required: bool = True) -> str:
        value = self.raw[column].strip()
        if required and not value:
            raise self.fail(column, "is empty")
        return value

    def choice(self, column: str, valid: tuple[str, ...]) -> str:
        value = self.text(column)
        if value not in valid:
            raise self.fail(column, f"'{value}' is not one of {', '.join(valid)}")
        return value

    def integer(self, column: str, required: bool = True, minimum: int = 1) -> int | None:
        value = self.text(column, required)
        if not value:
            return None
        if not re.fullmatch(r"\d+", value) or int(value) < minimum:
            raise self.fail(column, f"'{value}' is not an integer >= {minimum}")
        return int(value)

    def number(self, column: str, required: bool = True, allow_inf: bool = False) -> float | None:
        value = self.text(column, required)
        if not value:
            return None
        try:
            number = float(value)
        except ValueError:
            raise self.fail(column, f"'{value}' is not a number") from None
        if math.isnan(number) or (math.isinf(number) and not allow_inf) or number <= 0:
            raise self.fail(column, f"'{value}' is not a positive finite number" + (" or inf" if allow_inf else ""))
        return number

    def flag(self, column: str) -> bool:
        return self.choice(column, ("true", "false")) == "true"


def _parse(row: _Row) -> ServingRow:
    url = row.text("source_url")
    if not url.startswith("https://"):
        raise row.fail("source_url", f"'{url}' is not an https address")
    date = row.text("date")
    if not DATE.match(date):
        raise row.fail("date", f"'{date}' is not YYYY-MM-DD (or YYYY-MM)")
    model = row.text("model")
    if model not in MODELS:
        raise row.fail("model", f"'{model}' is not a simroute model ({', '.join(sorted(MODELS))})")
    range_ratio = row.text("range_ratio", required=False)
    ratio = None
    if range_ratio:
        ratio = float(range_ratio) if re.fullmatch(r"\d+(\.\d+)?", range_ratio) else -1.0
        if not 0.0 <= ratio <= 1.0:
            raise row.fail("range_ratio", f"'{range_ratio}' is not a ratio in [0, 1]")
    metrics = {name: row.number(name, required=False) for name in METRICS}
    values = dict(
        id=row.text("id"), source=row.text("source"), source_url=url, source_ref=row.text("source_ref"), date=date,
        author=row.text("author"), framework=row.choice("framework", FRAMEWORKS),
        framework_version=row.text("framework_version"), image=row.text("image", required=False),
        gpu=row.choice("gpu", GPUS), gpus=row.integer("gpus"), nodes=row.integer("nodes"), model=model,
        checkpoint=row.text("checkpoint"), weight_dtype=row.choice("weight_dtype", WEIGHT_DTYPES),
        kv_cache_dtype=row.choice("kv_cache_dtype", KV_DTYPES),
        kv_cache_default=row.text("kv_cache_default", required=False), tp=row.integer("tp"), ep=row.integer("ep"),
        dp_attention=row.flag("dp_attention"), speculative=row.choice("speculative", SPECULATIVE),
        deployment=row.choice("deployment", DEPLOYMENTS),
        chunked_prefill_tokens=row.integer("chunked_prefill_tokens", required=False),
        max_num_tokens=row.integer("max_num_tokens", required=False),
        max_running_requests=row.integer("max_running_requests", required=False),
        cuda_graph_max_bs=row.integer("cuda_graph_max_bs", required=False),
        mem_fraction=row.number("mem_fraction", required=False),
        stream_interval=row.integer("stream_interval", required=False),
        scheduler_recv_interval=row.integer("scheduler_recv_interval", required=False, minimum=1),
        prefill_graph_max_tokens=row.integer("prefill_graph_max_tokens", required=False, minimum=0),
        batch_wait_timeout_iters=row.integer("batch_wait_timeout_iters", required=False),
        batch_wait_max_tokens_ratio=row.number("batch_wait_max_tokens_ratio", required=False),
        adp_balance=row.flag("adp_balance") if row.text("adp_balance", required=False) else None,
        adp_timeout_iters=row.integer("adp_timeout_iters", required=False, minimum=0),
        adp_batching_wait_iters=row.integer("adp_batching_wait_iters", required=False, minimum=0),
        moe_backend=row.text("moe_backend", required=False) or None,
        fp8_gemm_backend=row.text("fp8_gemm_backend", required=False) or None,
        mtp_draft_tokens=row.integer("mtp_draft_tokens", required=False),
        mtp_accept_length=row.number("mtp_accept_length", required=False),
        server_flags=row.text("server_flags"), client=row.text("client"), dataset=row.choice("dataset", DATASETS),
        isl=row.integer("isl", required=False), osl=row.integer("osl", required=False), range_ratio=ratio,
        length_rule=row.choice("length_rule", LENGTH_RULES), ignore_eos=row.flag("ignore_eos"),
        num_prompts=row.integer("num_prompts"), warmups=row.integer("warmups", required=False, minimum=0),
        client_seed=row.integer("client_seed", required=False, minimum=0),
        concurrency=row.integer("concurrency", required=False),
        request_rate_req_s=row.number("request_rate_req_s", allow_inf=True),
        metrics={k: v for k, v in metrics.items() if v is not None}, derived=_derived(row, metrics),
        holdout=row.flag("holdout"), notes=row.text("notes", required=False))
    parsed = ServingRow(**values)
    _check_consistency(row, parsed)
    return parsed


def _derived(row: _Row, metrics: dict[str, float | None]) -> dict[str, str]:
    """`metric=formula; ...`: each names a metric the row has."""
    out = {}
    for item in filter(None, (part.strip() for part in row.text("derived", required=False).split(";"))):
        name, _, formula = item.partition("=")
        name = name.strip()
        if name not in METRICS or not formula.strip():
            raise row.fail("derived", f"'{item}' is not METRIC=FORMULA with METRIC one of the metric columns")
        if metrics[name] is None:
            raise row.fail("derived", f"marks {name} derived but the row has no {name}")
        out[name] = formula.strip()
    return out


def _check_consistency(row: _Row, parsed: ServingRow) -> None:
    """Fields that constrain each other; each check can fail on a mistyped row."""
    if not parsed.metrics:
        raise row.fail(f"{METRICS[0]}..{METRICS[-1]}", "the row has no metric")
    if parsed.kv_cache_dtype == "unstated" and not parsed.kv_cache_default:
        raise row.fail("kv_cache_default", "kv_cache_dtype is unstated: say what the framework's default would be")
    if parsed.gpus % parsed.tp or parsed.tp > parsed.gpus * parsed.nodes:
        raise row.fail("tp", f"tp {parsed.tp} does not divide the {parsed.gpus} GPUs")
    if parsed.concurrency is not None and not math.isinf(parsed.request_rate_req_s):
        raise row.fail("request_rate_req_s", "a closed loop (concurrency set) sends each request at once: inf")
    if (parsed.speculative != "none") != ("mtp" in parsed.deployment):
        raise row.fail("deployment", f"'{parsed.deployment}' disagrees with speculative '{parsed.speculative}'")
    if parsed.dp_attention != ("dp-attention" in parsed.deployment):
        raise row.fail("deployment", f"'{parsed.deployment}' disagrees with dp_attention {parsed.dp_attention}")
    if parsed.dataset == "random":
        for column in ("isl", "osl", "range_ratio"):
            if getattr(parsed, column) is None:
                raise row.fail(column, "a random-dataset row states its nominal lengths and range ratio")
        if parsed.length_rule == "sharegpt":
            raise row.fail("length_rule", "a random-dataset row draws lengths by a rule, not from ShareGPT")
    elif parsed.length_rule != "sharegpt":
        raise row.fail("length_rule", "a ShareGPT row takes its lengths from the dataset: 'sharegpt'")
    if parsed.client_seed is not None and parsed.length_rule != "uniform[max(1,r*L),L]":
        raise row.fail("client_seed", "simroute reproduces the draws of SGLang's bench_serving only (length_rule "
                                      "'uniform[max(1,r*L),L]'); empty otherwise")
    for per_gpu, total in PER_GPU.items():
        if per_gpu in parsed.metrics and total in parsed.metrics:
            expected = parsed.metrics[total] / parsed.gpus
            if abs(parsed.metrics[per_gpu] - expected) > 0.01 * expected:
                raise row.fail(per_gpu, f"{parsed.metrics[per_gpu]} is not {total} / gpus = {expected:.3f}")
    ratio = parsed.batch_wait_max_tokens_ratio
    if ratio is not None and ratio > 1:
        raise row.fail("batch_wait_max_tokens_ratio", f"{ratio} is not a share of max_num_tokens in (0, 1]")
    if (ratio is not None or parsed.batch_wait_timeout_iters is not None) and parsed.framework != "trtllm":
        raise row.fail("batch_wait_timeout_iters", "batch waiting is TensorRT-LLM's (empty for other frameworks)")
    adp = (parsed.adp_balance, parsed.adp_timeout_iters, parsed.adp_batching_wait_iters)
    if any(v is not None for v in adp):
        if not (parsed.framework == "trtllm" and parsed.dp_attention):
            raise row.fail("adp_balance", "attention-DP balancing is TensorRT-LLM's with DP attention (empty "
                                          "otherwise)")
        if any(v is None for v in adp):
            raise row.fail("adp_balance", "attention_dp_config's enable_balance, timeout_iters and "
                                          "batching_wait_iters come together (all empty: the framework's default)")
    if parsed.moe_backend is not None:
        if parsed.framework != "trtllm":
            raise row.fail("moe_backend", "the MoE backend column is TensorRT-LLM's moe_config backend (empty for "
                                          "other frameworks)")
        if parsed.moe_backend not in TRTLLM_MOE_BACKENDS:
            raise row.fail("moe_backend", f"'{parsed.moe_backend}' is not one of {', '.join(TRTLLM_MOE_BACKENDS)}")
    if parsed.fp8_gemm_backend is not None:
        if parsed.framework != "sglang":
            raise row.fail("fp8_gemm_backend", "the FP8 GEMM backend column is SGLang's --fp8-gemm-backend (empty for "
                                               "other frameworks)")
        if parsed.fp8_gemm_backend not in SGLANG_FP8_GEMM_BACKENDS:
            raise row.fail("fp8_gemm_backend", f"'{parsed.fp8_gemm_backend}' is not one of "
                                               f"{', '.join(SGLANG_FP8_GEMM_BACKENDS)}")
    drafts, accepted = parsed.mtp_draft_tokens, parsed.mtp_accept_length
    if (parsed.speculative == "mtp") != (drafts is not None):
        raise row.fail("mtp_draft_tokens", "an MTP row states the draft tokens per step its launch sets; empty "
                                           "for other rows")
    if accepted is not None and drafts is not None and not 1.0 <= accepted <= drafts + 1:
        raise row.fail("mtp_accept_length", f"{accepted} is not a mean accepted length in [1, mtp_draft_tokens + "
                                            f"1 = {drafts + 1}]")
    if accepted is not None and drafts is None:
        raise row.fail("mtp_accept_length", "an acceptance length needs an MTP row (mtp_draft_tokens)")
    e2e, ttft = parsed.metrics.get("e2e_mean_s"), parsed.metrics.get("ttft_mean_ms")
    if e2e is not None and ttft is not None and e2e * 1e3 < ttft:
        raise row.fail("e2e_mean_s", f"mean E2E {e2e} s is shorter than mean TTFT {ttft} ms (a unit slip?)")


def load_serving_table(path: str | Path = SERVING_TABLE) -> tuple[ServingRow, ...]:
    """Every row of a serving-benchmark table, checked; the shipped table by default."""
    path = Path(path)
    if not path.is_file():
        raise ConfigurationError("no such file", file=path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        if header != COLUMNS:
            missing = [c for c in COLUMNS if c not in header]
            extra = [c for c in header if c not in COLUMNS]
            problem = (f"missing column(s) {', '.join(missing)}" if missing else
                       f"unknown column(s) {', '.join(extra)}" if extra else "columns out of the documented order")
            raise ConfigurationError(problem, file=path, field="header", line=1)
        rows: list[ServingRow] = []
        seen: dict[str, int] = {}
        for raw in reader:
            line = reader.line_num
            if None in raw or any(value is None for value in raw.values()):
                raise ConfigurationError(f"has not {len(COLUMNS)} fields", file=path, line=line)
            parsed = _parse(_Row(raw, path, line))
            if parsed.id in seen:
                raise ConfigurationError(f"'{parsed.id}' repeats line {seen[parsed.id]}", file=path, field="id",
                                         line=line)
            seen[parsed.id] = line
            rows.append(parsed)
    if not rows:
        raise ConfigurationError("has no rows", file=path)
    return tuple(rows)
