"""helm_release.stuck_container, last_words and container_problem: a failed
release's crashing container named from its pods' JSON
(recorded/pods-crashloop.json: `kubectl get pods -o json` of metrics-server
given a flag it does not know, as tests/it/real_node/addons/broken.rs
`a_broken_metrics_server_is_named_by_the_reconciler_and_up_wait_exits_3`
printed it on the real-node bed; until stop 51 in tests/it/real_node.rs as
`..._names_a_broken_addon_and_up_wait_exits_3`), and Reconciler.diagnose, the thin call that reads the pods and the
crashed container's previous log with kubectl."""
import copy
import json
import os
import shutil
import tempfile
import unittest

import helpers  # noqa: F401 - puts the package on sys.path
from kube_aws_node import bundle, helm_release, reconcile
from kube_aws_node.helm_release import container_problem, last_words, stuck_container

HERE = os.path.dirname(os.path.abspath(__file__))


def recorded():
    with open(os.path.join(HERE, "recorded", "pods-crashloop.json"), encoding="utf-8") as f:
        return json.load(f)


# The end of metrics-server's output for an unknown flag: cobra's error and
# usage, then main's panic with the goroutine's stack (its last three lines
# as the real-node test's run showed them).
LOG = """Error: unknown flag: --no-such-flag
Usage:
  metrics-server [flags]

      --tls-min-version string    Minimum TLS version supported.
      --tls-private-key-file string    File containing the default x509 private key.

panic: unknown flag: --no-such-flag

goroutine 1 [running]:
main.main()
	sigs.k8s.io/metrics-server@v0.8.0/cmd/metrics-server/metrics-server.go:37 +0x88
"""


