"""Shipped inputs by name: `fattree` for the topology file, `agents-default` for the trace, `h100-ibgda` for the
profile, `ark-ecmp-vs-ark` for the study, `mooncake-sample` for a raw trace to import. Every place that takes
an input file takes one of these names too (an existing path always wins)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
KINDS = {"topology": ("topologies", ".yaml"), "trace": ("traces", ".parquet"), "calib": ("calib", ".yaml"),
         "study": ("studies", ".yaml"), "sample": ("samples", ".jsonl")}


def shipped_folder(kind: str) -> Path:
    """The folder the package ships `kind`'s files in (`calib`: the profiles, with the engine presets below)."""
    return DATA / KINDS[kind][0]


def shipped_names(kind: str) -> list[str]:
    suffix = KINDS[kind][1]
    return sorted(p.name.removesuffix(suffix) for p in shipped_folder(kind).glob(f"*{suffix}"))


def resolve_input(kind: str, value: str | Path, *, strict: bool = False) -> str:
    """`value` itself if it names an existing path (or is not a bare name), else the shipped file of that name.

    Anything else comes back unchanged, so the loader reports the missing file; with `strict`, a bare name with
    no suffix that is neither a file nor shipped is an error listing the shipped names. An empty value (which
    Path reads as the working directory) names nothing: refused, naming the flag."""
    check_not_empty(kind, value)
    p = Path(value)
    if p.exists() or len(p.parts) != 1:
        return str(value)
    suffix = KINDS[kind][1]
    cand = shipped_folder(kind) / f"{p.name.removesuffix(suffix)}{suffix}"
    if cand.exists():
        return str(cand)
    if strict and not p.suffix:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"neither a file nor a shipped {kind} (shipped: {', '.join(shipped_names(kind))})",
                                 file=p)
    return str(value)


def check_not_empty(kind: str, value: object) -> None:
    """An input flag given an empty or blank value (`--calib ''`) is refused rather than read as `.`."""
    if isinstance(value, str) and not value.strip():
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"an empty value names no {kind}: give a path or a shipped name (shipped: "
                                 f"{', '.join(shipped_names(kind))})", field=f"--{kind}")
