"""`simroute topo show FILE|NAME [--png OUT]`: summarise (and draw) a topology file or a shipped topology."""

from __future__ import annotations

from pathlib import Path

import typer


LAYERS = ("GPU", "NVSwitch / NIC", "leaf", "spine / agg", "core")
TIER_COLOURS = {"nvlink": "tab:green", "pcie": "tab:olive", "xsocket": "tab:red", "nic-leaf": "tab:blue",
                "leaf-spine": "tab:purple", "spine-core": "tab:orange"}
GPU_ROW_LIMIT = 256     # past this many GPUs the GPU row (and its host-internal links) is left out


def _layer(node: str) -> int:
    if node.startswith("core"):
        return 4
    if node.startswith(("spine", "agg")):
        return 3
    if node.startswith("leaf"):
        return 2
    return 1 if node.endswith((".nvs", ".nic")) or ".s" in node else 0


def _natural(name: str) -> list:
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _draw(topo, out: Path) -> None:
    """Layered drawing: GPUs and host nodes at the bottom, then leaves, spines (aggs), cores. Large fabrics drop
    the GPU row, thin their lines by link count, and the legend lists only the tiers drawn."""
    from simroute.plotting import pyplot, save_png
    plt = pyplot()
    drop_gpus = len(topo.gpus) > GPU_ROW_LIMIT
    rows: dict[int, list[str]] = {}
    for n in topo.graph.nodes:
        if not (drop_gpus and _layer(n) == 0):
            rows.setdefault(_layer(n), []).append(n)
    pos = {}
    for y, names in rows.items():
        names.sort(key=_natural)
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) / len(names), y)
    # a GPU left out is drawn as the host-layer node it first links to (its NVSwitch, NIC or socket; a
    # multi-host NVLink domain's switch), or not at all (an NVLink mesh with a NIC per GPU)
    host_layer = set(rows.get(1, []))
    alias = {n: n if n in pos else next((m for m in topo.graph.successors(n) if m in host_layer), None)
             for n in topo.graph.nodes}
    drawn: dict[str, set] = {}
    count: dict[str, int] = {}
    for link in topo.links:
        count[link.tier] = count.get(link.tier, 0) + (link.src < link.dst)
        a, b = alias.get(link.src), alias.get(link.dst)
        if a and b and a != b and link.src < link.dst:
            drawn.setdefault(link.tier, set()).add((pos[a], pos[b]))
    fig, ax = plt.subplots(figsize=(14, 7))
    for tier, segs in drawn.items():
        lw, alpha = (0.8, 0.8) if len(segs) < 200 else (0.25, 0.35)
        for (x0, y0), (x1, y1) in segs:
            ax.plot([x0, x1], [y0, y1], color=TIER_COLOURS.get(tier, "grey"), lw=lw, alpha=alpha)
        ax.plot([], [], color=TIER_COLOURS.get(tier, "grey"), lw=2, label=f"{tier} ({count[tier]} links)")
    for y, names in rows.items():
        ax.scatter([pos[n][0] for n in names], [y] * len(names), s=6 if len(names) > 64 else 25, zorder=3,
                   color="black")
    s = topo.summary()
    note = "; GPUs drawn as the NVSwitch, NIC or socket they join" if drop_gpus else ""
    ax.set_title(f"{s['name']}: {s['gpus']} GPUs, bisection {s['bisection_GBps']:.0f} GB/s, "
                 f"oversubscription {s['oversubscription']:.2f}:1{note}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, title="tier")
    ax.set_yticks(sorted(rows), [f"{LAYERS[y]} ({len(rows[y])})" for y in sorted(rows)])
    ax.set_xticks([])
    ax.set_ylim(min(rows) - 0.3, max(rows) + 0.3)
    save_png(fig, out)


def register(app: typer.Typer) -> None:
    topo = typer.Typer(help="Inspect cluster topologies.", no_args_is_help=True)

    @topo.command("show")
    def show(file: str = typer.Argument(..., help="Topology YAML or a shipped name (fattree, fattree-1024, "
                                                  "paper-testbed, ark-leafspine, ark-paper, rail-optimized, "
                                                  "gb200-nvl72)."),
             png: Path | None = typer.Option(None, "--png", help="also draw it into this PNG")) -> None:
        """Print a summary: kind, GPUs, links per tier, bisection bandwidth, oversubscription, and whether one
        rank pair's flow stands for a whole host's tensor-parallel ranks (their own links, or shared ones).

        Example: simroute topo show gb200-nvl72 --png nvl72.png
        """
        from simroute.ioutil import check_new_file
        from simroute.network import load_topology
        from simroute.shipped import resolve_input
        source = resolve_input("topology", file, strict=True)
        if png is not None:      # before any work: a user's file of that name is never overwritten
            check_new_file(png, flag="--png", inputs=[source])
        t = load_topology(source)
        s = t.summary()
        rows = [("topology", s["name"]), ("kind", t.spec.kind),
                ("hosts x GPUs", f"{s['hosts']} x {s['gpus_per_host']} = {s['gpus']}"),
                ("intra-host", s["intra"]), ("NIC", f"per {s['nic_per']}, {s['nic_GBps']:g} GB/s")]
        if "nvlink_domains" in s:
            rows.append(("NVLink domains", f"{s['nvlink_domains']} x {s['gpus_per_domain']} GPUs"))
        if "rails" in s:
            rows.append(("rails", f"{s['rails']} per host, {s['rail_groups']} rail group(s)"))
        rows += [("tiers", s["tiers"]), ("leaves", s["leaves"]), ("spines (or cores)", s["spines"]),
                 ("switch uplink", f"{s['uplink_GBps']:g} GB/s"), ("links (directed)", s["links"])]
        rows += [(f"  {tier}", n) for tier, n in s["links_per_tier"].items()]
        rows += [("bisection", f"{s['bisection_GBps']:g} GB/s per direction"),
                 ("oversubscription", f"{s['oversubscription']:.2f}:1")]
        planes = t.rank_planes(t.spec.gpus_per_host)
        yes = {True: "one rank pair stands for all", False: "ranks share links"}
        rows += [(f"tp {planes.tp} ranks", f"within a domain: {yes[planes.within_domain]}; across: "
                                           f"{yes[planes.across_domains]}"), ("  why", planes.why)]
        w = max(len(k) for k, _ in rows)
        for k, v in rows:
            typer.echo(f"{k:<{w}}  {v}")
        if png is not None:
            from simroute.ioutil import atomic_files
            with atomic_files(png.parent, [png.name], flag="--png", inputs=[source]) as tmp:
                _draw(t, tmp[png.name])
            typer.echo(f"wrote {png}")

    app.add_typer(topo, name="topo")
