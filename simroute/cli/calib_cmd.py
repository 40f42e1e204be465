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
               all_rows: bool = typer.Option(False, "--all", help="Show equal constants too.")) -> None:
    """Compare two profiles side by side (value and provenance).

    Example: simroute calib diff h100-ibgda calib/measured/h200/profile.yaml
    """
    from simroute.calib import flatten, load_profile
    fa, fb = flatten(load_profile(a)), flatten(load_profile(b))
    rows = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key, ("-", "")), fb.get(key, ("-", ""))
        if va != vb or all_rows:
            rows.append([key, va[0], vb[0], va[1], vb[1]])
    table(f"{a}  vs  {b}", ["key", "A", "B", "A provenance", "B provenance"], rows)
    typer.echo(f"{len(rows)} differing constants" if not all_rows else f"{len(rows)} constants")


def register(app: typer.Typer) -> None:
    app.add_typer(calib_app, name="calib")
