"""The plug-in registries: what every variant must provide (whatever how many there are), discovery of
plug-in modules, variants built from what a run gives them, and three examples dropped in with no other edit:
a router that draws from the run's seed, a scheduler in its own file, and a GPU entry."""

from __future__ import annotations

import importlib
import inspect
import shutil
import sys
from pathlib import Path

import pytest

from simroute.errors import UnknownNameError
from simroute.network import shipped_topology
from simroute.scenarios.traces import write_trace
from simroute.sim import RunConfig, Simulation, simulate
from simroute.sim.placements.base import Placement
from simroute.sim.policies.base import Policy
from simroute.sim.registry import PACKAGES, discover, registry, run_rng
from simroute.sim.routers.base import Router
from simroute.sim.frameworks.base import Framework
from simroute.sim.schedulers.base import Scheduler
from simroute.sim.prefill_routers.base import PrefillRouter

EXAMPLE = Path(__file__).parent / "example"
BASES = {"router": Router, "policy": Policy, "placement": Placement, "scheduler": Scheduler, "framework": Framework,
         "prefill-router": PrefillRouter}
ENTRY_POINT = {"router": "pick", "policy": "choose", "placement": "candidates", "scheduler": "plan",
               "framework": "settings", "prefill-router": "pick"}
CONFIG = RunConfig(topology="-", trace="-", calib="-")


# ---- what every registered variant must provide ----------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(BASES))
def test_every_variant_of_a_kind_keeps_its_contract(kind):
    variants = registry(kind)
    assert variants.names(), f"no {kind} registered"
    for name in variants:
        cls = variants.get(name)
        assert issubclass(cls, BASES[kind]) and cls.name == name
        assert not inspect.isabstract(cls), f"{kind} '{name}' leaves an abstract method"
        assert callable(getattr(cls, ENTRY_POINT[kind]))
        assert (cls.__doc__ or "").strip(), f"{kind} '{name}' has no docstring (its CLI help)"
        built = variants.create(name, CONFIG, run_rng(0, kind))
        assert isinstance(built, cls)


RUN_FIELDS = {"router": "router", "policy": "policy", "placement": "placement", "scheduler": "scheduler",
              "routing": "routing", "framework": "engine",       # `engine` names a framework's preset
              "prefill-router": "prefill_router"}
NAMED_BY_FILES = {"topology"}       # a topology file names its kind (simroute/network/kinds/), not a run option
NAMED_ELSEWHERE = {"solver", "replay", "generator", "importer", "command"}   # tests/test_registry_kinds.py


def test_every_kind_is_a_run_option_or_named_by_a_file():
    assert set(PACKAGES) == set(RUN_FIELDS) | NAMED_BY_FILES | NAMED_ELSEWHERE


@pytest.mark.parametrize("kind", sorted(RUN_FIELDS))
def test_the_run_config_checks_names_against_each_kind_and_lists_them(kind):
    field = RUN_FIELDS[kind]
    name = registry(kind).names()[0]
    assert getattr(RunConfig(topology="-", trace="-", calib="-", **{field: name}), field) == name
    with pytest.raises(UnknownNameError) as err:
        RunConfig(topology="-", trace="-", calib="-", **{field: "no-such-variant"})
    assert name in str(err.value)
    assert name in registry(kind).help()


def test_the_built_ins_the_docs_name_are_registered():
    assert {"paper", "adaptive", "always-route", "always-fetch", "always-local"} <= set(registry("policy"))
    assert {"affinity", "hint", "least-loaded", "locality", "round-robin", "hash"} <= set(registry("router"))
    assert {"hash", "consistent-hash", "popularity"} <= set(registry("placement"))
    assert {"sarathi", "vllm", "sglang", "trtllm"} <= set(registry("scheduler"))
    assert {"sglang", "vllm", "trtllm"} <= set(registry("framework"))
    assert {"ecmp", "ark", "least-loaded"} <= set(registry("routing"))


def test_an_unknown_kind_is_a_named_error():
    with pytest.raises(UnknownNameError, match="plug-in kind 'router2'"):
        registry("router2")


def test_each_kind_gets_its_own_random_stream_from_the_seed():
    draw = lambda seed, kind: run_rng(seed, kind).integers(1 << 30, size=4).tolist()
    assert draw(3, "router") == draw(3, "router")
    assert draw(3, "router") != draw(4, "router")
    assert draw(3, "router") != draw(3, "placement")


