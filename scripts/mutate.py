"""Break the code once per mutation; the test that guards it must fail.

    python scripts/mutate.py defences               # reward and sandbox defences (about 5 minutes on 2 cores)
    python scripts/mutate.py suite                  # what the suite's end-to-end tests claim (about 12 minutes)
    python scripts/mutate.py suite "no drain"       # one, by name
    python scripts/mutate.py core --table docs/mutants.md   # the core guarantees, and their table
    python scripts/mutate.py memory                 # the flagship's memory features (about 8 minutes)
    python scripts/mutate.py moe                    # mixture-of-experts policies and routing replay
    python scripts/mutate.py tests3                 # off-default keys and colocation's hand-over (issue 45)
    python scripts/mutate.py first_hour             # what a new user meets first: fast refusals, the Python API
    python scripts/mutate.py reward                 # issue 46: no correct fix refused, no derivation pays
    python scripts/mutate.py expected_sides         # issue 46: an expected side that calls code the fix changes

Each mutation replaces exact pieces of code (it refuses, STALE, when that code has moved on),
runs the guarding test(s), and restores the files, whatever happens. CAUGHT means pytest said the
tests failed (exit 1) with the code broken; a missing test or any other pytest error is an ERROR,
never a catch. Do not edit the tree while it runs: it rewrites files in place.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# each feature's mutants in its own module; scripts/ is on the path of `python scripts/mutate.py`
from mutants_baseline import BASELINE
from mutants_blind import BLIND_MUTANTS
from mutants_calls import CALL_MUTANTS
from mutants_calls2 import CALL_IMPORT_MUTANTS, KEYWORD_MUTANTS
from mutants_eval import EVAL
from mutants_expected_sides import EXPECTED_SIDES
from mutants_first_hour import FIRST_HOUR
from mutants_harness import HARNESS
from mutants_load import LOAD
from mutants_memory import MEMORY
from mutants_moe import MOE
from mutants_reload import RELOAD
from mutants_reward import REWARD
from mutants_reward_fixes import REWARD_FIXES
from mutants_guesses import GUESSES
from mutants_odds import ODDS_MUTANTS
from mutants_oracle import ORACLE
from mutants_params2 import PARAMS2
from mutants_confined import CONFINED
from mutants_differential import DIFFERENTIAL
from mutants_sglang import SGLANG
from mutants_signal import SIGNAL
from mutants_tests3 import TESTS3
from mutants_types import TYPES
from mutants_typed2 import TYPED2
from mutants_wide import WIDE
from mutants_structure import STRUCTURE
from mutants_separate import SEPARATE
from mutants_edge import EDGE
from mutants_hard import HARD_MUTANTS
from mutants_wrong_fixes import WRONG_FIX_MUTANTS

ROOT = Path(__file__).resolve().parents[1]
NL = "\n"
F = "tests/test_reward_forgery.py::"
H = "tests/test_sandbox_hardening.py::"
DEFENCES = [
 ("host checks ignored", "tandem/envs/coding/verdict.py",
  "        why = host_check(events, sites, required.get(t, set()), t, lookup(stream.own, t, {}))", '        why = ""',
  F + "test_forgery_scores_zero[unshare-generic_forger_trial_0]"),
 ("required checks optional", "tandem/envs/coding/verdict.py", "        if k in sites and sites[k].unmet(test, seen.get(k, [])):",
  "        if False:",
  F + "test_judge_flags_each_disagreement"),
 ("unknown sites allowed", "tandem/envs/coding/verdict.py", "    if unknown:" + NL, "    if False:" + NL, F + "test_judge_flags_each_disagreement"),
 ("no stdout cross-check", "tandem/envs/coding/verdict.py", "    if forged:" + NL, "    if False:" + NL, F + "test_judge_flags_each_disagreement"),
 ("one-way stdout check", "tandem/envs/coding/verdict.py", "    if denied:" + NL, "    if False:" + NL, F + "test_judge_flags_each_disagreement"),
 ("split files not written", "tandem/envs/coding/grading.py", "            write_inside(sb.testbed, rel, text)", "            pass",
  F + "test_forgery_scores_zero[unshare-generic_forger_trial_0]"),
 ("no refusal", "tandem/envs/coding/grading_plan.py", '    plan.refused = "; ".join(reasons)[:1500]', '    plan.refused = ""',
  "tests/test_host_checks.py::test_forms_without_twins_are_graded_by_the_host_or_refused[unshare]"),
 ("every site strong", "tandem/envs/coding/checks.py", "            return not guessable(target, echoes)", "            return True",
  "tests/test_host_checks.py::test_constants_fold_within_bounds_and_guesses_are_told_apart"),
 ("echoes are no guess", "tandem/envs/coding/checks.py", "    return any(_same(value, g) for g in (*_GUESSES, *echoes))",
  "    return any(_same(value, g) for g in _GUESSES)",
  "tests/test_host_checks.py::test_constants_fold_within_bounds_and_guesses_are_told_apart"),
 ("graded repo writable", "tandem/envs/coding/grading.py", "acquire(self.graded_template(task), graded=True) as sb:" + NL + "            try:",
  "acquire(self.graded_template(task), graded=False) as sb:" + NL + "            try:",
  "tests/test_reward_fidelity.py::test_correct_fixes_the_reference_did_not_write_score_one[unshare]"),
 ("tests not restored", "tandem/envs/coding/grading.py",
  "            restored = restore_protected(sb.testbed, template, task.test_files)",
  "            restored = []", F + "test_edits_to_graded_tests_are_undone_however_the_diff_spells_the_path"),
 ("leftovers graded", "tandem/envs/coding/graded_diff.py", "PROTECTED_NAMES or is_leftover(p) for p in norm)", "PROTECTED_NAMES for p in norm)",
  "tests/test_sandbox_shared_state.py::test_bytecode_and_build_leftovers_are_not_graded"),
 ("leftovers not scrubbed", "tandem/envs/coding/graded_diff.py", "        remove_tree(testbed / rel)" + NL, "        continue" + NL,
  "tests/test_sandbox_shared_state.py::test_bytecode_and_build_leftovers_are_not_graded"),
 ("graded bytecode kept", "tandem/envs/coding/graded_diff.py", "        if is_leftover(rel) and not any(", "        if False and not any(",
  "tests/test_sandbox_shared_state.py::test_a_graded_interpreter_never_loads_the_agents_bytecode[unshare]"),
 ("sparse diff applied", "tandem/envs/coding/graded_diff.py", "            if size > SPARSE_MIN_BYTES and size > SPARSE_RATIO * max(encoded, 1):",
  "            if False:", "tests/test_sandbox_shared_state.py::test_sparse_and_huge_files_are_refused_by_name_before_git_applies"),
 ("malformed record crashes", "tandem/envs/coding/verdict.py",
  "        except Exception as err:  # KeyError, RecursionError (200,000-deep JSON), ...: never honest output",
  "        except (ValueError,) as err:", F + "test_parse_stream_statuses_and_forged_records"),
 ("' - ' split back", "tandem/envs/coding/verdict.py", '        elif depth == 0 and rest.startswith(" - ", i):', '        elif rest.startswith(" - ", i):',
  F + "test_parse_pytest_report_keeps_parametrized_ids_whole"),
 ("no unicode id escape", "tandem/envs/coding/verdict.py", "    return by_id.get(node_id, by_id.get(pytest_escaped(node_id), default))",
  "    return by_id.get(node_id, default)", F + "test_parametrized_ids_with_separators_grade_exactly"),
 ("locks shared", "tandem/envs/coding/sandbox/seccomp.py", '    code += [(None, _JEQ, nr["flock"], "nolock", None),', "    code += [",
  "tests/test_sandbox_shared_state.py::test_a_lock_on_a_shared_file_carries_no_signal_between_sandboxes[unshare]"),
 ("fcntl locks shared", "tandem/envs/coding/sandbox/seccomp.py",
  '    code += [(None, _JEQ, cmd, "nolock", None) for cmd in (F_SETLK, F_SETLKW, F_OFD_SETLK)]' + NL, "",
  "tests/test_sandbox_shared_state.py::test_a_lock_on_a_shared_file_carries_no_signal_between_sandboxes[unshare]"),
 ("inotify allowed", "tandem/envs/coding/sandbox/seccomp.py", '"clone3", "inotify_init", "inotify_init1", "inotify_add_watch",', '"clone3",',
  "tests/test_sandbox_shared_state.py::test_file_events_io_uring_and_host_unix_sockets_are_refused[unshare]"),
 ("unix sockets allowed", "tandem/envs/coding/sandbox/seccomp.py", '             (None, _JEQ, nr["socket"], "socket", None),' + NL, "",
  "tests/test_sandbox_shared_state.py::test_file_events_io_uring_and_host_unix_sockets_are_refused[unshare]"),
 ("memfd without a cgroup", "tandem/envs/coding/sandbox/seccomp.py", '        refused += ["memfd_create", "memfd_secret", "shmget"]', "        pass",
  "tests/test_sandbox_shared_state.py::test_without_a_cgroup_memfd_and_sysv_shm_are_refused[unshare]"),
 ("no memory cgroup", "tandem/envs/coding/sandbox/pool.py", "                    argv = cgroups.enter_argv(group, argv)", "                    pass",
  "tests/test_sandbox_shared_state.py::test_memory_held_outside_mappings_counts_against_the_limit[unshare]"),
 ("/dev writable", "tandem/envs/coding/sandbox/isolation.py", '"/dev/shm", "--remount-ro", "/dev",', '"/dev/shm",',
  "tests/test_sandbox_shared_state.py::test_dev_is_read_only_and_shared_memory_lands_in_the_slot[bwrap]"),
 ("inodes not counted", "tandem/envs/coding/sandbox/pool.py", "                inodes += 1" + NL, "",
  "tests/test_sandbox_shared_state.py::test_inodes_are_measured_and_capped_without_a_tmpfs[unshare]"),
 ("no seccomp", "tandem/envs/coding/sandbox/isolation.py", 'return self.backend == "bwrap" and seccomp.supported()', "return False",
  H + "test_as_root_the_agent_runs_as_its_slot_uid_with_no_capability"),
 ("keyrings allowed", "tandem/envs/coding/sandbox/seccomp.py", '    refused = ["add_key", "request_key", "keyctl"]', '    refused = []',
  H + "test_without_root_the_agent_holds_no_capability"),
 ("unshare maps root", "tandem/envs/coding/sandbox/isolation.py",
  'return ["--user", f"--map-user={UNPRIVILEGED_UID}", f"--map-group={UNPRIVILEGED_UID}", "--keep-caps"]',
  'return ["--user", "--map-root-user"]', H + "test_without_root_the_agent_holds_no_capability"),
 ("no cap drop in unshare", "tandem/envs/coding/sandbox/isolation.py", 'drop += ["--ambient-caps=-all", "--bounding-set=-all"]', "drop += []",
  H + "test_without_root_the_agent_holds_no_capability"),
 ("recursive rmtree", "tandem/envs/coding/sandbox/storage.py", "    _make_traversable(path, None, st)" + NL + "    fd = os.open(path, _DIR_FLAGS)",
  "    import shutil; return shutil.rmtree(path)" + NL + "    fd = os.open(path, _DIR_FLAGS)", H + "test_startup_sweep_removes_hostile_leftovers"),
 ("failed slot reused", "tandem/envs/coding/sandbox/pool.py",
  '            self._retire(sandbox.slot, f"cleanup failed: {type(err).__name__}: {err}")' + NL + "            return", "            pass",
  H + "test_a_slot_whose_cleanup_fails_is_retired_and_replaced"),
 ("no tmpfs cap", "tandem/envs/coding/sandbox/pool.py", "self.disk_cap = disk_cap if disk_cap is not None and tmpfs_available(self.dir) else None",
  "self.disk_cap = None", H + "test_disk_cap_counts_transient_bytes_and_inodes"),
 ("prefix under /tmp hidden", "tandem/envs/coding/sandbox/isolation.py", '        a += ["--perms", "0755", "--dir", SHIM_DIR,',
  '        a += ["--bind", str(slot_dir / "tmp"), SANDBOX_TMP]' + NL + '        a += ["--perms", "0755", "--dir", SHIM_DIR,',
  H + "test_a_python_under_tmp_is_not_hidden_by_the_sandboxes_tmp"),
 ("venv via shim first", "tandem/envs/coding/sandbox/isolation.py", 'first = f"{bindir}:{SHIM_DIR}" if own else f"{SHIM_DIR}:{bindir}"',
  'first = f"{SHIM_DIR}:{bindir}"', H + "test_a_python_under_tmp_is_not_hidden_by_the_sandboxes_tmp"),
 ("no self-check", "tandem/envs/coding/grading.py", "                grader.self_check()" + NL, "                pass" + NL,
  H + "test_a_python_without_pytest_is_refused_before_the_first_rollout"),
 ("infra failure raises at once", "tandem/envs/coding/grading.py", "        runtime.infra_failed(err)  # raises once failures repeat" + NL,
  "        raise err" + NL, H + "test_a_sandbox_failure_costs_one_sample_and_repeats_stop_the_run"),
 ("RunFatal swallowed", "tandem/rollout/scoring.py", "    except RunFatal:  # the plug-in asks to stop the run (e.g. a sandbox that keeps failing)" + NL + "        raise" + NL,
  "", "tests/test_plugin_edges.py::test_a_reward_that_asks_to_stop_the_run_is_not_turned_into_a_zero"),
 ("loader keeps SIGPIPE ignored", "tandem/envs/coding/sandbox/inside/seccomp_exec.py", "        signal.signal(sig, signal.SIG_DFL)", "        pass",
  "tests/test_sandbox.py::test_output_is_bounded_while_reading"),
 # issue 34 round 2 (the red team's findings): each defence, one line broken
 ("kept equality not exposing", "tandem/envs/coding/exposure.py", "        _kept_equality(c, names, host, out.reasons)", "        pass",
  F + "test_a_forger_that_reads_the_repository_scores_zero[unshare-kept_equality]"),
 ("round trips not exposing", "tandem/envs/coding/exposure.py", "        if pair and (c.k is None or c.k in broken):", "        if False:",
  F + "test_a_forger_that_reads_the_repository_scores_zero[unshare-round_trip]"),
 ("sandbox constants no echo", "tandem/envs/coding/exposure.py",
  "        echoes += echoes_of(tree, skip=references)  # R of a reference site is not in a graded copy",
  "        echoes += []", F + "test_a_forger_that_reads_the_repository_scores_zero[unshare-inverse_pair]"),
 ("uniform transforms unchecked", "tandem/envs/coding/exposure.py", "    _uniform_transforms(sites, buggy, required, tests, out.reasons)",
  "    pass", F + "test_a_forger_that_reads_the_repository_scores_zero[unshare-uniform_transform]"),
 ("issue text no echo", "tandem/envs/coding/exposure.py",
  "    out = Exposure(tuple(_distinct(echoes)), stated=stated_values(statement))",
  "    out = Exposure(tuple(_distinct(echoes)))", F + "test_a_forger_that_reads_the_issue_scores_zero[unshare]"),
 ("issue text not analysed", "tandem/envs/coding/grading_plan.py", "list(task.tests),\n                       task.problem_statement, buggy.own)",
  'list(task.tests),\n                       "", buggy.own)', F + "test_a_forger_that_reads_the_issue_scores_zero[unshare]"),
 ("R left in graded copies", "tandem/envs/coding/instrument.py", 'f", ({r}))" if r is not None and with_references else ")"',
  'f", ({r}))" if r is not None else ")"', "tests/test_host_checks.py::test_split_keeps_expectations_out_and_lines_in_place"),
 ("no confirming run", "tandem/envs/coding/grading_plan.py", "    if _refuse_failing(plan, task, run, confirm,",
  "    if False and _refuse_failing(plan, task, run, confirm,",
  "tests/test_host_checks.py::test_forms_without_twins_are_graded_by_the_host_or_refused[unshare]"),
 ("judged in the grader's process", "tandem/envs/coding/grading.py",
  "        verdict = judge_isolated(plan.judged_ids(task.tests), run.side, run.returncode, run.output," + NL
  + "                                 plan.sites, plan.required, narrower=plan.narrower, must_raise=plan.must_raise)",
  "        from tandem.envs.coding.verdict import judge, parse_stream as parse" + NL
  + "        verdict = judge(plan.judged_ids(task.tests), parse(run.side, plan.sites), run.returncode," + NL
  + "                        run.output, plan.sites, plan.required, narrower=plan.narrower, must_raise=plan.must_raise)",
  F + "test_a_hash_flood_costs_the_grading_thread_nothing[unshare]"),
 ("judging child unlimited", "tandem/envs/coding/judging.py", "    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))" + NL, "",
  "tests/test_host_checks.py::test_records_are_judged_in_a_child_that_agrees_and_is_bounded"),
 ("decoded before matched", "tandem/envs/coding/verdict.py", "    if sites is not None and site not in sites:", "    if False:",
  F + "test_parse_stream_statuses_and_forged_records"),
 ("long messages accepted", "tandem/envs/coding/checks.py", "    if type(message) is not str or len(message) > MAX_MESSAGE:",
  "    if type(message) is not str:", F + "test_forgery_scores_zero[unshare-long_exception_message]"),
 ("expectations from graded runs", "tandem/envs/coding/verdict.py", '    if "r" in rec and not references:', "    if False:",
  F + "test_forgery_scores_zero[unshare-expectation_in_a_graded_run]"),
 ("record id unchecked", "tandem/envs/coding/verdict.py", "        if stray:  # a helper of another test file", "        if False:  #",
  F + "test_judge_flags_each_disagreement"),
 ("subclasses opaque", "tandem/envs/coding/grader_plugin/tandem_checks.py", "    return _encode_other(value, depth, budget)",
  '    return {"o": kind.__name__}',
  "tests/test_host_checks.py::test_values_of_other_types_are_judged_as_the_original_assert_judges_them"),
 ("expectation shown", "tandem/envs/coding/instrument.py", "s.op, s.expected, _one_line(e), s.places",
  "s.op, s.expected, _one_line(ast.get_source_segment(source, node) or e), s.places",
  "tests/test_host_checks.py::test_no_expectation_leaves_the_hosts_judging_code[unshare]"),
 ("restored through links", "tandem/envs/coding/graded_diff.py", "        inside(testbed, ours)  # before reading or writing", "        pass  #",
  "tests/test_sandbox_shared_state.py::test_graded_files_are_never_restored_through_a_directory_the_diff_made_a_link[unshare]"),
 ("no tamper metric", "tandem/envs/coding/coding_env.py", 'sum(bool(s.reward_info.get("tamper")) for s in samples) / len(samples)', "0.0",
  F + "test_forgery_through_the_agent_loop_is_flagged_and_the_run_goes_on"),
]
L = "tests/test_launcher.py::"
E2E_ASYNC = L + "test_two_engines_end_to_end[async-drain-terminal]"
E2E_SYNC = L + "test_two_engines_end_to_end[sync-continue-plain]"
RESUME = L + "test_resume_extends_an_oversampled_run_that_aborts"
SUITE = [
 ("README metric not logged", "tandem/orchestrator/step_row.py", '"dropped_stale": batch.dropped_stale, "recycled_groups": batch.recycled,',
  '"dropped_stale": batch.dropped_stale,', E2E_SYNC),
 ("engine ignores new weights", "tandem/engine/embedded.py", "            await self._call(lambda: copy_weights_in_place(self.model, tensors))",
  "            pass", E2E_SYNC),
 ("mismatch not measured", "tandem/losses.py", "mismatch=((old - batch.rollout_logp).abs() * mask).sum(),",
  "mismatch=0.0 * ((old - batch.rollout_logp).abs() * mask).sum(),",
  E2E_ASYNC),
 ("no drain", "tandem/weights/reload.py", [('PAUSE_MODE = {"drain": None,', 'PAUSE_MODE = {"drain": "in_place",'),
                          ('        if policy == "drain":' + NL + "            await client.wait_idle()", '        if False:' + NL + "            pass")],
  None, E2E_ASYNC),
 ("abort not gated", "tandem/weights/reload.py", 'gated = policy in ("drain", "abort")', 'gated = policy in ("drain",)', RESUME),
 ("abort read as a finish", "tandem/rollout/client.py", '            raise RolloutAborted(finish.get("message", "aborted by engine"))', "            pass",
  RESUME),
 ("resume restarts the cursor", "tandem/orchestrator/run.py",
  '                          **({k: start.cursor[k] for k in ("epoch", "position")} if start.cursor else {}))', "                          )",
  RESUME),
 ("TensorBoard drops ints", "tandem/metric_groups.py", "    return isinstance(value, (int, float)) and not isinstance(value, bool)",
  "    return isinstance(value, float)", E2E_SYNC),
 ("plain line off by one", "tandem/orchestrator/live_view.py", 'print(f"step {row[\'step\']}/{self.total} "', 'print(f"step {row[\'step\'] + 1}/{self.total} "',
  E2E_SYNC),
 ("live view ignores the terminal", "tandem/orchestrator/live_view.py", '(mode == "auto" and sys.stdout.isatty())', "False", E2E_ASYNC),
 ("watchdog never warns", "tandem/orchestrator/real_run.py", "        elif not warned and time.monotonic() - last_progress > stall_s:",
  "        elif False:", L + "test_stall_is_reported_and_sigterm_stops_a_stalled_run"),
 ("SIGTERM not handled", "tandem/orchestrator/launcher.py", "    stop_signal.install()" + NL, "",
  L + "test_stall_is_reported_and_sigterm_stops_a_stalled_run"),
 ("a dropped SIGTERM is lost", "tandem/orchestrator/loop.py", "        stop_signal.raise_if_requested()", "        pass",
  "tests/test_loop.py::test_a_sigterm_whose_exception_python_dropped_still_stops_the_run_at_the_next_step"),
 ("no shutdown at exit", "tandem/orchestrator/launcher.py", "        sup.shutdown()" + NL, "        pass" + NL, L + "test_sigint_leaves_no_child"),
 ("restarts never run out", "tandem/orchestrator/fleet.py", "        if self.restarts > self.cfg.faults.max_engine_restarts:",
  "        if False:", "tests/test_faults.py::test_an_engine_that_keeps_failing_stops_the_run"),
 ("priority ignored", "tandem/engine/batch_scheduler.py", "enqueue(self.waiting, req, by_priority=self.priority_scheduling)",
  "enqueue(self.waiting, req, by_priority=False)",
  "tests/test_engine_api.py::test_waiting_requests_are_admitted_by_priority_when_enabled"),
 ("priority leaks to the caller", "tandem/orchestrator/producer.py", "        dropped = 0" + NL,
  "        dropped = 0" + NL + "        REQUEST_PRIORITY.set(-step)  # the step's own retries first" + NL,
  "tests/test_routing.py::test_the_producer_gives_every_group_its_priority"),
 ("publish without rename", "tandem/weights/publish.py", "        os.replace(tmp, final)", "        shutil.copytree(tmp, final)",
  "tests/test_weight_sync.py::test_a_publish_stopped_or_killed_at_any_moment_never_exposes_a_partial_version"),
]
S = "tests/test_run_safety.py::"
C = "tests/test_config.py::"
SUITE += [  # never lose a run, never fail silently
 ("a used run dir is taken", "tandem/orchestrator/run_state.py", "    if not held or overwrite or replaceable:", "    if True:",
  S + "test_a_fresh_run_refuses_a_run_dir_that_holds_a_run_and_overwrite_removes_only_its_outputs"),
 ("overwrite removes the user's files", "tandem/orchestrator/run_state.py", "    for name in RUN_OUTPUTS if run_dir.exists() and describe_run(run_dir) else ():",
  "    for name in [p.name for p in run_dir.iterdir()] if run_dir.exists() and describe_run(run_dir) else ():",
  S + "test_a_fresh_run_refuses_a_run_dir_that_holds_a_run_and_overwrite_removes_only_its_outputs"),
 ("an all-failed step trains", "tandem/orchestrator/failures.py", "        if counts.samples and counts.failed == counts.samples:",
  "        if False:", S + "test_the_failure_bound_by_hand"),
 ("the failure window is never read", "tandem/orchestrator/failures.py", "        if total and failed / total > self.max_fraction:",
  "        if False:", S + "test_the_failure_bound_by_hand"),
 ("a rollout error stops the run at once", "tandem/orchestrator/producer.py", "                await self._group_failed(seq, err)",
  "                await self._fail_run(err)", S + "test_a_rollout_that_raises_drops_its_group_and_a_step_of_them_in_a_row_stops_the_run"),
 ("a stop leaves no checkpoint", "tandem/orchestrator/loop.py", "        await run.trainer.checkpoint_only(step, samples, reason)" + NL,
  "        return" + NL, S + "test_a_reward_that_always_raises_stops_the_run_and_resume_continues_after_the_fix"),
 ("a stop forgets the failed prompts", "tandem/orchestrator/loop.py",
  "        rows = [g.row_pos for g in batch.groups] + [g.row_pos for g in batch.failed_groups]", "        rows = []",
  S + "test_a_reward_that_always_raises_stops_the_run_and_resume_continues_after_the_fix"),
 ("no preflight", "tandem/orchestrator/launcher.py", "    inputs = preflight.check(cfg, load_inputs, refused)",
  "    inputs = load_inputs(cfg)", S + "test_a_missing_megatron_core_fails_before_any_child_starts"),
 ("every rollout file kept", "tandem/handoff.py", '            if int(path.stem.split("_")[1]) <= steps_done - int(keep):',
  "            if False:", S + "test_keep_rollouts_keeps_the_last_n_steps_files"),
 ("steps numbered from 0", "tandem/orchestrator/step_row.py", '    row = {"step": step + 1, ', '    row = {"step": step, ',
  S + "test_a_second_run_loses_nothing_and_overwrite_starts_afresh"),
 ("the router's budget starts at once", "tandem/orchestrator/startup.py",
  "        if self.started is None and all(p.ready_after_s is not None for p in self.after):", "        if self.started is None:",
  S + "test_startup_gates_each_child_on_its_own_budget"),
 ("lax TOML types", "tandem/config/loading.py", "json.dumps(tree), strict=True)", "json.dumps(tree), strict=False)",
  C + "test_a_toml_file_gets_strict_types"),
 ("only the first config error", "tandem/config/loading.py", "    raise ConfigError(problems[0] if len(problems) == 1 else",
  "    raise ConfigError(problems[0] if True else", C + "test_every_config_error_at_once_with_a_suggestion_for_near_misses"),
 ("TOML paths from the cwd", "tandem/config/loading.py", "        resolve_file_paths(tree, Path(path).resolve().parent)" + NL, "",
  C + "test_paths_in_a_toml_file_are_relative_to_it"),
 ("a restart spends the retries", "tandem/rollout/client.py", "                if self._fleet_down(status, body, fleet_down_since):",
  "                if False:", S + "test_a_fleet_with_no_routable_engine_is_waited_for_within_one_request_timeout"),
 ("the cache in the cwd", "tandem/paths.py", "if configured else user_cache_dir()", 'if configured else Path(".cache/tandem").resolve()',
  C + "test_the_cache_is_the_users_wherever_tandem_runs"),
]
SETS = {"defences": DEFENCES, "suite": SUITE}


P = "tests/test_producer.py::"
W = "tests/test_weight_sync.py::"
C = "tests/test_config_layout.py::"
CORE = [  # one or more mutants per core guarantee, each guarded by a fast, hand-derived test
 ("staleness: lag S+1 trained", "tandem/orchestrator/producer.py", "return step - self.key_version(group) <= self.staleness",
  "return step - self.key_version(group) <= self.staleness + 1", P + "test_staleness_at_its_edge_lag_s_plus_one_is_dropped"),
 ("admission: one group too many", "tandem/orchestrator/producer.py",
  "return ahead * self.prompts_per_step + self.slack - len(self._running) - len(self._buffer)",
  "return ahead * self.prompts_per_step + self.slack + 1 - len(self._running) - len(self._buffer)",
  P + "test_admission_rule_by_hand"),
 ("sync mode keeps a leftover running", "tandem/orchestrator/producer.py", "        if self.staleness == 0:" + NL + "            return True",
  "        if self.staleness == 0:" + NL + "            return False", P + "test_sync_oversampling_keeps_the_first_to_finish"),
 ("advantages ignore use_std_norm", "tandem/orchestrator/loop.py",
  "prepare_step(batch.samples, cfg.rollout, loss.use_std_norm, loss.advantage_baseline)",
  "prepare_step(batch.samples, cfg.rollout, True, loss.advantage_baseline)", "tests/test_loop.py::test_the_loop_gives_each_group_its_own_advantages_as_configured"),
 ("one group id per step", "tandem/orchestrator/producer.py", "s.group_id, s.prompt_index = seq, ", "s.group_id, s.prompt_index = 0, ",
  P + "test_every_group_of_a_step_has_its_own_group_id"),
 ("publish: a version deleted while listed", "tandem/weights/publish.py",
  "    try:" + NL + "        os.replace(path, hidden)" + NL + "    except FileNotFoundError:" + NL + "        return" + NL
  + "    shutil.rmtree(hidden, ignore_errors=True)", "    shutil.rmtree(path, ignore_errors=True)",
  W + "test_a_publish_stopped_or_killed_at_any_moment_never_exposes_a_partial_version[several]"),
 ("publish: manifest after listing", "tandem/weights/publish.py",
  [("        write_manifest(tmp, version, manifest_extra, known)" + NL, ""),
   ("        os.replace(tmp, final)" + NL + "    except Exception",
    "        os.replace(tmp, final)" + NL + "        write_manifest(final, version, manifest_extra, known)" + NL + "    except Exception")],
  None, W + "test_the_manifest_is_in_a_version_before_it_is_listed"),
 ("resume: requeued prompts forgotten", "tandem/orchestrator/producer.py", '"in_flight_rows": list(self._requeue) + [i for',
  '"in_flight_rows": [i for', P + "test_a_checkpoint_taken_before_the_requeued_prompts_are_readmitted_still_holds_them"),
 ("resume: in-flight prompts not first", "tandem/orchestrator/producer.py",
  "index = self._requeue.popleft() if self._requeue else self.cursor.next()", "index = self.cursor.next()",
  P + "test_resume_regenerates_the_in_flight_prompts_first_none_lost_none_twice"),
 ("resume: metrics kept past the checkpoint", "tandem/orchestrator/run_state.py", 'json.loads(line)["step"] <= steps_done]',
  'json.loads(line)["step"] <= steps_done + 1]', "tests/test_run_state.py::test_resume_drops_what_the_crashed_run_wrote_after_its_checkpoint"),
 ("delta: a tensor applied unchecked", "tandem/weights/delta.py", "    verify_tensors(base, manifest)" + NL, "",
  "tests/test_weight_delta.py::test_a_delta_applied_to_the_wrong_base_is_refused_naming_the_tensor"),
 ("failures: an all-failed step trains", "tandem/orchestrator/failures.py",
  "        if counts.samples and counts.failed == counts.samples:", "        if False:",
  "tests/test_run_safety.py::test_the_failure_bound_by_hand"),
 ("run dir: a used one is taken", "tandem/orchestrator/run_state.py", "    if not held or overwrite or replaceable:", "    if True:",
  "tests/test_run_safety.py::test_a_fresh_run_refuses_a_run_dir_that_holds_a_run_and_overwrite_removes_only_its_outputs"),
 ("config: another backend's table accepted", "tandem/config/loading.py",
  "        problems += _other_backends_keys(variants, sub, value, dotted)" + NL, "",
  C + "test_a_backends_own_settings_exist_only_for_it"),
 ("config: a child reads the whole tree", "tandem/config/views.py",
  "        kept[name] = _prune(sub, tree[name]) if sub is not None and own_view else tree[name]", "        kept[name] = tree[name]",
  C + "test_each_child_receives_only_its_view"),
 ("config: environment args untyped", "tandem/env/base.py", "    if model is None:" + NL + "        return dict(args)",
  "    if True:" + NL + "        return dict(args)", C + "test_the_coding_environments_arguments_are_typed_and_named_when_wrong"),
 ("config: a moved key silently unknown", "tandem/config/renamed.py", "    now = MOVED_KEYS.get(dotted)", "    now = None",
  C + "test_every_error_is_still_reported_at_once_across_backends"),
 ("config: the trainer handed the whole tree", "tandem/orchestrator/cluster.py",
  '    view = view_path(run_dir, "trainer")', '    view = run_dir / "config.json"',
  C + "test_the_launcher_hands_each_child_its_view"),
 ("colocation: the memory saver always on", "tandem/engine/sglang_launch.py",
  'return _on_off_flag("--enable-memory-saver", "run.colocate") if cfg.colocated else []',
  'return _on_off_flag("--enable-memory-saver", "run.colocate")', "tests/test_colocation.py::test_sglang_gets_the_memory_saver_only_when_colocated"),
]
SETS = {"defences": DEFENCES, "suite": SUITE, "core": CORE, "memory": MEMORY, "moe": MOE, "tests3": TESTS3, "first_hour": FIRST_HOUR, "reward": REWARD, "load": LOAD, "eval": EVAL, "harness": HARNESS, "sglang": SGLANG, "signal": SIGNAL, "reload": RELOAD, "reward_fixes": REWARD_FIXES, "types": TYPES, "typed2": TYPED2, "expected_sides": EXPECTED_SIDES, "guesses": GUESSES, "params2": PARAMS2, "differential": DIFFERENTIAL, "baseline": BASELINE, "odds": ODDS_MUTANTS, "blind": BLIND_MUTANTS, "confined": CONFINED, "wide": WIDE, "structure": STRUCTURE}
OUTCOME = {0: "MISSED", 1: "CAUGHT"}
"""pytest's exit codes: 0 all passed (the mutant lived), 1 tests failed (caught). Anything else
(2 interrupted, 3 internal error, 4 usage error such as a test that does not exist, 5 no tests
collected) proves nothing and is an ERROR."""
SETS["oracle"] = ORACLE  # issue 46: the independent equivalence oracle (scripts/mutants_oracle.py)
SETS.update(calls=CALL_MUTANTS, calls2=CALL_IMPORT_MUTANTS, keywords=KEYWORD_MUTANTS)  # issue 46: scripts/mutants_calls*.py
SETS.update(separate=SEPARATE, edge=EDGE, hard=HARD_MUTANTS, wrong_fixes=WRONG_FIX_MUTANTS,  # issue 46, each in
            raising_values=__import__("mutants_raising_values").RAISING_VALUES)  # scripts/mutants_<set>.py


def run(name: str, rel: str, edits: list[tuple[str, str]], tests: str) -> str:
    path = ROOT / rel
    orig = text = path.read_text()
    for old, new in edits:
        if text.count(old) != 1:
            print(f"STALE  | {name} | {rel} | pattern found {text.count(old)} times", flush=True)
            return "STALE"
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
    outcome = OUTCOME.get(r.returncode, "ERROR")
    print(f"{outcome:6s} | {name} | {last} | {failed[:1]} | {why}", flush=True)
    return outcome


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(SETS)}}} [--table FILE] [mutation name ...]")
    which, rest = argv[0], argv[1:]
    table = None
    if rest[:1] == ["--table"]:
        table, rest = Path(rest[1]), rest[2:]
    started, rows = time.monotonic(), []
    for name, rel, old, new, tests in SETS[which]:
        if tests is not None and (not rest or name in rest):
            # One (old, new) replacement, or a list of them with new = None.
            rows.append((name, rel, tests, run(name, rel, old if new is None else [(old, new)], tests)))
    caught = sum(r[3] == "CAUGHT" for r in rows)
    took = time.monotonic() - started
    print(f"{which}: {caught} / {len(rows)} caught in {took:.0f} s", flush=True)
    if table is not None:
        lines = [f"# Mutants: `python scripts/mutate.py {which}`", "",
                 f"{caught} of {len(rows)} caught in {took:.0f} s on this machine's 2 cores.", "",
                 "| mutant | file | guarding test | outcome |", "|---|---|---|---|"]
        lines += [f"| {n} | `{f}` | `{t}` | {o} |" for n, f, t, o in rows]
        table.write_text("\n".join(lines) + "\n")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
