"""Build hook: compiles the routed exchange's hot modules with mypyc (`simroute.compiled` says which and why).

Everything else about the package is in pyproject.toml. The compiled modules are optional: without mypyc, a C
compiler, or with `SIMROUTE_PURE_PYTHON=1`, the install is plain Python and runs the same sources. An
editable install (`pip install -e .`) is never compiled: a compiled module sitting beside its source would hide
every later edit of it.
"""

from __future__ import annotations

import glob
import os
import sys
import warnings

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))


def forget_old_builds() -> None:
    """Remove the compiled modules an earlier build left in build/ (setuptools packages what it finds there: a
    module no longer compiled, or compiled from older sources, would shadow its source)."""
    for lib in glob.glob(os.path.join(HERE, "build", "lib*")):
        for path in glob.glob(os.path.join(lib, "**", "*.so"), recursive=True) + \
                glob.glob(os.path.join(lib, "**", "*.pyd"), recursive=True):
            os.remove(path)


def compiled_extensions() -> list:
    forget_old_builds()
    sys.path.insert(0, HERE)
    try:
        from simroute.compiled import COMPILED_MODULES, pure_python_requested
    finally:
        sys.path.remove(HERE)
    if pure_python_requested() or any(arg in ("editable_wheel", "develop") for arg in sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        warnings.warn("mypyc is not installed: simroute installs as plain Python (slower routed runs)")
        return []
    try:
        # the compiled modules' own types are checked; what they import is taken as declared (fast, no stubs)
        extensions = mypycify(["--follow-imports=skip", "--ignore-missing-imports",
                               *COMPILED_MODULES.values()], opt_level="3", verbose=False)
    except (SystemExit, Exception) as error:      # mypyc reports a type error by exiting
        warnings.warn(f"mypyc could not compile simroute ({error!r}): it installs as plain Python")
        return []
    for extension in extensions:
        extension.optional = True       # no C compiler: a warning and the plain-Python install
        # the same float arithmetic as the interpreter's: no fused multiply-add (aarch64's GCC contracts by default)
        extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off"]
    return extensions


setup(ext_modules=compiled_extensions())
