"""Fig. 7 of "Move the Query, Not the Cache" under three disciplines of the shared uplink: does any queueing
model of the link give the paper's cliff (flat through K = 2, then +119% / +108% / +172% at K = 3)?

- `round-robin`: the shipped message model (simroute.network.messages): round-robin over the messages already
  on the wire, each message's delay committed when it is sent;
- `fifo`: the same wire, first come first served at message granularity (exact with commit-at-send: a message
  waits only for earlier ones);
- `processor-sharing`: every message a max-min bulk flow of the flow engine, re-rated as others come and go
  (simroute.network.fig7.fig7_fluid_round_trips).

Paper-testbed, DeepSeek-V2-Lite rows, h100-ibgda constants, K decode-size (Mq = 256) background loops, each loop
started at a random phase (mean over seeds). Prints a table of the rise over K = 0 per discipline, curve and K.

    python3 bench/fig7_disciplines.py [--seeds 4] [--rounds 160]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import simpy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simroute.calib import load_profile  # noqa: E402
from simroute.model import get_model  # noqa: E402
from simroute.network import load_topology, shipped_topology  # noqa: E402
from simroute.network.engine import FlowEngine  # noqa: E402
from simroute.network.fig7 import fig7_fluid_round_trips  # noqa: E402
from simroute.network.messages import MessageModel, MessageRoute  # noqa: E402

BACKGROUND_ROWS = 256
KS = (0, 1, 2, 3)


class FifoMessages(MessageModel):
    """The wire served first come first served, a whole message at a time (no interleaving)."""

    def _occupy(self, route: MessageRoute, nbytes: float, t_probe_s: float, missed: bool, now: float) -> float:
        start = max([now] + [self.busy[link] for link, _ in route.link_wire])
        for link, wire in route.link_wire:
            self.busy[link] = start + nbytes * wire
        return start - now + t_probe_s + nbytes / route.rate_Bps


def message_trips(topology, model: type[MessageModel], rows: int, t_probe_s: float, q_bytes: float, p_bytes: float,
                  single_block_Bps: float, rounds: int, seeds: range) -> list[float]:
    """The measured loop's mean round trip per K with the message model `model`, loops at random phases."""
    requester = topology.gpus[0]
    holders = [gpu for gpu in topology.gpus if topology.host_of(gpu) != topology.host_of(requester)]
    out = []
    for k in KS:
        means = []
        for seed in seeds:
            rng = np.random.default_rng([seed, k])
            env = simpy.Environment()
            engine = FlowEngine(env, topology, message_model=model())
            samples: list[float] = []

            def loop(index: int, loop_rows: int, start_s: float):
                holder = holders[index % len(holders)]
                out_route, back_route = engine.message_route(requester, holder), engine.message_route(holder, requester)
                yield env.timeout(start_s)
                for _ in range(rounds):
                    began = env.now
                    yield env.timeout(engine.send_message(out_route, loop_rows * q_bytes, t_probe_s=t_probe_s / 2,
                                                          single_block_Bps=single_block_Bps))
                    yield env.timeout(engine.send_message(back_route, loop_rows * p_bytes, t_probe_s=t_probe_s / 2,
                                                          single_block_Bps=single_block_Bps))
                    if index == 0:
                        samples.append(env.now - began)
            for index in range(k + 1):
                loop_rows = rows if index == 0 else BACKGROUND_ROWS
                idle = t_probe_s + loop_rows * (q_bytes + p_bytes) / single_block_Bps
                env.process(loop(index, loop_rows, float(rng.random()) * idle))
            env.run()
            kept = samples[rounds // 4:]
            means.append(sum(kept) / len(kept))
        out.append(float(np.mean(means)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=160)
    args = parser.parse_args()
    topology = load_topology(shipped_topology("paper-testbed"))
    fab = load_profile("h100-ibgda").fabric_params("h100-ibgda")
    geometry = get_model("deepseek-v2-lite")
    paper = {1024: 250 / 114 - 1, 256: 95 / 45.6 - 1, 0: 39.5 / 14.5 - 1}
    print(f"{'discipline':<18} {'curve':<9} " + " ".join(f"K={k:<6}" for k in KS[1:]) + " paper K=3")
    for rows in (1024, 256, 0):
        probe = fab.t_probe_s + (fab.turnaround_s if rows else 0.0)
        common = dict(rows=rows, t_probe_s=probe, q_bytes=geometry.q_bytes, p_bytes=geometry.p_bytes,
                      single_block_Bps=fab.single_block_Bps)
        curves = {name: message_trips(topology, model, rounds=args.rounds, seeds=range(args.seeds), **common)
                  for name, model in (("round-robin", MessageModel), ("fifo", FifoMessages))}
        curves["processor-sharing"] = fig7_fluid_round_trips(topology, KS, background_rows=BACKGROUND_ROWS,
                                                             rounds=args.rounds, seeds=range(args.seeds), **common)
        for name, trips in curves.items():
            rises = " ".join(f"{100 * (trip / trips[0] - 1):+6.0f}%" for trip in trips[1:])
            label = f"Mq {rows}" if rows else "probe"
            print(f"{name:<18} {label:<9} {rises}  {100 * paper[rows]:+.0f}%")


if __name__ == "__main__":
    main()
