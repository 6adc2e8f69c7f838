#!/usr/bin/env python3
"""Where `make test`'s time goes: phase stamps, per-test times, a summary.

    test-times.py reset                 empties the times directory
    test-times.py phase NAME -- CMD...  runs CMD, records NAME's start, end and exit code
    test-times.py run BIN ARGS...       cargo's test runner (the Makefile passes it with
                                        --config target.'cfg(all())'.runner)
    test-times.py summary               prints the summary and writes it to summary.txt

The directory is $KUBE_AWS_TEST_TIMES (the Makefile sets it to
${CARGO_TARGET_DIR:-target}/test-times). Python's standard library only.

`run` runs a libtest binary with `-Z unstable-options --format json
--report-time` (RUSTC_BOOTSTRAP=1 in its environment: libtest accepts the
unstable options when that is set at run time, stable toolchains included),
prints what libtest's own output would (a line per test, each failure's
output under "failures:", the result line) and keeps each test's start and
end (as seen here, when its event arrives) and libtest's own time in
BIN's file. Its exit status is the binary's (a signal is raised again, so
cargo reports it as usual). When the binary does not take those options (no
JSON suite event and a failed exit), it runs the binary again with the
arguments as given and its own output: the times are then missing from the
summary, never the tests. With KUBE_AWS_TEST_TIMES unset or `off`, or with
arguments that choose an output of their own (--list, --format, -Z, ...),
it only runs the binary.

A test's time is its thread's, from its start to its end: a test waiting
for a shared fixture's lock counts the wait. A module's span runs from its
first test's start to its last test's end; with several test threads,
modules overlap, so the spans add up to more than the binary's wall time.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

PLAIN_ARGS = {"--list", "--format", "-Z", "--help", "-h", "--bench", "--logfile", "-q", "--quiet",
              "--report-time", "--show-output"}


def times_dir():
    d = os.environ.get("KUBE_AWS_TEST_TIMES", "")
    return "" if d in ("", "off") else d


def exit_like(rc):
    """Exits with `rc`, a subprocess's return code; a signal is raised again."""
    if rc < 0:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
        rc = 128 - rc
    sys.exit(rc)


def say(msg):
    sys.stderr.write("test-times: %s\n" % msg)
    sys.stderr.flush()


# ------------------------------------------------------------------ phase

def phase(argv):
    if len(argv) < 3 or argv[1] != "--":
        say("usage: test-times.py phase NAME -- CMD...")
        return 2
    name, cmd = argv[0], argv[2:]
    start = time.time()
    try:
        rc = subprocess.call(cmd)
    except OSError as e:
        say("%s: %s" % (cmd[0], e.strerror))
        rc = 127
    d = times_dir()
    if d:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "phases.tsv"), "a") as f:
            f.write("%s\t%.3f\t%.3f\t%d\n" % (name, start, time.time(), rc))
    exit_like(rc)


# ------------------------------------------------------------------ run

def label_of(binary):
    """it-0123456789abcdef -> it"""
    return re.sub(r"-[0-9a-f]{16}$", "", os.path.basename(binary))


def result_path(d, label):
    os.makedirs(d, exist_ok=True)
    n, path = 1, os.path.join(d, "run-%s.json" % label)
    while os.path.exists(path):
        n += 1
        path = os.path.join(d, "run-%s-%d.json" % (label, n))
    return path


class Libtest(object):
    """Prints libtest's events the way its pretty output does."""

    def __init__(self, out):
        self.out = out
        self.t0 = time.time()
        self.started = {}
        self.tests = []
        self.failures = []
        self.suite_started = False
        self.suite_done = False

    def write(self, text):
        self.out.write(text)
        self.out.flush()

    def event(self, ev):
        kind, what = ev.get("type"), ev.get("event")
        now = time.time() - self.t0
        if kind == "suite" and what == "started":
            self.suite_started = True
            self.write("\nrunning %d test%s\n" % (ev.get("test_count", 0), "" if ev.get("test_count") == 1 else "s"))
        elif kind == "suite":
            self.suite_done = True
            if self.failures:
                self.write("\nfailures:\n\n")
                for name, text in self.failures:
                    if text:
                        self.write("---- %s stdout ----\n%s\n" % (name, text))
                self.write("\nfailures:\n")
                for name, _ in self.failures:
                    self.write("    %s\n" % name)
            self.write("\ntest result: %s. %d passed; %d failed; %d ignored; %d measured; %d filtered out; "
                       "finished in %.2fs\n\n" % (
                           "ok" if what == "ok" else "FAILED", ev.get("passed", 0), ev.get("failed", 0),
                           ev.get("ignored", 0), ev.get("measured", 0), ev.get("filtered_out", 0),
                           ev.get("exec_time", 0.0)))
        elif kind == "test" and what == "started":
            self.started[ev.get("name", "")] = now
        elif kind == "test" and what == "timeout":
            self.write("test %s has been running for over 60 seconds\n" % ev.get("name", ""))
        elif kind == "test":
            name = ev.get("name", "")
            secs = ev.get("exec_time")
            shown = {"ok": "ok", "failed": "FAILED", "ignored": "ignored"}.get(what, what)
            if what == "ignored" and ev.get("message"):
                shown += ", " + ev["message"]
            self.write("test %s ... %s%s\n" % (name, shown, " <%.3fs>" % secs if secs is not None else ""))
            if what == "failed":
                text = ev.get("stdout", "")
                if ev.get("message"):
                    text = (text + "\n" if text else "") + "note: " + ev["message"]
                self.failures.append((name, text))
            rec = {"name": name, "event": what, "start": self.started.pop(name, None), "end": now,
                   "exec_time": secs}
            if what == "failed":
                rec["why"] = why_tail(ev)
            self.tests.append(rec)
        elif kind == "bench":
            self.write("test %s ... bench: %s ns/iter (+/- %s)\n" % (
                ev.get("name", ""), ev.get("median", "?"), ev.get("deviation", "?")))


