"""tandem's reporter inside the grading sandbox: per-test results out of band, as they happen.

Loaded with `-p tandem_report` from a read-only bind at /.tandem/grader, before any code of
the repository is imported (`python -P` keeps /testbed off sys.path until pytest applies
the grader's `pythonpath` ini). It writes one JSON object per line to the pipe whose fd is
in TANDEM_REPORT_FD; the host reads that pipe, not stdout.

Records: {"ev": "start"}; {"ev": "collected", "ids": [...]}; {"ev": "call", "id", "raised", "types"}
(did the test body raise, seen around item.runtest, before any report object exists; what it raised, its class
and bases by name, for the fresh rows where the reference fix raises, tandem.envs.coding.raising_values);
{"ev": "report", "id", "when", "outcome", "xfail"}; {"ev": "check", "id", "k", "v"} (what a
hidden check computed, tandem_checks); {"ev": "tamper", "what"} (an audit hook saw a write
to a protected path); {"ev": "finish", "exitstatus"}.

This module is *not* a trust anchor: code that the tests import runs in this process and
can rewrite anything here. The hidden checks are judged on the host against expectations
that never enter this process (tandem.envs.coding.checks); the rest of a record only matters where it
says a test failed, and the grader (tandem/envs/coding/verdict.py) still cross-checks it with the exit
status the host saw and the stdout report.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

_FD = int(os.environ.get("TANDEM_REPORT_FD", "-1"))
_PROTECTED = tuple(os.path.abspath(p) for p in os.environ.get("TANDEM_PROTECTED", "").split(":") if p)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.remove", "os.rename", "os.rmdir", "os.chmod", "os.chown", "os.truncate", "os.link",
                "os.symlink", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
_in_hook = False
_current: list[str | None] = [None]


def current_test() -> str | None:
    """The node id of the test being set up, run or torn down (None outside tests)."""
    return _current[0]


def emit(record: dict) -> None:
    if _FD < 0:
        return
    data = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    try:
        while data:
            data = data[os.write(_FD, data):]
    except OSError:
        pass


def _protected(path) -> str | None:
    if isinstance(path, (bytes, os.PathLike, str)):
        try:
            p = os.path.abspath(os.fsdecode(path))
        except (TypeError, ValueError):
            return None
        for root in _PROTECTED:
            if p == root or p.startswith(root + os.sep):
                return p
    return None


def _audit(event: str, args: tuple) -> None:
    """Record attempts to change the graded test files or the grader (the mount refuses them anyway)."""
    global _in_hook
    if _in_hook or not _PROTECTED:
        return
    _in_hook = True
    try:
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            hit = _protected(path) if writing else None
            if hit:
                emit({"ev": "tamper", "what": f"opened {hit} for writing"})
        elif event in _PATH_EVENTS:
            for arg in args[:2]:
                hit = _protected(arg)
                if hit:
                    emit({"ev": "tamper", "what": f"{event} on {hit}"})
                    break
    finally:
        _in_hook = False


sys.addaudithook(_audit)  # audit hooks cannot be removed once added
emit({"ev": "start", "pid": os.getpid()})


def pytest_collection_finish(session) -> None:
    emit({"ev": "collected", "ids": [item.nodeid for item in session.items]})


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    try:
        return (yield)
    finally:
        _current[0] = None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    try:
        result = yield
    except BaseException as exc:
        emit({"ev": "call", "id": item.nodeid, "raised": True, "types": [c.__name__ for c in type(exc).__mro__][:64]})
        raise
    emit({"ev": "call", "id": item.nodeid, "raised": False})
    return result


def pytest_runtest_logreport(report) -> None:
    emit({"ev": "report", "id": report.nodeid, "when": report.when, "outcome": report.outcome,
           "xfail": hasattr(report, "wasxfail")})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus) -> None:
    emit({"ev": "finish", "exitstatus": int(exitstatus)})
