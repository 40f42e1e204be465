"""Plain records of validated files: the shipped profiles, engine presets and topologies read without pydantic.

The files' schemas are pydantic models (pydantic at the file boundary only); what a loader hands on is a
`Record` of each model, the same whether the file was validated or read plainly:

- a file a user gives (or an edited shipped file) is validated by its model and the validated model turned
  into records (`to_record`), with the model's checks and error messages;
- a shipped file whose bytes hash as recorded (`simroute/data/shipped-files.json`) was validated when the
  record was made, so it is read by the field table alone (`read_shipped`): names, aliases, defaults, nested
  models, lists, pairs and the int -> float a float field takes. Importing pydantic and building the models
  costs ~0.1 CPU s, a third of the default `simroute run`'s start-up (docs/PERFORMANCE.md).

The field table is not a second schema: it is derived from the models (`model_table`) and written to the
record with the files' hashes by `python -m simroute.records`; tests/test_records.py fails, naming that
command, when a model or a shipped file changes without the record, checks that the plain and the validating
reading give equal records for every shipped file, and that a changed file is validated again. A model's
`mode="before"` validators are not in the table: a kind's `network_input` does what the shipped kinds' did, on
both paths.

Regenerate: python -m simroute.records
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

DATA = Path(__file__).resolve().parent / "data"
RECORD = DATA / "shipped-files.json"
REGENERATE = "python -m simroute.records"
# the shipped files each schema reads (globs under DATA) and the root model that validates them
SHIPPED: dict[str, tuple[str, ...]] = {
    "simroute.calib.schema:ProfileFile": ("calib/*.yaml", "calib/fabrics/*.yaml", "calib/gpus/*.yaml"),
    "simroute.calib.engine_models:EnginePresetFile": ("calib/engines/*.yaml",),
    "simroute.network.schema_models:TopologyModel": ("topologies/*.yaml",),
}
# what validates more of a file than its root model: a topology's `network:` section, by its kind's model (the
# plain reader takes a recorded file's section as it is). Named as strings, as the models are, so that this base
# module imports no layer (simroute/registry.py does the same).
WHOLE_FILE_CHECKS = {"simroute.network.schema_models:TopologyModel": "simroute.network.schema:parse_topology"}
# the kinds' `network:` models, not reached from a root model's fields (the kind picks one at load)
EXTRA_MODELS = ("simroute.network.schema_models:FatTreeNetwork", "simroute.network.schema_models:RailNetwork",
                "simroute.network.schema_models:DomainNetwork")


class Record:
    """One validated model's values, frozen; equal to another record of the same model with equal values."""

    __slots__ = ()
    _model: ClassVar[str]                # the model's key, "module:qualname"
    _fields: ClassVar[tuple[str, ...]]   # its field names, in the model's order (`fields_of`)

    def __init__(self, **values: Any) -> None:
        for name in self._fields:
            object.__setattr__(self, name, values.pop(name))
        if values:
            raise TypeError(f"{self._model} has no field {', '.join(values)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return other._model == self._model and other._values() == self._values()

    def __hash__(self) -> int:
        return hash((self._model, self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self._fields)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (self._model, self._fields, dict(zip(self._fields, self._values())))

    def __copy__(self) -> "Record":
        return self

    def __deepcopy__(self, memo: dict) -> "Record":
        import copy
        return type(self)(**copy.deepcopy(dict(zip(self._fields, self._values())), memo))

    def replace(self, **changes: Any) -> "Record":
        """A copy with `changes` (field names) applied, unchecked: for tests and tools that vary one value."""
        return type(self)(**{**dict(zip(self._fields, self._values())), **changes})

    def as_dict(self, *, exclude_none: bool = False) -> dict[str, Any]:
        """Field name -> value, nested records as dicts (as pydantic's `model_dump` gives them)."""
        return {name: _plain(value, exclude_none) for name, value in zip(self._fields, self._values())
                if not (exclude_none and value is None)}


def _plain(value: Any, exclude_none: bool) -> Any:
    if isinstance(value, Record):
        return value.as_dict(exclude_none=exclude_none)
    if isinstance(value, list):
        return [_plain(item, exclude_none) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item, exclude_none) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item, exclude_none) for key, item in value.items()}
    return value


_CLASSES: dict[str, type[Record]] = {}


def record_class(model: str, fields: Iterable[str]) -> type[Record]:
    """The one record class of `model` in this process (made on first use)."""
    fields = tuple(fields)
    cls = _CLASSES.get(model)
    if cls is None:
        name = model.rpartition(":")[2].rpartition(".")[2]
        cls = type(name, (Record,), {"__slots__": fields, "_model": model, "_fields": fields,
                                     "__module__": __name__, "__qualname__": name})
        _CLASSES[model] = cls
    elif cls._fields != fields:
        raise RuntimeError(f"{model}'s fields changed ({cls._fields} -> {fields}): regenerate with `{REGENERATE}`")
    return cls


