"""`simroute predict` and `simroute model ...`: the closed-form model from the command line."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from simroute.cli.common import CALIB_HELP, PlainValues, checked, echo_json, fmt_bytes, fmt_us, table
from simroute.defaults import DEFAULT_GPU, DEFAULT_MODEL, DEFAULT_TP


class Offset(str, Enum):
    cached = "cached"
    rehome = "rehome"


class Exchanges(str, Enum):
    per_layer = "per-layer"
    once = "once"


def _params(calib: str, model: str, exchanges: Exchanges, prefill_us: float | None, host: bool = False,
            collapsed: bool = False, amortise: bool = False, batching: bool = False, cache_dtype: str = "bf16"):
    from simroute.calib.validated import cost_params     # a shipped profile's record: no YAML, pydantic or numpy
    return cost_params(calib, model, route_exchanges=exchanges.value, prefill_us=prefill_us, cache_dtype=cache_dtype,
                       host_overhead=host, collapsed_response=collapsed, holder_amortisation=amortise,
                       dispatcher_batching=batching)


def predict(
    model: str = typer.Option(DEFAULT_MODEL, help="Model geometry (see `simroute model list`)."),
    fabric: str = typer.Option("h100-ibgda", help="Fabric of the requester-holder path (a profile fabric)."),
    mq: int = typer.Option(256, "--mq", min=1, help="Routed query rows Mq (sequences x query heads)."),
    ct: int = typer.Option(2048, "--ct", min=1, help="Chunk tokens."),
    holders: int = typer.Option(1, min=1, help="Holders M a sparse selection spans."),
    topk: int = typer.Option(0, min=0, help="Selection budget k (0 = dense attention)."),
    reuse: int = typer.Option(0, min=0, help="Later steps R that would reuse a fetched copy."),
    offset: Offset = typer.Option(Offset.rehome, help="cached: a true prefix (splice elides); rehome: moved."),
    tp: int = typer.Option(DEFAULT_TP, min=1, help="Tensor-parallel degree (rank-paired routing, per-rank bytes / N)."),
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
    if topk > ct:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"--topk {topk} selects more tokens than the chunk's --ct {ct} holds",
                                 field="--topk")

    p = _params(calib, model, route_exchanges, prefill_us, host_overhead, collapsed_response,
                holder_amortisation, dispatcher_batching, cache_dtype)
    shape = Shape(mq=mq, ct=ct, fabric=p.fabric_id(fabric), holders=holders, topk=topk, reuse=reuse,
                  cached=offset is Offset.cached, tp=tp)
    c = costs_scalar(shape, p)
    choice = PRIMITIVES[decide_scalar(shape, p)[0]]
    if json_out:
        echo_json({"choice": choice,
                   "cost_us": {k: c[k]["total"] * 1e6 for k in PRIMITIVES},
                   "wire_bytes": {k: c[k]["wire_bytes"] for k in PRIMITIVES},
                   "terms_us": {k: {t: c[k][t] * 1e6 for t in TERMS[k]} for k in PRIMITIVES},
                   "inputs": {"model": model, "fabric": fabric, "mq": mq, "ct": ct, "holders": holders, "topk": topk,
                              "reuse": reuse, "offset": offset.value, "tp": tp, "calib": calib,
                              "route_exchanges": route_exchanges.value, "host_overhead": host_overhead}})
        return
    g = p.geometry
    typer.echo(f"{model} at TP {tp} on {fabric}: q+p = {g.qp_bytes} B/row, b_KV = {g.b_kv} B/token-layer, "
               f"L = {g.layers}; "
               f"Mq = {mq}, ct = {ct}, k = {topk or 'dense'}, M = {holders}, R = {reuse}, offset = {offset.value}, "
               f"route exchanges = {route_exchanges.value}")
    for prim in PRIMITIVES:
        rows = [[t, fmt_us(c[prim][t])] for t in TERMS[prim]]
        rows.append(["total", fmt_us(c[prim]["total"])])
        rows.append(["wire bytes", fmt_bytes(c[prim]["wire_bytes"])])
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
        echo_json({m.name: {**asdict(m), "params": m.params(), "active_params": m.active_params}
                   for m in MODELS.values()})
        return

    def experts(m) -> str:
        return f"{m.routed_experts}: {m.experts_per_token}+{m.shared_experts} x {m.expert_intermediate}" \
            if m.is_moe else "-"

    def source(m) -> str:
        assumed = sorted(k for k, v in m.sources.items() if v.startswith("assumed"))
        configs = sorted({v.removeprefix("HF config.json of ") for v in m.sources.values()
                          if v.startswith("HF config.json of ")})
        return "; ".join(configs + ([f"assumed: {len(assumed)} dims"] if assumed else []))

    table("models", ["model", "layers", "h_q", "kv", "hidden", "ffn", "experts", "params B", "active B", "top-k",
                     "q+p B", "b_KV B", "dimensions from"],
          [[m.name, m.layers, m.heads_q, m.kv_heads, m.hidden, m.intermediate, experts(m), f"{m.params() / 1e9:.1f}",
            f"{m.active_params / 1e9:.1f}", m.index_topk or "-", m.qp_bytes, m.b_kv, source(m)]
           for m in MODELS.values()])


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
        p = _params(calib, model, Exchanges.per_layer, None)
        _crossover_figure(p, model, tmp["crossover.csv"], tmp["crossover.png"])
    typer.echo(f"wrote {out / 'crossover.csv'} and {out / 'crossover.png'}")


def _crossover_figure(p, model: str, csv_path: Path, png_path: Path) -> None:
    import numpy as np
    from simroute.model.sweeps import crossover_map
    from simroute.plotting import pyplot, save_png, write_csv
    mq, ct = 2.0 ** np.arange(0, 14), 2.0 ** np.arange(4, 15)
    data = crossover_map(p, mq, ct)
    write_csv(data, csv_path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    z = (100 * data["route_saving"]).reshape(len(mq), len(ct))
    im = ax.pcolormesh(ct, mq, z, cmap="RdYlGn", vmin=-100, vmax=100, shading="nearest")
    ax.plot(ct, ct * p.geometry.b_kv * p.geometry.token_fraction / p.geometry.qp_bytes, "k--", label="break-even")
    ax.set(xscale="log", yscale="log", xlabel="chunk tokens ct", ylabel="query rows Mq",
           title=f"route wire-byte saving (%), {model}", ylim=(mq[0], mq[-1]))
    ax.legend(loc="lower right")
    fig.colorbar(im, ax=ax)
    save_png(fig, png_path)


@model_app.command("chunk")
def model_chunk(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (CSV + PNG)."),
    model: str = typer.Option("deepseek-v2-lite"), fabric: str = typer.Option("h100-ibgda"),
    mq: int = typer.Option(256, "--mq", min=1),
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
        p = _params(calib, model, route_exchanges, None)
        f = p.fabric_id(fabric)
        ct = np.unique(np.round(2.0 ** np.linspace(4, 13, 64)))
        d = cost_vs_chunk(p, ct, mq=mq, fabric=f, bw_Bps=bw_gbps * 1e9)
        write_csv(d, tmp["chunk.csv"])
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 4.5))
        ax.fill_between(ct, d["local_lo_s"] * 1e6, d["local_hi_s"] * 1e6, color="purple", alpha=0.2,
                        label="local band (c 0.5-1.5 us)")
        for prim, col in (("route", "green"), ("fetch", "red"), ("local", "purple")):
            ax.plot(ct, d[f"{prim}_s"] * 1e6, color=col, label=prim)
        ax.set(xscale="log", yscale="log", xlabel="chunk tokens ct", ylabel="cost (us)",
               title=f"cost vs chunk size, Mq = {mq}, {bw_gbps:g} GB/s, route exchanges: {route_exchanges.value}")
        ax.legend()
        save_png(fig, tmp["chunk.png"])
        from dataclasses import replace
        q = replace(p, fabrics=tuple(p.fabrics))
        lo = fetch_local_crossover_ct(q, mq=mq, fabric=f, prefill_us=1.5)
        hi = fetch_local_crossover_ct(q, mq=mq, fabric=f, prefill_us=0.5)
        said.append(f"route exchanges: {route_exchanges.value}" + (
            " (the paper's accounting for Fig 1b: one exchange for all layers; the simulator's default is per-layer)"
            if route_exchanges.value == "once" else ""))
        said.append(f"fetch beats local above ct ~ {lo:.0f}-{hi:.0f} tokens (c = 1.5..0.5 us); "
                    f"wrote {out / 'chunk.csv'} and {out / 'chunk.png'}")
    for line in said:
        typer.echo(line)


@model_app.command("bandwidth")
def model_bandwidth(
    out: Path = typer.Option(..., "-o", "--out", help="Output directory (CSV + PNG)."),
    model: str = typer.Option("deepseek-v2-lite"), fabric: str = typer.Option("h100-ibgda"),
    mq: int = typer.Option(256, "--mq", min=1), ct: int = typer.Option(2048, "--ct", min=1),
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
        p = _params(calib, model, route_exchanges, None)
        bw = 10.0 ** np.linspace(-1, 3, 41) * 1e9
        d = cost_vs_bandwidth(p, bw, mq=mq, ct=ct, fabric=p.fabric_id(fabric))
        write_csv(d, tmp["bandwidth.csv"])
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for prim, col in (("route", "green"), ("fetch", "red"), ("local", "purple")):
            ax.plot(d["bw_GBps"], d[f"{prim}_s"] * 1e6, color=col, label=prim)
        bw_star = float(route_loses_below_bw(mq, ct, p))
        ax.axvline(bw_star / 1e9, color="grey", ls=":", label=f"route bytes = fetch splice ({bw_star / 1e9:.2f} GB/s)")
        cross = curve_crossing(d["bw_GBps"], d["route_s"], d["fetch_s"])
        if cross is not None:
            ax.axvline(cross, color="black", ls="--", lw=0.8, label=f"route = fetch ({cross:.2f} GB/s)")
        ax.set(xscale="log", yscale="log", xlabel="effective bandwidth (GB/s)", ylabel="cost (us)",
               title=f"cost vs bandwidth, Mq = {mq}, ct = {ct}, route exchanges: {route_exchanges.value}")
        ax.legend(fontsize=8)
        save_png(fig, tmp["bandwidth.png"])
        crossing = (f"the route and fetch curves cross at {cross:.2f} GB/s (dashed)" if cross is not None
                    else "the route curve stays below fetch over the plotted range")
        said.append(f"route's byte term exceeds fetch's splice below {bw_star / 1e9:.2f} GB/s (Mq (q+p) / T_splice, "
                    f"dotted line); {crossing}")
        said.append(f"wrote {out / 'bandwidth.csv'} and {out / 'bandwidth.png'}")
    for line in said:
        typer.echo(line)


def curve_crossing(x, a, b) -> float | None:
    """The x (log-interpolated) where curve a - b changes sign, the first one; None if it never does."""
    import numpy as np
    x, diff = np.asarray(x, float), np.asarray(a, float) - np.asarray(b, float)
    idx = np.flatnonzero(np.sign(diff[1:]) != np.sign(diff[:-1]))
    if not len(idx):
        return None
    i = int(idx[0])
    w = diff[i] / (diff[i] - diff[i + 1])
    return float(np.exp(np.log(x[i]) + w * (np.log(x[i + 1]) - np.log(x[i]))))


def _step_profile(calib: str, gpu: str):
    """The profile to take GPU `gpu` from: `calib` if it has the entry, else the shipped calib/gpus/<gpu>.yaml."""
    from simroute.calib import load_profile, shipped_dir
    from simroute.errors import UnknownNameError
    prof = load_profile(calib)
    if gpu in prof.gpus:
        return prof, prof
    shipped = shipped_dir() / "gpus" / f"{gpu}.yaml"
    if not shipped.exists():
        names = sorted({*prof.gpus, *(f.stem for f in (shipped_dir() / "gpus").glob("*.yaml"))})
        raise UnknownNameError("gpu", gpu, names)
    return prof, load_profile(shipped)


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


def _allreduce_fabric(prof, gpu: str, fabric: str | None, tp: int) -> str | None:
    """The fabric the TP all-reduce runs over: the one given, else the fastest of the profile naming `gpu`."""
    if fabric is not None or tp == 1:
        return fabric
    own = [n for n, f in prof.fabrics.items() if f.gpu == gpu] or _topology_fabrics(prof, gpu)
    if not own:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"--tp {tp} needs --fabric for the all-reduce: no fabric of the profile names gpu "
                                 f"'{gpu}' (profile fabrics: {', '.join(prof.fabrics)})", field="fabric")
    return max(own, key=lambda n: prof.fabric(n).link_peak_GBps.value)


@model_app.command("step")
def model_step(
    model: str = typer.Option(DEFAULT_MODEL, help="Model geometry (see `simroute model list`)."),
    gpu: str = typer.Option(DEFAULT_GPU, help="GPU entry (a profile's `gpus:` or shipped calib/gpus/<name>.yaml)."),
    tp: int = typer.Option(DEFAULT_TP, "--tp", min=1, help="Tensor-parallel degree of the instance."),
    tokens: int = typer.Option(..., "--tokens", min=1, help="Tokens computed this iteration (decodes + prefill)."),
    decode_seqs: int = typer.Option(0, "--decode-seqs", min=0, help="Of --tokens, one-token decodes."),
    context: int = typer.Option(0, "--context", min=0, help="Context each decoding sequence attends (tokens)."),
    prefill_context: int = typer.Option(0, "--prefill-context", min=0,
                                        help="Earlier tokens the prefill chunk (tokens - decode-seqs) attends."),
    fabric: str = typer.Option(None, help="Fabric of the TP all-reduce (default: the fastest naming the GPU)."),
    weights: str = typer.Option(None, help="Weight dtype of the linear layers: bf16 | fp8 (default: the "
                                           "checkpoint's, e.g. fp8 for DeepSeek-V3)."),
    kv_cache: str = typer.Option("bf16", "--kv-cache", help="KV-cache dtype: bf16 | fp8."),
    kv_layout: str = typer.Option("replicated", "--kv-layout", help="Where an MLA latent lives under TP: "
                                  "replicated (every rank holds it all) | tpla (1/tp per rank, the paper's §8)."),
    roofline: bool = typer.Option(False, "--roofline", help="Ignore the GPU's measured operator tables: the "
                                                            "datasheet roofline with kernel floors alone."),
    calib: str = typer.Option("paper-all", help=CALIB_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """One engine iteration's time, term by term: each term from the GPU's measured operator tables where they
    cover it (measured / interpolated / extrapolated), else the roofline, and the sources of the GPU's
    constants (docs/STEP_TIME.md).

    Example: simroute model step --model llama-3.1-70b --gpu h100-sxm --tp 8 --tokens 64 --decode-seqs 64 --context 4096
    """
    from simroute.errors import ConfigurationError
    from simroute.model.geometry import get_model
    from simroute.model.steptime import KV_LAYOUTS, BatchShape
    if decode_seqs > tokens:
        raise ConfigurationError(f"--decode-seqs {decode_seqs} exceeds --tokens {tokens}", field="decode-seqs")
    for flag, value in (("--tokens", tokens), ("--context", context), ("--prefill-context", prefill_context)):
        if value > MAX_SHAPE_TOKENS:
            raise ConfigurationError(f"{flag} {value:,} is past any serving engine's context ({MAX_SHAPE_TOKENS:,} "
                                     "tokens at most)", field=flag.lstrip("-"))
    if kv_layout not in KV_LAYOUTS:
        raise ConfigurationError(f"unknown layout '{kv_layout}' (known: {', '.join(KV_LAYOUTS)})", field="kv-layout")
    _check_tp_divides_heads(get_model(model), tp)
    prof, gpu_prof = _step_profile(calib, gpu)
    fab = _allreduce_fabric(prof, gpu, fabric, tp)
    m = prof.step_model(model, tp=tp, intra_host_fabric=fab, gpu_spec=gpu_prof.gpu_spec(gpu, tables=not roofline),
                        weight_dtype=weights, cache_dtype=kv_cache, kv_layout=kv_layout)
    batch = BatchShape.uniform(decode_seqs, context, prefill_tokens=tokens - decode_seqs,
                               prefill_context=prefill_context)
    terms = m.iteration(batch).as_ms()
    inputs = {"model": model, "gpu": gpu, "tp": tp, "tokens": tokens, "decode_seqs": decode_seqs, "context": context,
              "prefill_context": prefill_context, "allreduce_fabric": fab, "calib": calib, "weights": weights,
              "kv_cache": kv_cache, "kv_layout": kv_layout, "roofline": roofline}
    g = m.geometry
    dtype = {"weight_dtype": g.weight_dtype, "weight_dtype_source": g.sources.get("weight_dtype", "default: bf16"),
             "linear_fp8_rate": m.fp8_rate, "notes": list(m.notes)}
    kv_tokens = decode_seqs * context + (prefill_context + tokens - decode_seqs if tokens > decode_seqs else 0)
    sizes = {"weight_GB_per_gpu": m.weight_bytes_per_gpu / 1e9,
             "kv_bytes_per_token_per_gpu": m.kv_bytes_per_token_per_gpu, "kv_capacity_tokens": m.kv_capacity_tokens(),
             "weights_fit": m.weight_bytes_per_gpu < m.gpu.hbm_bytes, "kv_tokens": kv_tokens,
             "kv_fits": kv_tokens <= m.kv_capacity_tokens()}
    # a shape that cannot exist on this instance still gets its terms, flagged in the notes
    if not sizes["weights_fit"]:
        dtype["notes"].append(f"the weights ({sizes['weight_GB_per_gpu']:.1f} GB per GPU) do not fit in one {gpu}'s "
                              f"{m.gpu.hbm_bytes / 1e9:.0f} GB at tp = {tp}: the terms are what the iteration would "
                              "cost if they did")
    elif not sizes["kv_fits"]:
        dtype["notes"].append(f"the batch's KV ({kv_tokens:,} tokens) exceeds the {sizes['kv_capacity_tokens']:,} "
                              f"tokens of HBM the weights leave on {tp} x {gpu}: no engine could hold this batch")
    if json_out:
        echo_json({**terms, **sizes, **dtype, "inputs": inputs, "gpu_sources": m.gpu.sources})
        return
    b, look, src = terms["bounds"], terms["term_lookups"], terms["term_sources"]
    rows = [["iteration", f"{terms['iteration_ms']:.4f}", "", "", ""]]
    for label, key, term in (("linear (per layer)", "linear_ms_per_layer", "linear"),
                             ("attention (per layer)", "attention_ms_per_layer", "attention"),
                             ("all-reduce (per layer)", "allreduce_ms_per_layer", "allreduce"),
                             ("elementwise (per layer)", "elementwise_ms_per_layer", "elementwise"),
                             ("LM head", "lm_head_ms", "lm_head"), ("overhead", "overhead_ms", "overhead")):
        rows.append([label, f"{terms[key]:.4f}", b.get(term, ""), look.get(term, ""), src.get(term, "")])
    table(f"{model} on {tp} x {gpu}: {tokens} tokens ({decode_seqs} decodes at context {context}), "
          f"{terms['layers']} layers", ["term", "ms", "bound", "from", "table"], rows)
    rate = "the FP8 rate" if m.fp8_rate else "the bf16 rate"
    typer.echo(f"weights {g.weight_dtype} ({dtype['weight_dtype_source']}); linear GEMMs at {rate}")
    typer.echo(f"weights {sizes['weight_GB_per_gpu']:.1f} GB per GPU; KV {sizes['kv_bytes_per_token_per_gpu']:,.0f} B "
               f"per token per GPU; KV capacity {sizes['kv_capacity_tokens']:,} tokens")
    for note in dtype["notes"]:
        typer.echo(f"note: {note}")
    table("GPU constants and their sources", ["constant", "source"], [[k, v] for k, v in m.gpu.sources.items()])


MAX_SHAPE_TOKENS = 10_000_000      # 10M tokens: beyond every shipped model's context window by an order


def _check_tp_divides_heads(geometry, tp: int) -> None:
    """A TP degree that splits no head evenly is no engine's configuration: refuse it (exit 2)."""
    from simroute.errors import ConfigurationError
    if geometry.heads_q % tp:
        raise ConfigurationError(f"--tp {tp} does not divide {geometry.name}'s {geometry.heads_q} query heads",
                                 field="tp")
    if not geometry.is_mla and geometry.kv_heads % tp and tp % geometry.kv_heads:
        raise ConfigurationError(f"--tp {tp} neither divides nor is a multiple of {geometry.name}'s "
                                 f"{geometry.kv_heads} KV heads", field="tp")


def register(app: typer.Typer) -> None:
    app.command("predict", cls=PlainValues)(predict)
    app.add_typer(model_app, name="model")
