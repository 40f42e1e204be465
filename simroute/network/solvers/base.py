"""The solver contract: what a max-min solver of the flow engine must provide, and the registry of solvers by mode.

A solver owns how the rates of the bulk flows in flight are kept max-min fair between engine steps. The
engine (simroute/network/engine.py) owns everything event-facing: `transfer`, the start queue, the wake-up
events, the completion of a flow (its record, its event, its reservation); it calls the solver once per step
with the instant's starts, and hands over from one solver to another when the solver asks.

A solver must provide (see `Solver`):
- `mode`: the registry key (a `SolverMode` member; a solver outside this package may key itself on a member of
  its own `Enum`);
- `step(now, starts)`: take every completion due at `now` (calling `host.complete(flow, at)` for each, `at`
  being `now` plus the flow's `latency`) and every start (counting it with `self.started(flow, now)`), re-rate,
  call `host.schedule_wake(t, now)` for its next completion, and return None, or the mode to hand over to;
- `enter(now, previous)`: take over the flows in flight from `previous` (None: the engine is new), which left
  its groups in `host.bulk.groups`, and solve them; `leave(now)`: leave the shared state for the next solver;
- `flow_rates()` and `active_flows()`, for inspection and tests.
It keeps `host.bulk` up to date (per-link `load` and `link_n`, `version` moved at every re-rating, the
counters), since the message model and telemetry read it. It imports nothing of the engine: it sees it as a
`SolverHost`.

To add one: a module in this package with a `Solver` subclass decorated `@register_solver` (a module that mypyc
compiles, simroute.compiled, calls `register_solver(cls)` after the class instead: a decorated class is no native
class) and a member added to `SolverMode`; `FlowEngine(mode=...)` and tests/network/test_solvers.py pick it up
(every registered mode must give the textbook max-min rates there).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import TYPE_CHECKING, ClassVar, Protocol

from mypy_extensions import mypyc_attr

from simroute.errors import UnknownNameError
from simroute.registry import registry

if TYPE_CHECKING:
    from simroute.network.bulk import BulkState
    from simroute.network.flows import ActiveFlow
    from simroute.network.kernels import SolverBackend
    from simroute.network.telemetry import Telemetry


class SolverMode(StrEnum):
    """How group state is kept and re-solved."""

    OBJECTS = "objects"     # groups as Python objects, incremental progressive filling (maxmin.fill)
    ARRAYS = "arrays"       # groups in columns, the backend's incremental cascade or a full solve
    ONLINE = "online"       # the compiled online core: one kernel call per step over packed buffers


@dataclass(frozen=True)
class SolverSettings:
    """The engine's knobs a solver reads: when to hand over (group counts), the cascade's limits, the tolerance.

    `arrays_on` / `arrays_off`: object mode hands over to array mode from `arrays_on` groups on, array mode back
    below `arrays_off`; `core_on`: object mode hands over to the online core from that many groups when
    `want_core`. A pinned mode sets them so that no hand-over happens."""

    arrays_on: float
    arrays_off: float
    core_on: float
    want_core: bool
    cascade_limit: float
    cascade_floor: int
    rate_tolerance: float
    slack: float            # the cascade's relative slack: the tolerance, at least float noise


class SolverHost(Protocol):
    """What a solver sees of the engine."""

    bulk: BulkState
    telemetry: Telemetry
    settings: SolverSettings

    @property
    def backend(self) -> SolverBackend: ...

    def complete(self, flow: ActiveFlow, at: float) -> None:
        """The flow's last byte arrives at `at` (its record, its event, its reservation released)."""

    def schedule_wake(self, next_t: float, now: float) -> None:
        """A step at `next_t` unless one is queued before it."""

    def reset_wake(self) -> None:
        """Forget the queued wake-up time (the solver dropped what it was for)."""


@mypyc_attr(allow_interpreted_subclasses=True)     # compiled (simroute.compiled); solvers in Python subclass it
class Solver(ABC):
    """One way of keeping the bulk flows' rates max-min fair (see module docstring)."""

    mode: ClassVar[Enum]

    def __init__(self, host: SolverHost) -> None:
        self.host = host
        self.bulk = host.bulk
        self.telemetry = host.telemetry
        self.settings = host.settings

    def enter(self, now: float, previous: Solver | None) -> None:
        """Take over the flows in flight (in `bulk.groups`) from `previous` and solve them."""

    def leave(self, now: float) -> None:
        """Hand the flows in flight back as `bulk.groups` objects, for the next solver's `enter`."""

    @abstractmethod
    def step(self, now: float, starts: list[ActiveFlow]) -> Enum | None:
        """Completions due at `now` and the instant's starts; re-rate; the next wake-up. Returns the mode to hand
        over to, or None."""

    @abstractmethod
    def flow_rates(self) -> dict[int, float]:
        """Current rate of every active flow (fid -> B/s)."""

    @abstractmethod
    def active_flows(self) -> list[tuple[int, tuple[int, ...], float]]:
        """(fid, link ids, cap) of every active flow: enough to recompute max-min from scratch."""

    def started(self, flow: ActiveFlow, now: float) -> None:
        """Count a start the solver took in the spine telemetry (the engine uncounts it at its completion)."""
        if flow.spine is not None:
            self.telemetry.spine_change(flow.spine, 1, now)


# Solvers are filed in the one registry of named variants (`registry("solver")`) under their mode, an Enum
# member: the engine hands over between modes by member, a StrEnum member is also its word ("arrays"), and a
# test may key a toy solver on an Enum of its own. SOLVERS is the registry's own dict.
SOLVER_REGISTRY = registry("solver")
SOLVERS: dict[Enum, type[Solver]] = SOLVER_REGISTRY.classes


def register_solver(cls: type[Solver]) -> type[Solver]:
    """Class decorator: file a solver under its `mode`, refusing a second one for a mode."""
    if cls.mode in SOLVERS:
        raise ValueError(f"solver mode {cls.mode!r} registered twice")
    SOLVER_REGISTRY.add(cls.mode, cls)      # type: ignore[arg-type]  # the key is the mode member
    return cls


def solver_class(mode: Enum | str) -> type[Solver]:
    """The solver registered under `mode` (a member, or its value: "objects", "arrays", "online", ...)."""
    if isinstance(mode, Enum):
        found = SOLVERS.get(mode)
    else:
        found = next((cls for key, cls in SOLVERS.items() if key.value == mode), None)
    if found is None:
        name = mode.value if isinstance(mode, Enum) else str(mode)
        raise UnknownNameError("solver mode", name, [key.value for key in SOLVERS])
    return found
