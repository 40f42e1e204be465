"""`simroute predict` and `simroute model ...`: the closed-form model from the command line."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from simroute.cli.common import CALIB_HELP, PlainValues, checked, echo_json, fmt_bytes, fmt_us, table
from simroute.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_TP

if TYPE_CHECKING:
    from simroute.model.cost import CostParams


class Offset(str, Enum):
    cached = "cached"
    rehome = "rehome"


class Exchanges(str, Enum):
    per_layer = "per-layer"
    once = "once"


def _check_model(model: str) -> None:
    """An unknown --model is refused naming the flag (as `run` and `plan` do), before anything is written."""
    from simroute.errors import ConfigurationError, UnknownNameError
    from simroute.model.geometry import get_model
    try:
        get_model(model)
    except UnknownNameError as exc:
        raise ConfigurationError(str(exc), field="--model") from None


def _fabric_id(params: CostParams, fabric: str) -> int:
    """The profile's index of --fabric; an unknown one is refused naming the flag and listing the profile's."""
    from simroute.errors import ConfigurationError, UnknownNameError
    try:
        return params.fabric_id(fabric)
    except UnknownNameError as exc:
        raise ConfigurationError(str(exc), field="--fabric") from None


def _params(calib: str, model: str, exchanges: Exchanges, prefill_us: float | None, host: bool = False,
            collapsed: bool = False, amortise: bool = False, batching: bool = False, cache_dtype: str = "bf16"):
    from simroute.calib.validated import cost_params     # a shipped profile's record: no YAML, pydantic or numpy
    _check_model(model)
    return cost_params(calib, model, route_exchanges=exchanges.value, prefill_us=prefill_us, cache_dtype=cache_dtype,
                       host_overhead=host, collapsed_response=collapsed, holder_amortisation=amortise,
                       dispatcher_batching=batching)


def predict(
    model: str = typer.Option(DEFAULT_MODEL, help="Model geometry (see `simroute model list`)."),
    fabric: str = typer.Option("h100-ibgda", help="Fabric of the requester-holder path (a profile fabric)."),
    query_rows: int = typer.Option(256, "--mq", min=1, help="Routed query rows Mq (sequences x query heads)."),
    chunk_tokens: int = typer.Option(2048, "--ct", min=1, help="Chunk tokens."),
    holders: int = typer.Option(1, min=1, help="Holders M a sparse selection spans."),
    topk: int = typer.Option(0, min=0, help="Selection budget k (0 = dense attention)."),
    reuse: int = typer.Option(0, min=0, help="Later steps R that would reuse a fetched copy."),
    offset: Offset = typer.Option(Offset.rehome, help="cached: a true prefix (splice elides); rehome: moved."),
    tp_size: int = typer.Option(DEFAULT_TP, "--tp", min=1,
                                help="Tensor-parallel degree (rank-paired routing, per-rank bytes / N)."),
    calib: str = typer.Option("h100-ibgda", help=CALIB_HELP),
    route_exchanges: Exchanges = typer.Option(Exchanges.per_layer, help="per-layer (exact) or once (paper §5.4)."),
    prefill_us: float = typer.Option(None, help="Re-prefill cost c per token-layer (us); profile value if unset.",
                                     callback=checked("--prefill-us", minimum=0)),
    cache_dtype: str = typer.Option("bf16", help="Cache dtype: bf16 or fp8."),
    host_overhead: bool = typer.Option(False, help="The Python-client host-overhead regime of paper §5.3."),
    collapsed_response: bool = typer.Option(False, help="Reduction: one put for (o, m, l)."),
    holder_amortisation: bool = typer.Option(False, help="Reduction: holder compute shared by a dispatch batch."),
    dispatcher_batching: bool = typer.Option(False, help="Reduction: host cost paid once per dispatch batch."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Cost of route, fetch and local for one request shape, term by term, and the predicate's choice.

    Example: simroute predict --model deepseek-v2-lite --fabric h100-ibgda --mq 256 --ct 2048
    """
    from simroute.model.cost import PRIMITIVES, TERMS, Shape, costs_scalar
    from simroute.model.scalar import decide_scalar
    if topk > chunk_tokens:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"--topk {topk} selects more tokens than the chunk's --ct {chunk_tokens} holds",
                                 field="--topk")

    params = _params(calib, model, route_exchanges, prefill_us, host_overhead, collapsed_response,
                holder_amortisation, dispatcher_batching, cache_dtype)
    shape = Shape(mq=query_rows, ct=chunk_tokens, fabric=_fabric_id(params, fabric), holders=holders, topk=topk,
                  reuse=reuse, cached=offset is Offset.cached, tp=tp_size)
    costs = costs_scalar(shape, params)
    choice = PRIMITIVES[decide_scalar(shape, params)[0]]
    if json_out:
        echo_json({"choice": choice,
                   "cost_us": {primitive: costs[primitive]["total"] * 1e6 for primitive in PRIMITIVES},
                   "wire_bytes": {primitive: costs[primitive]["wire_bytes"] for primitive in PRIMITIVES},
                   "terms_us": {primitive: {term: costs[primitive][term] * 1e6 for term in TERMS[primitive]}
                                for primitive in PRIMITIVES},
                   "inputs": {"model": model, "fabric": fabric, "mq": query_rows, "ct": chunk_tokens,
                              "holders": holders, "topk": topk, "reuse": reuse, "offset": offset.value, "tp": tp_size,
                              "calib": calib, "route_exchanges": route_exchanges.value,
                              "host_overhead": host_overhead}})
        return
    geometry = params.geometry
    typer.echo(f"{model} at TP {tp_size} on {fabric}: q+p = {geometry.qp_bytes} B/row, b_KV = {geometry.b_kv} "
               "B/token-layer, "
               f"L = {geometry.layers}; "
               f"Mq = {query_rows}, ct = {chunk_tokens}, k = {topk or 'dense'}, M = {holders}, R = {reuse}, "
               f"offset = {offset.value}, route exchanges = {route_exchanges.value}")
    for prim in PRIMITIVES:
        rows = [[term, fmt_us(costs[prim][term])] for term in TERMS[prim]]
        rows.append(["total", fmt_us(costs[prim]["total"])])
        rows.append(["wire bytes", fmt_bytes(costs[prim]["wire_bytes"])])
        table(f"{prim}" + ("  <- chosen" if prim == choice else ""), ["term", "us"], rows)
    typer.echo(f"choice: {choice}")


