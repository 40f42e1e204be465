"""The PEP 517 build backend (pyproject.toml): setuptools' own, plus mypy in the isolated build environment when
the compiled build is asked for (`SIMROUTE_COMPILE=1`, setup.py).

A plain `pip install .` needs setuptools only: no mypy download, no C compiler, a pure-Python wheel in seconds.
The hooks that run setup.py only to list requirements, write metadata or pack the sources run it without the
compile request (mypyc is not installed yet when requirements are listed, and none of them compiles anything);
an editable install refuses the request (a compiled module beside its source would hide every later edit).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook not defined here is setuptools')

from simroute.compiled import COMPILE_ENV, compile_requested

MYPY = "mypy==2.4.1"     # the mypyc that compiles simroute.compiled.COMPILED_MODULES (the version tested with them)


@contextlib.contextmanager
def _without_compile() -> Iterator[None]:
    saved = os.environ.pop(COMPILE_ENV, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[COMPILE_ENV] = saved


def _refuse_editable() -> None:
    if compile_requested():
        raise SystemExit(f"{COMPILE_ENV}=1: an editable install cannot be compiled (a compiled module beside its "
                         "source would hide every later edit of it); use `pip install .`, or unset it")


def get_requires_for_build_wheel(config_settings=None):
    with _without_compile():
        needs = _setuptools.get_requires_for_build_wheel(config_settings)
    return [*needs, MYPY] if compile_requested() else needs


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    with _without_compile():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def get_requires_for_build_sdist(config_settings=None):
    with _without_compile():
        return _setuptools.get_requires_for_build_sdist(config_settings)


def build_sdist(sdist_directory, config_settings=None):
    with _without_compile():
        return _setuptools.build_sdist(sdist_directory, config_settings)


def get_requires_for_build_editable(config_settings=None):
    _refuse_editable()
    return _setuptools.get_requires_for_build_editable(config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):
    _refuse_editable()
    return _setuptools.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    _refuse_editable()
    return _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
