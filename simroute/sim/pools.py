"""Disaggregated serving as a deployment: a prefill pool and a decode pool of instances, each with its own
parallelism, in a P:D instance ratio (`--disagg P:D`, `--prefill-tp N`).

Every request is prefilled on a prefill-pool instance (picked by the run's registered prefill router,
`simroute/sim/prefill_routers/`), its prompt's KV shipped over the real links to its decode instance (the run's
router picks it among the decode pool), then decoded there; the decode instances keep the paper's route / fetch /
local choices for shared chunks. As SGLang's `--disaggregation-mode prefill|decode` servers: a prefill server
runs prefill-only batches (and no CUDA graph, which a prefill batch never replays) and keeps a request's KV until
it has been sent; a decode server runs the batches of sequences whose KV arrived, the first token having come
from the prefill server with the KV.

A pool's parallelism is a `PoolSpec` (role, instances, TP, DP attention ranks, EP). The decode pool takes the run's
parallelism (`--tp`, or `--tp N --dp-attention N --ep N`: each decode group of N GPUs is N attention instances,
each receiving its own requests' KV from the prefill pool, the group stepping in lockstep as aggregated DP groups
do, sim/engine/group.py); the prefill pool is TP instances (`--prefill-tp`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from simroute.errors import ConfigurationError
from simroute.sim.request_spec import RequestSpec

# A leaf of the simulator (the run config checks --disagg with it): it names no component module, so its
# instances and router are typed `Any` (`Instance` of sim/cluster.py, `PrefillRouter` of sim/prefill_routers/).

AGGREGATED = "none"


def parse_disagg(value: str, field: str = "disagg") -> tuple[int, int] | None:
    """(P, D) of a `--disagg` value 'P:D' (prefill : decode instances, each >= 1), or None for 'none'
    (aggregated serving: every instance prefills and decodes its own requests)."""
    if value == AGGREGATED:
        return None
    head, colon, tail = str(value).partition(":")
    if not colon or not head.strip().isdigit() or not tail.strip().isdigit():
        raise ConfigurationError(f"'{value}' is not a P:D ratio of prefill to decode instances (e.g. 1:3) or none",
                                 field=field)
    prefill, decode = int(head), int(tail)
    if prefill < 1 or decode < 1:
        raise ConfigurationError(f"'{value}': both pools need at least one instance (a ratio with 0 has no "
                                 f"{'prefill' if prefill < 1 else 'decode'} pool; none is aggregated serving)",
                                 field=field)
    return prefill, decode


def prefill_tp_of(prefill_tp: int | None, tp: int, gpus_per_host: int) -> int:
    """The prefill pool's TP: `--prefill-tp`, else the decode pool's `--tp` as far as one host holds it (a decode
    DP group may span hosts; a prefill TP instance lives inside one)."""
    return prefill_tp if prefill_tp is not None else min(tp, gpus_per_host)


@dataclass(frozen=True)
class PoolSpec:
    """One pool's parallelism: its role, how many instances (TP groups), each one's TP degree (its GPUs), and
    where its GPUs serve as DP attention ranks (`dp` > 1: each rank its own instance of tp / dp GPUs) its DP
    degree and its MoE layers' EP degree."""

    role: str           # "prefill" | "decode"
    instances: int
    tp: int
    dp: int = 1
    ep: int = 1

    @property
    def ranks(self) -> int:
        """The instances requests are served by: a TP group each, or each group's DP attention ranks."""
        return self.instances * self.dp

    @property
    def gpus(self) -> int:
        return self.instances * self.tp