model_app = typer.Typer(help="The closed-form model's figures (paper Figs 1b, 3b, 6a) and model catalogue.",
                        no_args_is_help=True)


@model_app.command("list")
def model_list(json_out: bool = typer.Option(False, "--json", help="Every dimension and its full source.")) -> None:
    """The model catalogue with derived payload sizes, parameters and where each dimension comes from.

    Example: simroute model list
    """
    from dataclasses import asdict
    from simroute.model import MODELS
    if json_out:
        echo_json({geom.name: {**asdict(geom), "params": geom.params(), "active_params": geom.active_params}
                   for geom in MODELS.values()})
        return

    def experts(geom) -> str:
        return f"{geom.routed_experts}: {geom.experts_per_token}+{geom.shared_experts} x {geom.expert_intermediate}" \
            if geom.is_moe else "-"

    def source(geom) -> str:
        assumed = sorted(field_name for field_name, value in geom.sources.items() if value.startswith("assumed"))
        configs = sorted({value.removeprefix("HF config.json of ") for value in geom.sources.values()
                          if value.startswith("HF config.json of ")})
        return "; ".join(configs + ([f"assumed: {len(assumed)} dims"] if assumed else []))

    table("models", ["model", "layers", "h_q", "kv", "hidden", "ffn", "experts", "params B", "active B", "top-k",
                     "window", "q+p B", "b_KV B", "dimensions from"],
          [[geom.name, geom.layers, geom.heads_q, geom.kv_heads, geom.hidden, geom.intermediate, experts(geom),
            f"{geom.params() / 1e9:.1f}", f"{geom.active_params / 1e9:.1f}", geom.index_topk or "-",
            f"{geom.context_window:,}", geom.qp_bytes, geom.b_kv, source(geom)]
           for geom in MODELS.values()])


@model_app.command("crossover")
def model_crossover(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (CSV + PNG)."),
    model: str = typer.Option("deepseek-v2-lite"), calib: str = typer.Option("h100-ibgda", help=CALIB_HELP),
) -> None:
    """Wire-byte winner map over (Mq, ct) (paper Fig 3b).

    Example: simroute model crossover -o figs/
    """
    from simroute.ioutil import atomic_files
    with atomic_files(out, ("crossover.csv", "crossover.png"), flag="--out") as tmp:
        params = _params(calib, model, Exchanges.per_layer, None)
        _crossover_figure(params, model, tmp["crossover.csv"], tmp["crossover.png"])
    typer.echo(f"wrote {out / 'crossover.csv'} and {out / 'crossover.png'}")


def _crossover_figure(params, model: str, csv_path: Path, png_path: Path) -> None:
    import numpy as np
    from simroute.model.sweeps import crossover_map
    from simroute.plotting import pyplot, save_png, write_csv
    query_rows, chunk_tokens = 2.0 ** np.arange(0, 14), 2.0 ** np.arange(4, 15)
    data = crossover_map(params, query_rows, chunk_tokens)
    write_csv(data, csv_path)
    plt = pyplot()
    fig, axes = plt.subplots(figsize=(6, 4.5))
    saving_percent = (100 * data["route_saving"]).reshape(len(query_rows), len(chunk_tokens))
    image = axes.pcolormesh(chunk_tokens, query_rows, saving_percent, cmap="RdYlGn", vmin=-100, vmax=100,
                            shading="nearest")
    geometry = params.geometry
    axes.plot(chunk_tokens, chunk_tokens * geometry.b_kv * geometry.token_fraction / geometry.qp_bytes, "k--",
              label="break-even")
    axes.set(xscale="log", yscale="log", xlabel="chunk tokens ct", ylabel="query rows Mq",
           title=f"route wire-byte saving (%), {model}", ylim=(query_rows[0], query_rows[-1]))
    axes.legend(loc="lower right")
    fig.colorbar(image, ax=axes)
    save_png(fig, png_path)