class StuckContainer(unittest.TestCase):
    def test_a_crash_looping_container_is_named_and_its_log_is_asked_for(self):
        s = stuck_container(recorded())
        self.assertEqual(s["namespace"], "kube-system")
        self.assertEqual(s["pod"], "metrics-server-644fbbc657-6k9tr")
        self.assertEqual(s["container"], "metrics-server")
        self.assertEqual(s["reason"], "CrashLoopBackOff")
        # No termination message (terminationMessagePolicy File, nothing
        # written): the last exit, and the log says more.
        self.assertEqual(s["message"], "exit code 2 (Error)")
        self.assertTrue(s["needsLog"])
        self.assertEqual(s["restarts"], 1)

    def test_the_line_carries_the_logs_last_words(self):
        line = container_problem(stuck_container(recorded()), LOG)
        self.assertTrue(line.startswith(
            "pod kube-system/metrics-server-644fbbc657-6k9tr container metrics-server: CrashLoopBackOff: "), line)
        self.assertTrue(line.endswith("panic: unknown flag: --no-such-flag"), line)
        self.assertEqual(line.count(" | "), 2, line)

    def test_without_a_log_the_last_exit_is_said(self):
        line = container_problem(stuck_container(recorded()), "")
        self.assertEqual(line, "pod kube-system/metrics-server-644fbbc657-6k9tr container metrics-server: "
                               "CrashLoopBackOff: exit code 2 (Error)")

    def test_a_termination_message_is_the_containers_own_word(self):
        pods = recorded()
        c = pods["items"][0]["status"]["containerStatuses"][0]
        c["lastState"]["terminated"]["message"] = "open /etc/config.yaml: no such file\n"
        s = stuck_container(pods)
        self.assertFalse(s["needsLog"])
        self.assertTrue(container_problem(s, LOG).endswith(
            "CrashLoopBackOff: open /etc/config.yaml: no such file"))

    def test_an_image_that_cannot_be_pulled_gives_the_pulls_message(self):
        pods = recorded()
        c = pods["items"][0]["status"]["containerStatuses"][0]
        c["lastState"] = {}
        c["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                  "message": 'Back-off pulling image "example.invalid/x:1"'}}
        self.assertEqual(container_problem(stuck_container(pods)),
                         'pod kube-system/metrics-server-644fbbc657-6k9tr container metrics-server: '
                         'ImagePullBackOff: Back-off pulling image "example.invalid/x:1"')

    def test_starting_and_running_containers_are_not_stuck(self):
        pods = recorded()
        c = pods["items"][0]["status"]["containerStatuses"][0]
        for state in ({"waiting": {"reason": "ContainerCreating"}}, {"waiting": {"reason": "PodInitializing"}},
                      {"running": {"startedAt": "2026-12-04T04:10:21Z"}}, {}):
            c["state"] = state
            self.assertIsNone(stuck_container(pods), state)
        self.assertIsNone(stuck_container({"items": []}))
        self.assertIsNone(stuck_container({"kind": "Status"}))
        self.assertIsNone(stuck_container([]))

    def test_an_init_container_comes_first_and_pods_keep_their_order(self):
        pods = recorded()
        second = copy.deepcopy(pods["items"][0])
        second["metadata"]["name"] = "metrics-server-644fbbc657-zzzzz"
        pods["items"].append(second)
        self.assertEqual(stuck_container(pods)["pod"], "metrics-server-644fbbc657-6k9tr")
        st = pods["items"][0]["status"]
        st["initContainerStatuses"] = [{"name": "init", "restartCount": 0, "lastState": {},
                                        "state": {"waiting": {"reason": "CreateContainerConfigError",
                                                              "message": 'secret "creds" not found'}}}]
        self.assertEqual(container_problem(stuck_container(pods)),
                         'pod kube-system/metrics-server-644fbbc657-6k9tr container init: '
                         'CreateContainerConfigError: secret "creds" not found')


class LastWords(unittest.TestCase):
    def test_a_go_panic_ends_at_its_message(self):
        self.assertEqual(last_words(LOG, lines=1), "panic: unknown flag: --no-such-flag")
        # A panic line the program only logged, with no stack after it, is just a line.
        self.assertEqual(last_words("panic: quoted\nstill running\n"), "panic: quoted | still running")

    def test_bounded_in_lines_and_characters(self):
        self.assertEqual(last_words("a\n\n b \nc\nd\n"), "b | c | d")
        self.assertEqual(last_words("a\nb", lines=1), "b")
        long = last_words("x" * 1000)
        self.assertEqual(len(long), helm_release.LOG_CHARS)
        self.assertTrue(long.startswith("...x"))
        self.assertEqual(last_words(""), "")


class Diagnose(unittest.TestCase):
    """The thin call: kubectl answers from recorded output."""

    class Fake(reconcile.Reconciler):
        def __init__(self, pods, log, log_code=0):
            self.pods, self.logtext, self.log_code, self.calls = pods, log, log_code, []

        def run(self, args, out=None):
            self.calls.append(args)
            if args[3] == "get":
                return 0, json.dumps(self.pods)
            return self.log_code, self.logtext

    R = {"name": "metrics-server", "namespace": "kube-system"}

    def test_reads_the_releases_pods_and_the_crashed_containers_previous_log_once_per_restart(self):
        f = self.Fake(recorded(), LOG)
        seen = {}
        found = f.diagnose(self.R, seen)
        self.assertEqual(found.reason, "CrashLoopBackOff")
        line = found.line
        self.assertEqual(line, "pod kube-system/metrics-server-644fbbc657-6k9tr container metrics-server: "
                               "CrashLoopBackOff: --tls-min-version string    Minimum TLS version supported. | "
                               "--tls-private-key-file string    File containing the default x509 private key. | "
                               "panic: unknown flag: --no-such-flag")
        self.assertEqual(f.calls[0], ["kubectl", "-n", "kube-system", "get", "pods", "-l",
                                      "app.kubernetes.io/instance=metrics-server", "-o", "json"])
        self.assertEqual(f.calls[1], ["kubectl", "-n", "kube-system", "logs", "metrics-server-644fbbc657-6k9tr",
                                      "-c", "metrics-server", "--previous", "--tail=30"])
        self.assertEqual(f.diagnose(self.R, seen).line, line)
        self.assertEqual(len(f.calls), 3)  # the same restart: its log is not read again
        f.pods["items"][0]["status"]["containerStatuses"][0]["restartCount"] = 2
        f.diagnose(self.R, seen)
        self.assertEqual(len(f.calls), 5)

    def test_a_log_that_cannot_be_read_leaves_the_last_exit_and_is_asked_for_again(self):
        f = self.Fake(recorded(), "Error from server: remote error: tls: internal error", 1)
        seen = {}
        self.assertTrue(f.diagnose(self.R, seen).line.endswith("CrashLoopBackOff: exit code 2 (Error)"))
        # The kubelet's serving certificate approved: the same restart's log is read at the next look.
        f.logtext, f.log_code = LOG, 0
        self.assertTrue(f.diagnose(self.R, seen).line.endswith("panic: unknown flag: --no-such-flag"))
        self.assertEqual(sum(1 for c in f.calls if "logs" in c), 2)

    def test_no_pods_or_no_answer_is_none(self):
        self.assertIsNone(self.Fake({"items": []}, "").diagnose(self.R, {}))
        self.assertIsNone(self.Fake("not json", "").diagnose(self.R, {}))


class RunWatching(unittest.TestCase):
    """The watch runs while the command does, and the command's output is its answer."""

    def test_the_watch_runs_every_poll_interval_while_the_command_runs(self):
        r = reconcile.Reconciler.__new__(reconcile.Reconciler)
        r.env, r.poll = dict(os.environ), 1
        ticks = []
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "out.log")
            code, text = r.run_watching(["sh", "-c", "sleep 2.5; echo waited; exit 3"], out,
                                        lambda: ticks.append(1))
            self.assertEqual((code, text), (3, "waited\n"))
            self.assertGreaterEqual(len(ticks), 2)
            self.assertEqual(r.run_watching(["/nonexistent/helm"], out, lambda: None)[0], 127)