@dataclass(frozen=True)
class PoolLayout:
    """Where the pools sit on the cluster's GPUs (in the topology's GPU order): `decode[i]` and `prefill[j]` are
    each instance's first GPU index; its TP ranks are the GPUs that follow. The decode pool takes the first GPUs,
    the prefill pool the next (each instance starting at a multiple of its TP, so that no TP group spans two
    hosts); what is left is idle (`idle_gpus`, still counted in the cluster's GPUs)."""

    ratio: tuple[int, int]
    decode_pool: PoolSpec
    prefill_pool: PoolSpec
    decode: tuple[int, ...]
    prefill: tuple[int, ...]
    total_gpus: int

    @property
    def idle_gpus(self) -> int:
        return self.total_gpus - self.decode_pool.gpus - self.prefill_pool.gpus

    @property
    def decode_instances(self) -> tuple[tuple[int, int], ...]:
        """(first GPU, GPUs) of each decode-pool instance: a TP group, or each DP attention rank of a group."""
        width = self.decode_pool.tp // self.decode_pool.dp
        return tuple((first + rank * width, width) for first in self.decode for rank in range(self.decode_pool.dp))

    def summary(self, router: str) -> dict[str, Any]:
        return {"mode": "disaggregated", "ratio": f"{self.ratio[0]}:{self.ratio[1]}",
                "prefill": {"instances": self.prefill_pool.instances, "tp": self.prefill_pool.tp,
                            "gpus": self.prefill_pool.gpus, "router": router},
                "decode": {"instances": self.decode_pool.instances, "tp": self.decode_pool.tp,
                           "gpus": self.decode_pool.gpus,
                           **({"dp_attention": self.decode_pool.dp, "ep": self.decode_pool.ep,
                               "attention_instances": self.decode_pool.ranks}
                              if self.decode_pool.dp > 1 or self.decode_pool.ep > 1 else {})},
                "idle_gpus": self.idle_gpus}


def _pack(groups: int, ratio: tuple[int, int], tp: int, prefill_tp: int) -> tuple[list[int], list[int], int]:
    """The first GPU of each decode then each prefill instance for `groups` x (P prefill + D decode) instances,
    each aligned to its TP, and the GPUs they span."""
    at, decode, prefill = 0, [], []
    for _ in range(groups * ratio[1]):
        decode.append(at)
        at += tp
    for _ in range(groups * ratio[0]):
        at = -(-at // prefill_tp) * prefill_tp
        prefill.append(at)
        at += prefill_tp
    return decode, prefill, at


def pool_layout(ratio: tuple[int, int], *, total_gpus: int, tp: int, prefill_tp: int, dp: int = 1,
                ep: int = 1) -> PoolLayout:
    """The most P:D groups the cluster's `total_gpus` hold (the ratio kept exactly: k x P prefill and k x D decode
    instances of `tp` GPUs, a decode one `dp` attention ranks where `dp` > 1); refused, naming --disagg, where not
    even one group fits."""
    per_group = ratio[0] * prefill_tp + ratio[1] * tp
    groups = total_gpus // per_group
    while groups > 0 and _pack(groups, ratio, tp, prefill_tp)[2] > total_gpus:
        groups -= 1
    if groups < 1:
        raise ConfigurationError(
            f"{ratio[0]}:{ratio[1]} needs {per_group} GPUs ({ratio[0]} prefill x TP {prefill_tp} + {ratio[1]} "
            f"decode x {f'TP {tp}' if dp == 1 else f'{tp} GPUs of DP attention {dp}'}); the cluster has "
            f"{total_gpus} (more hosts, a smaller ratio or TP)", field="disagg")
    decode, prefill, _ = _pack(groups, ratio, tp, prefill_tp)
    return PoolLayout(ratio, PoolSpec("decode", len(decode), tp, dp, ep),
                      PoolSpec("prefill", len(prefill), prefill_tp),
                      tuple(decode), tuple(prefill), total_gpus)


class PrefillPool:
    """The prefill pool of a run: its instances and the prompt tokens each has queued or is prefilling (added
    when a request is sent there, removed when its prefill is done), which the prefill router reads."""

    def __init__(self, instances: list[Any], router: Any) -> None:
        self.instances, self.router = instances, router
        self.queued = np.zeros(len(instances), dtype=np.float64)
        self._index = {inst.id: i for i, inst in enumerate(instances)}
        self.sent = np.zeros(len(instances), dtype=np.int64)     # requests each prefilled (the summary's)

    def pick(self, spec: RequestSpec, requester: Any) -> Any:
        i = self.router.pick(spec, requester, self.instances, self.queued)
        self.queued[i] += spec.prompt_tokens
        self.sent[i] += 1
        return self.instances[i]

    def done(self, instance: Any, tokens: int) -> None:
        self.queued[self._index[instance.id]] -= tokens

    def summary(self) -> dict[str, Any]:
        return {"requests_per_instance": {"min": int(self.sent.min()), "max": int(self.sent.max())}
                if len(self.sent) else None}
