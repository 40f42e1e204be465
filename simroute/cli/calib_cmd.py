"""`simroute calib list|show|validate|diff|import`: inspect calibration profiles and their provenance, compare
operator tables, import a published operator database."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import table

calib_app = typer.Typer(help="Calibration profiles: list, show with provenance, validate, diff, import.",
                        no_args_is_help=True)
import_app = typer.Typer(help="Import a published measured operator database as simroute operator tables.",
                         no_args_is_help=True)
calib_app.add_typer(import_app, name="import")


@calib_app.command("list")
def calib_list() -> None:
    """Shipped profiles (use the name or a path wherever a profile is asked for).

    Example: simroute calib list
    """
    from simroute.calib import load_profile, shipped_dir
    rows = []
    for path in sorted(shipped_dir().rglob("*.yaml")):
        if path.relative_to(shipped_dir()).parts[0] == "ops":
            continue                      # operator-table manifests (calib/ops/<gpu>/<set>/tables.yaml), not profiles
        name = str(path.relative_to(shipped_dir()).with_suffix(""))
        if name.startswith(("ops/", "engines/")):      # operator tables' manifests, engine presets: not profiles
            continue
        try:
            prof = load_profile(path)
            rows.append([name, ", ".join(prof.fabrics) or "-", len(prof.constants), prof.description[:70]])
        except Exception as exc:  # a broken shipped file should show, not hide the others
            rows.append([name, "INVALID", "-", str(exc)[:70]])
    table("shipped calibration profiles", ["name", "fabrics", "constants", "description"], rows)
    from simroute.calib.engines import engines_dir, load_engine_preset_file
    presets = []
    for path in sorted(engines_dir().glob("*.yaml")):
        try:
            preset = load_engine_preset_file(path)
            presets.append([preset.label, len(preset.constants), preset.description])
        except Exception as exc:  # a broken shipped file should show, not hide the others
            presets.append([path.stem, "INVALID", str(exc)[:70]])
    table("shipped engine presets (--engine NAME@VERSION; docs/ENGINES.md)", ["engine", "constants", "description"],
          presets)


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
    """Validate profiles (schema, provenance, completeness for the cost model, and every GPU entry's operator
    tables: each file read and every column and value checked); exit 2 on the first error, before any line.

    Example: simroute calib validate calib/measured/mybox/profile.yaml
    """
    from simroute.calib import load_profile
    from simroute.errors import ConfigurationError
    lines = []
    for path in profiles:
        prof = load_profile(path)
        tables = {name: prof.operator_tables(name) for name in prof.gpus}       # read and checked, every file
        if not prof.fabrics and not prof.constants and not prof.gpus:
            lines.append(f"{path}: ok (empty)")
            continue
        complete = True
        try:
            prof.check_complete()
        except ConfigurationError:
            complete = False
        read = [f"{name}: {len(found.tables)} operator tables" for name, found in tables.items() if found is not None]
        lines.append(f"{path}: ok ({len(prof.fabrics)} fabrics, {len(prof.constants)} constants, {len(prof.gpus)} GPU "
                     f"entr{'y' if len(prof.gpus) == 1 else 'ies'}" + (f" ({'; '.join(read)})" if read else "")
                     + ("" if complete else "; a fragment: not complete enough to simulate alone") + ")")
    for line in lines:
        typer.echo(line)


@calib_app.command("diff")
def calib_diff(a: str = typer.Argument(..., help="First profile (with --tables: a table directory or a profile)."),
               b: str = typer.Argument(..., help="Second profile (with --tables: a table directory or a profile)."),
               all_rows: bool = typer.Option(False, "--all", help="Show equal constants too."),
               gpu: str = typer.Option(None, "--gpu", help="Only this GPU entry, with the achievable rates "
                                                          "derived from it (datasheet peak x fraction); with "
                                                          "--tables, the entry whose operator_tables a profile "
                                                          "argument names."),
               tables: bool = typer.Option(False, "--tables", help="Compare operator tables op by op (per kind "
                                           "and dtype: shared shapes, median and worst latency ratio B/A) "
                                           "instead of constants."),
               json_out: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table.")) -> None:
    """Compare two profiles side by side (value, B/A and provenance); with --gpu, one GPU entry's constants
    and the rates the step-time model derives from them, e.g. measured vs datasheet-derived; with --tables, two
    sets of operator tables at the shapes both measured.

    Example: simroute calib diff gpus/h200-sxm calib/measured/h200/profile.yaml --gpu h200-sxm
    Example: simroute calib diff calib/ops/h200-sxm/sglang-0.5.14 /tmp/ops-h200 --tables
    """
    if tables:
        _diff_tables(a, b, gpu, json_out)
        return
    from simroute.calib import flatten, load_profile
    pa, pb = load_profile(a), load_profile(b)
    fa, fb = flatten(pa), flatten(pb)
    if gpu is not None:
        from simroute.checks import check_name
        check_name(gpu, "--gpu", what="GPU entry name")
        if gpu not in pa.gpus and gpu not in pb.gpus:
            from simroute.errors import ConfigurationError
            known = sorted(set(pa.gpus) | set(pb.gpus))
            raise ConfigurationError(f"GPU entry '{gpu}' is in neither profile (their entries: "
                                     f"{', '.join(known) or 'none'})", field="--gpu")
        for name, prof in ((a, pa), (b, pb)):
            if gpu not in prof.gpus:
                from simroute.errors import ConfigurationError
                raise ConfigurationError(f"GPU entry '{gpu}' is absent from {name} (its entries: "
                                         f"{', '.join(sorted(prof.gpus)) or 'none'}): nothing to compare it with",
                                         field="--gpu")
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


def load_tables_arg(arg: str, gpu: str | None, flag: str):
    """The operator tables an argument of `calib diff --tables` names: a table directory (its tables.yaml), or a
    profile whose GPU entry `gpu` names operator_tables."""
    from simroute.calib.optables import MANIFEST, load_operator_tables
    from simroute.errors import ConfigurationError
    path = Path(arg)
    if path.is_dir():
        if not (path / MANIFEST).is_file():
            raise ConfigurationError(f"is a directory without a {MANIFEST} manifest: not an operator-table "
                                     "directory", file=path, field=flag)
        return load_operator_tables(path)
    from simroute.calib import load_profile
    prof = load_profile(arg)
    if gpu is not None:
        from simroute.checks import check_name
        check_name(gpu, "--gpu", what="GPU entry name")
    if gpu is None:
        if len(prof.gpus) != 1:
            raise ConfigurationError(f"is a profile: name the GPU entry whose operator tables to compare with --gpu "
                                     f"(entries: {', '.join(sorted(prof.gpus)) or 'none'})", file=arg, field="--gpu")
        gpu = next(iter(prof.gpus))
    if gpu not in prof.gpus:
        raise ConfigurationError(f"GPU entry '{gpu}' is not in this profile (entries: "
                                 f"{', '.join(sorted(prof.gpus)) or 'none'})", file=arg, field="--gpu")
    found = prof.operator_tables(gpu)
    if found is None:
        raise ConfigurationError(f"GPU entry '{gpu}' names no operator_tables", file=prof.origin.get(f"gpu:{gpu}", arg),
                                 field=f"gpus.{gpu}.operator_tables")
    return found


def _provenance_text(t) -> str:
    p = t.provenance
    where = ", ".join(f"{k} {p[k]}" for k in ("box", "device", "package", "package_version") if p.get(k))
    return f"{p.get('kind', '?')}" + (f" ({where})" if where else "")


def _diff_tables(a: str, b: str, gpu: str | None, json_out: bool) -> None:
    from simroute.calib.optables import diff_operator_tables
    ta, tb = load_tables_arg(a, gpu, "A"), load_tables_arg(b, gpu, "B")
    rows = diff_operator_tables(ta, tb)
    if json_out:
        from simroute.cli.common import echo_json
        echo_json({"A": {"path": ta.path, "label": ta.label, "provenance": dict(ta.provenance)},
                   "B": {"path": tb.path, "label": tb.label, "provenance": dict(tb.provenance)}, "rows": rows})
        return
    typer.echo(f"A: {ta.label} ({ta.path}): {_provenance_text(ta)}")
    typer.echo(f"B: {tb.label} ({tb.path}): {_provenance_text(tb)}")
    fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else ""
    table("operator tables, B/A at the shapes both hold",
          ["kind", "selection", "shared points", "median B/A", "worst B/A", "note"],
          [[r["kind"], r["selection"], r["shared_points"], fmt(r.get("median_ratio")), fmt(r.get("worst_ratio")),
            r["note"]] for r in rows])
    compared = [r for r in rows if r["shared_points"]]
    typer.echo(f"{len(compared)} selections compared over {sum(r['shared_points'] for r in compared)} shared shapes"
               + (f"; {len(rows) - len(compared)} kinds without shared shapes" if len(rows) > len(compared) else ""))


@import_app.command("aiconfigurator")
def import_aiconfigurator(
    gpu: str = typer.Option(None, "--gpu", help="simroute GPU entry (h200-sxm, b200-sxm, gb200, a100-80gb, ...) or "
                            "an aiconfigurator system name (h200_sxm); --list shows them all."),
    framework: str = typer.Option("sglang", "--framework", help="Serving framework whose kernels were measured "
                                  "(sglang, trtllm, vllm)."),
    version: str = typer.Option(None, "--version", help="Framework version (default: the database's current one "
                                "for that GPU and framework)."),
    source: Path = typer.Option(None, "--from", help="Directory holding the package's systems/data (an unpacked "
                                "wheel or a checkout); default: the installed aiconfigurator-core package."),
    out: Path = typer.Option(None, "-o", "--out", help="Table directory to write (new, or one simroute wrote)."),
    trim: bool = typer.Option(False, "--trim", help="Drop the rows no shipped model reads (every model, TP "
                              "degree and dtype reads the same rows; what the shipped calib/ops sets hold)."),
    list_systems: bool = typer.Option(False, "--list", help="List every GPU the database measured, its frameworks "
                                      "and versions, and exit."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Convert aiconfigurator-core's measured operator database (NVIDIA, Apache-2.0) into simroute operator
    tables: same rows, latencies in us, a tables.yaml manifest with the provenance of every table.

    Example: simroute calib import aiconfigurator --gpu b200-sxm --framework sglang -o /tmp/ops/b200-sxm/sglang-0.5.14
    """
    from simroute.calib.aiconfigurator import available, import_tables
    from simroute.calib.optables import load_operator_tables
    from simroute.errors import ConfigurationError
    from simroute.ioutil import claim_output
    if source is not None and not source.is_dir():
        raise ConfigurationError("not a directory (give the folder that holds systems/data)", file=source,
                                 field="--from")
    if list_systems:
        _list_aiconfigurator(available(source), json_out)
        return
    for flag, value in (("--gpu", gpu), ("--out", out)):
        if value is None:
            raise ConfigurationError("required (or --list to see what the database holds)", field=flag)
    with claim_output(out, directory=True, inputs=[source], flag="--out", what="operator tables"):
        summary = import_tables(gpu, framework, version, out, data_root=source, trim=trim)
    written = load_operator_tables(out)
    summary["provenance"] = dict(written.provenance)
    summary["output"] = str(Path(out).resolve())
    if json_out:
        from simroute.cli.common import echo_json
        echo_json(summary)
        return
    table(f"{summary['gpu']} ({summary['system']}) {framework} {summary['version']} -> {out}",
          ["kind", "rows", "measured rows", "read from version"],
          [[k, n, summary["rows_measured"].get(k, ""), summary["versions"].get(k, "")]
           for k, n in summary["rows"].items()])
    if summary["skipped"]:
        typer.echo(f"skipped (not measured for this GPU and framework): {', '.join(summary['skipped'])}")
    prov = summary["provenance"]
    typer.echo(f"provenance: {prov.get('kind')}: {prov.get('ref', '')}")
    if prov.get("licence"):
        typer.echo(f"licence: {prov['licence']}")
    typer.echo("to use them, point a GPU entry at the directory (a relative path resolves against the file that "
               "holds the entry):")
    typer.echo(f"  gpus:\n    {gpu}:\n      operator_tables: {{path: {summary['output']}, note: imported from "
               f"aiconfigurator-core}}")
    typer.echo(f"compare: simroute calib diff <other tables> {out} --tables")


def _list_aiconfigurator(systems: list[dict], json_out: bool) -> None:
    """`--list`: every system, its simroute name, frameworks and versions (the default one starred)."""
    from simroute.calib.profile import shipped_dir
    if json_out:
        from simroute.cli.common import echo_json
        echo_json({"systems": systems})
        return
    shipped = {path.stem for path in (shipped_dir() / "gpus").glob("*.yaml")}
    table("GPUs the measured database holds (* the default version; --gpu takes either name)",
          ["--gpu", "system", "GPU entry shipped", "frameworks: versions"],
          [[entry["gpu"], entry["system"], "yes" if entry["gpu"] in shipped else "",
            "; ".join(f"{name} " + ", ".join(v + ("*" if v == info["default"] else "") for v in info["versions"])
                      for name, info in entry["frameworks"].items())] for entry in systems])


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
