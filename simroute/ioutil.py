"""Safe outputs and validated loading: bad input never costs a user a file or leaves a half-written one.

Every output simroute writes goes through here, so each writer gets the same four guarantees:

- **Validated first.** `check_output_path` refuses an output that cannot be created, is the wrong kind (a file
  where a directory goes, or the reverse) or overlaps an input, before any work is done.
- **Only its own files are replaced.** A directory simroute writes holds a manifest (`MANIFEST`) of the files
  it put there; `check_replaceable` replaces an existing directory only when it is empty or holds exactly the
  files its manifest lists, unchanged. A user's notes, a hand-written `summary.json`, an edited output: refused.
- **Atomic.** Outputs are written beside the target and renamed into place. A directory replaces the previous
  one in one `renameat2(RENAME_EXCHANGE)` (the target path never goes missing), and the old contents are then
  removed from the temporary name. Where the file system lacks the exchange, two renames under the lock are
  the documented fallback (a reader may see the path missing for that instant; no writer can interleave).
- **Locked.** `claim_output` takes an exclusive, non-blocking lock on `.NAME.lock` beside the target, held from
  the check to the rename: a second writer of the same path fails at once with a clear error. The lock file is
  removed on release (the holder unlinks it while still holding the lock; a waiter re-checks the inode).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from simroute.errors import ConfigurationError

MANIFEST = ".simroute-manifest.json"
MAX_CONFIG_BYTES = 16 << 20      # a topology, profile or study bigger than this is not a config file
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


# -- path checks ---------------------------------------------------------------------------------------------
def check_output_path(target: str | Path, *, directory: bool, inputs: Iterable[str | Path | None] = (),
                      flag: str | None = None) -> Path:
    """Refuse an output path that cannot work, before any work: wrong kind, uncreatable, or overlapping an input.

    `inputs` are paths the command reads; writing inside one, onto one, or replacing a directory that holds
    one would destroy what is being read.
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        if directory and not target.is_dir():
            raise ConfigurationError("exists and is not a directory; give a directory path", file=target,
                                     field=flag)
        if not directory and target.is_dir():
            raise ConfigurationError("is a directory; give a file path", file=target, field=flag)
    ancestor = target.parent
    while not ancestor.exists():
        if ancestor.is_symlink():
            raise ConfigurationError(f"{ancestor} is a dangling link; cannot create the output", file=target,
                                     field=flag)
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigurationError(f"cannot create: {ancestor} is a file, not a directory", file=target, field=flag)
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigurationError(f"cannot create: {ancestor} is not writable", file=target, field=flag)
    resolved = target.resolve()
    for item in inputs:
        if item is None:
            continue
        source = Path(item).resolve()
        if resolved == source or source in resolved.parents:
            raise ConfigurationError(f"is or lies inside {item}, which this command also uses; choose another "
                                     f"output path", file=target, field=flag)
        if directory and resolved in source.parents:
            raise ConfigurationError(f"holds {item}, which this command also uses; replacing the directory would "
                                     f"delete it", file=target, field=flag)
    return target


def _manifest(directory: Path) -> dict[str, list[int]]:
    """{relative path: [size, mtime_ns]} of every file under `directory` except the manifest itself."""
    out: dict[str, list[int]] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != MANIFEST:
            st = path.stat()
            out[path.relative_to(directory).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def _write_manifest(directory: Path, kind: str | None = None) -> None:
    doc: dict[str, Any] = {"written_by": "simroute", "files": _manifest(directory)}
    if kind is not None:
        doc["kind"] = kind
    (directory / MANIFEST).write_text(json.dumps(doc, sort_keys=True) + "\n")


def manifest_kind(directory: Path) -> str | None:
    """The kind a simroute directory's manifest declares (`report`, `study`), None where it declares none."""
    try:
        doc = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return doc.get("kind") if isinstance(doc, dict) and isinstance(doc.get("kind"), str) else None


def _nested_outputs(directory: Path, listed: dict[str, Any]) -> dict[Path, list[str]]:
    """Subdirectories simroute wrote whole after the parent (a report inside a run), each with what in it
    simroute did not write: they carry their own manifest, so they answer for their own files."""
    out = {}
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and not p.is_symlink()):
        if (sub / MANIFEST).is_file() and not any(k.startswith(sub.name + "/") for k in listed):
            out[sub] = [f"{sub.name}/{name}" for name in foreign_files(sub)]
    return out


