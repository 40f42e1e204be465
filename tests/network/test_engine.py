"""Engine on real topologies: max-min against the reference, conservation, telemetry export."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
import simpy

from simroute.network import FlowEngine, load_topology, maxmin_rates

from simroute.network import DATA_DIR as TOPO_DIR


@pytest.mark.parametrize("name, routing", [("fattree-1024.yaml", "ecmp"), ("ark-leafspine.yaml", "ark"),
                                           ("fattree.yaml", "least-loaded")])
def test_random_flows_match_reference_and_conserve_bytes(name, routing):
    topo = load_topology(TOPO_DIR / name)
    rng = np.random.default_rng(7)
    env = simpy.Environment()
    eng = FlowEngine(env, topo, routing=routing, seed=3, ark_elephant_bytes=1e6, record_series=True)
    gpus = topo.gpus[:64]
    evs = []

    def arrivals():
        for _ in range(150):
            yield env.timeout(float(rng.exponential(2e-4)))
            cap = None if rng.random() < 0.7 else float(rng.uniform(5e9, 30e9))
            evs.append(eng.transfer(gpus[rng.integers(64)], gpus[rng.integers(64)],
                                    float(rng.uniform(1e5, 5e7)), rate_cap_Bps=cap))

    env.process(arrivals())
    for t in np.linspace(1e-3, 3e-2, 7):
        env.run(until=float(t) + 1.234e-9)
        active = eng.active_flows()
        ref = maxmin_rates([a[1] for a in active], eng.cap, [None if a[2] == np.inf else a[2] for a in active])
        got = eng.flow_rates()
        assert [got[a[0]] for a in active] == pytest.approx(ref, rel=1e-6)
    env.run()
    assert len(evs) == 150 and all(e.triggered for e in evs)
    want = [0.0] * len(topo.links)
    for e in evs:
        for l in e.value.links:
            want[l] += e.value.nbytes
    eng.telemetry.flush()
    assert eng.telemetry.link_bytes == pytest.approx(want, rel=1e-6, abs=1e-3)
    assert eng.n_active == 0 and all(c == 0 for c in eng.spine_counts().values())


def test_telemetry_to_parquet(tmp_path):
    topo = load_topology(TOPO_DIR / "ark-leafspine.yaml")
    env = simpy.Environment()
    eng = FlowEngine(env, topo, record_series=True)
    for i in range(8):
        eng.transfer(f"h0.g{i}", f"h1.g{i}", 1e8, tag=("req", i))
    eng.message_delay("h0.g0", "h2.g0", 2e3, t_probe_s=16e-6, single_block_Bps=25e9)
    env.run()
    out = eng.telemetry.to_parquet(tmp_path / "net")
    flows = pq.read_table(out / "flows.parquet").to_pandas()
    links = pq.read_table(out / "links.parquet").to_pandas()
    spines = pq.read_table(out / "spines.parquet").to_pandas()
    series = pq.read_table(out / "link_series.parquet").to_pandas()
    assert len(flows) == 8 and (flows.fct_s > 0).all()
    assert links.bulk_bytes.sum() == pytest.approx(8 * 1e8 * 4, rel=1e-9)      # 2 NIC links + 2 spine links
    assert links.message_bytes.sum() == pytest.approx(2e3 * 4)
    assert spines.active_flows.max() >= 2 and set(spines.spine) <= {f"spine{s}" for s in range(4)}
    assert (series.utilisation <= 1 + 1e-9).all() and len(series) > 0
    assert not list(tmp_path.glob(".net*"))                                     # atomic: no temp left
