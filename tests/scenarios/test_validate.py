"""The `validate` scorecard: verdicts follow the bands, only predicted rows count, rows come from mechanisms
(break one and its rows fail), every failing predicted row is a finding with its numbers, the JSON is strict,
every claim the issue lists is a row, and `-j` gives the same rows as one process."""

from __future__ import annotations

import functools
import json
import math
import re

import numpy as np
import pytest

from simroute.scenarios import validate as v


def row(sim: float, low: float = 1.0, high: float = 2.0, kind: str = v.PREDICTED, paper: float = 1.5) -> v.Row:
    return v.Row("r", "effect", "source", paper, sim, "x", low, high, "band", "basis", kind=kind)


@pytest.mark.parametrize("sim, verdict", [(1.0, "pass"), (2.0, "pass"), (0.999, "fail"), (2.001, "fail"),
                                          (math.nan, "fail"), (math.inf, "fail")])
def test_verdict_is_the_band(sim, verdict):
    assert row(sim).verdict == verdict


def test_open_band_and_a_claim_without_a_number_are_null_in_json():
    entry = row(5.0, 1.0, math.inf, paper=math.nan).as_dict()
    assert entry["hi"] is None and entry["paper"] is None and entry["verdict"] == "pass"
    json.dumps(entry, allow_nan=False)


def test_only_predicted_rows_count():
    rows = [row(1.5), row(9.0), row(9.0, kind=v.INPUT), row(1.5, kind=v.INPUT)]
    assert v.summary(rows) == {"predicted": 2, "passed": 1, "failed": 1, "inputs": 2, "inputs_failed": 1}
    with pytest.raises(ValueError, match="kind"):
        row(1.5, kind="guess")


@pytest.fixture(scope="module")
def card() -> dict[str, v.Row]:
    return {card_row.id: card_row for card_row in v.scorecard()}


CLAIMS = (
    # Move the Query, Not the Cache: cost model, fabrics, topology
    "table1-rt-2184", "fig2b-mape-amortised", "fig2b-mape-large", "table2-decode-rt-cross", "table2-decode-rt-intra",
    "fig6b-decode-rt-a100", "fig6b-decode-rt-rtx", "fig6b-decode-rt-a40", "fig6b-nvlink-leads-to",
    "s8-multi-block-ratio", "s8-spine-vs-leaf",
    # decode point, crossovers, host overhead, proxy
    "fig1b-fetch", "fig1b-fetch-over-route", "fig1b-local", "s5-fetch-local-crossover-c15",
    "s5-fetch-local-crossover-c05", "fig6a-route-loses-below", "s53-host-overhead-crossover", "s53-fetch-wins-below",
    "s61-proxy-over-ibgda",
    # bytes
    "bytes-route-saving", "bytes-break-even", "s54-break-even-top512", "s54-break-even-top1024",
    "s8-tpla-per-rank-bytes",
    # selection, holders, congestion, staging
    "fig4a-route-fanout", "s54-cross-socket-gather", "fig4b-fanin-flat", "fig4b-fanin-rise", "replica-relief",
    "s63-holder-flat-to-8", "s63-holder-decode-point", "s63-holder-decode-point-128", "s63-holder-saturated",
    "fig4b-fanin-flat-measured-kernel", "fig4b-fanin-rise-measured-kernel",
    "fig7-onset", "fig7-onset-256", "fig7-probe-onset", "fig7-saturated", "fig7-saturated-256",
    "fig7-probe-saturated", "fig7-no-inversion", "fig7b-same-socket", "fig7b-a40-cross-socket",
    "fig7b-pcie5-cross-socket", "staging-elbow", "staging-past-elbow",
    # ARK
    "ark-fct-mean", "ark-fct-p95", "ark-ttft-mean", "ark-spine-ecmp", "ark-spine-ark")


@pytest.mark.slow                      # the module's scorecard fixture: the whole default scorecard once
def test_scorecard_covers_the_papers_claims(card):
    assert set(CLAIMS) <= set(card), sorted(set(CLAIMS) - set(card))
    for card_row in card.values():
        assert card_row.verdict in ("pass", "fail") and card_row.lo <= card_row.hi
        assert card_row.kind in v.KINDS and re.search(r"(Table|Fig|§|abstract)", card_row.source), card_row.id
        assert math.isfinite(card_row.paper) or card_row.paper != card_row.paper     # a number, or NaN: no number


def test_every_failing_predicted_row_is_a_finding_with_its_numbers(card):
    for card_row in card.values():
        if card_row.kind == v.PREDICTED and card_row.verdict == "fail":
            assert card_row.note.startswith("finding:") and len(card_row.note) > 120, card_row.id
            assert re.search(r"\d", card_row.note), card_row.id