def foreign_files(directory: Path) -> list[str]:
    """What in `directory` simroute did not write there (or was changed since): empty means replaceable.

    A subdirectory with a manifest of its own (a report written into a run) answers for its own files: if
    all of them are simroute's, so is the subdirectory, and a later run may replace the whole directory."""
    entries = [p for p in directory.rglob("*") if p.name != MANIFEST or p.parent != directory]
    if not entries:
        return []
    try:
        listed = json.loads((directory / MANIFEST).read_text())["files"]
        if not isinstance(listed, dict):
            raise TypeError
    except (OSError, ValueError, TypeError, KeyError):
        return sorted(p.relative_to(directory).as_posix() for p in entries if not p.is_dir())[:3] or ["(folders)"]
    nested = _nested_outputs(directory, listed)
    inside = lambda p: any(sub == p or sub in p.parents for sub in nested)
    entries = [p for p in entries if not inside(p)]
    actual = {name: stat for name, stat in _manifest(directory).items() if not inside(directory / name)}
    foreign = [name for name, stat in actual.items() if listed.get(name) != stat]
    extra = [p.relative_to(directory).as_posix() for p in entries
             if (p.is_symlink() or not (p.is_file() or p.is_dir()))]
    return sorted(foreign + extra + [name for names in nested.values() for name in names])


def check_replaceable(target: str | Path, markers: tuple[str, ...] = (), what: str = "output") -> None:
    """Refuse to replace an existing directory unless everything in it is a file simroute wrote there.

    `markers` is kept for callers written before the manifest; the manifest alone decides.
    """
    del markers
    target = Path(target)
    if not target.exists():
        check_output_path(target, directory=True)
        return
    if not target.is_dir():
        raise ConfigurationError(f"exists and is not a directory; choose another path for the {what}", file=target)
    foreign = foreign_files(target)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise ConfigurationError(f"holds files simroute did not write there ({shown}): refusing to replace it "
                                 f"with the {what} (choose a new or empty directory)", file=target)
    kind = manifest_kind(target)
    if kind is not None and what != "output" and kind != what:
        raise ConfigurationError(f"holds simroute's {kind}, not a {what}: a {what} never replaces it (choose a new "
                                 "or empty directory)", file=target)


# -- the lock -------------------------------------------------------------------------------------------------
_CLAIMS: dict[str, list[Any]] = {}          # resolved target -> [fd, depth]; this process's held locks
_CLAIMS_GUARD = threading.Lock()


def _lock_path(target: Path) -> Path:
    return target.parent / f".{target.name}.lock"


def _acquire(target: Path) -> int:
    lock = _lock_path(target)
    lock.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise ConfigurationError("another simroute process is writing this output right now; wait for it "
                                         "or choose another path", file=target) from None
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)             # the previous holder removed it between our open and lock: try again