# ---- examples dropped in with no other edit ---------------------------------------------------------------
@pytest.fixture
def drop_in(tmp_path, monkeypatch):
    """Copy an example module into a folder on a plug-in package's search path and run the discovery the
    package runs when it loads; undone afterwards (module and registration)."""
    added: list[tuple[str, str, str]] = []

    def drop(kind: str, example: str, name: str) -> None:
        package = importlib.import_module(PACKAGES[kind])
        folder = tmp_path / kind
        folder.mkdir()
        shutil.copy(EXAMPLE / example, folder / example)
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        discover(package.__name__, package.__path__)
        added.append((kind, f"{package.__name__}.{Path(example).stem}", name))
        assert name in registry(kind)

    yield drop
    for kind, module, name in added:
        registry(kind).unregister(name)
        sys.modules.pop(module, None)


def _requests_trace(path: Path, n: int = 24, *, requester: int = -1, gap_s: float = 0.002) -> Path:
    chunks = [{"chunk_id": 0, "tokens": 512, "canonical": True, "holder_hint": 0, "cached_offset": 0}]
    requests = [{"arrival_s": gap_s * k, "requester_hint": requester, "prompt_tokens": 64 + 16 * k, "output_tokens": 4,
                 "chunk_ids": [0] if k % 3 == 0 else [], "chunk_at_cached_offset": [True] if k % 3 == 0 else []}
                for k in range(n)]
    return write_trace(path, requests, chunks, name="plug-ins")


def _config(trace: Path, **kw) -> RunConfig:
    from simroute.calib import default_profile_path
    from simroute.defaults import PAPER_DEPLOYMENT
    return RunConfig(topology=str(shipped_topology("paper-testbed")), trace=str(trace),
                     calib=str(kw.pop("calib", default_profile_path())), **{**PAPER_DEPLOYMENT, **kw})


def test_a_dropped_in_router_draws_from_the_runs_seed(tmp_path, drop_in):
    drop_in("router", "seeded_random_router.py", "seeded-random")
    trace = _requests_trace(tmp_path / "t.parquet")
    requesters = lambda seed: simulate(_config(trace, router="seeded-random", seed=seed)) \
        .tables["requests"].column("requester").to_pylist()
    first, again, other = requesters(1), requesters(1), requesters(2)
    instances = len(Simulation(_config(trace, seed=1)).instances)
    rng = run_rng(1, "router")      # the stream the run hands routers: one draw per request, in arrival order
    assert first == [int(rng.integers(instances)) for _ in first]
    assert first == again and first != other
    from simroute.cli.run_cmd import run_options
    assert "seeded-random: A uniformly random instance" in dict(run_options())["router"].default.help


def test_a_scheduler_in_its_own_file_runs(tmp_path, drop_in):
    drop_in("scheduler", "one_prefill_scheduler.py", "one-prefill")
    trace = _requests_trace(tmp_path / "t.parquet", requester=0, gap_s=0.0)     # all at once, on one instance
    result = simulate(_config(trace, scheduler="one-prefill"))
    assert result.summary["completed"] == 24
    iterations = result.tables["iterations"].to_pandas()
    assert iterations.prefill_seqs.max() == 1 and iterations.prefill_seqs.sum() == 24
    batched = simulate(_config(trace, scheduler="vllm")).tables["iterations"].to_pandas()
    assert batched.prefill_seqs.max() > 1          # the same arrivals batch under vllm: the toy is what ran


def test_a_gpu_entry_beside_a_profile_is_chosen_with_gpu(tmp_path):
    trace = _requests_trace(tmp_path / "t.parquet", n=6)
    profile = EXAMPLE / "toy-profile.yaml"
    toy = Simulation(_config(trace, calib=profile, gpu="toy-gpu"))
    assert toy.ctx.engines.step.gpu.name == "toy-gpu" and toy.ctx.engines.hbm_bytes == 40e9
    default = Simulation(_config(trace, calib=profile))             # unset: the topology's hosts.gpu
    assert default.ctx.engines.step.gpu.name != "toy-gpu" and default.ctx.engines.hbm_bytes > 40e9
    summary = simulate(_config(trace, calib=profile, gpu="toy-gpu")).summary
    assert summary["config"]["gpu"] == "toy-gpu"
    assert str(EXAMPLE / "toy-gpu.yaml") in summary["inputs"]["calib_files"]      # an input of the run
    from simroute.errors import ConfigurationError           # the one check of a GPU name: it names the field
    with pytest.raises(ConfigurationError, match="field 'gpu': unknown gpu 'toy-gpu2'; valid: .*toy-gpu"):
        Simulation(_config(trace, calib=profile, gpu="toy-gpu2"))
    with pytest.raises(ConfigurationError, match="unknown gpu 'toy-gpu'"):      # not in the default profile
        Simulation(_config(trace, gpu="toy-gpu"))