def test_implementation_checks_hold_except_the_papers_own_inconsistency(card):
    """Input rows evaluate the paper's constants: they fail only where the implementation is wrong, or where
    the paper's sentence disagrees with its own formula (§5.3's order, explained in the row's note)."""
    failing = {card_row.id for card_row in card.values() if card_row.kind == v.INPUT and card_row.verdict == "fail"}
    assert failing == {"s53-fetch-wins-below"}
    assert "no reading of its stated costs" in card["s53-fetch-wins-below"].note


def test_the_mechanism_rows_the_issue_requires(card):
    for rid in ("fig4a-route-fanout", "table2-decode-rt-intra", "fig6b-decode-rt-a100", "fig6b-decode-rt-rtx",
                "fig7-onset", "fig7-probe-onset", "ark-fct-mean", "ark-fct-p95", "ark-ttft-mean", "ark-spine-ecmp",
                "ark-spine-ark"):
        assert card[rid].verdict == "pass" and card[rid].kind == v.PREDICTED, card[rid]
    # ARK reserves paths: shorter transfers, diluted in TTFT by prefill, and a less crowded busiest spine
    assert card["ark-fct-mean"].simulated < card["ark-ttft-mean"].simulated < 0
    assert card["ark-spine-ark"].simulated < card["ark-spine-ecmp"].simulated
    for rid in ("table1-rt-2184", "fig4b-fanin-flat", "bytes-break-even"):      # implementation checks
        assert card[rid].kind == v.INPUT


def test_congestion_rises_with_background_load(tmp_path):
    round_trips = v.congestion_curve(v.Ctx(tmp_path), stream_counts=(0, 2, 4), background_rows=1024)
    assert round_trips[0] <= round_trips[2] < round_trips[4]


def test_a_broken_message_path_fails_its_rows(monkeypatch, tmp_path):
    """Rows are computed by the engine, not read back: a message model that ignores bytes fails Table 1 and the
    decode-point rows of Table 2."""
    from simroute.network.engine import FlowEngine
    monkeypatch.setattr(FlowEngine, "message_delay", lambda self, *args, **kwargs: 5e-6)
    ctx = v.Ctx(tmp_path)
    assert all(card_row.verdict == "fail" for card_row in v.table1_rows(ctx))
    assert all(card_row.verdict == "fail" for card_row in v.table2_rows(ctx)[:5])


def test_validate_json_cli(cli):
    code, out, err = cli("validate", "--json", "--strict", "-j", "1", "--only", "table1,wire_byte,table2")
    doc = json.loads(out)
    assert ({card_row["id"] for card_row in doc["rows"]}
            >= {"table1-rt-900", "bytes-break-even", "table2-decode-rt-intra"})
    predicted = [card_row for card_row in doc["rows"] if card_row["kind"] == "predicted"]
    assert doc["failed"] == sum(card_row["verdict"] == "fail" for card_row in predicted)
    assert doc["predicted"] == len(predicted) and doc["inputs"] == len(doc["rows"]) - len(predicted)
    assert code == (1 if doc["failed"] else 0), err
    assert "validate [" in err                       # progress on stderr, the JSON alone on stdout


def test_unknown_section_is_one_line(cli):
    code, out, err = cli("validate", "--only", "nope")
    assert code == 2 and "unknown validate section 'nope'" in err


def test_bad_jobs_is_one_line(cli):
    code, out, err = cli("validate", "--only", "table1", "-j", "0")
    assert code == 2 and "--jobs" in err and out == ""


def test_parallel_rows_equal_one_process(tmp_path):
    sections = v.select_sections(["table1", "crossover", "tpla"])
    heard = []
    rows = v.scorecard(sections, jobs=2, progress=lambda what, done, total, cpu_s: heard.append((done, total)))
    assert [r.as_dict() for r in rows] == [r.as_dict() for r in v.scorecard(sections, jobs=1)]
    assert heard[-1] == (3, 3) and [done for done, _ in heard] == [1, 2, 3]


# ---- the rows' explanations: each checkable from its numbers ---------------------------------------------------
def test_nvlink_decode_route_is_table2s_fit_plus_the_turnaround_of_its_mape(tmp_path):
    """The intra-node row by hand: T_probe 1.2 us + 256 x 2184 B / 21 GB/s + the turnaround Table 2's 3% MAPE
    implies (3.62 us): 31.4 us, inside the measured 31-48 us (the fit alone, 27.8 us, is not)."""
    ctx = v.Ctx(tmp_path)
    nvlink = v.table2_rows(ctx)[1]
    fab = ctx.all_fabrics.fabric_params("h100-nvlink4")
    hand = (fab.t_probe_s + fab.turnaround_s + 256 * 2184 / fab.single_block_Bps) * 1e6
    assert nvlink.simulated == pytest.approx(hand, rel=1e-3) and 31.0 <= hand <= 48.0
    assert (fab.t_probe_s + 256 * 2184 / fab.single_block_Bps) * 1e6 < 31.0
    assert fab.turnaround_s == pytest.approx(3.62e-6, abs=0.01e-6)