def _release(target: Path, fd: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(_lock_path(target))
    os.close(fd)


@contextlib.contextmanager
def lock_output(target: str | Path, *, flag: str | None = None) -> Iterator[Path]:
    """Hold the exclusive lock of `target` (fails fast if another process holds it). Reentrant in a process."""
    target = Path(target)
    key = str(target.resolve())
    with _CLAIMS_GUARD:
        held = _CLAIMS.get(key)
        if held is not None:
            held[1] += 1
        else:
            try:
                _CLAIMS[key] = [_acquire(target), 1]
            except OSError as exc:
                raise ConfigurationError(f"cannot lock the output: {exc.strerror}", file=target, field=flag) from None
    try:
        yield target
    finally:
        with _CLAIMS_GUARD:
            held = _CLAIMS[key]
            held[1] -= 1
            if held[1] == 0:
                del _CLAIMS[key]
                _release(target, held[0])


@contextlib.contextmanager
def claim_output(target: str | Path, *, directory: bool = True, inputs: Iterable[str | Path | None] = (),
                 flag: str | None = None, what: str = "output") -> Iterator[Path]:
    """Validate `target`, lock it and (for a directory) check it may be replaced, before any work.

    Wrap the whole command in it so a concurrent writer fails before simulating, not after; writes inside
    (`atomic_path`) reuse the claim.
    """
    target = check_output_path(target, directory=directory, inputs=inputs, flag=flag)
    with naming_faults(target), undo_folders(target.parent), lock_output(target, flag=flag):
        clean_stale_temps(target)
        if directory:
            check_replaceable(target, what=what)
        yield target


@contextlib.contextmanager
def naming_faults(target: Path) -> Iterator[None]:
    """A fault of the machine while writing `target` (a full disk, a read-only file system) is reported
    against `target`, not a temporary name or no name at all (`simroute_output` on the OSError)."""
    try:
        yield
    except OSError as exc:
        temporary = any(_TEMP_NAME.search(part) for part in target.parts)     # a write inside a temporary
        if getattr(exc, "simroute_output", None) is None and not temporary:
            with contextlib.suppress(AttributeError):
                exc.simroute_output = str(target)
        raise


_TEMP_NAME = re.compile(r"\.simroute-\d+-[^./]*\.tmp$")


# -- atomic writes --------------------------------------------------------------------------------------------
def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where the system or file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _replace_directory(tmp: Path, target: Path, what: str) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    check_replaceable(target, what=what)          # again, under the lock, right before the swap
    if _exchange(tmp, target):
        _remove(tmp)                                # tmp now holds the previous contents
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    os.replace(target, old)
    os.replace(tmp, target)
    _remove(old)


def _temp_prefix(target: Path) -> str:
    """Temporary names carry the writer's pid, so a later writer can tell debris of a killed one."""
    return f".{target.name}.simroute-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:          # EPERM: alive, someone else's
        return True
    return True


def clean_stale_temps(target: Path) -> list[Path]:
    """Remove what killed writers of `target` left beside it (`.NAME.simroute-PID-*.tmp`, `.NAME.old-PID`),
    where that PID no longer runs. Called under the target's lock, at the next write."""
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(?:simroute-(\d+)-[^./]*\.tmp|old-(\d+))$")
    # before temporaries carried a pid (mkstemp's 8 random characters): under the lock no writer of this target
    # is alive, so one of these left beside it is a killed writer's
    legacy = re.compile(rf"^\.{re.escape(target.name)}\.[a-z0-9_]{{8}}\.tmp$")
    removed = []
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return removed
    for path in siblings:
        match = pattern.match(path.name)
        if match and not _pid_alive(int(match.group(1) or match.group(2))) or legacy.match(path.name):
            _remove(path)
            removed.append(path)
    return removed


def _temp_beside(target: Path, directory: bool) -> Path:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if directory:
            return Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
        fd, name = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
        os.close(fd)
        return Path(name)
    except OSError as exc:
        raise ConfigurationError(f"cannot create the output: {exc.strerror}", file=target) from None


@contextlib.contextmanager
def atomic_path(target: str | Path, *, directory: bool = False, what: str = "output",
                kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside `target`; move it onto `target` only if the block succeeds.

    Works for files and for directories (a Parquet dataset, a run's output folder); a directory gets a
    manifest of the files written into it, which is what lets a later write replace it.
    """
    target = Path(target)
    with claim_output(target, directory=directory, what=what):
        tmp = _temp_beside(target, directory)
        # mkstemp / mkdtemp create 0600 / 0700: give the result the permissions a plain open() would have.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, (0o777 if directory else 0o666) & ~umask)
        try:
            yield tmp
            if directory:
                _write_manifest(tmp, kind if kind is not None else (what if what != "output" else None))
                _replace_directory(tmp, target, what)
            else:
                if target.is_dir():
                    raise ConfigurationError("is a directory; give a file path", file=target)
                os.replace(tmp, target)
        except BaseException:
            _remove(tmp)
            raise


def _listed_unchanged(path: Path) -> bool:
    """Whether `path` is a file its folder's manifest lists, unchanged since simroute wrote it."""
    try:
        listed = json.loads((path.parent / MANIFEST).read_text())["files"]
        st = path.lstat()
    except (OSError, ValueError, TypeError, KeyError):
        return False
    return isinstance(listed, dict) and path.is_file() and not path.is_symlink() \
        and listed.get(path.name) == [st.st_size, st.st_mtime_ns]


def check_new_file(target: str | Path, *, flag: str | None = None,
                   inputs: Iterable[str | Path | None] = ()) -> Path:
    """A single output file: new, or one simroute wrote into a folder of its own (listed unchanged in the
    folder's manifest). Anything else is the user's and is never overwritten."""
    target = check_output_path(target, directory=False, inputs=inputs, flag=flag)
    if (target.exists() or target.is_symlink()) and not _listed_unchanged(target):
        raise ConfigurationError("exists and simroute did not write it (or it was changed since): refusing to "
                                 "overwrite it; choose a new path", file=target, field=flag)
    return target


def record_files(directory: Path, names: Iterable[str]) -> None:
    """Add `names` (files just written) to `directory`'s manifest, keeping what it already listed."""
    doc: dict[str, Any] = {"written_by": "simroute", "files": {}}
    with contextlib.suppress(OSError, ValueError):
        old = json.loads((directory / MANIFEST).read_text())
        if isinstance(old, dict) and isinstance(old.get("files"), dict):
            doc = old
    for name in names:
        st = (directory / name).stat()
        doc["files"][name] = [st.st_size, st.st_mtime_ns]
    tmp = _temp_beside(directory / MANIFEST, False)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)         # mkstemp's 0600: the permissions a plain open() would give
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        os.replace(tmp, directory / MANIFEST)
    except BaseException:
        _remove(tmp)
        raise


@contextlib.contextmanager
def undo_folders(directory: Path) -> Iterator[None]:
    """On failure inside, remove the folders up to `directory` that did not exist on entry (and are empty
    again): a failed write leaves no trace of the path it would have made."""
    created = missing_folders(directory)
    try:
        yield
    except BaseException:
        for folder in created:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def missing_folders(directory: Path) -> list[Path]:
    """`directory` and those of its ancestors that do not exist yet, innermost first."""
    out = []
    while not directory.exists() and directory != directory.parent:
        out.append(directory)
        directory = directory.parent
    return out


@contextlib.contextmanager
def atomic_files(directory: str | Path, names: Iterable[str], *, flag: str | None = None,
                 inputs: Iterable[str | Path | None] = ()) -> Iterator[dict[str, Path]]:
    """Write several files into `directory` as one output: each must be new or simroute's own (checked
    before any work), all are written to temporaries, and renamed only when the whole block succeeds.

    The folder may hold other files (a user's `figs/`, the working directory of `topo show --png`); its
    manifest then lists the files simroute put there, which is what lets the next write replace them and
    nothing else. A failed write leaves the folder as it was (a folder it had to create is removed again).
    `inputs` are files the command reads: none of the outputs may be one."""
    names = list(names)
    inputs = list(inputs)
    directory = check_output_path(directory, directory=True, flag=flag)
    with naming_faults(directory / names[0] if len(names) == 1 else directory), undo_folders(directory), \
            lock_output(directory, flag=flag):
        for name in names:
            check_new_file(directory / name, flag=flag, inputs=inputs)
        temps: dict[str, Path] = {}
        umask = os.umask(0)
        os.umask(umask)
        try:
            for name in names:
                temps[name] = _temp_beside(directory / name, False)
                os.chmod(temps[name], 0o666 & ~umask)
            yield temps
            for name in names:
                os.replace(temps[name], directory / name)
            record_files(directory, names)
        except BaseException:
            for tmp in temps.values():
                _remove(tmp)
            raise


def write_text_atomic(target: str | Path, text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text)


def dumps_json(obj: Any, **kwargs: Any) -> str:
    """JSON that every parser reads: NaN and +-inf become null (json.dumps would write bare `NaN`)."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if obj == obj and obj not in (float("inf"), float("-inf")) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):     # numpy scalars
        with contextlib.suppress(TypeError, ValueError):
            return _finite(obj.item())
    return obj


# -- reading --------------------------------------------------------------------------------------------------
def check_input_file(path: str | Path, *, what: str = "file", max_bytes: int | None = None) -> Path:
    """An input that must be a readable regular file (not missing, not a directory, not too big)."""
    path = Path(path)
    if not path.exists():
        raise ConfigurationError(f"{what} not found", file=path)
    if path.is_dir():
        raise ConfigurationError(f"is a directory; expected a {what}", file=path)
    if not path.is_file():          # a pipe, a socket or a device: reading it could block forever or never end
        raise ConfigurationError(f"is not a regular file (a pipe, socket or device); expected a {what}", file=path)
    if not os.access(path, os.R_OK):
        raise ConfigurationError("is not readable (permission denied)", file=path)
    if max_bytes is not None and path.stat().st_size > max_bytes:
        raise ConfigurationError(f"is {path.stat().st_size:,} bytes; a {what} is at most {max_bytes:,}", file=path)
    return path


def read_text(path: str | Path, *, what: str = "file", max_bytes: int | None = MAX_CONFIG_BYTES) -> str:
    """A UTF-8 text file, or a ConfigurationError naming it (missing, a directory, binary, not UTF-8)."""
    path = check_input_file(path, what=what, max_bytes=max_bytes)
    data = path.read_bytes()
    if b"\x00" in data:
        raise ConfigurationError(f"is a binary file, not a {what}", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise ConfigurationError(f"is not UTF-8 text (byte {exc.start})", file=path, line=line) from None


MAX_NESTING = 100


def _check_nesting(text: str, path: Path) -> None:
    """Refuse flow collections nested absurdly deep before the parser recurses into them (slow, then a crash)."""
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return
    depth = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise ConfigurationError(f"not valid YAML: nested deeper than {MAX_NESTING} levels", file=path)
        elif ch in "]}":
            depth = max(depth - 1, 0)


MAX_YAML_NODES = 100_000       # values a document may expand to through aliases beyond 10x its own count


def _expanded_size(root: yaml.Node, path: Path) -> None:
    """Refuse a document whose aliases expand it past MAX_YAML_NODES (a "billion laughs"): PyYAML shares the
    repeated object, but every consumer that walks it (validation, copying, JSON) walks each repetition."""
    sizes: dict[int, int] = {}
    unique = 0
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:               # post-order without recursion: children's sizes before their parent's
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [item for pair in node.value for item in pair]
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        unique += 1
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
        if sizes[id(node)] > max(MAX_YAML_NODES, 10 * unique):
            raise ConfigurationError(f"not a config file: its aliases expand it past {MAX_YAML_NODES:,} values "
                                     "(an alias bomb?)", file=path)


def _safe_load(text: str, path: Path) -> Any:
    """yaml.safe_load, with the alias expansion measured on the composed nodes before anything is built.

    Through libyaml where installed (the calibration profile and its includes parse 5-10x faster); a document
    libyaml refuses is parsed again by the pure loader, whose error messages are the ones users see."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return _load_checked(fast, text, path)
        except yaml.YAMLError:
            pass
    return _load_checked(yaml.SafeLoader, text, path)


def _load_checked(loader_class: Any, text: str, path: Path) -> Any:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(path: str | Path) -> Any:
    """Load a YAML file, turning I/O, encoding and syntax errors into a ConfigurationError naming the file.

    The one YAML loader of every config (topologies, profiles, studies, generator presets): nesting and
    alias expansion are bounded, so no file makes it hang."""
    path = Path(path)
    text = read_text(path, what="YAML file")
    _check_nesting(text, path)
    try:
        return _safe_load(text, path)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        raise ConfigurationError(f"not valid YAML: {getattr(exc, 'problem', None) or exc}", file=path,
                                 line=None if line is None else line + 1) from None
    except RecursionError:
        raise ConfigurationError("not valid YAML: nested too deeply", file=path) from None


def load_json(path: str | Path, *, what: str = "JSON file", max_bytes: int | None = MAX_CONFIG_BYTES) -> Any:
    """Load a JSON file (e.g. a run's summary.json), errors naming the file and line."""
    path = Path(path)
    text = read_text(path, what=what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"not valid JSON: {exc.msg}", file=path, line=exc.lineno) from None
    except RecursionError:
        raise ConfigurationError("not valid JSON: nested too deeply", file=path) from None


MAX_LINE_BYTES = 64 << 20     # a line of a trace longer than this is not a record (no real trace has one)


def bounded_lines(stream: Any, file: Path, *, max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a binary stream, never holding more than `max_bytes` of one line."""
    lineno = 0
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > max_bytes:
            raise ConfigurationError(f"line is longer than {max_bytes:,} bytes: not a trace record", file=file,
                                     line=lineno)
        yield lineno, raw


def check_line_lengths(file: Path, *, max_bytes: int = MAX_LINE_BYTES, block: int = 1 << 20) -> None:
    """Refuse a text file with a line longer than `max_bytes`, reading it in bounded blocks (a parser handed
    a 2 GiB line would hold it whole)."""
    block = min(block, max_bytes)          # a line inside one block is then never too long by itself
    run, lineno = 0, 1                     # bytes of the current line so far, its number
    with file.open("rb") as f:
        while data := f.read(block):
            first = data.find(b"\n")
            if first < 0:
                run += len(data)
            else:
                if run + first > max_bytes:
                    break
                lineno += data.count(b"\n")
                run = len(data) - data.rfind(b"\n") - 1
            if run > max_bytes:
                break
        else:
            return
    raise ConfigurationError(f"line is longer than {max_bytes:,} bytes: not a trace record", file=file, line=lineno)


def sha256_file(path: str | Path) -> str:
    """Content hash of a file (or of every file under a directory, in sorted order; the manifest excluded)."""
    path = Path(path)
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.name != MANIFEST) if path.is_dir() else [path]
    try:
        for p in files:
            if path.is_dir():
                h.update(str(p.relative_to(path)).encode())
            with p.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    except OSError as exc:
        raise ConfigurationError(f"cannot read: {exc.strerror}", file=path) from None
    return h.hexdigest()