def _rebuild(model: str, fields: tuple[str, ...], values: dict[str, Any]) -> Record:
    return record_class(model, fields)(**values)


def fields_of(record: Record) -> tuple[str, ...]:
    """A record's field names, in its model's order."""
    return record._fields


def is_record(value: object, model: str) -> bool:
    """Whether `value` is a record of `model` ("module:qualname")."""
    return isinstance(value, Record) and value._model == model


# ---- the validating side (pydantic) --------------------------------------------------------------------------
def model_key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def to_record(value: Any) -> Any:
    """A validated pydantic model (and what it holds) as records; lists, tuples and dicts kept as they are."""
    from pydantic import BaseModel
    if isinstance(value, BaseModel):
        cls = type(value)
        names = tuple(cls.model_fields)
        return record_class(model_key(cls), names)(**{name: to_record(getattr(value, name)) for name in names})
    if isinstance(value, list):
        return [to_record(item) for item in value]
    if isinstance(value, tuple):
        return tuple(to_record(item) for item in value)
    if isinstance(value, dict):
        return {key: to_record(item) for key, item in value.items()}
    return value


def _spec(annotation: Any, models: dict[str, Any]) -> Any:
    """A field type as the plain reader follows it (JSON): "float", "int|str", "any", ["model", key],
    ["optional", spec], ["list", spec], ["tuple", [spec, ...]], ["dict", spec], ["union", [spec, ...]]."""
    import types
    import typing

    from pydantic import BaseModel
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _spec(args[0], models)
    if origin in (typing.Union, types.UnionType):
        members = [member for member in args if member is not type(None)]
        inner = _union_spec([_spec(member, models) for member in members]) if len(members) > 1 else \
            _spec(members[0], models)
        return ["optional", inner] if len(members) < len(args) else inner
    if origin is None and isinstance(annotation, type) and issubclass(annotation, BaseModel):
        _collect(annotation, models)
        return ["model", model_key(annotation)]
    if origin is typing.Literal:
        return "|".join(sorted({type(value).__name__ for value in args}))
    if origin is list:
        return ["list", _spec(args[0], models)]
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            raise TypeError(f"{annotation}: variable tuples are not read plainly")
        return ["tuple", [_spec(arg, models) for arg in args]]
    if origin is dict:
        return ["dict", _spec(args[1], models)]
    if annotation is typing.Any:
        return "any"
    if annotation in (float, int, str, bool):
        return annotation.__name__
    raise TypeError(f"{annotation}: not a type the plain reader follows")


def _union_spec(specs: list[Any]) -> Any:
    if all(isinstance(spec, str) for spec in specs):
        return "|".join(sorted({part for spec in specs for part in spec.split("|")}))
    return ["union", specs]


def _collect(cls: type, models: dict[str, Any]) -> None:
    """`cls`'s field table, and those of the models its fields hold, into `models`."""
    key = model_key(cls)
    if key in models:
        return
    models[key] = None                                    # a model that holds itself ends here
    rows = []
    for name, info in cls.model_fields.items():           # type: ignore[attr-defined]
        spec = _spec(info.annotation, models)
        required = info.is_required()
        default = None if required else info.get_default(call_default_factory=True)
        rows.append([name, info.alias if info.alias and info.alias != name else None, spec, required, default])
    models[key] = {"fields": rows}


def model_table(models: Iterable[type]) -> dict[str, Any]:
    """The field tables of `models` and every model their fields hold, by key."""
    table: dict[str, Any] = {}
    for cls in models:
        _collect(cls, table)
    return {key: table[key] for key in sorted(table)}


def import_model(key: str) -> Any:
    """The pydantic model (or the function) named by `key` ("module:qualname"), imported."""
    import importlib
    module, _, name = key.partition(":")
    return getattr(importlib.import_module(module), name)


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_record() -> dict[str, Any]:
    """Validate every shipped file by its schema's model and record its hash, with the field tables."""
    from simroute.ioutil import load_yaml
    files: dict[str, Any] = {}
    for root, patterns in SHIPPED.items():
        model = import_model(root)
        for pattern in patterns:
            for path in sorted(DATA.glob(pattern)):
                raw = load_yaml(path)
                model.model_validate(raw)                    # a shipped file that does not validate fails here
                if root in WHOLE_FILE_CHECKS:
                    import_model(WHOLE_FILE_CHECKS[root])(raw, file=path)
                files[path.relative_to(DATA).as_posix()] = {"model": root, "sha256": file_hash(path)}
    return {"about": f"field tables of the shipped files' models and the files' hashes; regenerate with "
                     f"`{REGENERATE}` (simroute/records.py)",
            "models": model_table([import_model(key) for key in [*SHIPPED, *EXTRA_MODELS]]), "files": files}


