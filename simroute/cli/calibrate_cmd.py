"""`simroute calibrate`: capability report, probes with a progress bar, fits with MAPE, then the profile
with per-constant provenance, the raw samples as Parquet and the step probes' operator tables beside it."""

from __future__ import annotations

from pathlib import Path

import typer

from simroute.cli.common import table

# The paper's fit quality for the affine route model on H100 IBGDA ("Move the Query, Not the Cache", Table 2).
PAPER_MAPE_AMORTISED = 0.07     # Mq >= 512
PAPER_MAPE_FULL = 0.16          # the whole Mq sweep


def mape_warnings(fits: dict[str, dict]) -> list[str]:
    """One line per fit whose MAPE exceeds the paper's 7% (Mq >= 512) or 16% (all Mq)."""
    out = []
    for fabric, f in fits.items():
        for key, limit, where in (("mape_amortised", PAPER_MAPE_AMORTISED, "Mq >= 512"),
                                  ("mape_full", PAPER_MAPE_FULL, "all Mq")):
            if f.get(key) is not None and f[key] > limit:
                out.append(f"warning: {fabric}: affine fit MAPE {f[key]:.0%} ({where}) exceeds the paper's "
                           f"{limit:.0%}; T_probe + Mq (q+p) / BW may not describe this path (see samples.parquet)")
    return out


def calibrate(
    out: Path = typer.Option(None, "--out", help="Profile to write (default calib/measured/<hostname>/profile.yaml);"
                             " samples.parquet goes beside it."),
    only: list[str] = typer.Option(None, "--only", help="Run only this probe (repeatable; see --list)."),
    quick: bool = typer.Option(False, "--quick", help="Fewer repetitions: the host probes take a few seconds."),
    pes: int = typer.Option(1, "--pes", min=1, help="Processing elements (one process per GPU) for nvshmem-pes."),
    timeout: float = typer.Option(None, "--timeout", min=0.1, help="Per-probe timeout in seconds "
                                  "(default: each probe's own)."),
    list_probes: bool = typer.Option(False, "--list", help="List the probes and what each needs, then exit."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report capabilities and the plan; run nothing."),
) -> None:
    """Measure this machine and write a calibration profile the simulator trusts.

    Example: simroute calibrate --quick --only host-shm --only host-tcp --out /tmp/me/profile.yaml
    """
    from simroute.probes.calibrate import calibrate as run, default_out, select
    from simroute.probes.capability import detect, report_rows
    from simroute.probes.framework import NEEDS_TEXT, requirement_gap
    from simroute.probes.registry import PROBES

    if list_probes:
        table("probes", ["probe", "needs", "what"],
              [[p.name, NEEDS_TEXT[p.needs], p.what] for p in PROBES.values() if not p.hidden])
        return
    probes = select(only)
    cap = detect()
    target = out or default_out(cap.hostname)
    if target.is_dir():
        from simroute.errors import ConfigurationError
        raise ConfigurationError("is a directory; --out names the profile file (e.g. DIR/profile.yaml)", file=target)
    from simroute.ioutil import check_new_file, record_files
    for path in (target, target.parent / "samples.parquet"):     # a user's profile is never measured over
        check_new_file(path, flag="--out")                        # (checked before anything is printed)
    table("capability", ["what", "this machine"], report_rows(cap))
    for n in cap.notes:
        typer.echo(f"note: {n}")
    plan = []
    for p in probes:
        gap = requirement_gap(p.needs, cap.gpus, pes, hosts_with_nic=bool(cap.infiniband) and pes >= 2)
        plan.append([p.name, NEEDS_TEXT[p.needs], "run" if not gap else f"skip: {gap}"])
    table("plan", ["probe", "needs", "action"], plan)
    if dry_run:
        typer.echo(f"dry run: would write {target} and {target.parent / 'samples.parquet'}"
                   + (f", and operator tables under {target.parent / 'ops'}" if any(
                       p.name in ("gemm", "decode-attention", "prefill-attention") for p in probes) else ""))
        return

    from tqdm import tqdm
    bar = tqdm(total=len(probes), desc="probes", unit="probe", leave=True)
    lines: list[str] = []

    def done(o) -> None:
        bar.set_postfix_str(f"{o.probe.name}: {o.status}")
        bar.update(1)
        lines.append(o.line())
    cal = run(target, only=only, quick=quick, pes=pes, timeout_s=timeout, on_done=done, cap=cap)
    bar.close()
    record_files(target.parent, [p.name for p in (target, target.parent / "samples.parquet") if p.is_file()])
    for line in lines:
        typer.echo(line)

    fits, fit_of = [], {}
    for o in cal.outcomes:
        f = o.results.get("fit") if o.ok else None
        if f:
            fit_of[o.probe.name] = f
            fits.append([o.probe.name, f"{f['t_probe_s'] * 1e6:.1f}", f"{f['bw_Bps'] / 1e9:.3f}",
                         f"{o.results.get('bulk_Bps', o.results.get('multi_block_Bps', 0)) / 1e9:.3f}",
                         f"{f['turnaround_s'] * 1e6:.1f}", f"{f['mape_amortised']:.1%}", f"{f['mape_full']:.1%}"])
    if fits:
        table("affine fits (T = T_probe + turnaround + Mq (q+p) / BW)",
              ["fabric", "T_probe us", "BW GB/s", "bulk GB/s", "turnaround us", "MAPE Mq>=512", "MAPE all"], fits)
    for line in mape_warnings(fit_of):
        typer.secho(line, fg=typer.colors.YELLOW, err=True)
    typer.echo("measured: " + (", ".join(cal.measured()) or "nothing"))
    for name, why in cal.not_measured():
        typer.echo(f"not measured: {name} ({why})")
    for n in cal.notes:
        typer.echo(n)
    if cal.profile_path:
        n_def = sum(1 for c in cal.profile.constants.values() if c.provenance.kind == "default")
        typer.echo(f"wrote {cal.profile_path} ({len(cal.profile.fabrics)} fabrics, {len(cal.profile.constants)} "
                   f"constants, {n_def} paper defaults standing in) and {cal.samples_path}")
        if cal.tables_path:
            rows = ", ".join(f"{k} {n}" for k, n in cal.tables_rows.items())
            typer.echo(f"wrote operator tables {cal.tables_path} (rows: {rows}); the profile's GPU entry "
                       f"{cal.profile.gpu} names them (operator_tables.path)")
            typer.echo(f"compare: simroute calib diff gpus/{cal.profile.gpu} {cal.profile_path} --tables --gpu "
                       f"{cal.profile.gpu}")
        typer.echo(f"inspect: simroute calib show {cal.profile_path}")
    elif not cal.measured():
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
