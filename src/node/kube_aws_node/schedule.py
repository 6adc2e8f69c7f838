"""Which releases start now: the reconciler's scheduling decision.

Invariant: `decide` is a pure function of the plan and the run's state. A
release starts when every dependency is `ready`, every bootstrap release is
finished if it is not one itself, and a slot is free (at most `concurrency`
run at once), in plan order; a release whose dependency failed, was skipped
or is not in the plan is skipped at once, with the dependency and its phase.
"""
from collections import namedtuple

Release = namedtuple("Release", "name depends_on bootstrap")
Decision = namedtuple("Decision", "start skip")  # start: [name]; skip: [(name, dep, dep_phase)]

DONE = "ready"


def decide(releases, finished, running, concurrency):
    """releases: [Release] in plan order; finished: {name: phase}; running: set of names."""
    known = set(r.name for r in releases)
    bootstrap_pending = any(r.bootstrap and r.name not in finished for r in releases)
    slots = max(1, int(concurrency)) - len(running)
    start, skip = [], []
    for r in releases:
        if r.name in finished or r.name in running:
            continue
        blocked = None
        waiting = False
        for d in r.depends_on:
            if d not in known:
                blocked = (d, "not installed")
                break
            phase = finished.get(d)
            if phase is None:
                waiting = True
            elif phase != DONE:
                blocked = (d, phase)
                break
        if blocked is not None:
            skip.append((r.name, blocked[0], blocked[1]))
            continue
        if waiting or (bootstrap_pending and not r.bootstrap):
            continue
        if slots > 0:
            start.append(r.name)
            slots -= 1
    return Decision(start, skip)