@model_app.command("chunk")
def model_chunk(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (CSV + PNG)."),
    model: str = typer.Option("deepseek-v2-lite"), fabric: str = typer.Option("h100-ibgda"),
    query_rows: int = typer.Option(256, "--mq", min=1),
    bw_gbps: float = typer.Option(70.0, help="Bandwidth (Fig 1b used 70 GB/s).",
                                  callback=checked("--bw-gbps", minimum=0, exclusive_minimum=True)),
    calib: str = typer.Option("h100-ibgda", help=CALIB_HELP),
    route_exchanges: Exchanges = typer.Option(Exchanges.once, help="Fig 1b uses the paper's accounting (once)."),
) -> None:
    """Cost of the three primitives vs chunk tokens (paper Fig 1b).

    Example: simroute model chunk -o figs/ --mq 256
    """
    import numpy as np
    from simroute.model.sweeps import cost_vs_chunk, fetch_local_crossover_ct
    from simroute.plotting import pyplot, save_png, write_csv
    from simroute.ioutil import atomic_files
    said: list[str] = []
    with atomic_files(out, ("chunk.csv", "chunk.png"), flag="--out") as tmp:
        params = _params(calib, model, route_exchanges, None)
        fabric_id = _fabric_id(params, fabric)
        chunk_tokens = np.unique(np.round(2.0 ** np.linspace(4, 13, 64)))
        series = cost_vs_chunk(params, chunk_tokens, mq=query_rows, fabric=fabric_id, bw_Bps=bw_gbps * 1e9)
        write_csv(series, tmp["chunk.csv"])
        plt = pyplot()
        fig, axes = plt.subplots(figsize=(6, 4.5))
        axes.fill_between(chunk_tokens, series["local_lo_s"] * 1e6, series["local_hi_s"] * 1e6, color="purple",
                          alpha=0.2, label="local band (c 0.5-1.5 us)")
        for prim, col in (("route", "green"), ("fetch", "red"), ("local", "purple")):
            axes.plot(chunk_tokens, series[f"{prim}_s"] * 1e6, color=col, label=prim)
        axes.set(xscale="log", yscale="log", xlabel="chunk tokens ct", ylabel="cost (us)",
               title=f"cost vs chunk size, Mq = {query_rows}, {bw_gbps:g} GB/s, route exchanges: "
                     f"{route_exchanges.value}")
        axes.legend()
        save_png(fig, tmp["chunk.png"])
        from dataclasses import replace
        params_copy = replace(params, fabrics=tuple(params.fabrics))
        low_ct = fetch_local_crossover_ct(params_copy, mq=query_rows, fabric=fabric_id, prefill_us=1.5)
        high_ct = fetch_local_crossover_ct(params_copy, mq=query_rows, fabric=fabric_id, prefill_us=0.5)
        said.append(f"route exchanges: {route_exchanges.value}" + (
            " (the paper's accounting for Fig 1b: one exchange for all layers; the simulator's default is per-layer)"
            if route_exchanges.value == "once" else ""))
        said.append(f"fetch beats local above ct ~ {low_ct:.0f}-{high_ct:.0f} tokens (c = 1.5..0.5 us); "
                    f"wrote {out / 'chunk.csv'} and {out / 'chunk.png'}")
    for line in said:
        typer.echo(line)