# How much of a failed test's output the summary repeats at its end: CI shows
# the tail of `make test`, and libtest's own "failures:" section sits above the
# summary, where a long run's output is cut.
WHY_LINES = 30
WHY_LINE_CHARS = 400


def why_tail(ev):
    """What a failed test printed from its (last) panic on, or its last lines, each line cut short."""
    text = ev.get("stdout", "") or ""
    if ev.get("message"):
        text = (text + "\n" if text else "") + "note: " + ev["message"]
    lines = text.rstrip("\n").split("\n")
    panics = [i for i, l in enumerate(lines) if "panicked at" in l]
    lines = lines[panics[-1]:panics[-1] + WHY_LINES] if panics else lines[-WHY_LINES:]
    return [l if len(l) <= WHY_LINE_CHARS else l[:WHY_LINE_CHARS] + " [...]" for l in lines]


def run(argv):
    if not argv:
        say("usage: test-times.py run BIN ARGS...")
        return 2
    binary, args = argv[0], argv[1:]
    d = times_dir()
    plain = [binary] + args
    if not d or any(a in PLAIN_ARGS or a.startswith("--format=") or a.startswith("-Z") for a in args):
        os.execv(binary, plain)
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    t = Libtest(sys.stdout)
    try:
        p = subprocess.Popen(plain + ["-Z", "unstable-options", "--format", "json", "--report-time"],
                             stdout=subprocess.PIPE, env=env, universal_newlines=True, errors="replace")
    except OSError as e:
        say("%s: %s" % (binary, e.strerror))
        return 127
    for line in p.stdout:
        ev = None
        if line.startswith("{"):
            try:
                ev = json.loads(line)
            except ValueError:
                ev = None
        if isinstance(ev, dict) and ev.get("type") in ("suite", "test", "bench"):
            t.event(ev)
        else:
            t.write(line)  # a test's own output (--nocapture) or anything else
    rc = p.wait()
    end = time.time()
    if not t.suite_started:
        if rc != 0:
            say("%s did not run with --format json (exit %d); running it again with libtest's own output, "
                "without per-test times" % (label_of(binary), rc))
            os.execv(binary, plain)
        return rc
    if not t.suite_done:
        running = sorted(t.started)
        say("%s ended (%s) before its tests finished%s" % (
            label_of(binary), "signal %d" % -rc if rc < 0 else "exit %d" % rc,
            "; still running: " + ", ".join(running) if running else ""))
        for name in running:
            t.tests.append({"name": name, "event": "unfinished", "start": t.started[name], "end": end - t.t0,
                            "exec_time": None})
    try:
        with open(result_path(d, label_of(binary)), "w") as f:
            json.dump({"binary": binary, "args": args, "start": t.t0, "end": end, "exit": rc,
                       "tests": t.tests}, f)
    except OSError as e:
        say("cannot write the times: %s" % e)
    exit_like(rc)


# ------------------------------------------------------------------ summary

