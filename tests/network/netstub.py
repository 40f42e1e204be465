"""A stub topology with explicit link sets, for textbook max-min cases."""

from __future__ import annotations

from simroute.network import FlowEngine, Link


class StubTopology:
    """Endpoints 'a', 'b', ... joined by explicitly given link sets (one path per pair)."""

    def __init__(self, capacities: list[float], routes: dict[tuple[str, str], tuple[int, ...]]) -> None:
        self.links = [Link(i, f"n{i}", f"n{i + 1}", c, 0.0, "nic-leaf", "test") for i, c in enumerate(capacities)]
        names = sorted({x for pair in routes for x in pair})
        self.gpus = names
        self._idx = {n: i for i, n in enumerate(names)}
        self._routes = {(self._idx[a], self._idx[b]): r for (a, b), r in routes.items()}

    def index(self, name: str) -> int:
        return self._idx[name]

    def path_choices(self, ia: int, ib: int):
        return [(self._routes.get((ia, ib), ()), None)]

    def path_ids(self, ia: int, ib: int, choice: int = 0):
        return self.path_choices(ia, ib)[0]

    def ecmp_choice(self, ia: int, ib: int, key: int, seed: int) -> int:
        return 0

    def n_choices(self, ia: int, ib: int) -> int:
        return 1


class CoreFromFirst(FlowEngine):
    """The online core from the first group on (where numba is importable; object mode otherwise)."""

    core_on = 1


class ObjectMode(FlowEngine):
    """The engine without its online core: object mode (Python incremental fill), array mode from 512 groups."""

    online_core = False


class AlwaysFull(FlowEngine):
    """Keeps group arrays from the first group on and abandons every cascade: every re-rating is a full solve
    or a mix of the two paths (the budget lets one or two groups through incrementally)."""

    online_core = False
    arrays_on = 1
    arrays_off = 0
    budget_base = 1
    budget_div = 10**9
    backoff = 2
