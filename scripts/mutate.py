"""Break the code once per mutation; the test that guards it must fail.

    python scripts/mutate.py defences               # reward and sandbox defences (about 5 minutes on 2 cores)
    python scripts/mutate.py suite                  # what the suite's end-to-end tests claim (about 12 minutes)
    python scripts/mutate.py suite "no drain"       # one, by name

Each mutation replaces exact pieces of code (it refuses, STALE, when that code has moved on),
runs the guarding test(s), and restores the files, whatever happens. CAUGHT means the test
failed with the code broken. Do not edit the tree while it runs: it rewrites files in place.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NL = "\n"
F = "tests/test_reward_forgery.py::"
H = "tests/test_sandbox_hardening.py::"
DEFENCES = [
 ("no canaries", "tandem/grading.py", "disguise = insert_canaries(sb.testbed, task.test_files, task.fail_to_pass)",
  "disguise = insert_canaries(sb.testbed, [], ())", F + "test_forgery_scores_zero_with_tamper"),
 ("no stdout cross-check", "tandem/verdict.py", "    if forged:" + NL, "    if False:" + NL, F + "test_forgery_scores_zero_with_tamper"),
 ("one-way stdout check", "tandem/verdict.py", "    if denied:" + NL, "    if False:" + NL, F + "test_judge_flags_each_disagreement"),
 ("graded repo writable", "tandem/grading.py", "acquire(self.graded_template(task), graded=True)",
  "acquire(self.graded_template(task), graded=False)", F + "test_forgery_scores_zero_with_tamper"),
 ("no entry-point scan", "tandem/grading.py", "planted = plugin_entry_points(sb.testbed)", "planted = []", F + "test_forgery_scores_zero_with_tamper"),
 ("plugin autoload on", "tandem/grading.py", 'env = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", ', 'env = {', F + "test_forgery_scores_zero_with_tamper"),
 ("graded .git kept", "tandem/grading.py", '            remove_tree(sb.testbed / ".git")' + NL, "", F + "test_forgery_scores_zero_with_tamper"),
 ("tests not restored", "tandem/grading.py",
  '            restored = restore_protected(sb.testbed, sb.template / "testbed", task.test_files)',
  "            restored = []", F + "test_edits_to_graded_tests_are_undone_however_the_diff_spells_the_path"),
 ("originals keep names", "tandem/canaries.py", "    renamed = _renames(source, tests, names)", "    renamed = {}",
  F + "test_canary_names_and_places_tell_nothing"),
 ("twins only after original", "tandem/canaries.py",
  "rng.choice([s for s in spots if s >= end] or [end]) if decorated else rng.choice(spots)",
  "rng.choice([s for s in spots if s >= end] or [end])", F + "test_canary_names_and_places_tell_nothing"),
 ("no twin per hidden test", "tandem/canaries.py", "    hidden = [fn for fn in cloneable if fn.name in wanted]", "    hidden = []",
  F + "test_canary_names_and_places_tell_nothing"),
 ("twin judged alone", "tandem/verdict.py",
  '            original is None or stream.status.get(original + p) in ("PASSED", "XPASS"))]', ")]",
  F + "test_judge_flags_each_disagreement"),
 ("float step unchecked", "tandem/canaries.py", "    return new_text if ast.literal_eval(new_text) != value else None  # 1e20 + 1.0 == 1e20",
  "    return repr(value + 1.0) if isinstance(value, float) else new_text", F + "test_canaries_never_pass_on_code_the_originals_pass"),
 ("lenient matcher mutated", "tandem/canaries.py", "and isinstance(st.test.ops[0], ast.Eq) and not _lenient(source, st.test)",
  "and isinstance(st.test.ops[0], ast.Eq)", F + "test_canaries_never_pass_on_code_the_originals_pass"),
 ("splitlines", "tandem/canaries.py", '    lines = io.StringIO(source, newline="").readlines()', "    lines = source.splitlines(keepends=True)",
  F + "test_canaries_never_pass_on_code_the_originals_pass"),
 ("malformed record crashes", "tandem/verdict.py", "        except (ValueError, TypeError, OverflowError, AttributeError):",
  "        except (ValueError,):", F + "test_forgery_scores_zero_with_tamper"),
 ("' - ' split back", "tandem/verdict.py", '        elif depth == 0 and rest.startswith(" - ", i):', '        elif rest.startswith(" - ", i):',
  F + "test_parse_pytest_report_keeps_parametrized_ids_whole"),
 ("no unicode id escape", "tandem/verdict.py", 'stream.status.get(t, stream.status.get(pytest_escaped(t), "MISSING"))',
  'stream.status.get(t, "MISSING")', F + "test_parametrized_ids_with_separators_grade_exactly"),
 ("no seccomp", "tandem/sandbox/isolation.py", 'return self.backend == "bwrap" and seccomp.supported()', "return False",
  H + "test_as_root_the_agent_runs_as_its_slot_uid_with_no_capability"),
 ("keyrings allowed", "tandem/sandbox/seccomp.py", '        (None, _JEQ, nr["add_key"], "eperm", None),' + NL, "",
  H + "test_without_root_the_agent_holds_no_capability"),
 ("unshare maps root", "tandem/sandbox/isolation.py",
  'return ["--user", f"--map-user={UNPRIVILEGED_UID}", f"--map-group={UNPRIVILEGED_UID}", "--keep-caps"]',
  'return ["--user", "--map-root-user"]', H + "test_without_root_the_agent_holds_no_capability"),
 ("no cap drop in unshare", "tandem/sandbox/isolation.py", 'drop += ["--ambient-caps=-all", "--bounding-set=-all"]', "drop += []",
  H + "test_without_root_the_agent_holds_no_capability"),
 ("recursive rmtree", "tandem/sandbox/storage.py", "    _make_traversable(path, None, st)" + NL + "    fd = os.open(path, _DIR_FLAGS)",
  "    import shutil; return shutil.rmtree(path)" + NL + "    fd = os.open(path, _DIR_FLAGS)", H + "test_startup_sweep_removes_hostile_leftovers"),
 ("failed slot reused", "tandem/sandbox/pool.py",
  '            self._retire(sandbox.slot, f"cleanup failed: {type(err).__name__}: {err}")' + NL + "            return", "            pass",
  H + "test_a_slot_whose_cleanup_fails_is_retired_and_replaced"),
 ("no tmpfs cap", "tandem/sandbox/pool.py", "self.disk_cap = disk_cap if disk_cap is not None and tmpfs_available(self.dir) else None",
  "self.disk_cap = None", H + "test_disk_cap_counts_transient_bytes_and_inodes"),
 ("prefix under /tmp hidden", "tandem/sandbox/isolation.py", '        a += ["--perms", "0755", "--dir", SHIM_DIR,',
  '        a += ["--bind", str(slot_dir / "tmp"), SANDBOX_TMP]' + NL + '        a += ["--perms", "0755", "--dir", SHIM_DIR,',
  H + "test_a_python_under_tmp_is_not_hidden_by_the_sandboxes_tmp"),
 ("venv via shim first", "tandem/sandbox/isolation.py", 'first = f"{bindir}:{SHIM_DIR}" if own else f"{SHIM_DIR}:{bindir}"',
  'first = f"{SHIM_DIR}:{bindir}"', H + "test_a_python_under_tmp_is_not_hidden_by_the_sandboxes_tmp"),
 ("no self-check", "tandem/grading.py", "                grader.self_check()" + NL, "                pass" + NL,
  H + "test_a_python_without_pytest_is_refused_before_the_first_rollout"),
 ("infra failure raises at once", "tandem/grading.py", "        runtime.infra_failed(err)  # raises once failures repeat" + NL,
  "        raise err" + NL, H + "test_a_sandbox_failure_costs_one_sample_and_repeats_stop_the_run"),
 ("RunFatal swallowed", "tandem/rollout/plugins.py", "    except RunFatal:  # the plug-in asks to stop the run (e.g. a sandbox that keeps failing)" + NL + "        raise" + NL,
  "", "tests/test_plugin_edges.py::test_a_reward_that_asks_to_stop_the_run_is_not_turned_into_a_zero"),
 ("loader keeps SIGPIPE ignored", "tandem/sandbox/inside/seccomp_exec.py", "        signal.signal(sig, signal.SIG_DFL)", "        pass",
  "tests/test_sandbox.py::test_output_is_bounded_while_reading"),
 ("no tamper metric", "tandem/agent/coding_env.py", 'sum(bool(s.reward_info.get("tamper")) for s in samples) / len(samples)', "0.0",
  F + "test_forgery_through_the_agent_loop_is_flagged_and_the_run_goes_on"),
]
L = "tests/test_launcher.py::"
E2E_ASYNC = L + "test_two_engines_end_to_end[async-drain-terminal]"
E2E_SYNC = L + "test_two_engines_end_to_end[sync-continue-plain]"
RESUME = L + "test_resume_extends_an_oversampled_run_that_aborts"
SUITE = [
 ("README metric not logged", "tandem/orchestrator/loop.py", '"dropped_stale": batch.dropped_stale, "recycled_groups": batch.recycled,',
  '"dropped_stale": batch.dropped_stale,', E2E_SYNC),
 ("engine ignores new weights", "tandem/engine/embedded.py", "            await self._call(lambda: copy_weights_in_place(self.model, tensors))",
  "            pass", E2E_SYNC),
 ("mismatch not measured", "tandem/losses.py", "mismatch=((old - batch.rollout_logp).abs() * mask).sum())",
  "mismatch=0.0 * ((old - batch.rollout_logp).abs() * mask).sum())",
  E2E_ASYNC),
 ("no drain", "tandem/weights/reload.py", [('PAUSE_MODE = {"drain": None,', 'PAUSE_MODE = {"drain": "in_place",'),
                          ('        if policy == "drain":' + NL + "            await client.wait_idle()", '        if False:' + NL + "            pass")],
  None, E2E_ASYNC),
 ("abort not gated", "tandem/weights/reload.py", 'gated = policy in ("drain", "abort")', 'gated = policy in ("drain",)', RESUME),
 ("abort read as a finish", "tandem/rollout/client.py", '            raise RolloutAborted(finish.get("message", "aborted by engine"))', "            pass",
  RESUME),
 ("resume restarts the cursor", "tandem/orchestrator/loop.py",
  '                          **({k: start.cursor[k] for k in ("epoch", "position")} if start.cursor else {}))', "                          )",
  RESUME),
 ("TensorBoard drops ints", "tandem/orchestrator/metrics.py", "if isinstance(value, (int, float)) and not isinstance(value, bool) and key != \"step\":",
  "if isinstance(value, float) and key != \"step\":", E2E_SYNC),
 ("plain line off by one", "tandem/orchestrator/live_view.py", 'print(f"step {row[\'step\'] + 1}/{self.total} "', 'print(f"step {row[\'step\']}/{self.total} "',
  E2E_SYNC),
 ("live view ignores the terminal", "tandem/orchestrator/live_view.py", '(mode == "auto" and sys.stdout.isatty())', "False", E2E_ASYNC),
 ("watchdog never warns", "tandem/orchestrator/loop.py", "        elif not warned and time.monotonic() - last_progress > stall_s:",
  "        elif False:", L + "test_stall_is_reported_and_sigterm_stops_a_stalled_run"),
 ("SIGTERM not handled", "tandem/orchestrator/launcher.py", "    signal.signal(signal.SIGTERM, _raise_stop)" + NL, "",
  L + "test_stall_is_reported_and_sigterm_stops_a_stalled_run"),
 ("no shutdown at exit", "tandem/orchestrator/launcher.py", "            sup.shutdown()" + NL, "            pass" + NL, L + "test_sigint_leaves_no_child"),
 ("restarts never run out", "tandem/orchestrator/fleet.py", "        if self.restarts > self.cfg.faults.max_engine_restarts:",
  "        if False:", "tests/test_faults.py::test_an_engine_that_keeps_failing_stops_the_run"),
 ("priority ignored", "tandem/engine/batch_scheduler.py", "enqueue(self.waiting, req, by_priority=self.priority_scheduling)",
  "enqueue(self.waiting, req, by_priority=False)",
  "tests/test_engine_api.py::test_waiting_requests_are_admitted_by_priority_when_enabled"),
 ("priority leaks to the caller", "tandem/orchestrator/producer.py", "        dropped = 0" + NL,
  "        dropped = 0" + NL + "        REQUEST_PRIORITY.set(-step)  # the step's own retries first" + NL,
  "tests/test_routing.py::test_the_producer_gives_every_group_the_priority_of_its_step"),
 ("publish without rename", "tandem/weights/publish.py", "        os.replace(tmp, final)", "        shutil.copytree(tmp, final)",
  "tests/test_weight_sync.py::test_a_publish_stopped_or_killed_at_any_moment_never_exposes_a_partial_version"),
 ("' - ' split back", "tandem/verdict.py", '        elif depth == 0 and rest.startswith(" - ", i):', '        elif rest.startswith(" - ", i):',
  F + "test_parse_pytest_report_keeps_parametrized_ids_whole"),
]
SETS = {"defences": DEFENCES, "suite": SUITE}


def run(name: str, rel: str, edits: list[tuple[str, str]], tests: str) -> None:
    path = ROOT / rel
    orig = text = path.read_text()
    for old, new in edits:
        if text.count(old) != 1:
            print(f"STALE  | {name} | {rel} | pattern found {text.count(old)} times", flush=True)
            return
        text = text.replace(old, new)
    path.write_text(text)
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                            f"--basetemp={tempfile.mkdtemp(prefix='mutate-')}", *tests.split()],
                           cwd=ROOT, capture_output=True, text=True, timeout=900)
    finally:
        path.write_text(orig)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-200:]
    failed = [line.split(" - ")[0] for line in r.stdout.splitlines() if line.startswith("FAILED")]
    why = next((line[1:].strip()[:160] for line in r.stdout.splitlines() if line.startswith("E ")), "")
    print(f"{'CAUGHT' if r.returncode else 'MISSED'} | {name} | {last} | {failed[:1]} | {why}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in SETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(SETS)}}} [mutation name ...]")
    only = sys.argv[2:]
    for name, rel, old, new, tests in SETS[sys.argv[1]]:
        if tests is not None and (not only or name in only):
            # One (old, new) replacement, or a list of them with new = None.
            run(name, rel, old if new is None else [(old, new)], tests)
