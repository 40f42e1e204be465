"""Run configuration: one frozen dataclass, validated when built, recorded in every output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from simroute.errors import ConfigurationError, UnknownNameError
from simroute.network.engine import ROUTINGS
from simroute.sim.placements import PLACEMENTS
from simroute.sim.policies import POLICIES
from simroute.sim.routers import ROUTERS


def default_trace_path() -> Path:
    """The shipped default trace (an agentic scenario), found inside the installed package."""
    return Path(__file__).resolve().parent.parent / "data" / "traces" / "agents-default.parquet"


@dataclass(frozen=True)
class RunConfig:
    """Everything a run depends on besides the input files' contents (which are hashed into the summary).

    Times are in the units their names say; the simulator converts to seconds once.
    """

    topology: str
    trace: str
    calib: str
    model: str = "deepseek-v2-lite"
    policy: str = "paper"
    routing: str = "ecmp"
    seed: int = 0
    route_exchanges: str = "per-layer"
    placement: str = "hash"
    replicas: int = 1                      # copies of each hot chunk under `popularity` placement
    hot_fraction: float = 0.01             # share of chunks replicated under `popularity`
    router: str = "hint"                   # requester choice when the trace gives no hint: falls back to least-loaded
    tp: int = 1                            # GPUs per instance (tensor-parallel group inside a host)
    hbm_gb: float = 40.0                   # HBM per instance for canonical chunks and fetched copies
    batch_window_us: float = 10.0          # holder batching window (routed queries computed as one batch)
    dispatch_window_us: float = 5.0        # requester dispatcher window (same-chunk queries sent as one message)
    holder_streams: int = 1                # holder batches computed concurrently
    staging_streams: int = 8               # K of the holder's D2D staging pool
    staging_copy_GBps: float = 200.0       # D2D copy rate of one staging stream (default, not measured)
    decode_steps_per_event: int = 4        # decode steps one simulated macro-step stands for (1 = exact)
    decode_base_ms: float = 0.0            # non-attention time of a decode step (model-specific; 0 = attention only)
    prefill_us: float | None = None        # re-prefill cost per token-layer (profile value if None)
    max_requests: int | None = None
    until_s: float | None = None
    slo_ttft_ms: float = 500.0
    slo_tpot_ms: float = 100.0
    telemetry: bool = True                # flows, links, spines and holder queues as Parquet
    link_series: bool = False             # per-link utilisation time series (large on long runs)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_types()
        for name, value, valid in (("policy", self.policy, POLICIES), ("routing", self.routing, ROUTINGS),
                                   ("placement", self.placement, PLACEMENTS), ("router", self.router, ROUTERS),
                                   ("route_exchanges", self.route_exchanges, ("per-layer", "once"))):
            if value not in valid:
                raise UnknownNameError(name, value, list(valid))
        for name in ("replicas", "tp", "holder_streams", "staging_streams", "decode_steps_per_event"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"must be >= 1, got {getattr(self, name)}", field=name)
        for name in ("hbm_gb", "batch_window_us", "dispatch_window_us", "staging_copy_GBps", "decode_base_ms", "slo_ttft_ms",
                     "slo_tpot_ms"):
            if getattr(self, name) < 0:
                raise ConfigurationError(f"must be >= 0, got {getattr(self, name)}", field=name)
        if not 0 <= self.hot_fraction <= 1:
            raise ConfigurationError("must be within [0, 1]", field="hot_fraction")
        if self.seed < 0:
            raise ConfigurationError(f"must be >= 0, got {self.seed}", field="seed")
        if self.until_s is not None and self.until_s <= 0:
            raise ConfigurationError(f"must be > 0, got {self.until_s}", field="until_s")
        if self.max_requests is not None and self.max_requests < 0:
            raise ConfigurationError("must be >= 0", field="max_requests")

    def _check_types(self) -> None:
        """Each field has the type its annotation says (ints may stand for floats): a clear error, not a
        TypeError deep inside the simulator."""
        simple = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,)}
        for f in fields(self):
            ann = str(f.type).replace(" ", "")
            optional = ann.endswith("|None")
            base = ann.removesuffix("|None")
            if base not in simple:
                continue
            v = getattr(self, f.name)
            if v is None and optional:
                continue
            ok = isinstance(v, simple[base]) and not (base in ("int", "float") and isinstance(v, bool))
            if not ok:
                raise ConfigurationError(f"must be {base}{' or null' if optional else ''}, got {v!r}", field=f.name)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("topology", "trace", "calib"):
            d[k] = str(Path(d[k]))
        return d
