"""The shipped profiles' cost constants, validated once and recorded by the hash of their files.

Loading a profile parses its YAML and validates it with pydantic (and loads numpy through the step model),
which with typer's own pydantic converter was most of what `simroute predict` waited for (bench/bench_cli.py).
A shipped profile changes only with the package, so its `CostParams` inputs are recorded in
`calib/validated-profiles.json` (the shipped folder), keyed by the SHA-256 of the files it is composed of:
`cost_params` reads them from there while the files hash as recorded, and loads the profile as usual otherwise
(a path of the user's, an edited file, a model or dtype not recorded). tests/calib/test_validated.py fails,
naming the command that regenerates the record, when a shipped file or the code that reads it changes the
record, and checks the record's CostParams against the loaded profile's.

Regenerate: python -m simroute.calib.validated
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from simroute.model.cost import ROUTE_EXCHANGES, CostParams, FabricParams, RouteExchanges
from simroute.model.geometry import MODELS, get_model

SHIPPED = (Path(__file__).resolve().parent.parent / "data" / "calib").resolve()   # profile.shipped_dir(), resolved
RECORD = SHIPPED / "validated-profiles.json"
CACHE_DTYPES = ("bf16", "fp8")
PROFILE_FIELDS = ("splice_ct", "splice_s", "holder_n", "holder_s", "sparse_k", "sparse_premium", "merge_s",
                  "prefill_s_per_token_layer", "gather_base_s", "gather_per_holder_s", "host_fixed_s",
                  "host_per_row_s")     # the CostParams fields a profile sets whatever the model
REGENERATE = "python -m simroute.calib.validated"


def files_hash(files: list[str]) -> str:
    """SHA-256 over the shipped files (paths relative to the shipped folder) and their bytes, in order."""
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0" + (SHIPPED / name).read_bytes() + b"\0")
    return digest.hexdigest()


def shipped_key(calib: str | Path) -> str | None:
    """The record key (path under the shipped folder) of `calib` as `load_profile` would resolve it (a path
    first, then a shipped name); None for a profile outside the shipped folder."""
    path = Path(calib)
    if not path.exists():
        path = next((c for c in (SHIPPED / f"{calib}.yaml", SHIPPED / str(calib)) if c.is_file()), path)
    try:
        return path.resolve().relative_to(SHIPPED).as_posix() if path.is_file() else None
    except ValueError:
        return None


def _records() -> dict[str, Any]:
    try:
        return json.loads(RECORD.read_text())["profiles"]
    except (OSError, ValueError, KeyError):
        return {}


def recorded(calib: str | Path) -> dict[str, Any] | None:
    """The record of shipped profile `calib` if its files still hash as recorded, else None."""
    key = shipped_key(calib)
    entry = _records().get(key) if key is not None else None
    if entry is None:
        return None
    try:
        return entry if files_hash(entry["files"]) == entry["sha256"] else None
    except OSError:
        return None


def cost_params(calib: str | Path, model: str, *, route_exchanges: str = RouteExchanges.PER_LAYER,
                prefill_us: float | None = None, cache_dtype: str | None = None, **switches: Any) -> CostParams:
    """`load_profile(calib).cost_params(model, ...)`, from the record when `calib` is an unchanged shipped
    profile (no YAML, no pydantic, no numpy), else from the profile itself. `cache_dtype` None: the model's
    default KV-cache dtype."""
    cache_dtype = cache_dtype or get_model(model).cache_dtype
    entry = recorded(calib)
    prefill_form = entry["prefill_form"].get(f"{model}/{cache_dtype}", False) if entry is not None else False
    if prefill_form is False or route_exchanges not in ROUTE_EXCHANGES:
        from simroute.calib.profile import load_profile
        return load_profile(calib).cost_params(model, route_exchanges=route_exchanges, prefill_us=prefill_us,
                                               cache_dtype=cache_dtype, **switches)
    constants = {name: tuple(value) if isinstance(value, list) else value
                 for name, value in entry["constants"].items()}
    if prefill_us is not None:
        constants["prefill_s_per_token_layer"] = prefill_us * 1e-6
    geometry = get_model(model)
    if cache_dtype != geometry.cache_dtype:
        geometry = geometry.with_cache_dtype(cache_dtype)
    return CostParams(geometry=geometry, fabrics=tuple(FabricParams(**fabric) for fabric in entry["fabrics"]),
                      holder_prefill_s=tuple(prefill_form) if prefill_form is not None else None,
                      route_exchanges=route_exchanges, **constants, **switches)


def build_record() -> dict[str, Any]:
    """Load and validate every complete shipped profile, and record what `cost_params` reads."""
    from dataclasses import asdict

    from simroute.calib.profile import load_profile
    from simroute.errors import ConfigurationError
    profiles: dict[str, Any] = {}
    for path in sorted(SHIPPED.glob("*.yaml")) + sorted(SHIPPED.glob("fabrics/*.yaml")):
        profile = load_profile(path)
        try:
            profile.check_complete()
        except ConfigurationError:
            continue                                    # a fragment (shared constants): no CostParams
        files = [Path(name).resolve().relative_to(SHIPPED).as_posix() for name in profile.files]
        entry: dict[str, Any] = {"files": files, "sha256": files_hash(files), "prefill_form": {}}
        for model in MODELS:
            for dtype in CACHE_DTYPES:
                params = profile.cost_params(model, cache_dtype=dtype)
                entry["prefill_form"][f"{model}/{dtype}"] = params.holder_prefill_s
                entry["fabrics"] = [asdict(fabric) for fabric in params.fabrics]
                entry["constants"] = {name: getattr(params, name) for name in PROFILE_FIELDS}
        profiles[path.relative_to(SHIPPED).as_posix()] = entry
    return {"about": f"CostParams inputs of the shipped profiles, by the hash of their files; regenerate with "
                     f"`{REGENERATE}` (simroute/calib/validated.py)", "profiles": profiles}


def stale() -> list[str]:
    """The shipped profiles whose record differs from what loading them gives now (their files changed, or
    the code that turns a profile into CostParams did), and shipped profiles not recorded."""
    records = _records()
    current = json.loads(json.dumps(build_record()["profiles"]))       # as the record file would hold it
    return sorted(key for key in set(records) | set(current) if records.get(key) != current.get(key))


def main() -> None:
    from simroute.ioutil import write_text_atomic
    write_text_atomic(RECORD, json.dumps(build_record(), indent=1) + "\n")
    print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
