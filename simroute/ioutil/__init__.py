"""Safe outputs and validated loading: bad input never costs a user a file or leaves a half-written one.

Every output simroute writes goes through here, so each writer gets the same four guarantees:

- **Validated first.** `check_output_path` refuses an output that cannot be created, is the wrong kind (a file
  where a directory goes, or the reverse) or overlaps an input, before any work is done (`paths`).
- **Only its own files are replaced.** A directory simroute writes holds a manifest (`MANIFEST`) of the files
  it put there; `check_replaceable` replaces an existing directory only when it is empty or holds exactly the
  files its manifest lists, unchanged. A user's notes, a hand-written `summary.json`, an edited output: refused
  (`manifests`).
- **Atomic.** Outputs are written beside the target and renamed into place. A directory replaces the previous
  one in one `renameat2(RENAME_EXCHANGE)` (the target path never goes missing), and the old contents are then
  removed from the temporary name. Where the file system lacks the exchange, two renames under the lock are
  the documented fallback (a reader may see the path missing for that instant; no writer can interleave)
  (`atomic`, its temporaries in `temps`).
- **Locked.** `claim_output` takes an exclusive, non-blocking lock on `.NAME.lock` beside the target, held from
  the check to the rename: a second writer of the same path fails at once with a clear error. The lock file is
  removed on release (the holder unlinks it while still holding the lock; a waiter re-checks the inode)
  (`locks`).

Reading is the other half (`reading`): an input is a regular file of bounded size, YAML's nesting and alias
expansion are bounded, a trace's lines too.

One module per concern; this package re-exports their public names, so `from simroute.ioutil import X` is
the way to use them.
"""

from __future__ import annotations

from simroute.ioutil.atomic import atomic_files, atomic_path, dumps_json, write_text_atomic
from simroute.ioutil.locks import claim_output, lock_output
from simroute.ioutil.manifests import MANIFEST, foreign_files, manifest_kind, record_files, sha256_file
from simroute.ioutil.paths import check_new_file, check_output_path, check_replaceable
from simroute.ioutil.reading import (MAX_CONFIG_BYTES, MAX_LINE_BYTES, MAX_NESTING, MAX_YAML_NODES, bounded_lines,
                                     check_input_file, check_line_lengths, load_json, load_yaml, read_text)
from simroute.ioutil.temps import clean_stale_temps, missing_folders, naming_faults, undo_folders

__all__ = [
    "MANIFEST", "MAX_CONFIG_BYTES", "MAX_LINE_BYTES", "MAX_NESTING", "MAX_YAML_NODES",
    "atomic_files", "atomic_path", "bounded_lines", "check_input_file", "check_line_lengths", "check_new_file",
    "check_output_path", "check_replaceable", "claim_output", "clean_stale_temps", "dumps_json", "foreign_files",
    "load_json", "load_yaml", "lock_output", "manifest_kind", "missing_folders", "naming_faults", "read_text",
    "record_files", "sha256_file", "undo_folders", "write_text_atomic",
]