@model_app.command("bandwidth")
def model_bandwidth(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (CSV + PNG)."),
    model: str = typer.Option("deepseek-v2-lite"), fabric: str = typer.Option("h100-ibgda"),
    query_rows: int = typer.Option(256, "--mq", min=1), chunk_tokens: int = typer.Option(2048, "--ct", min=1),
    calib: str = typer.Option("h100-ibgda", help=CALIB_HELP),
    route_exchanges: Exchanges = typer.Option(Exchanges.once, help="Fig 6a uses the paper's accounting (once)."),
) -> None:
    """Cost of the three primitives vs effective bandwidth (paper Fig 6a).

    Example: simroute model bandwidth -o figs/
    """
    import numpy as np
    from simroute.model.cost import route_loses_below_bw
    from simroute.model.sweeps import cost_vs_bandwidth
    from simroute.plotting import pyplot, save_png, write_csv
    from simroute.ioutil import atomic_files
    said: list[str] = []
    with atomic_files(out, ("bandwidth.csv", "bandwidth.png"), flag="--out") as tmp:
        params = _params(calib, model, route_exchanges, None)
        bandwidths = 10.0 ** np.linspace(-1, 3, 41) * 1e9
        series = cost_vs_bandwidth(params, bandwidths, mq=query_rows, ct=chunk_tokens,
                                   fabric=_fabric_id(params, fabric))
        write_csv(series, tmp["bandwidth.csv"])
        plt = pyplot()
        fig, axes = plt.subplots(figsize=(6, 4.5))
        for prim, col in (("route", "green"), ("fetch", "red"), ("local", "purple")):
            axes.plot(series["bw_GBps"], series[f"{prim}_s"] * 1e6, color=col, label=prim)
        bw_star = float(route_loses_below_bw(query_rows, chunk_tokens, params))
        axes.axvline(bw_star / 1e9, color="grey", ls=":",
                     label=f"route bytes = fetch splice ({bw_star / 1e9:.2f} GB/s)")
        cross = curve_crossing(series["bw_GBps"], series["route_s"], series["fetch_s"])
        if cross is not None:
            axes.axvline(cross, color="black", ls="--", lw=0.8, label=f"route = fetch ({cross:.2f} GB/s)")
        axes.set(xscale="log", yscale="log", xlabel="effective bandwidth (GB/s)", ylabel="cost (us)",
               title=f"cost vs bandwidth, Mq = {query_rows}, ct = {chunk_tokens}, route exchanges: "
                     f"{route_exchanges.value}")
        axes.legend(fontsize=8)
        save_png(fig, tmp["bandwidth.png"])
        crossing = (f"the route and fetch curves cross at {cross:.2f} GB/s (dashed)" if cross is not None
                    else "the route curve stays below fetch over the plotted range")
        said.append(f"route's byte term exceeds fetch's splice below {bw_star / 1e9:.2f} GB/s (Mq (q+p) / T_splice, "
                    f"dotted line); {crossing}")
        said.append(f"wrote {out / 'bandwidth.csv'} and {out / 'bandwidth.png'}")
    for line in said:
        typer.echo(line)


def curve_crossing(abscissa, first_curve, second_curve) -> float | None:
    """The x (log-interpolated) where curve a - b changes sign, the first one; None if it never does."""
    import numpy as np
    abscissa, diff = np.asarray(abscissa, float), np.asarray(first_curve, float) - np.asarray(second_curve, float)
    idx = np.flatnonzero(np.sign(diff[1:]) != np.sign(diff[:-1]))
    if not len(idx):
        return None
    index = int(idx[0])
    weight = diff[index] / (diff[index] - diff[index + 1])
    return float(np.exp(np.log(abscissa[index]) + weight * (np.log(abscissa[index + 1]) - np.log(abscissa[index]))))


def _step_profile(calib: str, gpu: str):
    """The profile to take GPU `gpu` from: `calib` if it has the entry, else the shipped calib/gpus/<gpu>.yaml."""
    from simroute.calib import load_profile
    prof = load_profile(calib)
    entry_file = prof.check_gpu_entry(gpu, field="--gpu")
    return prof, prof if gpu in prof.gpus else load_profile(entry_file)


def _topology_fabrics(prof, gpu: str) -> list[str]:
    """The intra-host fabrics of the shipped topologies whose hosts carry `gpu` (`hosts.gpu`: HGX H200 hosts
    run the H100's NVLink 4 fabric), where the profile has them."""
    from simroute.network import DATA_DIR, load_topology
    out = []
    for path in sorted(DATA_DIR.glob("*.yaml")):
        spec = load_topology(path).spec
        if spec.gpu == gpu and spec.intra.fabric in prof.fabrics and spec.intra.fabric not in out:
            out.append(spec.intra.fabric)
    return out


def _shipped_fabric_profile(gpu: str):
    """The shipped fabric file (calib/fabrics/*.yaml) whose fabric connects `gpu`'s hosts, loaded (it includes the GPU
    entry), or None: HGX B200 hosts run `b200-nvlink5`, which no paper profile holds."""
    from simroute.calib import load_profile, shipped_dir
    for path in sorted((shipped_dir() / "fabrics").glob("*.yaml")):
        fabric_prof = load_profile(path)
        if any(spec.gpu == gpu for spec in fabric_prof.fabrics.values()):
            return fabric_prof
    return None


def _allreduce_fabric(prof, gpu: str, fabric: str | None, tp_size: int):
    """(fabric, profile holding it) of the TP all-reduce: the one given, else the fastest of the profile naming
    `gpu`, else a shipped topology's intra-host fabric for `gpu`, else the shipped fabric file naming `gpu`."""
    if fabric is not None or tp_size == 1:
        return fabric, prof
    own = [name for name, fabric_spec in prof.fabrics.items() if fabric_spec.gpu == gpu] or _topology_fabrics(prof, gpu)
    holder = prof
    if not own:
        holder = _shipped_fabric_profile(gpu)
        own = [name for name, spec in holder.fabrics.items() if spec.gpu == gpu] if holder is not None else []
    if not own:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"--tp {tp_size} needs --fabric for the all-reduce: no fabric of the profile names "
                                 "gpu "
                                 f"'{gpu}' (profile fabrics: {', '.join(prof.fabrics)})", field="--fabric")
    return max(own, key=lambda name: holder.fabric(name).link_peak_GBps.value), holder


