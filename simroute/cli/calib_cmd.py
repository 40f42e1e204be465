"""`simroute calib list|show|validate|diff`: inspect calibration profiles and their provenance."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import table

calib_app = typer.Typer(help="Calibration profiles: list, show with provenance, validate, diff.",
                        no_args_is_help=True)


@calib_app.command("list")
def calib_list() -> None:
    """Shipped profiles (use the name or a path wherever a profile is asked for).

    Example: simroute calib list
    """
    from simroute.calib import load_profile, shipped_dir
    rows = []
    for path in sorted(shipped_dir().rglob("*.yaml")):
        name = str(path.relative_to(shipped_dir()).with_suffix(""))
        try:
            prof = load_profile(path)
            rows.append([name, ", ".join(prof.fabrics) or "-", len(prof.constants), prof.description[:70]])
        except Exception as exc:  # a broken shipped file should show, not hide the others
            rows.append([name, "INVALID", "-", str(exc)[:70]])
    table("shipped calibration profiles", ["name", "fabrics", "constants", "description"], rows)


@calib_app.command("show")
def calib_show(profile: str = typer.Argument(..., help="Profile path or shipped name.")) -> None:
    """Every constant of a composed profile with its value and provenance.

    Example: simroute calib show h100-ibgda
    """
    from simroute.calib import flatten, load_profile
    prof = load_profile(profile)
    typer.echo(f"{prof.name}: {prof.description}" + (f" (box: {prof.box})" if prof.box else ""))
    table("constants", ["key", "value", "provenance"], [[k, v, p] for k, (v, p) in flatten(prof).items()])


@calib_app.command("validate")
def calib_validate(profiles: list[Path] = typer.Argument(..., help="Profile files to validate.")) -> None:
    """Validate profiles (schema, provenance, completeness for the cost model); exit 2 on the first error.

    Example: simroute calib validate calib/measured/mybox/profile.yaml
    """
    from simroute.calib import load_profile
    for path in profiles:
        prof = load_profile(path)
        if not prof.fabrics and not prof.constants:
            typer.echo(f"{path}: ok (empty)")
            continue
        complete = True
        try:
            prof.check_complete()
        except Exception:
            complete = False
        typer.echo(f"{path}: ok ({len(prof.fabrics)} fabrics, {len(prof.constants)} constants"
                   + ("" if complete else "; a fragment: not complete enough to simulate alone") + ")")


@calib_app.command("diff")
def calib_diff(a: str = typer.Argument(..., help="First profile."), b: str = typer.Argument(..., help="Second profile."),
               all_rows: bool = typer.Option(False, "--all", help="Show equal constants too."),
               gpu: str = typer.Option(None, "--gpu", help="Only this GPU entry, with the achievable rates "
                                                          "derived from it (datasheet peak x fraction)."),
               json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table.")) -> None:
    """Compare two profiles side by side (value, B/A and provenance); with --gpu, one GPU entry's constants
    and the rates the step-time model derives from them, e.g. measured vs datasheet-derived.

    Example: simroute calib diff gpus/h200-sxm calib/measured/h200/profile.yaml --gpu h200-sxm
    """
    from simroute.calib import flatten, load_profile
    pa, pb = load_profile(a), load_profile(b)
    fa, fb = flatten(pa), flatten(pb)
    if gpu is not None:
        fa = {k: v for k, v in {**fa, **derived_rates(pa, gpu)}.items() if k.startswith(f"gpus.{gpu}.")}
        fb = {k: v for k, v in {**fb, **derived_rates(pb, gpu)}.items() if k.startswith(f"gpus.{gpu}.")}
    rows = []
    keys = sorted(set(fa) | set(fb)) if gpu is None else list(dict.fromkeys([*fa, *fb]))
    for key in keys:
        va, vb = fa.get(key, ("-", "")), fb.get(key, ("-", ""))
        if va != vb or all_rows:
            rows.append([key, va[0], vb[0], _ratio(va[0], vb[0]), va[1], vb[1]])
    columns = ["key", "A", "B", "B/A", "A provenance", "B provenance"]
    if json_out:
        from simroute.cli.common import echo_json
        echo_json([dict(zip(columns, r)) for r in rows])
        return
    table(f"{a}  vs  {b}", columns, rows)
    typer.echo(f"{len(rows)} differing constants" if not all_rows else f"{len(rows)} constants")


def _ratio(a: str, b: str) -> str:
    try:
        x, y = float(a), float(b)
    except ValueError:                      # curves, ranges, absent values
        return ""
    return f"{y / x:.3g}" if x else ""


DIFF_TOKENS = (1, 16, 64, 256, 1024, 4096, 8192)


def derived_rates(prof, gpu: str) -> dict[str, tuple[str, str]]:
    """The absolute rates a GPU entry implies (what a probe measured, when its fractions are measured):
    achievable HBM GB/s, GEMM TFLOP/s at each point of the curve, attention TFLOP/s."""
    if gpu not in prof.gpus:
        return {}
    spec, e = prof.gpu_spec(gpu), prof.gpus[gpu]
    peak = spec.peak_flops / 1e12
    src = {k: getattr(e, k).provenance.kind for k in ("hbm_efficiency", "gemm_efficiency", "attention_efficiency")}
    out = {f"gpus.{gpu}.achievable_hbm_GBps": (f"{spec.achievable_hbm_Bps / 1e9:.4g}",
                                               f"derived: hbm_GBps x hbm_efficiency ({src['hbm_efficiency']})"),
           f"gpus.{gpu}.attention_TFLOPs": (f"{peak * spec.attention_efficiency:.4g}",
                                            f"derived: peak x attention_efficiency ({src['attention_efficiency']})")}
    for tokens in DIFF_TOKENS:              # the model's interpolation of the curve, on one grid for both sides
        out[f"gpus.{gpu}.gemm_TFLOPs_at_{tokens}_tokens"] = (
            f"{peak * spec.gemm_fraction(tokens):.4g}", f"derived: peak x gemm_efficiency ({src['gemm_efficiency']})")
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(calib_app, name="calib")
