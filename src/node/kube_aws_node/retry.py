"""The one retry loop of the node program.

Invariant: at most `attempts` tries; after try i (1-based) it waits
`delay * i` seconds; an error `final(e)` says retrying cannot change is
raised at once; the last error is raised, never swallowed.
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