def test_a_study_sets_the_gpu_field(tmp_path):
    from simroute.errors import ConfigurationError
    from simroute.study.spec import load_study
    trace = _requests_trace(tmp_path / "t.parquet", n=2)
    spec = tmp_path / "s.yaml"
    spec.write_text(f"name: gpus\nbase: {{topology: paper-testbed, calib: h100-ibgda, trace: {trace}, "
                    "model: deepseek-v2-lite, tp: 4}\naxes: {gpu: [h100-sxm, h200-sxm]}\n")   # 4 GPUs a host
    study = load_study(spec)
    assert [study.config(labels, 0)["gpu"] for labels in study.groups()] == ["h100-sxm", "h200-sxm"]
    spec.write_text(spec.read_text().replace("gpu: [h100-sxm, h200-sxm]", "gpu: [7]"))
    with pytest.raises(ConfigurationError, match="gpu"):
        load_study(spec)


def test_the_run_config_loads_no_plug_in_module():
    """Importing and building a RunConfig, in a fresh interpreter, imports no router / policy / placement /
    scheduler module until a name is checked against its kind."""
    import subprocess
    code = ("import sys; from simroute.sim.config import RunConfig; "
            "print(sorted(m for m in sys.modules if m.split('.')[2:3] in "
            "(['routers'], ['policies'], ['placements'], ['schedulers'])))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "[]"


def test_every_router_only_reads_its_cluster_view(tmp_path):
    """Each registered router picks from a view whose arrays cannot be written and whose holder lists are
    tuples: a router that wrote to the cluster would raise here. The simulator's Cluster offers every name of
    the view."""
    import numpy as np

    from simroute.sim.cluster import Cluster
    from simroute.sim.request_spec import RequestSpec
    from simroute.sim.routers.base import ClusterView

    class _Instance:
        def __init__(self, index):
            self.id, self.host = index, index // 4

    class _Chunks:
        holders = ((0,), (2, 5), ())
        tokens = np.array([512, 256, 128])

    class _View:
        instances = tuple(_Instance(i) for i in range(8))
        active = np.array([3, 1, 0, 2, 0, 1, 4, 0])
        chunks = _Chunks()

    _View.active.setflags(write=False)
    _Chunks.tokens.setflags(write=False)
    for name in registry("router"):
        router = registry("router").create(name, CONFIG, run_rng(0, "router"))
        for spec in (RequestSpec(7, -1, -1, 16, 2, [0, 1], [True, True], 0, 0),
                     RequestSpec(8, 3, -1, 16, 2, [2], [True], 0, 0)):
            picked = router.pick(spec, _View())
            assert picked is None or picked in _View.instances, name
    view_names = {name for name in dir(ClusterView) if not name.startswith("_")}
    assert view_names == {"instances", "active", "chunks"}
    cluster = Simulation(_config(_requests_trace(tmp_path / "t.parquet", n=2))).ctx.cluster
    assert isinstance(cluster, Cluster) and all(hasattr(cluster, name) for name in view_names)
    assert hasattr(cluster.chunks, "holders") and hasattr(cluster.chunks, "tokens")


def test_a_scheduler_in_its_own_file_is_built_with_the_runs_seed(tmp_path, drop_in):
    """Each instance engine's scheduler is built by the registry's `create(kind, config, rng)`, with the run's
    scheduler stream: the toy's first draw per engine is that stream's, in instance order, and its random
    admissions make the iteration log a function of the seed."""
    drop_in("scheduler", "seeded_scheduler.py", "seeded-admissions")
    trace = _requests_trace(tmp_path / "t.parquet", requester=0, gap_s=0.0)     # all at once, on one instance
    simulation = Simulation(_config(trace, scheduler="seeded-admissions", seed=5))
    rng = run_rng(5, "scheduler")
    draws = [engine.scheduler.first_draw for engine in simulation.ctx.engines.engines]
    assert len(draws) > 1 and draws == [int(rng.integers(1 << 30)) for _ in draws]
    assert all(engine.scheduler.token_budget == simulation.cfg.token_budget for engine in simulation.ctx.engines)
    prefills = lambda seed: simulate(_config(trace, scheduler="seeded-admissions", seed=seed)) \
        .tables["iterations"].column("prefill_seqs").to_pylist()
    first, again, other = prefills(5), prefills(5), prefills(6)
    assert first == again and first != other and sum(first) == 24 and max(first) <= 3
