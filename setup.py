"""Build hook: the compiled build, on request (`simroute.compiled` says which modules and why).

Everything else about the package is in pyproject.toml. `pip install .` installs plain Python: no compiler, a few
seconds. `SIMROUTE_COMPILE=1 pip install .` compiles the routed exchange's hot modules with mypyc (routed runs
~25% faster, outputs identical; the compiled wheel takes ~35 CPU-seconds to build, the plain one ~4); the build
backend (build_backend.py) then puts mypy in the isolated build environment. Asked for, the compiled build fails
loudly: a mypyc type error, a missing C compiler or an editable install stops the install instead of falling
back to Python, so that CI, which asks for it, goes red when the compiled build breaks.
"""

from __future__ import annotations

import glob
import os
import sys

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
        from simroute.compiled import COMPILE_ENV, COMPILED_MODULES, compile_requested
    finally:
        sys.path.remove(HERE)
    if not compile_requested():
        return []
    if any(arg in ("editable_wheel", "develop") for arg in sys.argv):
        sys.exit(f"{COMPILE_ENV}=1: an editable install cannot be compiled (a compiled module beside its source "
                 "would hide every later edit of it); install with `pip install .`, or unset it")
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        sys.exit(f"{COMPILE_ENV}=1 asks for the compiled build, but mypyc does not import ({error}); "
                 "pip installs it into the build environment (build_backend.py); with --no-build-isolation, "
                 "install the mypy named in build_backend.py first")
    # the compiled modules' own types are checked; what they import is taken as declared (fast, no stubs);
    # a type error exits here, and the install with it
    extensions = mypycify(["--follow-imports=skip", "--ignore-missing-imports", *COMPILED_MODULES.values()],
                          opt_level="3", verbose=False)
    for extension in extensions:
        # the same float arithmetic as the interpreter's: no fused multiply-add (aarch64's GCC contracts by default)
        extension.extra_compile_args = [*extension.extra_compile_args, "-ffp-contract=off"]
    return extensions


setup(ext_modules=compiled_extensions())
