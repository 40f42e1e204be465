"""The process's own command spares the cyclic collector (simroute/cli/common.py); a caller's `main([...])`
leaves the collector as it found it."""

from __future__ import annotations

import gc
import subprocess
import sys


def test_a_callers_main_keeps_its_collector() -> None:
    from simroute.cli.main import main
    frozen = gc.get_freeze_count()
    assert main(["run", "--help"]) == 0          # builds `run`'s options: loads the simulator's modules
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_the_process_command_leaves_its_heap_frozen_and_its_collector_on() -> None:
    code = ("import gc, sys\nsys.argv = ['simroute', 'run', '--help']\nfrom simroute.cli.main import main\n"
            "before = gc.get_freeze_count()\nrc = main()\n"
            "print(rc, before, gc.get_freeze_count() > before, gc.isenabled())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1].split() == ["0", "0", "True", "True"]


def _commands(group, path=()):
    for name, command in group.commands.items():
        yield (*path, name), command
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_every_lazy_command_is_the_one_typer_builds() -> None:
    """Each command built on first use (`common.built_on_first_use`, `lazy_command`) has the attributes of the
    command typer builds from the same registration (name, help, settings), and that command's options."""
    import typer

    from simroute.cli.main import app
    lazy = [(path, command) for path, command in _commands(typer.main.get_command(app)) if hasattr(command, "_real")]
    assert len(lazy) > 20
    for path, command in lazy:
        real = command._real()
        assert type(real).__name__ != "LazyCommand", path
        assert command.params is real.params and command.callback is real.callback, path
        # (`_help_option`: a cache of the --help option, set once the command has printed its help)
        ours = {key: value for key, value in vars(command).items() if key not in ("params", "callback", "_help_option")}
        theirs = {key: value for key, value in vars(real).items() if key not in ("params", "callback", "_help_option")}
        assert ours == theirs, path
        assert real.params or path[-1] in ("list",), path       # the real options, not the stub's none


def test_a_run_freezes_its_set_up_and_hands_it_back() -> None:
    """While a run's events run, the set-up is frozen and young collections are rarer; after it, the collector is
    as it was (nothing frozen, its thresholds)."""
    from simroute.sim.runner import YOUNG_COLLECTION_EVERY, _collector_for_a_run
    if gc.get_freeze_count():
        gc.unfreeze()       # (this process froze something before: the case the next test covers)
    thresholds = gc.get_threshold()
    with _collector_for_a_run():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == max(thresholds[0], YOUNG_COLLECTION_EVERY)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds


def test_a_run_leaves_what_was_frozen_frozen() -> None:
    """The command line freezes its modules as they load: a run inside it must not hand them back to the
    collector (`gc.unfreeze` would hand back every frozen object)."""
    from simroute.sim.runner import _collector_for_a_run
    kept = [[object()] for _ in range(100)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen >= len(kept)
        with _collector_for_a_run():
            garbage = [[object()] for _ in range(1000)]
            del garbage
        # still frozen: the kept lists at least (an unconditional unfreeze leaves 0); not `== frozen`, as frozen
        # objects that other code frees meanwhile leave the count (seen under xdist: 2 fewer)
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


def test_a_run_the_process_ends_after_leaves_its_set_up_frozen() -> None:
    """`leave_frozen` (the process's own command line): the set-up is frozen whatever was frozen before, and left
    so (the command freezes its whole heap at exit anyway); the thresholds are restored."""
    from simroute.sim.runner import _collector_for_a_run
    if gc.get_freeze_count():
        gc.unfreeze()
    thresholds = gc.get_threshold()
    kept = [[object()] for _ in range(100)]
    try:
        with _collector_for_a_run(leave_frozen=True):
            assert gc.get_freeze_count() >= len(kept)
        assert gc.get_freeze_count() >= len(kept)          # not handed back
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()


def test_the_process_command_runs_with_its_set_up_left_frozen(tmp_path) -> None:
    """`simroute run` as the process's own command asks the run to leave its set-up frozen; a caller's `main`
    does not (its collector is left as it was: the first test)."""
    code = ("import sys\nfrom simroute.sim import runner\nseen = []\nown = runner._collector_for_a_run\n"
            "def noted(leave_frozen=False):\n    seen.append(leave_frozen)\n    return own(leave_frozen)\n"
            "runner._collector_for_a_run = noted\n"
            f"sys.argv = ['simroute', 'run', '--max-requests', '5', '-o', {str(tmp_path / 'out')!r}]\n"
            "from simroute.cli.main import main\nrc = main()\nprint(rc, seen)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 [True]"