@model_app.command("step")
def model_step(
    model: str = typer.Option(DEFAULT_MODEL, help="Model geometry (see `simroute model list`)."),
    gpu: str = typer.Option(DEFAULT_GPU, help="GPU entry (a profile's `gpus:` or shipped calib/gpus/<name>.yaml)."),
    tp_size: int = typer.Option(DEFAULT_TP, "--tp", min=1, help="Tensor-parallel degree of the instance."),
    tokens: int = typer.Option(..., "--tokens", min=1, help="Tokens computed this iteration (decodes + prefill)."),
    decode_seqs: int = typer.Option(0, "--decode-seqs", min=0, help="Of --tokens, one-token decodes."),
    context: int = typer.Option(0, "--context", min=0, help="Context each decoding sequence attends (tokens)."),
    prefill_context: int = typer.Option(0, "--prefill-context", min=0,
                                        help="Earlier tokens the prefill chunk (tokens - decode-seqs) attends."),
    fabric: str = typer.Option(None, help="Fabric of the TP all-reduce (default: the fastest naming the GPU)."),
    weights: str = typer.Option(None, help="Weight dtype of the linear layers: bf16 | fp8 (default: the "
                                           "checkpoint's, e.g. fp8 for DeepSeek-V3)."),
    kv_cache: str = typer.Option(None, "--kv-cache", help="KV-cache dtype: bf16 | fp8 (default: the serving "
                                 "framework's default for the checkpoint, bf16 for every shipped model)."),
    kv_layout: str = typer.Option("replicated", "--kv-layout", help="Where an MLA latent lives under TP: "
                                  "replicated (every rank holds it all) | tpla (1/tp per rank, the paper's §8)."),
    roofline: bool = typer.Option(False, "--roofline", help="Ignore the GPU's measured operator tables: the "
                                                            "datasheet roofline with kernel floors alone."),
    dp_attention: int = typer.Option(1, "--dp-attention", min=1, help="Attention DP ranks in the --tp GPUs (SGLang "
                                     "--enable-dp-attention --dp N): each rank attends its own requests over its own "
                                     "latent; --tokens, --decode-seqs and --context are then one rank's batch."),
    ep: int = typer.Option(1, "--ep", min=1, help="Expert-parallel size of the MoE layers (divides --tp)."),
    hosts: int = typer.Option(None, "--hosts", min=1, help="Hosts the --tp GPUs span (default: --tp / 8, HGX "
                              "boards of 8 GPUs)."),
    a2a: str = typer.Option(None, "--a2a", help="How MoE tokens reach their experts: allgather (SGLang's "
                            "default) | deepep (DeepEP dispatch / combine); default: deepep once the group spans "
                            "hosts."),
    moe_load: str = typer.Option("power_law_1.01", "--moe-load", help="Routed-expert load the expert kernels are "
                                 "read at: balanced | power_law_1.01 | power_law_1.2 (DeepEP rows also 0.6, 0.8, "
                                 "1.02)."),
    redundant_experts: int = typer.Option(0, "--redundant-experts", min=0, help="EPLB's extra expert replicas "
                                          "per group (read at the balanced rows)."),
    nextn: int = typer.Option(0, "--nextn", min=0, help="MTP draft tokens per step (DeepSeek-V3's MTP module); "
                              "needs --accept-rate or --accept-length."),
    accept_rate: float = typer.Option(None, "--accept-rate", help="MTP: probability each draft token is accepted "
                                      "(given every earlier one was)."),
    accept_length: float = typer.Option(None, "--accept-length", help="MTP: mean tokens a step emits (1 to "
                                        "nextn + 1), instead of --accept-rate."),
    calib: str = typer.Option("paper-all", help=CALIB_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """One engine iteration's time, term by term: each term from the GPU's measured operator tables where they
    cover it (measured / interpolated / extrapolated), else the roofline, and the sources of the GPU's
    constants (docs/STEP_TIME.md). With --dp-attention, --ep or --nextn: one step of a DP-attention / expert-
    parallel group, with MTP (docs/STEP_TIME.md, "DP attention and expert parallelism").

    Example: simroute model step --model llama-3.1-70b --gpu h100-sxm --tp 8 --tokens 64 --decode-seqs 64 --context 4096

    Example: simroute model step --model deepseek-v3 --gpu h200-sxm --tp 16 --dp-attention 16 --ep 16 --tokens 64
    --decode-seqs 64 --context 4096 --nextn 1 --accept-length 1.8
    """
    from simroute.errors import ConfigurationError
    from simroute.model.geometry import CACHE_DTYPE_BYTES, get_model
    from simroute.model.limits import Fields, check_mtp, check_shape, check_tp_splits_heads
    from simroute.model.parallel import Mtp
    from simroute.model.steptime import KV_LAYOUTS, BatchShape
    _check_model(model)
    if decode_seqs > tokens:
        raise ConfigurationError(f"--decode-seqs {decode_seqs} exceeds --tokens {tokens}", field="--decode-seqs")
    for flag, value in (("--tokens", tokens), ("--context", context), ("--prefill-context", prefill_context)):
        if value > MAX_SHAPE_TOKENS:
            raise ConfigurationError(f"{flag} {value:,} is past any serving engine's context ({MAX_SHAPE_TOKENS:,} "
                                     "tokens at most)", field=flag)
    if kv_layout not in KV_LAYOUTS:
        raise ConfigurationError(f"unknown layout '{kv_layout}' (known: {', '.join(KV_LAYOUTS)})", field="--kv-layout")
    if kv_cache is not None and kv_cache not in CACHE_DTYPE_BYTES:
        raise ConfigurationError(f"unknown KV-cache dtype '{kv_cache}' (known: {', '.join(CACHE_DTYPE_BYTES)})",
                                 field="--kv-cache")
    fields = Fields.flags()
    if dp_attention > 1 or ep > 1 or nextn > 0 or hosts is not None or a2a is not None or redundant_experts:
        _deployment_step(model=model, gpu=gpu, tp_size=tp_size, tokens=tokens, decode_seqs=decode_seqs,
                         context=context, prefill_context=prefill_context, fabric=fabric, weights=weights,
                         kv_cache=kv_cache, kv_layout=kv_layout, roofline=roofline, dp_attention=dp_attention, ep=ep,
                         hosts=hosts, a2a=a2a, moe_load=moe_load, redundant_experts=redundant_experts, nextn=nextn,
                         accept_rate=accept_rate, accept_length=accept_length, calib=calib, json_out=json_out)
        return
    check_mtp(get_model(model), Mtp(nextn, accept_rate=accept_rate, accepted_length=accept_length), fields)
    check_tp_splits_heads(get_model(model), tp_size, fields)
    prof, gpu_prof = _step_profile(calib, gpu)
    fab, fabric_prof = _allreduce_fabric(prof, gpu, fabric, tp_size)
    step = fabric_prof.step_model(model, tp=tp_size, intra_host_fabric=fab,
                           gpu_spec=gpu_prof.gpu_spec(gpu, tables=not roofline), weight_dtype=weights,
                           cache_dtype=kv_cache, kv_layout=kv_layout)
    # a shape that cannot exist on this instance (TP, FP8, weights, context window, KV in HBM) is refused here
    check_shape(step, tokens=tokens, decode_seqs=decode_seqs, context=context, prefill_context=prefill_context,
                fields=fields)
    batch = BatchShape.uniform(decode_seqs, context, prefill_tokens=tokens - decode_seqs,
                               prefill_context=prefill_context)
    terms = step.iteration(batch).as_ms()
    inputs = {"model": model, "gpu": gpu, "tp": tp_size, "tokens": tokens, "decode_seqs": decode_seqs,
              "context": context, "prefill_context": prefill_context, "allreduce_fabric": fab, "calib": calib,
              "weights": weights, "kv_cache": kv_cache, "kv_layout": kv_layout, "roofline": roofline}
    geometry = step.geometry
    dtype = {"weight_dtype": geometry.weight_dtype,
             "weight_dtype_source": geometry.sources.get("weight_dtype", "default: bf16"),
             "linear_fp8_rate": step.fp8_rate, "notes": list(step.notes)}
    kv_tokens = decode_seqs * context + (prefill_context + tokens - decode_seqs if tokens > decode_seqs else 0)
    sizes = {"weight_GB_per_gpu": step.weight_bytes_per_gpu / 1e9,
             "kv_cache": geometry.cache_dtype,
             "kv_cache_source": geometry.sources.get("cache_dtype", "default: bf16"),
             "kv_bytes_per_token_per_gpu": step.kv_bytes_per_token_per_gpu,
             "kv_capacity_tokens": step.kv_capacity_tokens(), "kv_tokens": kv_tokens,
             "context_window": geometry.context_window,
             "context_window_source": geometry.sources.get("context_window", "unknown")}
    if json_out:
        echo_json({**terms, **sizes, **dtype, "inputs": inputs, "gpu_sources": step.gpu.sources})
        return
    second_curve, look, src = terms["bounds"], terms["term_lookups"], terms["term_sources"]
    rows = [["iteration", f"{terms['iteration_ms']:.4f}", "", "", ""]]
    for label, key, term in (("linear (per layer)", "linear_ms_per_layer", "linear"),
                             ("attention (per layer)", "attention_ms_per_layer", "attention"),
                             *((("indexer (per layer)", "indexer_ms_per_layer", "indexer"),)
                               if geometry.has_indexer else ()),
                             ("all-reduce (per layer)", "allreduce_ms_per_layer", "allreduce"),
                             ("elementwise (per layer)", "elementwise_ms_per_layer", "elementwise"),
                             ("LM head", "lm_head_ms", "lm_head"), ("overhead", "overhead_ms", "overhead")):
        rows.append([label, f"{terms[key]:.4f}", second_curve.get(term, ""), look.get(term, ""), src.get(term, "")])
    table(f"{model} on {tp_size} x {gpu}: {tokens} tokens ({decode_seqs} decodes at context {context}), "
          f"{terms['layers']} layers", ["term", "ms", "bound", "from", "table"], rows)
    table("elementwise kernels (ms over the layers that launch them)",
          ["kernel", "role", "width", "layers", "ms", "from", "table"],
          [[kernel["kernel"], kernel["role"], str(kernel["width"]), str(kernel["layers"]), f"{kernel['ms']:.4f}",
            kernel["lookup"], kernel["table"]] for kernel in terms["elementwise_kernels"]])
    rate = "the FP8 rate" if step.fp8_rate else "the bf16 rate"
    typer.echo(f"weights {geometry.weight_dtype} ({dtype['weight_dtype_source']}); linear GEMMs at {rate}")
    typer.echo(f"weights {sizes['weight_GB_per_gpu']:.1f} GB per GPU; KV {sizes['kv_bytes_per_token_per_gpu']:,.0f} B "
               f"per token per GPU ({geometry.cache_dtype}: {sizes['kv_cache_source']}); KV capacity "
               f"{sizes['kv_capacity_tokens']:,} tokens")
    typer.echo(f"context window {geometry.context_window:,} tokens ({sizes['context_window_source']})")
    for note in dtype["notes"]:
        typer.echo(f"note: {note}")
    table("GPU constants and their sources", ["constant", "source"],
          [[constant, source] for constant, source in step.gpu.sources.items()])


MAX_SHAPE_TOKENS = 10_000_000      # 10M tokens: beyond every shipped model's context window by an order
GPUS_PER_HGX = 8                   # GPUs of one HGX H100 / H200 board: the default host of a group
CROSS_HOST_FABRIC = "h100-ibgda"   # the profile's cross-host fabric (NIC RDMA) the collectives' roofline falls back to


def _deployment_step(*, model: str, gpu: str, tp_size: int, tokens: int, decode_seqs: int, context: int,
                     prefill_context: int, fabric: str | None, weights: str | None, kv_cache: str, kv_layout: str,
                     roofline: bool, dp_attention: int, ep: int, hosts: int | None, a2a: str | None, moe_load: str,
                     redundant_experts: int, nextn: int, accept_rate: float | None, accept_length: float | None,
                     calib: str, json_out: bool) -> None:
    """`model step` for a DP-attention / expert-parallel / MTP group (simroute.model.dpstep): every check before
    anything is printed, one line per refusal."""
    from simroute.errors import ConfigurationError
    from simroute.model.dpstep import DeploymentStep
    from simroute.model.geometry import get_model
    from simroute.model.limits import Fields, check_group_shape, check_hosts, check_parallel
    from simroute.model.parallel import A2A, Deployment, Mtp, a2a_layer_traffic
    from simroute.model.steptime import BatchShape

    fields = Fields.flags()
    if kv_layout != "replicated":
        raise ConfigurationError("--kv-layout tpla is a TP layout; with --dp-attention each rank holds its own "
                                 "latent", field=fields.kv_layout)
    if a2a is not None and a2a not in {mode.value for mode in A2A}:
        raise ConfigurationError(f"unknown all-to-all '{a2a}' (known: allgather, deepep)", field=fields.a2a)
    hosts = hosts if hosts is not None else -(-tp_size // GPUS_PER_HGX)
    per_host = check_hosts(tp_size, hosts, GPUS_PER_HGX, fields)
    geometry = get_model(model)
    if weights is not None:
        geometry = geometry.with_weight_dtype(weights)
    if kv_cache is not None:
        geometry = geometry.with_cache_dtype(kv_cache)
    deployment = Deployment(tp=tp_size, dp=dp_attention, ep=ep, gpus_per_host=per_host,
                            a2a=A2A(a2a) if a2a else None, distribution=moe_load,
                            redundant_experts=redundant_experts)
    mtp = Mtp(nextn, accept_rate=accept_rate, accepted_length=accept_length)
    # the group's shape (simroute.model.limits, the one feasibility module) before any table is read
    check_parallel(geometry, deployment, mtp, fields)
    prof, gpu_prof = _step_profile(calib, gpu)
    fab, fab_prof = _allreduce_fabric(prof, gpu, fabric, tp_size if hosts == 1 else GPUS_PER_HGX)
    intra = (float("inf"), 0.0)
    if fab is not None:
        params = fab_prof.fabric_params(fab)
        intra = (params.bulk_Bps, params.t_probe_s)
    inter = None
    if CROSS_HOST_FABRIC in prof.fabrics:
        params = prof.fabric_params(CROSS_HOST_FABRIC)
        inter = (params.bulk_Bps, params.t_probe_s)
    spec = gpu_prof.gpu_spec(gpu, tables=not roofline)
    step = DeploymentStep(geometry, spec, deployment, mtp=mtp, cuda_graphs=True, intra=intra, inter=inter)
    # a shape no group could hold (FP8 on the GPU, weights per GPU, the window, a rank's KV) is refused here
    check_group_shape(step, tokens=tokens, decode_seqs=decode_seqs, context=context, prefill_context=prefill_context,
                      fields=fields)
    mtp = step.mtp
    batch = BatchShape.uniform(decode_seqs, context, prefill_tokens=tokens - decode_seqs,
                               prefill_context=prefill_context)
    result = step.iteration(batch)
    out = result.as_ms()
    hbm = step.hbm
    kv_tokens = batch.kv_read_tokens
    capacity = step.kv_capacity_tokens()
    traffic = a2a_layer_traffic(geometry, deployment, [float(tokens)] * dp_attention,
                                prefill=tokens > decode_seqs) if geometry.is_moe and deployment.tp > 1 else None
    sizes = {"weight_GB_per_gpu": hbm.weights / 1e9, "weights_GB_by_part": {part: value / 1e9
                                                                              for part, value in hbm.parts.items()},
             "kv_bytes_per_token_per_gpu": hbm.kv_bytes_per_token, "kv_source": hbm.kv_sources,
             "kv_capacity_tokens_per_gpu": capacity, "kv_capacity_tokens_per_group": capacity * dp_attention,
             "kv_tokens_per_rank": kv_tokens}
    notes = list(out["notes"])
    a2a_bytes = ({phase: {link: value for link, value in split.items()} for phase, split in traffic.by_link().items()}
                 if traffic is not None else {})
    inputs = {"model": model, "gpu": gpu, "tp": tp_size, "dp_attention": dp_attention, "ep": ep, "hosts": hosts,
              "a2a": step.mode.value, "moe_load": deployment.expert_distribution,
              "redundant_experts": redundant_experts, "tokens": tokens, "decode_seqs": decode_seqs,
              "context": context, "prefill_context": prefill_context, "nextn": nextn, "accept_rate": accept_rate,
              "accept_length": accept_length, "weights": weights, "kv_cache": kv_cache, "calib": calib,
              "roofline": roofline, "attn_tp": deployment.attn_tp, "moe_tp": deployment.moe_tp}
    if json_out:
        echo_json({**out, **sizes, "a2a_bytes_per_layer": a2a_bytes, "notes": notes, "inputs": inputs,
                   "gpu_sources": spec.sources})
        return
    per_layer = out["layer_ms"].get("moe") or next(iter(out["layer_ms"].values()))
    rows = [["step", f"{out['iteration_ms']:.4f}", "", "", ""]]
    if mtp is not None:
        rows.append(["TPOT (step / tokens per step)", f"{out['tpot_ms']:.4f}", "", "",
                     f"{out['tokens_per_step']:.3f} tokens per step"])
    for term, ms in out["terms_ms"].items():
        layer = per_layer.get(term)
        rows.append([term, f"{ms:.4f}", f"{layer:.4f}" if layer is not None else "",
                     out["term_lookups"].get(term, ""), out["term_sources"].get(term, "")])
    table(f"{model} on {tp_size} x {gpu} ({hosts} host(s)): dp-attention {dp_attention} (attention TP "
          f"{deployment.attn_tp}), ep {ep} (moe TP {deployment.moe_tp}), {step.mode.value}; each rank {tokens} "
          f"tokens ({decode_seqs} decodes at context {context})",
          ["term", "ms", "ms per MoE layer", "from", "table"], rows)
    if mtp is not None:
        typer.echo("MTP: " + ", ".join(f"{name} {value:.4f} ms" for name, value in out["mtp_ms"].items()))
    typer.echo(f"weights {hbm.weights / 1e9:.1f} GB per GPU ("
               + ", ".join(f"{part} {value / 1e9:.1f}" for part, value in hbm.parts.items() if value) + ")")
    typer.echo(f"KV {hbm.kv_bytes_per_token:,.0f} B per token on its rank's GPU ({hbm.kv_sources}); capacity "
               f"{capacity:,} tokens per GPU, {capacity * dp_attention:,} per group")
    for phase, split in a2a_bytes.items():
        typer.echo(f"{step.mode.value} {phase} bytes per MoE layer: "
                   + ", ".join(f"{link} {fmt_bytes(value)}" for link, value in split.items()))
    for note in notes:
        typer.echo(f"note: {note}")


def register(app: typer.Typer) -> None:
    app.command("predict", cls=PlainValues)(predict)
    app.add_typer(model_app, name="model")