def stale() -> list[str]:
    """What differs between the record and what the models and shipped files give now."""
    try:
        recorded = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return ["the record"]
    current = json.loads(json.dumps(build_record()))
    out = [f"model {key}" for key in sorted(set(recorded.get("models", {})) | set(current["models"]))
           if recorded.get("models", {}).get(key) != current["models"].get(key)]
    out += [f"file {key}" for key in sorted(set(recorded.get("files", {})) | set(current["files"]))
            if recorded.get("files", {}).get(key) != current["files"].get(key)]
    return out


# ---- the plain side (no pydantic) ------------------------------------------------------------------------------
_RECORD: dict[str, Any] | None = None


def _record() -> dict[str, Any]:
    global _RECORD
    if _RECORD is None:
        try:
            _RECORD = json.loads(RECORD.read_text())
        except (OSError, ValueError):
            _RECORD = {}
    return _RECORD


class _Misfit(Exception):
    """The data does not fit the table: read it by validation instead."""


def recorded_model(path: str | Path) -> str | None:
    """The model that validated shipped file `path` when its bytes hash as recorded, else None (a path outside
    the shipped folders, an edited file, a file not recorded)."""
    key = _shipped_key(Path(path))
    entry = _record().get("files", {}).get(key) if key is not None else None
    if entry is None:
        return None
    try:
        return entry["model"] if file_hash(Path(path)) == entry["sha256"] else None
    except OSError:
        return None


def _shipped_key(path: Path) -> str | None:
    """The record key of a path inside a shipped folder (calib/, topologies/: links in a checkout)."""
    try:
        resolved = path.resolve()
    except OSError:
        return None
    for link in ("calib", "topologies"):
        try:
            return f"{link}/{resolved.relative_to((DATA / link).resolve()).as_posix()}"
        except ValueError:
            continue
    return None


def read_plain(model: str, data: Any) -> Record | None:
    """`data` (a trusted file's parsed YAML) as records of `model` by the recorded field table; None where it
    does not fit the table (the caller validates it instead)."""
    try:
        return _read(["model", model], data)
    except _Misfit:
        return None


def read_shipped(path: str | Path, model: str, data: Any) -> Record | None:
    """Shipped file `path`'s parsed `data` as records of `model` when the file hashes as recorded for that
    model; None otherwise (validate it)."""
    if recorded_model(path) != model:
        return None
    return read_plain(model, data)


def _read(spec: Any, value: Any) -> Any:
    if isinstance(spec, str):
        return _scalar(spec, value)
    form = spec[0]
    if form == "model":
        return _read_model(spec[1], value)
    if form == "optional":
        return None if value is None else _read(spec[1], value)
    if form == "list":
        if not isinstance(value, list):
            raise _Misfit
        return [_read(spec[1], item) for item in value]
    if form == "tuple":
        if not isinstance(value, (list, tuple)) or len(value) != len(spec[1]):
            raise _Misfit
        return tuple(_read(item_spec, item) for item_spec, item in zip(spec[1], value))
    if form == "dict":
        if not isinstance(value, dict):
            raise _Misfit
        return {key: _read(spec[1], item) for key, item in value.items()}
    if form == "union":
        for member in spec[1]:
            try:
                return _read(member, value)
            except _Misfit:
                continue
    raise _Misfit


def _scalar(spec: str, value: Any) -> Any:
    if spec == "any":
        return value
    kinds = spec.split("|")
    if isinstance(value, bool):
        if "bool" in kinds:
            return value
    elif isinstance(value, int):
        if "int" in kinds:
            return value
        if "float" in kinds:
            return float(value)
    elif isinstance(value, float):
        if "float" in kinds and value == value and value not in (float("inf"), float("-inf")):
            return value
    elif isinstance(value, str):
        if "str" in kinds:
            return value
    raise _Misfit


def _read_model(model: str, value: Any) -> Record:
    table = _record().get("models", {}).get(model)
    if table is None or not isinstance(value, dict):
        raise _Misfit
    rows = table["fields"]
    values: dict[str, Any] = {}
    used = 0
    for name, alias, spec, required, default in rows:
        key = alias or name
        if key in value:
            values[name] = _read(spec, value[key])
            used += 1
        elif required:
            raise _Misfit
        else:
            values[name] = type(default)(default) if isinstance(default, (list, dict)) else default
    if used != len(value):
        raise _Misfit                                      # a key the model does not know
    return record_class(model, (row[0] for row in rows))(**values)


def main(argv: list[str] | None = None) -> None:
    """`python -m simroute.records [--check]`: write the record (every shipped file validated first), or with
    --check say whether it is current and exit 1 if not, writing nothing."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m simroute.records", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="compare with the stored record; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        current = RECORD.exists() and json.loads(RECORD.read_text()) == build_record()
        print(f"{RECORD}: {'current' if current else 'stale: run ' + REGENERATE}")
        raise SystemExit(0 if current else 1)
    from simroute.ioutil import write_text_atomic
    write_text_atomic(RECORD, json.dumps(build_record(), indent=1) + "\n")
    print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