def test_local_row_is_the_step_models_prefill(card, tmp_path):
    """The local row's cost is the step model's prefill of the 2048-token chunk (plus the request's own tiny
    work), not a per-token constant: it moves with the GPU entry's GEMM rate."""
    from simroute.model.steptime import BatchShape
    ctx = v.Ctx(tmp_path)
    prefill_ms = ctx.profile.step_model(ctx.model).iteration(BatchShape.uniform(prefill_tokens=2048)).iteration_s * 1e3
    assert prefill_ms <= card["fig1b-local"].simulated <= 1.3 * prefill_ms
    note = card["fig1b-local"].note
    if card["fig1b-local"].verdict == "fail":
        assert note.startswith("finding:")
    assert f": {card['fig1b-local'].simulated:.1f} ms (" in note and "against the paper's 27.6-82.9 ms" in note
    assert "attention " in note and "elementwise " in note
    # the bracket: an eager per-expert prefill at the prototype's per-call cost (26 MoE layers x 64 experts x 5
    # launches x 11.85 us = 98.6 ms) lies above the band, the step model's engine below it
    assert v.eager_expert_launches(ctx.geometry) == 26 * 64 * 5
    assert "8320 launches" in note and "98.6 ms" in note and "c >= 1.78 us" in note


def test_fig7_findings_name_the_subscription_and_the_probe(card):
    note = card["fig7-saturated"].note
    assert "116% subscribed" in note and "nic-qp-sweep" in note and "+119%" in note
    assert "processor-sharing link" in note and "at K = 2 where the paper is flat" in note
    assert "moves no bytes" in card["fig7-probe-saturated"].note


def test_host_overhead_crossover_is_the_pull_paid_by_the_per_row_cost(card, tmp_path):
    """§5.3 by hand: route pays 3.5 ms + 12.5 us x Mq (+ its transport), a bytes-back fetch 3.5 ms + the
    2048-token pull (63.7 MB at 25 GB/s = 2.55 ms): they cross near 2.55 ms / 12.5 us ~ 200 rows."""
    crossing = card["s53-host-overhead-crossover"].simulated
    assert 150 <= crossing <= 205 and card["s53-fetch-wins-below"].simulated == 0.0


def test_staging_rows_move_the_fetch_by_the_pools_hand_count(tmp_path):
    """A lone fetch at K streams is later than at K = 1 by exactly what the staging mechanisms add: the same
    27 dispatches of 11.85 us, one join of 11.85 us per stream used (K = 8: +7 joins, 83 us; K = 16: +15), the
    copies (1.6 us each) finishing behind the host. Nothing else in the fetch depends on K."""
    ctx = v.Ctx(tmp_path)
    first, _ = v.STAGING_REQUESTERS

    @functools.cache
    def ttft(streams: int) -> float:
        trace = v.fanin_trace(tmp_path / "s1.parquet", 1, first_requester=first, holder=0, output_tokens=1)
        return float(np.median(v.column(ctx.run(trace, policy="always-fetch", staging_streams=streams), "ttft_s")))
    join = ctx.profile.staging_params().join_s
    assert join == pytest.approx(11.85e-6)
    for streams in (8, 16):
        assert ttft(streams) - ttft(1) == pytest.approx((streams - 1) * join, rel=1e-6)