def secs(s):
    if s >= 60:
        return "%dm%04.1fs" % (s // 60, s % 60)
    return "%.2fs" % s if s < 10 else "%.1fs" % s


def summarize(d):
    lines = []
    phases = []
    try:
        with open(os.path.join(d, "phases.tsv")) as f:
            for row in f:
                parts = row.rstrip("\n").split("\t")
                if len(parts) == 4:
                    phases.append((parts[0], float(parts[1]), float(parts[2]), int(parts[3])))
    except OSError:
        pass
    phases.sort(key=lambda p: p[1])  # a nested phase ends, and is written, before its parent
    runs = []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        if name.startswith("run-") and name.endswith(".json"):
            try:
                with open(os.path.join(d, name)) as f:
                    r = json.load(f)
                r["label"] = name[4:-5]
                runs.append(r)
            except (OSError, ValueError):
                pass
    lines.append("== make test: where the time went ==")
    if phases:
        lines.append("")
        lines.append("%-32s %10s  %s" % ("phase", "wall", "result"))
        top = [p for p in phases if "/" not in p[0]]
        for name, start, end, rc in phases:
            depth = name.count("/")
            shown = ("  " * depth) + name.split("/")[-1]
            lines.append("%-32s %10s  %s" % (shown, secs(end - start), "ok" if rc == 0 else "FAILED (exit %d)" % rc))
        if top:
            lines.append("%-32s %10s" % ("total", secs(max(p[2] for p in top) - min(p[1] for p in top))))
    tests = []
    for r in sorted(runs, key=lambda r: r["start"]):
        done = [t for t in r["tests"] if t["event"] != "ignored"]
        if not r["tests"]:
            continue
        count = {}
        for t in r["tests"]:
            count[t["event"]] = count.get(t["event"], 0) + 1
        lines.append("")
        lines.append("test binary %s: %s in %s wall (exit %d)" % (
            r["label"], ", ".join("%d %s" % (n, e) for e, n in sorted(count.items())), secs(r["end"] - r["start"]),
            r["exit"]))
        modules = {}
        for t in done:
            took = t["exec_time"] if t["exec_time"] is not None else (
                t["end"] - t["start"] if t["start"] is not None else 0.0)
            full = "%s::%s" % (r["label"], t["name"])
            tests.append((took, full, t["event"]))
            mod = t["name"].split("::")[0] if "::" in t["name"] else "(top level)"
            m = modules.setdefault(mod, {"n": 0, "failed": 0, "sum": 0.0, "first": None, "last": 0.0})
            m["n"] += 1
            m["failed"] += t["event"] not in ("ok",)
            m["sum"] += took
            if t["start"] is not None:
                m["first"] = t["start"] if m["first"] is None else min(m["first"], t["start"])
            m["last"] = max(m["last"], t["end"])
        if modules:
            lines.append("  %-34s %5s %6s %10s %10s" % ("module (by summed test time)", "tests", "failed",
                                                       "sum", "span"))
            for mod, m in sorted(modules.items(), key=lambda kv: -kv[1]["sum"]):
                span = m["last"] - m["first"] if m["first"] is not None else 0.0
                lines.append("  %-34s %5d %6s %10s %10s" % (mod, m["n"], m["failed"] or "", secs(m["sum"]),
                                                           secs(span)))
    if tests:
        lines.append("")
        n = min(10, len(tests))
        lines.append("the slowest %s:" % ("test" if n == 1 else "%d tests" % n))
        for took, full, what in sorted(tests, key=lambda t: -t[0])[:10]:
            lines.append("  %10s  %s%s" % (secs(took), full, "" if what == "ok" else "  (%s)" % what))
    failed = [(r["label"], t) for r in sorted(runs, key=lambda r: r["start"]) for t in r["tests"] if t.get("why")]
    if failed:
        lines.append("")
        lines.append("why the failed tests failed (up to %d lines from each one's panic on; libtest's "
                     "\"failures:\" above has all of it):" % WHY_LINES)
        for label, t in failed:
            lines.append("---- %s::%s ----" % (label, t["name"]))
            lines.extend("  " + l for l in t["why"])
    if not phases and not runs:
        lines.append("(nothing recorded in %s)" % d)
    lines.append("")
    lines.append("(a test's time is its own thread's, waits for shared fixtures included; a module's span runs "
                 "from its first test's start to its last test's end, and modules overlap on the test threads)")
    return "\n".join(lines) + "\n"


def summary(argv):
    d = times_dir()
    if not d:
        say("KUBE_AWS_TEST_TIMES is not set: nothing to summarize")
        return 0
    text = summarize(d)
    sys.stdout.write("\n" + text)
    try:
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "summary.txt"), "w") as f:
            f.write(text)
        sys.stdout.write("(also in %s)\n" % os.path.join(d, "summary.txt"))
    except OSError as e:
        say("cannot write the summary: %s" % e)
    return 0


def reset(argv):
    d = times_dir()
    if d and os.path.isdir(d):
        for name in os.listdir(d):
            if name == "phases.tsv" or name == "summary.txt" or (name.startswith("run-") and name.endswith(".json")):
                os.unlink(os.path.join(d, name))
    return 0


def main(argv):
    cmds = {"phase": phase, "run": run, "summary": summary, "reset": reset}
    if not argv or argv[0] not in cmds:
        say("usage: test-times.py {reset | phase NAME -- CMD... | run BIN ARGS... | summary}")
        return 2
    return cmds[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
