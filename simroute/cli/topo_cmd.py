"""`simroute topo show FILE [--png OUT]`: summarise (and draw) a topology file."""

from __future__ import annotations

from pathlib import Path

import typer


def _draw(topo, out: Path) -> None:
    """Layered drawing: GPUs / host nodes at the bottom, then leaves, spines (aggs), cores."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from simroute.ioutil import atomic_path

    def layer(n: str) -> int:
        if n.startswith("core"):
            return 4
        if n.startswith(("spine", "agg")):
            return 3
        if n.startswith("leaf"):
            return 2
        return 1 if n.endswith((".nvs", ".nic")) or ".s" in n else 0

    g = topo.graph
    rows: dict[int, list[str]] = {}
    for n in g.nodes:
        rows.setdefault(layer(n), []).append(n)
    pos = {}
    for y, names in rows.items():
        names.sort(key=lambda s: [int(t) if t.isdigit() else t for t in __import__("re").split(r"(\d+)", s)])
        for i, n in enumerate(names):
            pos[n] = ((i + 0.5) / len(names), y)
    colours = {"nvlink": "tab:green", "pcie": "tab:olive", "xsocket": "tab:red", "nic-leaf": "tab:blue",
               "leaf-spine": "tab:purple", "spine-core": "tab:orange"}
    fig, ax = plt.subplots(figsize=(12, 6))
    for l in topo.links:
        if l.src < l.dst:
            (x0, y0), (x1, y1) = pos[l.src], pos[l.dst]
            ax.plot([x0, x1], [y0, y1], color=colours.get(l.tier, "grey"), lw=0.5, alpha=0.6)
    for y, names in rows.items():
        ax.scatter([pos[n][0] for n in names], [y] * len(names), s=8 if len(names) > 64 else 25, zorder=3,
                   color="black")
    for tier, c in colours.items():
        ax.plot([], [], color=c, label=tier)
    s = topo.summary()
    ax.set_title(f"{s['name']}: {s['gpus']} GPUs, bisection {s['bisection_GBps']:.0f} GB/s, "
                 f"oversubscription {s['oversubscription']:.2f}:1")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_yticks(range(5), ["GPU", "host", "leaf", "spine/agg", "core"])
    ax.set_xticks([])
    with atomic_path(out) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    topo = typer.Typer(help="Inspect cluster topologies.", no_args_is_help=True)

    @topo.command("show")
    def show(file: Path = typer.Argument(..., help="topology YAML"),
             png: Path | None = typer.Option(None, "--png", help="also draw it into this PNG")) -> None:
        """Print a summary: GPUs, links per tier, bisection bandwidth, oversubscription.

        Example: simroute topo show topologies/fattree-1024.yaml --png fattree.png
        """
        from simroute.network import load_topology
        t = load_topology(file)
        s = t.summary()
        rows = [("topology", s["name"]), ("hosts x GPUs", f"{s['hosts']} x {s['gpus_per_host']} = {s['gpus']}"),
                ("intra-host", s["intra"]), ("NIC", f"per {s['nic_per']}, {s['nic_GBps']:g} GB/s"),
                ("tiers", s["tiers"]), ("leaves", s["leaves"]), ("spines (or cores)", s["spines"]),
                ("switch uplink", f"{s['uplink_GBps']:g} GB/s"), ("links (directed)", s["links"])]
        rows += [(f"  {tier}", n) for tier, n in s["links_per_tier"].items()]
        rows += [("bisection", f"{s['bisection_GBps']:g} GB/s per direction"),
                 ("oversubscription", f"{s['oversubscription']:.2f}:1")]
        w = max(len(k) for k, _ in rows)
        for k, v in rows:
            typer.echo(f"{k:<{w}}  {v}")
        if png is not None:
            _draw(t, png)
            typer.echo(f"wrote {png}")

    app.add_typer(topo, name="topo")
