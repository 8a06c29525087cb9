"""The verdict of a graded test run: host-held checks first, then the run's own account.

The tests of a graded run import the agent's code, so everything inside that process
(pytest, its reports, tandem's own reporter, stdout, the exit status) is the agent's to
rewrite. What decides a test therefore comes from outside it:

- **host-held checks** (tandem.envs.coding.checks, tandem.envs.coding.instrument): the hidden checks' expected
  values never enter the sandbox. The run only writes what each check computed; here each
  value is compared with its expectation, and every check the reference fix reached must
  have been reached. A forger writes whatever values it likes, and passes only with the
  right ones: what the fix computes.
- **the stream**: tandem_report's per-test records on a pipe (not stdout). It can only
  make a test fail here: a test passes when the stream says so *and* its checks hold.
  A record no honest reporter writes (wrong shape, unreadable, 200,000-deep, after the
  end of the session, naming a check site that does not exist, an exception message
  longer than the sandbox writes, an expectation outside the reference run, a check of
  one file reported under a test of another that the reference never saw) is tampering.
  A record is matched to its site before its value is decoded, and a graded run's stream
  is judged in a child process under CPU, memory and time limits (tandem.envs.coding.judging): a
  record built to be slow to decode or match (a hash flood, a regex that backtracks)
  costs that child, never the host, and a child that runs out is tampering.
- **the exit status** the host saw and **the stdout summary**: they must agree with the
  stream, both ways; **audit events**: an attempt to write a graded test file or the
  grader (refused by the read-only mount) is tampering.

What this cannot catch: a hidden check whose expected value can be guessed (yes/no, None,
zero, an input copied back); tandem.envs.coding.grading_plan refuses a task whose hidden tests have no
other kind of check that the bug fails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Mapping

from tandem.envs.coding.checks import MAX_RAISED_NAMES, Malformed, Site, check_outcome, read_record_value
from tandem.envs.coding.expected_sides import agreed, held_note, own_side

STATUSES = ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS")
MAX_TAMPER_NOTES = 8
"""Findings kept per graded sample (the first is the reason); one is enough to score 0."""


# ----------------------------------------------------------------------------- the stream
@dataclass
class Stream:
    started: bool = False
    collected: list[str] | None = None
    status: dict[str, str] = field(default_factory=dict)
    raised: dict[str, bool] = field(default_factory=dict)
    exitstatus: int | None = None
    tamper: list[str] = field(default_factory=list)
    checks: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    """Test id -> (site, decoded value) for every check record, in order."""
    references: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    """Test id -> (site, R's value) of the reference run's `E == R` sites, in order."""
    own: dict[str, dict[int, tuple[Any, bool]]] = field(default_factory=dict)
    """Test id -> index in its `checks` -> (R's value, did `E == R` hold) a graded run wrote for an own site
    (tandem.envs.coding.expected_sides)."""
    unknown_sites: set[int] = field(default_factory=set)
    """Sites named by records that the graded files do not have (their values never decoded)."""
    raised_types: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Test id -> the class names (its MRO) of what its body raised, where it raised (last: positional
    construction keeps its order)."""


def parse_stream(data: bytes, sites: dict[int, Site] | None = None, references: bool = False) -> Stream:
    """Fold the reporter's records into per-test statuses (as pytest's own summary names them).

    With `sites`, a check record is matched to its site before its value is decoded: a record of
    no site, or of no test, is never decoded. `references`: this is the reference fix's run, whose
    `E == R` sites write R's value too (in any other run such a record is tampering)."""
    out = Stream()
    phases: dict[str, dict[str, tuple[str, bool]]] = {}
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            rec = json.loads(line)
            _fold(out, phases, rec, sites, references)
        except Malformed as err:
            out.tamper.append(f"a check record no honest run writes ({err})"[:300])
        except Exception as err:  # KeyError, RecursionError (200,000-deep JSON), ...: never honest output
            out.tamper.append(f"unreadable record in the report stream ({type(err).__name__})")
    out.status = {node: _status(p) for node, p in phases.items()}
    return out


def _fold(out: Stream, phases: dict, rec, sites: dict[int, Site] | None = None, references: bool = False) -> None:
    """One record into the stream; a record of the wrong shape raises (the caller flags it)."""
    if not isinstance(rec, dict):
        raise TypeError("not an object")
    ev = rec.get("ev")
    if out.exitstatus is not None and ev != "tamper":
        out.tamper.append(f"report stream written after pytest finished ({ev})")
    if ev == "start":
        out.started = True
    elif ev == "collected":
        ids = rec["ids"]
        if not isinstance(ids, list):
            raise TypeError("ids")
        out.collected = [str(i) for i in ids]
    elif ev == "call":
        if str(rec.get("id")) in out.raised:
            out.tamper.append(f"two results for one test call: {rec.get('id')}")
        out.raised[str(rec.get("id"))] = bool(rec.get("raised"))
        types = rec.get("types", [])
        if type(types) is not list or len(types) > MAX_RAISED_NAMES or not all(type(n) is str and len(n) <= 200
                                                                                for n in types):
            raise Malformed("types: up to 64 class names")
        if types:
            out.raised_types[str(rec.get("id"))] = tuple(types)
    elif ev == "report":
        phases.setdefault(str(rec.get("id")), {})[str(rec.get("when"))] = (str(rec.get("outcome")),
                                                                           bool(rec.get("xfail")))
    elif ev == "check":
        _fold_check(out, rec, sites, references)
    elif ev == "tamper":
        out.tamper.append(str(rec.get("what"))[:300])
    elif ev == "finish":
        status = rec["exitstatus"]
        if not isinstance(status, int) or isinstance(status, bool):
            raise TypeError("exitstatus")
        out.exitstatus = status


def _fold_check(out: Stream, rec: dict, sites: dict[int, Site] | None, references: bool) -> None:
    site = rec["k"]
    if type(site) is not int or not set(rec) <= {"ev", "id", "k", "v", "r", "eq"}:
        raise Malformed("site number")
    if "r" in rec and not references:
        if sites is None or not own_side(sites.get(site)):
            raise Malformed("an expectation written by a graded run (only the reference run writes one, and a graded "
                            "run for a check the bug passes whose expected side runs the repository's code)")
    if ("eq" in rec) != ("r" in rec) or type(rec.get("eq", False)) is not bool:
        raise Malformed("an expected side's value without its outcome (a bool), or the other way round")
    if sites is not None and site not in sites:
        out.unknown_sites.add(site)
        return
    if rec.get("id") is None:  # a check run while no test was (at import): it decides nothing, never decoded
        return
    value = read_record_value(rec["v"])
    if sites is not None:
        check_outcome(sites[site], value)
    test = str(rec["id"])
    events = out.checks.setdefault(test, [])
    if "r" in rec and references:
        out.references.setdefault(test, []).append((site, read_record_value(rec["r"])))
    elif "r" in rec:
        out.own.setdefault(test, {})[len(events)] = (read_record_value(rec["r"]), rec["eq"])
    events.append((site, value))


def _status(phases: dict[str, tuple[str, bool]]) -> str:
    setup, call, teardown = phases.get("setup"), phases.get("call"), phases.get("teardown")
    if setup and setup[0] == "failed":
        return "ERROR"
    if setup and setup[0] == "skipped":
        return "XFAIL" if setup[1] else "SKIPPED"
    if call is None:
        return "ERROR"
    outcome, xfail = call
    if outcome == "failed":
        return "FAILED"
    if outcome == "skipped":
        return "XFAIL" if xfail else "SKIPPED"
    if teardown and teardown[0] == "failed":
        return "ERROR"
    return "XPASS" if xfail else "PASSED"


# ----------------------------------------------------------------------------- stdout
def parse_pytest_report(output: str) -> dict[str, str]:
    """Node id -> status from the last `-rA` short test summary of a pytest run.

    A node id may itself contain " - " (a parametrized id like test_x[a - b]), so the
    reason is split off only where what precedes it is a complete id: brackets balanced.
    """
    marker = output.rfind("short test summary info")
    section = output[marker:] if marker >= 0 else output
    results: dict[str, str] = {}
    for line in section.splitlines():
        status, _, rest = line.partition(" ")
        if status not in STATUSES or not rest or status == "SKIPPED":  # "SKIPPED [1] f.py:3: why" has no id
            continue
        node = _node_id(rest)
        if node:
            results[node] = status
    return results


def _node_id(rest: str) -> str:
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif depth == 0 and rest.startswith(" - ", i):
            return rest[:i].strip()
    return rest.strip()


# ----------------------------------------------------------------------------- judging
@dataclass
class Verdict:
    tests: dict[str, str]
    """Every expected node id -> its status (MISSING when the stream has none; FAILED when a check failed)."""
    tamper: list[str]
    complete: bool
    """The reporter started and finished, and pytest's exit status is the one its session reported."""
    check_failures: dict[str, str] = field(default_factory=dict)
    """Test id -> the first host-held check it failed, or one it never reached."""


def pytest_escaped(node_id: str) -> str:
    """The id as pytest reports it: non-ASCII in parametrize ids is written as escapes (ascii_escaped)."""
    name, bracket, params = node_id.partition("[")
    if not bracket:
        return node_id
    escaped = params.encode("unicode_escape").decode("ascii")
    return name + bracket + "".join(c if c.isprintable() else repr(c)[1:-1] for c in escaped)


def lookup(by_id: dict, node_id: str, default=None):
    """by_id's entry for a task's node id, under the id itself or as pytest escapes it."""
    return by_id.get(node_id, by_id.get(pytest_escaped(node_id), default))


def host_check(events: list[tuple[int, Any]], sites: dict[int, Site], required: set[int],
               test: str | None = None, own: dict[int, tuple[Any, bool]] | None = None) -> str:
    """Why one test's checks do not hold ('' when they do): a wrong value, or a required site never
    reached (a reference site: one of the reference run's values never met, Site.unmet). `own`: what the
    run wrote for its own sites' R, by index in `events` (tandem.envs.coding.expected_sides)."""
    own = own or {}
    seen: dict[int, list] = {}
    changed: set[int] = set()
    """Own sites a value passed only by the run's own R: the diff changed what R computes."""
    for i, (k, value) in enumerate(events):
        site = sites.get(k)
        if site is None:
            continue  # tamper: judge() names it
        nth = len(seen.setdefault(k, []))
        seen[k].append(value)
        if not site.passes(value, test, nth):
            if not agreed(site, own.get(i)):
                return f"the check at {site.where} does not hold (it computes `{site.source}`){held_note(site)}"
            changed.add(k)
    for k in sorted(required):
        if k in sites and sites[k].unmet(test, seen.get(k, [])):
            if k in changed:
                continue  # R changed: the reference's values are not the ones to meet, reached is what is left
            return f"the check at {sites[k].where} never ran (it computes `{sites[k].source}`)"
    return ""


def raised_before_checks(stream: Stream, test: str, sites: dict[int, Site]) -> tuple[str, ...]:
    """The class names (MRO) of what `test`'s body raised before any host-held check of `sites` ran; () where it
    did not raise, or reached such a check first (a fresh row where the reference raises,
    tandem.envs.coding.raising_values)."""
    if lookup(stream.status, test) != "FAILED" or not lookup(stream.raised, test):
        return ()
    if any(k in sites for k, _ in lookup(stream.checks, test, [])):
        return ()
    return lookup(stream.raised_types, test, ())


def _test_file(node_id: str) -> str:
    return node_id.split("::", 1)[0]


def judge(expected: list[str], stream: Stream, returncode: int, stdout: str, sites: dict[int, Site] | None = None,
          required: dict[str, set[int]] | None = None, narrower: AbstractSet[str] = frozenset(),
          must_raise: Mapping[str, str] | None = None) -> Verdict:
    """Each expected test's status: the stream's, turned FAILED where its host-held checks do not hold.

    `sites` are the graded files' check sites, `required` the sites each test reached under the
    reference fix (tandem.envs.coding.grading_plan); a test of `narrower` (hard rows beyond the fresh rows'
    guard, tandem.envs.coding.hard_rows) passes where its body raised before any host-held check ran; a row of
    `must_raise` (row -> the class the reference raised, tandem.envs.coding.raising_values) passes only where it
    raised an Exception so, of that class or another."""
    sites, required, must_raise = sites or {}, required or {}, must_raise or {}
    tests, failures = {}, {}
    tamper = list(stream.tamper)
    for t in expected:
        status = lookup(stream.status, t, "MISSING")
        events = lookup(stream.checks, t, [])
        if t in narrower and status == "FAILED" and lookup(stream.raised, t) and not any(k in sites for k, _ in events):
            tests[t] = "PASSED"  # a narrower domain: it raised where the reference answers, it wrote no other value
            continue
        if t in must_raise:  # the reference and the bug both raise here: a fix keeps that
            if "Exception" in raised_before_checks(stream, t, sites):  # any class: the reference's is no contract
                tests[t] = "PASSED"
            else:
                tests[t] = "FAILED" if status == "PASSED" else status
                failures[t] = f"the reference fix and the bug raise {must_raise[t]} on this row; the run raised nothing"
            continue
        why = host_check(events, sites, required.get(t, set()), t, lookup(stream.own, t, {}))
        if why:
            failures[t] = why
            status = "FAILED" if status == "PASSED" else status
        tests[t] = status
        stray = sorted({k for k, _ in events if k in sites and sites[k].file != _test_file(t)
                        and k not in required.get(t, set())})
        if stray:  # a helper of another test file runs only where the reference run saw it run
            tamper.append(f"a check of {sites[stray[0]].file} was reported under a test of another file that the "
                          f"reference run never saw reach it ({t})")
    unknown = sorted(stream.unknown_sites | {k for events in stream.checks.values() for k, _ in events
                                             if k not in sites})
    if unknown:
        tamper.append(f"a check record names a site the graded files do not have ({unknown[0]})")
    for node, raised in stream.raised.items():
        if raised and stream.status.get(node) == "PASSED":
            tamper.append(f"a test body raised but its report says passed ({node})")
    if stream.exitstatus is not None and returncode in (0, 1) and stream.exitstatus != returncode:
        tamper.append(f"pytest's exit status {returncode} differs from its session's {stream.exitstatus}")
    if stream.started and stream.exitstatus is None and returncode in (0, 1):
        tamper.append("pytest exited normally but its session never finished (the report stream was cut)")
    claimed = parse_pytest_report(stdout)
    forged = [t for t, s in claimed.items() if s == "PASSED" and t in stream.status and stream.status[t] != "PASSED"]
    if forged:
        tamper.append(f"the printed test summary claims passes the run did not have ({forged[0]})")
    denied = [t for t, s in stream.status.items() if s == "PASSED" and claimed.get(t, "PASSED") != "PASSED"]
    if denied:
        tamper.append(f"the report stream claims passes the printed summary does not ({denied[0]})")
    complete = stream.started and stream.exitstatus is not None and returncode == stream.exitstatus
    return Verdict(tests, list(dict.fromkeys(tamper))[:MAX_TAMPER_NOTES], complete, failures)
