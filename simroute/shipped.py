"""Shipped inputs by name: `fattree` for the topology file, `agents-default` for the trace, `h100-ibgda` for the
profile. Every place that takes an input file takes one of these names too (an existing path always wins)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
KINDS = {"topology": ("topologies", ".yaml"), "trace": ("traces", ".parquet"), "calib": ("calib", ".yaml")}


def shipped_names(kind: str) -> list[str]:
    folder, suffix = KINDS[kind]
    return sorted(p.name.removesuffix(suffix) for p in (DATA / folder).glob(f"*{suffix}"))


def resolve_input(kind: str, value: str | Path) -> str:
    """`value` itself if it names an existing path (or is not a bare name), else the shipped file of that name.

    A bare name with no suffix that is neither is an error listing the shipped names; a missing `x.yaml` comes
    back unchanged, so the loader reports the missing file."""
    p = Path(value)
    if p.exists() or len(p.parts) != 1:
        return str(value)
    folder, suffix = KINDS[kind]
    cand = DATA / folder / f"{p.name.removesuffix(suffix)}{suffix}"
    if cand.exists():
        return str(cand)
    if not p.suffix:
        from simroute.errors import ConfigurationError
        raise ConfigurationError(f"neither a file nor a shipped {kind} (shipped: {', '.join(shipped_names(kind))})",
                                 file=p)
    return str(value)
