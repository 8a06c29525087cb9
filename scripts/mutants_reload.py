"""The `reload` set of scripts/mutate.py: a weight sync that meets a dropped connection, one line each."""

R = "tests/test_reload_retry.py::"
RELOAD = [  # tandem/weights/reload.py: a dropped connection is tried again, a bounded number of times; a dead engine is not
 ("a dropped connection fails the sync at once", "tandem/weights/reload.py", "    for attempt in range(1, RELOAD_TRIES):",
  "    for attempt in range(1, 1):", R + "test_a_sync_goes_on_when_an_engine_drops_its_pause"),
 ("a restarted engine's dropped reload ends the run", "tandem/weights/reload.py", "    for attempt in range(1, RELOAD_TRIES):",
  "    for attempt in range(1, 1):", R + "test_a_restarted_engine_that_drops_its_first_reload_comes_back"),
 ("one try more than the bound", "tandem/weights/reload.py", "    for attempt in range(1, RELOAD_TRIES):",
  "    for attempt in range(1, RELOAD_TRIES + 1):", R + "test_an_engine_that_keeps_dropping_fails_the_sync_after_bounded_tries"),
 ("a dead engine tried again", "tandem/weights/reload.py", "DROPPED = (httpx.ReadError,",
  "DROPPED = (httpx.ConnectError, httpx.ReadError,", R + "test_an_engine_nobody_listens_for_is_not_tried_again"),
]
