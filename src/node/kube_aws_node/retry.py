"""The node program's two loops: `retry` (a call that fails, tried again)
and `poll` (a condition, checked again until a deadline).

Invariants: `retry` makes at most `attempts` tries; after try i (1-based) it
waits `delay * i` seconds; an error `final(e)` says retrying cannot change is
raised at once; the last error is raised, never swallowed. `poll` checks at
least once, and once more after the deadline has passed, never after that.
"""
import time


def retry(fn, attempts, delay, final=None, sleep=time.sleep, on_retry=None):
    attempts = max(1, int(attempts))
    for i in range(1, attempts + 1):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - the caller's predicate decides
            if i >= attempts or (final is not None and final(e)):
                raise
            if on_retry is not None:
                on_retry(i, e)
            sleep(delay * i)
    raise AssertionError("unreachable")


def poll(check, limit, interval, sleep=None, clock=None):
    """Calls `check()` every `interval` seconds until it returns a true
    value, which it returns, or until `limit` seconds after the first call
    have passed: then None (the caller says what did not happen, from what
    its last check saw). `sleep` and `clock` default to time's, looked up at
    the call (a test's patch of time.sleep applies)."""
    sleep, clock = sleep or time.sleep, clock or time.time
    end = clock() + limit
    while True:
        got = check()
        if got:
            return got
        if clock() >= end:
            return None
        sleep(interval)
