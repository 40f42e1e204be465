"""The holder's K-stream staging pool in the paper's own terms ("Move the Query, Not the Cache", §6.1-§6.2).

What the paper measured is a fetch round-trip time: at the elbow (K = 8 streams) the p50 per-fetch round trip
of its chunk-prefetch pipeline is 7% below the serialised K = 1 one (Fig 5b, §6.2), and that p50 at K = 8 is
6.0 ms with IBGDA (§6.1, "the K = 8 staging path"). So the elbow saves

    saved = gain x T_1 = gain x T_E / (1 - gain)          (0.07 x 6.0 / 0.93 = 0.45 ms)

of one 2048-token DeepSeek-V2-Lite chunk's fetch (27 layers of bf16 c_KV, 63.7 MB, the paper's testbed). The
paper attributes the win to the copy engines working in parallel ("HBM-parallel copy engines rather than mere
asynchrony"), so simroute spends that saving on the staging copies, the only part of the fetch the pool can
shorten. With one stream staging the reference chunk in S_1 = bytes / copy rate, the pool's copy-time saving
at the elbow (the fraction of S_1 it no longer spends) is

    saving = saved / S_1,   at most 1 - 1/E               (E streams at most E x one stream's rate).

`fitted_copy_Bps` is the one-stream rate at which that bound is met exactly: the rate whose E-fold parallel
pool saves the paper's 0.45 ms (123 GB/s). The shipped profile carries it as `staging_copy_GBps` (provenance
`fitted`); the staging probe replaces it with its K = 1 measurement, and its measured copy-time saving
(`staging_copy_gain_at_elbow`) replaces the derived one. `StagingPool` (simroute/sim/staging.py) charges a
chunk S_1 x (1 - saving x (c - 1) / (E - 1)) with c copies in flight, past the elbow the oversubscription loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from simroute.model.geometry import get_model

# Throughput lost per elbow's worth of streams beyond the elbow (scheduler oversubscription). The paper reports
# that K = 16 regresses against K = 8 without a figure: a default, not a measurement; a profile may set
# `staging_oversubscription_loss`.
STAGING_OVERSUBSCRIPTION_LOSS = 0.05
PAPER_CHUNK_TOKENS = 2048                     # §6.2's chunk-prefetch workload: 2048-token chunks ...
PAPER_CHUNK_MODEL = "deepseek-v2-lite"        # ... of the paper's measured geometry (27 layers, bf16 c_KV)


def paper_chunk_bytes() -> float:
    """Bytes of the chunk the paper's staging elbow was measured on (63.7 MB)."""
    return get_model(PAPER_CHUNK_MODEL).chunk_bytes(PAPER_CHUNK_TOKENS)


def elbow_fetch_saving_s(fetch_gain: float, fetch_p50_at_elbow_s: float) -> float:
    """Seconds the elbow takes off one fetch: gain x T_1, T_1 = T_E / (1 - gain) the serialised round trip."""
    if not 0.0 <= fetch_gain < 1.0:
        raise ValueError(f"the fetch gain at the elbow must be in [0, 1), got {fetch_gain}")
    return fetch_gain * fetch_p50_at_elbow_s / (1.0 - fetch_gain)


def max_copy_saving(elbow: int) -> float:
    """The largest share of one stream's staging time E parallel streams can save: 1 - 1/E."""
    return 1.0 - 1.0 / max(1, elbow)


def copy_saving_at_elbow(fetch_gain: float, fetch_p50_at_elbow_s: float, copy_Bps: float,
                         elbow: int) -> tuple[float, bool]:
    """(the pool's copy-time saving at the elbow, whether the 1 - 1/E bound cut it): the paper's fetch-time
    saving spent on the reference chunk's serialised staging time at one stream's `copy_Bps`."""
    stage_s = paper_chunk_bytes() / copy_Bps
    wanted = elbow_fetch_saving_s(fetch_gain, fetch_p50_at_elbow_s) / stage_s
    bound = max_copy_saving(elbow)
    return min(wanted, bound), wanted > bound


def fitted_copy_Bps(fetch_gain: float, fetch_p50_at_elbow_s: float, elbow: int) -> float:
    """The one-stream copy rate at which E parallel streams save exactly the paper's fetch-time gain."""
    return paper_chunk_bytes() * max_copy_saving(elbow) / elbow_fetch_saving_s(fetch_gain, fetch_p50_at_elbow_s)


@dataclass(frozen=True)
class StagingParams:
    """What a holder's `StagingPool` is built from, with where each value came from.

    copy_Bps: one stream's D2D copy rate; copy_saving: the share of one stream's staging time the pool saves
    at the elbow (`StagingPool`'s `gain_at_elbow`); clamped: the paper's fetch-time gain asked for more than
    E streams can give at this copy rate (so the pool saves less than the paper's 7%); sources: field -> text.
    """

    elbow: int
    copy_Bps: float
    copy_saving: float
    oversubscription_loss: float
    clamped: bool = False
    sources: tuple[tuple[str, str], ...] = ()

    def pool_kwargs(self) -> dict[str, float]:
        """The keyword arguments of `StagingPool` past (env, streams)."""
        return {"copy_Bps": self.copy_Bps, "elbow": self.elbow, "gain_at_elbow": self.copy_saving,
                "oversubscription_loss": self.oversubscription_loss}