def test_holder_kernel_rows_are_the_measured_decode_table_not_the_papers_curve(tmp_path, monkeypatch):
    """§6.3's rows by hand: the step model's decode attention of N sequences over 2048 tokens is the H100
    table's row at (batch N, context 2048, h_q, bf16), a grid point (the geometric mean where it has two); the
    paper's holder curve, which the rows are judged against, is not read (doubling it changes nothing)."""
    import pandas as pd
    from simroute.calib import shipped_dir
    table = pd.read_parquet(shipped_dir() / "ops" / "h100-sxm" / "sglang-0.5.14" / "mla_decode.parquet")

    def hand(batch: int, heads: int) -> float:
        hit = table[(table.batch == batch) & (table.context == 2048) & (table.heads == heads)
                    & (table.kv_dtype == "bf16")]
        assert 1 <= len(hit) <= 2        # a shape the database timed twice: their geometric mean (optables)
        return float(np.exp(np.log(hit.latency_us).mean()))
    ctx = v.Ctx(tmp_path)
    rows = {card_row.id: card_row for card_row in v.holder_kernel_rows(ctx)}
    assert rows["s63-holder-flat-to-8"].simulated == pytest.approx(hand(8, 16) / hand(1, 16), rel=1e-6)
    assert rows["s63-holder-decode-point"].simulated == pytest.approx(hand(16, 16), rel=1e-6)
    assert rows["s63-holder-decode-point-128"].simulated == pytest.approx(hand(16, 128), rel=1e-6)
    assert rows["s63-holder-saturated"].simulated == pytest.approx(hand(256, 128), rel=1e-6)
    assert all(card_row.kind == v.PREDICTED and "mla_decode" in card_row.basis for card_row in rows.values())
    holder = ctx.profile.constants["holder_compute_dense_us"]
    monkeypatch.setitem(ctx.profile.constants, "holder_compute_dense_us",
                        holder.replace(points=[(n, 2 * us) for n, us in holder.points]))
    assert ctx.profile.step_model(ctx.model).holder_curve[1][0] == pytest.approx(2 * holder.points[0][1] * 1e-6)
    again = {card_row.id: card_row.simulated for card_row in v.holder_kernel_rows(ctx)}
    assert again == {rid: card_row.simulated for rid, card_row in rows.items()}


def test_fanin_on_the_measured_kernel_rises_by_the_kernels_rise_per_layer(tmp_path):
    """The predicted Fig 4b rows run the fan-in with the holder curve replaced by the measured kernel (a scratch
    profile that includes the shipped one): its curve is the table's, and from 8 to 32 sub-agents the TPOT rises
    by the kernel's rise in every layer (27 x (45.8 - 20.5) us = 0.68 ms), all 32 partials in one call."""
    from simroute.calib import load_profile
    ctx = v.Ctx(tmp_path)
    profile = load_profile(v.table_holder_profile(ctx))
    kernel = v.holder_kernel_us(ctx, 16, v.HOLDER_TABLE_POINTS)
    assert [tuple(point) for point in profile.constants["holder_compute_dense_us"].points] == [
        (n, round(kernel[n], 4)) for n in v.HOLDER_TABLE_POINTS]
    assert profile.constants["merge_us"] == ctx.profile.constants["merge_us"]       # the rest is the default's
    rows = {card_row.id: card_row for card_row in v.holder_table_fanin_rows(ctx)}
    tpot = {n: v.fanin(ctx, n, calib=str(v.table_holder_profile(ctx))) for n in (8, 32)}
    assert rows["fig4b-fanin-rise-measured-kernel"].simulated == pytest.approx(tpot[32] / tpot[8])
    layers = ctx.geometry.layers
    assert tpot[32] - tpot[8] == pytest.approx(layers * (kernel[32] - kernel[8]) * 1e-6, rel=0.05)
    assert all(card_row.kind == v.PREDICTED for card_row in rows.values())


def test_the_alone_control_is_each_requester_alone(tmp_path):
    """The replica row's control runs the requesters in one trace, 2 s apart: each alone, so its mean TPOT is
    the mean of one run per requester (to float noise)."""
    ctx = v.Ctx(tmp_path)
    separate = np.mean([v.fanin(ctx, 1, 4, 8 + offset) for offset in range(3)])
    spaced = v.fanin(ctx, 3, 4, spacing_s=v.FANIN_ALONE_SPACING_S)
    assert spaced == pytest.approx(separate, rel=1e-9)


def test_ark_ttft_gain_is_the_fct_gain_diluted_by_prefill(tmp_path):
    """The ARK TTFT note's arithmetic: TTFT falls by the FCT cut times FCT's share of TTFT."""
    ctx = v.Ctx(tmp_path)
    (ecmp, args), = v.ark_points(ctx, 25.0, 30.0, (1,))
    fct_red, ttft_red = args.fct_mean_ms / ecmp.fct_mean_ms - 1, args.ttft_mean_ms / ecmp.ttft_mean_ms - 1
    assert ttft_red == pytest.approx(fct_red * ecmp.fct_mean_ms / ecmp.ttft_mean_ms, abs=0.02)
    assert 0.15 < ecmp.fct_mean_ms / ecmp.ttft_mean_ms < 0.5      # prefill still dominates TTFT in this scenario


def test_spine_heatmap_by_hand():
    """Per spine, the most flows at once in each 1 s bin: a level set inside a bin, or held from its start."""
    import pandas as pd
    from simroute.scenarios.ark import spine_heatmap
    frame = pd.DataFrame({"t_s": [0.0, 0.0, 0.5, 0.7, 2.2, 1.5], "spine": ["s1", "s2", "s1", "s1", "s1", "s2"],
                          "active_flows": [0, 0, 3, 1, 0, 2]})
    assert spine_heatmap(frame) == {"s1": [3, 1, 1], "s2": [0, 2, 2]}
