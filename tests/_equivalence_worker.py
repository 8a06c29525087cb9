"""The oracle's child process (tests/_equivalence.py): stdlib only, run by path with a task tree as its PYTHONPATH.

    python _equivalence_worker.py record TREE OUT TEST...   the calls the tests make from tests/ into the package
    python _equivalence_worker.py call TREE CALLS OUT        each sampled call's outcome, outside pytest

`record` runs the tests under pytest with a profiler that keeps, per function of the package (module, qualname),
the argument tuples of every call made directly from a test file. `call` imports each function as a user would
(no pytest on the stack, no PYTEST_CURRENT_TEST) and calls it on every sampled argument tuple: the outcome is
("ok", value) or ("raise", exception type name); a call running past 2 s is ("raise", "Timeout").
"""

from __future__ import annotations

import copy
import importlib
import os
import pickle
import signal
import sys


def _record(tree: str, out: str, tests: list[str]) -> None:
    import pytest

    package_files = os.path.realpath(tree) + os.sep
    tests_dir = os.path.join(os.path.realpath(tree), "tests") + os.sep
    calls: dict = {}

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee, caller = frame.f_code.co_filename, frame.f_back.f_code.co_filename
        if not callee.startswith(package_files) or callee.startswith(tests_dir) or not caller.startswith(tests_dir):
            return
        code = frame.f_code
        names = code.co_varnames[:code.co_argcount]
        args = tuple(frame.f_locals[n] for n in names)
        if code.co_flags & 0x04:  # *args
            args += tuple(frame.f_locals[code.co_varnames[code.co_argcount + code.co_kwonlyargcount]])
        key = (frame.f_globals.get("__name__"), code.co_qualname)
        try:
            blob = pickle.dumps(copy.deepcopy(args))
        except Exception:
            return
        calls.setdefault(key, [])
        if blob not in calls[key]:
            calls[key].append(blob)

    class Profiler:
        def pytest_runtest_call(self, item):
            sys.setprofile(profile)

        def pytest_runtest_teardown(self, item):
            sys.setprofile(None)

    os.chdir(tree)
    pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests], plugins=[Profiler()])
    sys.setprofile(None)
    with open(out, "wb") as f:
        pickle.dump({k: [pickle.loads(b) for b in v] for k, v in calls.items()}, f)


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _outcome(function, args):
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        value = function(*copy.deepcopy(args))
        pickle.dumps(value)
        return ("ok", value)
    except _Timeout:
        return ("raise", "Timeout")
    except BaseException as e:  # noqa: BLE001 -- the outcome, whatever the candidate raises
        return ("raise", type(e).__name__)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _call(tree: str, calls_path: str, out: str) -> None:
    os.environ.pop("PYTEST_CURRENT_TEST", None)
    signal.signal(signal.SIGALRM, _alarm)
    with open(calls_path, "rb") as f:
        calls = pickle.load(f)
    results = {}
    for (module, qualname), samples in calls.items():
        try:
            target = importlib.import_module(module)
            for part in qualname.split("."):
                target = getattr(target, part)
        except BaseException as e:  # noqa: BLE001 -- a candidate whose package no longer imports
            results[(module, qualname)] = [("raise", "Import" + type(e).__name__)] * len(samples)
            continue
        results[(module, qualname)] = [_outcome(target, args) for args in samples]
    with open(out, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    mode, tree = sys.argv[1], sys.argv[2]  # the parent puts `tree` first on PYTHONPATH
    if mode == "record":
        _record(tree, sys.argv[3], sys.argv[4:])
    else:
        _call(tree, sys.argv[3], sys.argv[4])
