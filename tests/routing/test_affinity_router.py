"""The load-aware affinity router: sessions stay where their copies are, a hot spot spills (power of two
choices), hints are obeyed, and it is the default."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simroute.scenarios.traces import write_trace
from simroute.defaults import PAPER_DEPLOYMENT


def _run(trace: Path, router: str, **kw):
    from simroute.calib import default_profile_path
    from simroute.network import default_topology_path
    from simroute.sim import RunConfig, simulate
    return simulate(RunConfig(topology=str(default_topology_path()), trace=str(trace), router=router,
                              calib=str(default_profile_path()), telemetry=False, **{**PAPER_DEPLOYMENT, **kw}))


def _requests(res):
    df = res.tables["requests"].to_pandas()
    return df[df.status == "completed"]


@pytest.fixture(scope="module")
def hot_spot(tmp_path_factory) -> Path:
    """200 requests, 4 ms apart, each a 2048-token prompt over one popular document homed on instance 0."""
    chunks = [{"chunk_id": 0, "tokens": 2048, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    reqs = [{"arrival_s": 0.004 * i, "requester_hint": -1, "prompt_tokens": 2048, "output_tokens": 8,
             "chunk_ids": [0]} for i in range(200)]
    return write_trace(tmp_path_factory.mktemp("hot") / "hot.parquet", reqs, chunks, name="hot-spot")


@pytest.fixture(scope="module")
def conversation(tmp_path_factory) -> Path:
    """One conversation of 12 turns, 1 s apart (an idle cluster): turn k attends the k earlier turns' chunks."""
    chunks = [{"chunk_id": k, "tokens": 512, "canonical": False, "holder_hint": -1, "cached_offset": 512 * k}
              for k in range(12)]
    reqs = [{"arrival_s": float(k), "requester_hint": -1, "prompt_tokens": 64, "output_tokens": 4,
             "chunk_ids": list(range(k + 1))} for k in range(12)]
    return write_trace(tmp_path_factory.mktemp("conv") / "conv.parquet", reqs, chunks, name="conversation")


def test_hot_spot_spills_instead_of_queueing(hot_spot):
    p99 = {r: float(np.percentile(_requests(_run(hot_spot, r)).ttft_s, 99)) for r in ("affinity", "locality", "hash")}
    assert p99["affinity"] < 0.5 * p99["locality"] and p99["affinity"] < 0.5 * p99["hash"], p99
    served = _requests(_run(hot_spot, "affinity")).requester
    assert served.nunique() > 4                      # spread by the power-of-two choices ...
    assert (served == 0).sum() > served.value_counts().iloc[1:].mean()   # ... while the holder still serves most


def test_a_session_stays_where_its_copies_are(conversation):
    aff, ll = _requests(_run(conversation, "affinity")), _requests(_run(conversation, "least-loaded"))
    assert aff.requester.nunique() == 1 and aff.n_fetch.sum() == 0
    assert ll.requester.nunique() > 1 and ll.n_fetch.sum() > 0


def test_hints_are_obeyed(tmp_path):
    chunks = [{"chunk_id": 0, "tokens": 256, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    reqs = [{"arrival_s": 0.0, "requester_hint": 9, "prompt_tokens": 8, "output_tokens": 1, "chunk_ids": [0]}]
    trace = write_trace(tmp_path / "h.parquet", reqs, chunks)
    assert list(_requests(_run(trace, "affinity")).requester) == [9]


def test_deterministic_and_default(hot_spot):
    from simroute.sim import RunConfig
    a, b = _requests(_run(hot_spot, "affinity")), _requests(_run(hot_spot, "affinity"))
    assert list(a.requester) == list(b.requester) and list(a.ttft_s) == list(b.ttft_s)
    assert RunConfig.__dataclass_fields__["router"].default == "affinity"