class InstallNamesTheStuckContainer(unittest.TestCase):
    """Reconciler.install: helm fails (--atomic has removed the pods by then);
    the line the watch saw while helm waited leads the failure's message."""

    class Install(reconcile.Reconciler):
        def __init__(self, tmp):
            self.log = lambda *a: None
            self.scratch = self.addons = tmp
            self.helm, self.helm_major, self.attempts, self.delay = "helm", 3, 3, 0
            self.pods = recorded()
            self.helm_runs = 0
            self.logged = []
            self.log = lambda line, name=None: self.logged.append(line)

        def status(self, name, phase, message=""):
            pass

        def aws(self, args):
            shutil.copy(os.path.join(self.scratch, "chart.tgz"), args[-1])

        def run(self, args, out=None):
            if args[:4] == ["kubectl", "-n", "kube-system", "get"] and "json" in args:
                return 0, json.dumps(self.pods)
            if args[:4] == ["kubectl", "-n", "kube-system", "logs"]:
                return 0, LOG
            return (1, "Error: release: not found\n") if args[1:2] == ["history"] else (0, "")

        def run_watching(self, args, out, watch):
            self.helm_runs += 1
            watch()  # helm waits: the pods crash-loop
            self.pods = {"items": []}  # --atomic uninstalled the release
            with open(out, "w") as f:
                f.write("Error: release metrics-server failed, and has been uninstalled due to atomic being set: "
                        "context deadline exceeded\n")
            return 1, ""

    def install(self, pods=None):
        """(phase, message, the Install) of metrics-server, three attempts
        allowed, its pods as `pods` (the recorded crash loop by default)."""
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "chart.tgz"), "wb") as f:
                f.write(b"chart")
            r = dict(name="metrics-server", namespace="kube-system", locked=True, chartObject="s3://b/c.tgz",
                     sha256=bundle.sha256_file(os.path.join(d, "chart.tgz")), timeoutSeconds=60,
                     valuesFile="values/metrics-server.yaml")
            inst = self.Install(d)
            if pods is not None:
                inst.pods = pods
            phase, message = inst.install(r)
        return phase, message, inst

    def test_the_failure_message_starts_with_the_container(self):
        phase, message, _ = self.install()
        self.assertEqual(phase, "failed")
        first, second = message.splitlines()[:2]
        self.assertEqual(first, "pod kube-system/metrics-server-644fbbc657-6k9tr container metrics-server: "
                                "CrashLoopBackOff: --tls-min-version string    Minimum TLS version supported. | "
                                "--tls-private-key-file string    File containing the default x509 private key. | "
                                "panic: unknown flag: --no-such-flag")
        self.assertEqual(second, "helm failed for metrics-server:")
        self.assertIn("uninstalled due to atomic being set", message)

    def test_a_crash_loop_is_not_tried_again_in_the_same_run(self):
        # Three attempts allowed; the first saw the container crash-loop:
        # helm ran once, and the log says why no second attempt came.
        phase, _, inst = self.install()
        self.assertEqual((phase, inst.helm_runs), ("failed", 1))
        self.assertTrue(any(line.startswith("not tried again in this run: CrashLoopBackOff")
                            for line in inst.logged), inst.logged)

    def test_an_image_pull_error_is_tried_again(self):
        # A registry that did not answer may answer the next attempt.
        pods = recorded()
        c = pods["items"][0]["status"]["containerStatuses"][0]
        c["state"] = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
        c["lastState"] = {}
        phase, message, inst = self.install(pods)
        self.assertEqual((phase, inst.helm_runs), ("failed", 3))
        self.assertIn("ImagePullBackOff: Back-off pulling image", message)

    def test_only_the_releases_own_faults_end_the_attempts(self):
        cannot = helm_release.retry_cannot_help
        self.assertTrue(cannot(helm_release.Problem("CrashLoopBackOff", "x")))
        self.assertTrue(cannot(helm_release.Problem("InvalidImageName", "x")))
        for reason in ("ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", ""):
            self.assertFalse(cannot(helm_release.Problem(reason, "x")), reason)
        self.assertFalse(cannot(None))


if __name__ == "__main__":
    unittest.main()
