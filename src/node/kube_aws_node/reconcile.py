"""`kube-aws-node reconcile`: the addon reconciler, run by
kube-aws-addons.service from its timer on every controller.

It reads the control-plane stack's plan pointer (the SSM parameter named in
/etc/kube-aws/addons/reconciler.json: the addon bundle's S3 URI and sha256),
the bundle's plan, and the installed record (installedURI, S3: which release
is installed at which wait condition, for which plan). Any error reading the
record other than "there is none" fails the run: nothing is installed or
uninstalled on a guess.

Every run, on every controller: each release of the current plan that the
record shows at the plan's wait condition, not yet known to be signalled, is
signalled SUCCESS if its wait condition still waits (signals come from the
recorded state, not from the process that installed it, so a plan whose
installer died is still signalled). The plan is done when the record is of
this plan, lists every release at its wait condition and nothing the plan
dropped, and names this controller's secrets version; after a run with
failures it is tried again once its `retryAfter` has passed.

Otherwise the controller that takes the installer's lease (lease.py) installs
it, renewing the lease while it runs and releasing it however the run ends:
it decrypts the plugin secrets again (secrets.py: the store is tmpfs, empty
once the node restarts) and unpacks the bundle with them into a private
directory on tmpfs (/run/kube-aws/addons/<sha>, removed after the run, also
on failure); waits for /readyz; Helm v2 mode: installs Tiller and waits for
it; installs the pinned helm client (sha256 checked); then the releases. A release the
record shows at its wait condition is left alone. The others start as soon as
their dependencies are ready, up to the plan's `concurrency` at once
(schedule.py decides): bootstrap addons first; then the plugin manifests and
the Ready-node gate; each release fetches its chart from S3 (sha256 checked),
is first undone if a stopped installer left it pending (unstick), then
runs `helm upgrade --install --atomic --wait` (with its replicas value at 0
while `kube-aws update` pauses its Deployments, which a failed attempt's
rollback scales back to 0: paused_overrides, repause_command; a failed
install is uninstalled, a failed upgrade rolled back to the last deployed
revision), waits for its CRDs to be Established, is recorded, writes one
status object to S3 and signals its wait condition (cfn.py). A failed release's dependants
are skipped with the reason. Releases the record lists that this plan no
longer does are uninstalled and struck from the record. The record is
written after each release (conditional on its ETag), so a controller that
takes over an expired lease resumes rather than restarts, and a plan that
CloudFormation rolls back to is applied again (the record is of another plan).

Invariant: every command is an argument list; each release's helm output
goes to its own file and its log lines carry its name, so nothing
interleaves mid-line; every message leaving the node is blanked of secrets;
filled-in values exist only on tmpfs; the record is written only by the
lease holder, each write conditional on the ETag of the last one read or
written.
"""
import collections
import concurrent.futures
import datetime
import json
import os
import shutil
import signal as posix_signal
import socket
import subprocess
import sys
import tarfile
import threading
import time

from . import bundle, cfn, jsonio, lease, paths, schedule, secrets, upgrade
from .awscall import Aws, AwsError, listed_object
from .console import Console
from .retry import poll, retry

DEFAULT_CONCURRENCY = 4
# After a run with failures, the same plan is tried again this long after it.
DEFAULT_RETRY_FAILED_SECONDS = 900

DONE, LATER, INSTALL = "done", "later", "install"

# The pause `kube-aws update --wait` records on a Deployment, with the count
# it had (src/aws/autoscaler.rs PAUSED_REPLICAS_ANNOTATION), and the label
# that finds a release's Deployments (RELEASE_LABEL there).
PAUSED_REPLICAS = "kube-aws.io/paused-replicas"
RELEASE_LABEL = "app.kubernetes.io/instance"


class Fatal(Exception):
    """Nothing can be installed: every release is reported failed with this message."""


class Stop(Exception):
    """The run cannot go on (the record cannot be read or written, the lease
    was lost, the secrets or the bundle cannot be had): nothing more is done."""


# The installed record as read: its document and its ETag (None: there is none).
Record = collections.namedtuple("Record", "doc etag")


def recorded(doc):
    """{name: entry} of the record's releases."""
    return dict((r["name"], r) for r in doc.get("releases", []) if isinstance(r, dict) and r.get("name"))


def current(entry, r):
    """Whether a record entry is release `r` as the plan has it: at its wait
    condition, with the same secrets (the pointer's hash of the ciphertexts
    its values reference, src/render/cfn/release_secrets.rs): a rotated
    secret upgrades its release, and only that one."""
    return (entry or {}).get("waitCondition") == r["waitCondition"] and \
        (entry or {}).get("secrets", "") == r.get("secrets", "")


def after_restore(doc, snapshot):
    """The installed record once etcd was restored from `snapshot`: the
    releases in etcd are now the snapshot's (at its versions, or missing), so
    no entry is current any more. Every entry keeps its name and namespace
    (a release the plan has dropped since is still uninstalled) but loses its
    wait condition and secrets hash, and the plan and secrets versions are
    forgotten: the next run brings every release to the current plan with
    `helm upgrade --install`, which upgrades what the snapshot holds and
    installs what it lacks. Pure."""
    out = dict(doc)
    out["plan"] = None
    out["secretsVersions"] = []
    out.pop("retryAfter", None)
    out["restoredFrom"] = snapshot
    out["releases"] = [dict(r, waitCondition="", secrets="") for r in doc.get("releases", [])
                       if isinstance(r, dict) and r.get("name")]
    return out


def attach_secrets(releases, hashes):
    """Gives each release its secrets hash from the plan pointer (`secrets`: release → hash)."""
    hashes = hashes if isinstance(hashes, dict) else {}
    for r in releases:
        h = hashes.get(r["name"])
        if isinstance(h, str) and h:
            r["secrets"] = h


def outcome(doc, plan_sha, secrets_version, releases, now):
    """DONE, LATER (failed releases wait for retryAfter) or INSTALL: what this
    tick does with the plan, from the record alone (a pure function)."""
    if doc.get("plan") != plan_sha:
        return INSTALL
    rec = recorded(doc)
    names = set(r["name"] for r in releases)
    pending = [r["name"] for r in releases if not current(rec.get(r["name"]), r)]
    dropped = [n for n in rec if n not in names]
    if not pending and not dropped and secrets_version in doc.get("secretsVersions", []):
        return DONE
    retry_after = doc.get("retryAfter")
    if isinstance(retry_after, (int, float)) and now < retry_after:
        return LATER
    return INSTALL


def paused_overrides(release, deployments):
    """The helm arguments that keep a paused release paused through its
    upgrade: ["--set", "<replicasValue>=0"] when the plan names the release's
    replicas value and one of its live Deployments (`deployments`: the parsed
    `kubectl get deployments -o json` of the release) carries the pause that
    `kube-aws update --wait` records; else []. A pure function.

    Helm 3 upgrades an object by a three-way merge of the last release's
    manifest, the live object and the new manifest (Helm docs, "Changes since
    Helm 2", "Improved Upgrade Strategy: 3-way Strategic Merge Patches"), so
    any upgrade, a minor upgrade's bump of the autoscaler's chart among them,
    sets the live 0 of a paused Deployment back to the chart's count, even
    when both manifests have the same count, while the pools still roll
    (tests/it/helm_pause_testbed.rs shows it with the real helm). The
    record stays on the Deployment (no manifest holds it, and the merge keeps
    what only the live object has), so the resume still gives back its count;
    once the resume has removed it, the next upgrade installs the chart's
    count again."""
    value = release.get("replicasValue")
    if not value:
        return []
    items = deployments.get("items") if isinstance(deployments, dict) else None
    for d in items if isinstance(items, list) else []:
        meta = d.get("metadata") if isinstance(d, dict) else None
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict) and PAUSED_REPLICAS in annotations:
            return ["--set", "%s=0" % value]
    return []


def repause_command(release):
    """The command that scales a paused release's Deployments back to 0 after
    a failed upgrade: `--atomic` rolls the release back to its last deployed
    revision, by the same three-way merge, which puts that revision's count
    back (tests/it/helm_pause_testbed.rs). Their pause record is untouched,
    so the resume still gives back its count. A pure function."""
    return ["kubectl", "-n", release["namespace"], "scale", "deployments", "-l",
            "%s=%s" % (RELEASE_LABEL, release["name"]), "--replicas=0"]


# The reasons a waiting container gives on its way to running; any other
# reason (CrashLoopBackOff, ImagePullBackOff, ErrImagePull,
# CreateContainerConfigError, CreateContainerError, InvalidImageName...)
# names a container that does not run as it is.
STARTING = ("ContainerCreating", "PodInitializing")
# The reasons that put the fault in the release itself, its chart, image or
# values: the container ran and keeps crashing, or its image name cannot be
# parsed. A new attempt of the same `helm upgrade --install` in this run would
# fail the same way after another full timeout (three attempts of a 5-minute
# release made `up --wait` wait 15 minutes to name a bad flag), so the
# release fails after the attempt that saw it, and the plan's `retryAfter`
# tries it again later, as Flux's helm-controller does by default (its
# install and upgrade remediation retries default to 0: a failed release
# waits for the next reconciliation; fluxcd/flux2 discussion 102,
# helm-controller's HelmRelease API). A pull error (a registry that may come
# back) or a failure nothing was seen for is tried again as before.
NOT_RETRIED = ("CrashLoopBackOff", "InvalidImageName")
# The bounds of a crashed container's last words taken from its log.
LOG_LINES, LOG_CHARS = 3, 300


def stuck_container(pods):
    """The first container of a release's pods (`pods`: the parsed `kubectl
    get pods -o json`, in its order; a pod's init containers before its
    others, as they run) that waits with a reason other than starting, as
    {"namespace", "pod", "container", "reason", "message", "needsLog",
    "restarts"}, or
    None. `message` is its last termination message
    (lastState.terminated.message) when it has one; else, for a container
    that ran, its last exit ("exit code 1 (Error)"), with `needsLog` set:
    the default terminationMessagePolicy (File) writes no message unless the
    program does, so its previous log's last lines say more; else (it never
    ran: an image pull, a missing Secret) the waiting reason's own message.
    A pure function."""
    items = pods.get("items") if isinstance(pods, dict) else None
    for pod in items if isinstance(items, list) else []:
        meta = pod.get("metadata") if isinstance(pod, dict) else None
        status = pod.get("status") if isinstance(pod, dict) else None
        if not isinstance(meta, dict) or not isinstance(status, dict) or not meta.get("name"):
            continue
        for c in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
            if not isinstance(c, dict) or not c.get("name"):
                continue
            waiting = (c.get("state") or {}).get("waiting")
            reason = waiting.get("reason") if isinstance(waiting, dict) else None
            if not reason or reason in STARTING:
                continue
            last = (c.get("lastState") or {}).get("terminated")
            last = last if isinstance(last, dict) else {}
            own = str(last.get("message") or "").strip()
            if own:
                message, needs_log = own, False
            elif last:
                message, needs_log = "exit code %s (%s)" % (last.get("exitCode"), last.get("reason") or
                                                            "Terminated"), True
            else:
                message, needs_log = str(waiting.get("message") or "").strip(), False
            return {"namespace": str(meta.get("namespace") or ""), "pod": str(meta["name"]),
                    "container": str(c["name"]), "reason": str(reason), "message": message,
                    "needsLog": needs_log, "restarts": c.get("restartCount")}
    return None


def last_words(log, lines=LOG_LINES, chars=LOG_CHARS):
    """The last `lines` non-empty lines of a log, joined with " | ", cut to
    their last `chars` characters ("..." marks the cut); a Go program's
    panic ends its log with the goroutines' stacks after its `panic: <why>`
    line (metrics-server panics on a flag it does not know), so a log whose
    last `panic: ` line is followed by a `goroutine ` line ends at that
    line. A pure function."""
    kept = [line.strip() for line in (log or "").splitlines() if line.strip()]
    panics = [i for i, line in enumerate(kept) if line.startswith("panic: ")]
    if panics and any(line.startswith("goroutine ") for line in kept[panics[-1] + 1:]):
        kept = kept[:panics[-1] + 1]
    text = " | ".join(kept[-lines:])
    return text if len(text) <= chars else "..." + text[-(chars - 3):]


Problem = collections.namedtuple("Problem", "reason line")


def retry_cannot_help(problem):
    """Whether a failed attempt during which the release's container was seen
    stuck as `problem` (a Problem, or None) is the last of this run
    (NOT_RETRIED). A pure function."""
    return problem is not None and problem.reason in NOT_RETRIED


def container_problem(stuck, log=""):
    """The line naming a stuck container (stuck_container's answer): `pod
    <ns>/<pod> container <c>: <reason>: <its last words>`, its last words
    being its previous log's last lines (last_words) when it has no
    termination message of its own and the log has any. A pure function."""
    words = last_words(log) if stuck.get("needsLog") else ""
    return "pod %s/%s container %s: %s: %s" % (stuck["namespace"], stuck["pod"], stuck["container"],
                                              stuck["reason"], words or stuck["message"])


def manifest_objects(texts):
    """[apiVersion, kind, namespace, name] of every object in the plugin
    manifests' texts (YAML streams), sorted, without duplicates."""
    import yaml  # PyYAML: on AL2023 with cloud-init (see secrets.py)
    out = set()
    for text in texts:
        for d in yaml.safe_load_all(text):
            items = d.get("items") if isinstance(d, dict) and str(d.get("kind", "")).endswith("List") else [d]
            for o in items or []:
                meta = o.get("metadata") if isinstance(o, dict) else None
                if isinstance(meta, dict) and o.get("kind") and meta.get("name"):
                    out.add((str(o.get("apiVersion", "")), str(o["kind"]), str(meta.get("namespace") or ""),
                             str(meta["name"])))
    return [list(o) for o in sorted(out)]


def object_identity(o):
    """An object's identity across API versions: (group, kind, namespace,
    name). A manifest that moves a kind to a new version keeps its object."""
    api, kind, ns, name = o
    return (api.rsplit("/", 1)[0] if "/" in api else "", kind, ns, name)


def gone_objects(old, new):
    """The objects kube-aws applied before (`old`, the record's) that no
    manifest of this plan holds any more (a disabled plugin's, a removed
    file's): a pure function."""
    keep = set(object_identity(o) for o in new)
    return [o for o in old if object_identity(o) not in keep]


def due_signals(doc, releases):
    """[(name, wait condition)] of the plan's releases that the record shows
    at the plan's wait condition and not yet known to be signalled."""
    rec = recorded(doc)
    return [(r["name"], r["waitCondition"]) for r in releases
            if rec.get(r["name"], {}).get("waitCondition") == r["waitCondition"]
            and not rec[r["name"]].get("signalled")]


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tail(text, n):
    return "\n".join(text.splitlines()[-n:])


def reaches(host, port, timeout):
    """Whether a TCP connection to host:port opens within `timeout` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Reconciler(object):
    def __init__(self, log, aws, runtime, reconciler, node=None):
        self.log = log
        self.aws = aws
        self.runtime = runtime
        self.node = node if node is not None else {}
        # The stack of the addons' wait conditions: the root stack (after the pools).
        self.stack = reconciler.get("waitConditionStack") or runtime["stackName"]
        self.bucket = runtime["bucket"]
        self.prefix = runtime["keyPrefix"]
        self.secrets_version = runtime.get("secretsVersion") or ""
        self.plan_parameter = reconciler["planParameter"]
        self.installed_uri = reconciler["installedURI"]
        b, _, k = self.installed_uri[len("s3://"):].partition("/")
        self.installed_bucket, self.installed_key = b, k
        self.work = paths.path(paths.WORK + "/addons")
        # On tmpfs, beside the secret store: the unpacked plan (filled-in
        # values), the charts and helm's output, for one run only.
        self.tmp = os.path.join(os.path.dirname(secrets.store_dir()), "addons")
        self.scratch = None
        self.holder = "%s/%d" % (socket.gethostname(), os.getpid())
        self.lease = None
        self.record_lock = threading.RLock()
        self.record_etag = None
        self.rec = {}
        self.record_versions = []
        self.retry_after = None
        # The plugin manifests' objects kube-aws applied (the record's
        # manifestObjects), pruned when a plan no longer holds them.
        self.manifest_record = []
        self.bin = paths.path(paths.HELM_BIN_DIR)
        self.helm = os.path.join(self.bin, "helm")
        self.store = secrets.store_dir()
        self.env = dict(os.environ)
        self.env.setdefault("KUBECONFIG", paths.path(paths.ADMIN_CONF))
        self.signals = []
        self.poll = paths.knob("POLL_INTERVAL", 5)
        self.manifests_done = False

    # --- commands -------------------------------------------------------
    def run(self, args, out=None):
        """(exit code, output) of a command; its output goes to the file `out` when given."""
        try:
            p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=self.env, universal_newlines=True,
                               errors="replace")
            code, text = p.returncode, p.stdout or ""
        except OSError as e:
            code, text = 127, "%s: %s\n" % (args[0], e.strerror)
        if out is not None:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        return code, text

    def run_watching(self, args, out, watch):
        """As run, with the output to the file `out`; `watch()` is called
        every poll interval while the command runs (it looks at the cluster
        while helm waits: what helm's --atomic undoes is gone once it exits)."""
        try:
            with open(out, "w", encoding="utf-8") as f:
                p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                     env=self.env)
                while True:
                    try:
                        code = p.wait(timeout=max(1, self.poll))
                        break
                    except subprocess.TimeoutExpired:
                        watch()
        except OSError as e:
            with open(out, "w", encoding="utf-8") as f:
                f.write("%s: %s\n" % (args[0], e.strerror))
            code = 127
        with open(out, encoding="utf-8", errors="replace") as f:
            return code, f.read()

    def must(self, args, out=None, watch=None):
        code, text = self.run(args, out) if watch is None else self.run_watching(args, out, watch)
        if code != 0:
            raise RuntimeError(tail(text, 20) or "%s exited %d" % (args[0], code))
        return text

    def retried(self, args, out=None, name="", after_failure=None, watch=None, final=None):
        """`args` run until it succeeds, at most `attempts` times, fewer when
        `final(error)` says a failed attempt is the last (retry's `final`);
        `after_failure()` runs after each failed attempt, the last included;
        `watch` as run_watching's (with `out`)."""
        def once():
            try:
                return self.must(args, out, watch)
            except RuntimeError:
                if after_failure is not None:
                    after_failure()
                raise
        return retry(once, self.attempts, self.delay, final=final,
                     on_retry=(lambda i, e: self.log("attempt %d of %d failed" % (i, self.attempts), name))
                     if name else None)

    # --- the pointer and the plan --------------------------------------
    def pointer(self):
        out = self.aws(["ssm", "get-parameter", "--name", self.plan_parameter])
        return jsonio.parse(out["Parameter"]["Value"], "the plan pointer %s" % self.plan_parameter)

    def status(self, name, phase, message=""):
        """Writes the release's status object, its message blanked of secrets, to S3."""
        if message:
            try:
                message = secrets.blank(message, self.store)
            except OSError:
                message = "(the message could not be blanked of secrets)"
        path = os.path.join(self.work, "status-%s.json" % name)
        try:
            old = jsonio.read(path, default={})
        except jsonio.JsonError:
            old = {}
        now = now_iso()
        jsonio.write(path, {"cluster": self.cluster, "release": name, "phase": phase,
                            "message": message[-8000:], "startedAt": old.get("startedAt", now),
                            "updatedAt": now}, mode=0o600)
        try:
            self.aws(["s3", "cp", "--only-show-errors", "--content-type", "application/json", path,
                      self.status_uri + name + ".json"])
        except AwsError as e:
            self.log("cannot write the status: %s" % e, name)

    # --- signals --------------------------------------------------------
    def signal(self, name, status):
        wc = self.by_name[name]["waitCondition"]
        t = threading.Thread(target=self._signal, args=(name, wc, status))
        t.start()
        self.signals.append(t)

    def _signal(self, name, wc, status):
        # CloudFormation creates a wait condition once the controller group is
        # complete (at create) or the pointer is updated (after an update),
        # which can be after a fast release is done: a missing one is waited
        # for unless the pointer has moved on to a newer plan.
        attempts = paths.knob("SIGNAL_ATTEMPTS", 120)
        delay = paths.knob("SIGNAL_DELAY", 15)
        for _ in range(attempts):
            st = cfn.resource_state(self.aws, self.stack, wc)
            if st == "CREATE_IN_PROGRESS":
                if cfn.signal(self.aws, self.stack, wc, name, status):
                    self.mark_signalled(name, wc)
                    return
            elif st == "missing":
                try:
                    newer = self.pointer().get("sha256") != self.plan_sha
                except (AwsError, jsonio.JsonError, KeyError, TypeError):
                    newer = False
                if newer:
                    self.log("%s (%s) is not in the stack and a newer plan is live: not signalled" % (wc, name))
                    return
            elif st != "error":
                self.log("%s (%s) is %s: nothing waits for its signal" % (wc, name, st))
                self.mark_signalled(name, wc)
                return
            time.sleep(delay)
        self.log("cannot signal %s for %s" % (wc, name))

    def mark_signalled(self, name, wc):
        """Notes in the record that nothing more waits for `name`'s signal at
        `wc`, so no controller asks CloudFormation about it again."""
        with self.record_lock:
            e = self.rec.get(name)
            if e is None or e.get("waitCondition") != wc or e.get("signalled"):
                return
            e["signalled"] = True
            try:
                self.record()
            except Stop as err:
                self.log(str(err))

    def signal_recorded(self, doc):
        """Any controller, every tick: signals SUCCESS for each release of the
        plan that the record shows at its wait condition while that wait
        condition waits. [(name, wc)] of those nothing waits for any more."""
        due = due_signals(doc, self.releases)
        if not due or not cfn.stack_in_progress(self.aws, self.stack):
            return []
        settled = []
        for name, wc in due:
            st = cfn.resource_state(self.aws, self.stack, wc)
            if st == "CREATE_IN_PROGRESS":
                if cfn.signal(self.aws, self.stack, wc, name, "SUCCESS"):
                    self.log("%s (%s) signalled SUCCESS: the installed record has it at this wait condition"
                             % (wc, name))
                    settled.append((name, wc))
            elif st not in ("missing", "error"):
                settled.append((name, wc))
        return settled

    def finish(self, name, phase, message=""):
        self.finished[name] = phase
        if phase == "ready":
            r = self.by_name[name]
            with self.record_lock:
                old = self.rec.get(name) or {}
                entry = {"name": name, "namespace": r["namespace"], "waitCondition": r["waitCondition"]}
                if r.get("secrets"):
                    entry["secrets"] = r["secrets"]
                if old.get("waitCondition") == r["waitCondition"] and old.get("signalled"):
                    entry["signalled"] = True  # an upgrade for its secrets: the wait condition is long signalled
                self.rec[name] = entry
                self.record()
        self.status(name, phase, message)
        self.signal(name, "SUCCESS" if phase == "ready" else "FAILURE")
        if phase != "ready":
            self.bad += 1
        self.log(phase, name)

    # --- cluster waits --------------------------------------------------
    def wait_until(self, seconds, probe):
        return bool(poll(probe, seconds, self.poll))

    def readyz(self):
        return self.run(["kubectl", "get", "--raw=/readyz"])[1].strip() == "ok"

    # How this host's connections to the kubernetes Service are tried
    # (replaced in tests).
    connect = staticmethod(reaches)

    def service_route_gate(self):
        """Waits, bounded, until this host reaches the API server through the
        kubernetes Service's ClusterIP, when kube-proxy is the cluster's. A
        host-network addon started before kube-proxy has written the
        Service's rules (the cloud controller manager, the first release on
        a new cluster) dials an address nothing routes: client-go's dial
        hangs 30 s, the controller manager exits ("unable to load configmap
        based request-header-client-ca-file: ... i/o timeout") and starts
        again after the kubelet's back-off. On the real-node bed that held
        every other release about 31 s, because kube-proxy itself waited 30
        s for the Node's address; the kubelet's --node-ip (kubeadmcfg.py)
        removed that wait, and this gate stays for a kube-proxy that is
        slow for another reason (an image pull). docs/testing.md, "One
        cluster for the addons". Never fatal: without a kube-proxy DaemonSet
        (a CNI that replaces it), or past the bound, the installs go on as
        before. Returns what it saw, for the log."""
        code, name = self.run(["kubectl", "-n", "kube-system", "get", "daemonset", "kube-proxy", "-o", "name",
                               "--ignore-not-found"])
        if code != 0 or not name.strip():
            return "no kube-proxy DaemonSet"
        code, ip = self.run(["kubectl", "-n", "default", "get", "service", "kubernetes", "-o",
                             "jsonpath={.spec.clusterIP}"])
        ip = ip.strip()
        if code != 0 or not ip:
            return "no kubernetes Service address"
        limit = paths.knob("SERVICE_ROUTE_TIMEOUT", 120)
        if poll(lambda: self.connect(ip, 443, 2), limit, 1):
            return "the kubernetes Service (%s:443) answers" % ip
        return "the kubernetes Service (%s:443) did not answer within %ss; going on" % (ip, limit)

    def ready_node_gate(self):
        """Any Ready node; first, when a pool starts with a node and the root
        stack is still creating or updating (its pools start only after the
        control plane), a Ready worker, for at most the plan's
        workerReadyTimeoutSeconds: the releases that need one would
        otherwise time out before the pools exist."""
        worker_wait = self.plan.get("workerReadyTimeoutSeconds") or 0
        if worker_wait:
            self.wait_until(worker_wait,
                            lambda: self.a_worker_is_ready() or not cfn.stack_in_progress(self.aws, self.stack))
        return self.wait_until(self.plan["nodeReadyTimeoutSeconds"], self.a_node_is_ready)

    def a_worker_is_ready(self):
        code, text = self.run(["kubectl", "get", "nodes", "-l", "!node-role.kubernetes.io/control-plane", "-o",
                               'jsonpath={range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'])
        return code == 0 and "True" in text.split()

    def a_node_is_ready(self):
        code, text = self.run(["kubectl", "get", "nodes", "-o", 'jsonpath={range .items[*]}'
                               '{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'])
        return code == 0 and "True" in text.split()

    def apply_manifests(self):
        if self.manifests_done:
            return
        self.manifests_done = True
        applied = True
        texts = []
        for m in self.plan.get("manifests", []):
            path = os.path.join(self.addons, m)
            try:
                with open(path, encoding="utf-8") as f:
                    texts.append(f.read())
                self.retried(["kubectl", "apply", "--server-side", "-f", path])
            except (RuntimeError, OSError):
                applied = False
                self.log("manifest %s could not be applied" % m)
        try:
            new = manifest_objects(texts)
        except Exception as e:  # noqa: BLE001 - a manifest kubectl took but PyYAML did not: prune nothing
            self.log("cannot list the manifests' objects (%s): nothing is pruned" % e.__class__.__name__)
            applied, new = False, []
        with self.record_lock:
            old = list(self.manifest_record)
        if not applied:
            # Prune only after a plan's manifests all went in: keep knowing both.
            keep = old + [o for o in new if o not in old]
        else:
            keep = new + self.prune_objects(gone_objects(old, new))
        with self.record_lock:
            self.manifest_record = keep

    def prune_objects(self, gone):
        """Deletes the objects a plan no longer holds (a disabled plugin's
        MutatingWebhookConfiguration with failurePolicy Fail would otherwise
        block every pod it matches, with nothing left to answer it). Returns
        those that could not be deleted, to try again next time."""
        left = []
        for i, (api, kind, ns, name) in enumerate(gone):
            doc = {"apiVersion": api, "kind": kind, "metadata": {"name": name}}
            if ns:
                doc["metadata"]["namespace"] = ns
            path = os.path.join(self.scratch or self.work, "prune-%d.json" % i)
            jsonio.write(path, doc)
            code, out = self.run(["kubectl", "delete", "--ignore-not-found", "--wait=false", "-f", path])
            where = "%s/%s" % (ns, name) if ns else name
            if code == 0:
                self.log("pruned %s %s (no manifest of the plan holds it)" % (kind, where))
            else:
                left.append([api, kind, ns, name])
                self.log("cannot prune %s %s: %s" % (kind, where, tail(out, 3)))
        return left

    def wait_manifest_rollouts(self):
        """Waits for the plan's `manifestRollouts` (the pod identity webhook's
        Deployment): the releases that start next have pods the webhook must
        mutate, and its MutatingWebhookConfiguration fails closed for them.
        A rollout that does not finish is logged and the releases go on: the
        webhook's own failure policy still keeps their pods from starting
        without credentials, and their failures then name it. Returns the
        rollouts that did not finish."""
        late = []
        for w in self.plan.get("manifestRollouts") or []:
            ref = "%s/%s" % (w["kind"].lower(), w["name"])
            code, out = self.run(["kubectl", "-n", w["namespace"], "rollout", "status", ref,
                                  "--timeout=%ss" % int(w["timeoutSeconds"])])
            if code == 0:
                self.log("%s in %s rolled out (%s)" % (ref, w["namespace"], w["manifest"]))
            else:
                late.append(ref)
                self.log("%s in %s did not roll out within %ss: %s" % (ref, w["namespace"], w["timeoutSeconds"],
                                                                        tail(out, 3)))
        return late

    # --- helm -----------------------------------------------------------
    def install_tiller(self):
        ns = self.plan["helm"]["tiller"]["namespace"]
        try:
            self.retried(["kubectl", "apply", "-f",
                          os.path.join(self.addons, self.plan["helm"]["tiller"]["manifest"])])
            self.retried(["kubectl", "-n", ns, "rollout", "status", "deployment/tiller-deploy", "--timeout=300s"])
        except RuntimeError:
            raise Fatal("Tiller did not roll out in namespace %s" % ns)

    def install_helm(self):
        # The copy `kube-aws up` published with the charts (checked against
        # the same sha256 when it was downloaded): no node reaches the
        # internet for it, and every run installs the same bytes.
        b = self.plan["helm"]["binary"]
        tgz = os.path.join(self.work, "helm.tgz")
        try:
            try:
                self.aws(["s3", "cp", "--only-show-errors", b["object"], tgz])
            except AwsError as e:
                raise RuntimeError("cannot fetch the helm client %s: %s" % (b["object"], e))
            if bundle.sha256_file(tgz) != b["sha256"]:
                raise RuntimeError("helm tarball %s does not match its sha256 %s" % (b["object"], b["sha256"]))
            with tarfile.open(tgz) as t:
                member = t.extractfile("linux-amd64/helm")
                data = member.read() if member is not None else b""
            if not data:
                raise RuntimeError("no linux-amd64/helm in the tarball")
            os.makedirs(self.bin, exist_ok=True)
            tmp = self.helm + ".part"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o755)
            os.replace(tmp, self.helm)
            if self.helm_major == 2:
                self.must([self.helm, "init", "--client-only", "--skip-refresh"])
        except (RuntimeError, OSError, KeyError, tarfile.TarError) as e:
            self.log(str(e))
            raise Fatal("cannot install the helm client from %s" % b.get("object"))

    def diagnose(self, r, seen):
        """The first stuck container of release `r`'s pods as a Problem: its
        waiting reason and the line naming it (stuck_container,
        container_problem), or None; `seen` keeps the log
        fetched per container restart, so a watch that looks every few
        seconds reads each crash's log once. The pods are those labelled
        app.kubernetes.io/instance=<release> (RELEASE_LABEL, as the paused
        Deployments are found): the label Helm's chart conventions give
        every object of a release, which the built-in charts set; a chart
        without it is not diagnosed (its failure keeps helm's output and the
        namespace's pods that do not run)."""
        code, text = self.run(["kubectl", "-n", r["namespace"], "get", "pods", "-l",
                               "%s=%s" % (RELEASE_LABEL, r["name"]), "-o", "json"])
        if code != 0:
            return None
        try:
            stuck = stuck_container(jsonio.parse(text, "the pods of %s" % r["name"]))
        except jsonio.JsonError:
            return None
        if stuck is None:
            return None
        log = ""
        if stuck["needsLog"]:
            key = (stuck["pod"], stuck["container"], stuck["restarts"])
            if key not in seen:
                code, text = self.run(["kubectl", "-n", stuck["namespace"], "logs", stuck["pod"], "-c",
                                       stuck["container"], "--previous", "--tail=%d" % (LOG_LINES * 10)])
                # A log that could not be read is asked for again at the next
                # look: the kubelet serves logs only once its serving
                # certificate is approved, which a container crashing soon
                # after the node's boot can beat (seen on the real-node bed).
                if code == 0:
                    seen.clear()
                    seen[key] = text
            log = seen.get(key, "")
        return Problem(stuck["reason"], container_problem(stuck, log))

    def describe_failure(self, name, ns, helm_log, problem=None):
        """The failed release's status message: the stuck container's line
        first when one was seen (diagnose), then helm's output and the
        namespace's pods and events."""
        with open(helm_log, errors="replace") as f:
            out = ([problem] if problem else []) + ["helm failed for %s:" % name, tail(f.read(), 40)]
        out.append("--- pods not running in namespace %s ---" % ns)
        out.append(tail(self.run(["kubectl", "-n", ns, "get", "pods",
                                  "--field-selector=status.phase!=Running,status.phase!=Succeeded"])[1], 20))
        out.append("--- warning events in namespace %s ---" % ns)
        out.append(tail(self.run(["kubectl", "-n", ns, "get", "events", "--field-selector=type=Warning",
                                  "--sort-by=.lastTimestamp"])[1], 20))
        return "\n".join(out) + "\n"

    def chart_crds(self, r, tgz):
        """(the release's crds/ files extracted from its chart, by their path
        under crds/; None) or (None, the reason one is missing)."""
        d = os.path.join(self.scratch, "crds-" + r["name"])
        shutil.rmtree(d, ignore_errors=True)
        found = {}
        with tarfile.open(tgz) as t:
            for m in t.getmembers():
                parts = m.name.split("/")
                if not m.isfile() or "crds" not in parts[:-1] or any(p in ("", ".", "..") for p in parts):
                    continue
                rel = "/".join(parts[parts.index("crds") + 1:])
                target = os.path.join(d, *parts)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    f.write(t.extractfile(m).read())
                found.setdefault(rel, target)
        for f in r["crds"]:
            if f not in found:
                return None, "CRD file crds/%s is not in the chart archive" % f
        return found, None

    def apply_crds(self, r, found):
        """Helm installs a chart's crds/ once and never upgrades them ("There
        is no support at this time for upgrading or deleting CRDs using
        Helm", Helm docs, Custom Resource Definitions best practices): a chart
        bump whose CRDs gained a field or a version would run its new
        controller against the old schema. They are applied here, server-side
        and before helm, on every install of the release (on the first one
        helm then finds them present and skips them). --force-conflicts takes
        the fields over from helm's own field manager. None, or the reason."""
        for f in r["crds"]:
            code, out = self.run(["kubectl", "apply", "--server-side", "--force-conflicts",
                                  "--field-manager=kube-aws", "-f", found[f]])
            if code != 0:
                return "%s\nCRDs of crds/%s could not be applied" % (tail(out, 20), f)
        return None

    def wait_crds(self, r, found):
        """None when every CRD of the release is Established, else the reason."""
        for f in r["crds"]:
            code, out = self.run(["kubectl", "wait", "--for=condition=Established",
                                  "--timeout=%ss" % r["timeoutSeconds"], "-f", found[f]])
            if code != 0:
                return "%s\nCRDs of crds/%s are not Established after %ss" % (tail(out, 20),
                                                                                 f, r["timeoutSeconds"])
        return None

    def install(self, r):
        """(phase, message) of one release; runs in a worker thread."""
        name = r["name"]
        self.status(name, "installing")
        self.log("installing", name)
        if not r.get("locked"):
            return "failed", "chart is not locked (no sha256): run `kube-aws charts lock` and publish again\n"
        tgz = os.path.join(self.scratch, name + ".tgz")
        try:
            self.aws(["s3", "cp", "--only-show-errors", r["chartObject"], tgz])
        except AwsError as e:
            return "failed", "%s\ncannot fetch the chart from %s\n" % (e, r["chartObject"])
        if bundle.sha256_file(tgz) != r["sha256"]:
            return "failed", "chart archive %s does not match its sha256 %s\n" % (r["chartObject"], r["sha256"])
        timeout = r["timeoutSeconds"]
        # --atomic (Helm v3, and v2 since 2.13): when the release fails, helm
        # undoes it before it exits. A first install (`upgrade --install` of
        # a release that does not exist runs the install action with Atomic
        # set) is uninstalled: "release X failed, and has been uninstalled due
        # to atomic being set" (pkg/action/install.go, failRelease); a failed
        # upgrade is rolled back to the last deployed or superseded revision
        # (pkg/action/upgrade.go, failRelease, helm v3.16). So a failed release
        # is left as it was before this plan, which is what the record says.
        args = [self.helm, "upgrade", "--install", name, tgz, "--namespace", r["namespace"], "--wait", "--atomic",
                "-f", os.path.join(self.addons, r["valuesFile"])]
        if self.helm_major == 2:
            args += ["--timeout", str(timeout), "--tiller-namespace", self.tiller_ns]
        else:
            args += ["--timeout", "%ss" % timeout]
            if r.get("createNamespace"):
                args.append("--create-namespace")
        overrides = []
        if r.get("replicasValue"):
            try:
                overrides = paused_overrides(r, self.release_deployments(r))
            except (RuntimeError, jsonio.JsonError) as e:
                return "failed", "%s\ncannot tell whether the Deployments of %s are paused by `kube-aws update`\n" \
                    % (e, name)
            if overrides:
                self.log("its Deployments are paused by `kube-aws update` (%s): installed with %s"
                         % (PAUSED_REPLICAS, " ".join(overrides)), name)
            args += overrides
        helm_log = os.path.join(self.scratch, "helm-%s.log" % name)
        found = {}
        if r.get("crds"):
            found, why = self.chart_crds(r, tgz)
            why = why or self.apply_crds(r, found)
            if why is not None:
                return "failed", why + "\n"
        self.unstick(name, r["namespace"], timeout)
        # While helm waits, the release's pods are looked at every poll
        # interval: a container that will not run (CrashLoopBackOff,
        # ImagePullBackOff...) is named in the failure. It must be seen
        # before helm exits: --atomic uninstalls a failed first install and
        # rolls a failed upgrade back, and its pods go with it.
        seen, problem = {}, []

        def watch():
            found = self.diagnose(r, seen)
            if found:
                problem[:] = [found]

        def last_attempt(_e):
            if not problem:
                watch()  # a failure faster than one poll interval: what is left
            if retry_cannot_help(problem[0] if problem else None):
                self.log("not tried again in this run: %s is the release's own (the plan is tried again after "
                         "its retryAfter)" % problem[0].reason, name)
                return True
            return False
        try:
            self.retried(args, out=helm_log, name=name, watch=watch, final=last_attempt,
                         after_failure=(lambda: self.keep_paused(r)) if overrides else None)
        except RuntimeError:
            if not problem:
                watch()  # a failure faster than one poll interval: what is left
            if problem:
                self.log(problem[0].line, name)
            return "failed", self.describe_failure(name, r["namespace"], helm_log,
                                                   problem[0].line if problem else None)
        if r.get("crds"):
            why = self.wait_crds(r, found)
            if why is not None:
                return "failed", why + "\n"
        return "ready", ""

    def release_deployments(self, r):
        """The release's live Deployments (by RELEASE_LABEL), parsed; raises
        RuntimeError or jsonio.JsonError when kubectl cannot tell."""
        out = self.retried(["kubectl", "-n", r["namespace"], "get", "deployments", "-l",
                            "%s=%s" % (RELEASE_LABEL, r["name"]), "-o", "json"], name=r["name"])
        return jsonio.parse(out, "the Deployments of %s" % r["name"])

    def keep_paused(self, r):
        """After a failed attempt to upgrade a paused release: its Deployments
        back to 0 (repause_command), so the pause holds until the next
        attempt, and after the last one until the resume."""
        code, out = self.run(repause_command(r))
        if code == 0:
            self.log("the failed upgrade was rolled back: its paused Deployments are scaled to 0 again", r["name"])
        else:
            self.log("cannot scale its paused Deployments back to 0 after the failed upgrade: %s" % tail(out, 3),
                     r["name"])

    def helm_scope(self, ns):
        if self.helm_major == 2:
            return ["--tiller-namespace", self.tiller_ns]
        return ["--namespace", ns]

    def unstick(self, name, ns, timeout):
        """A release an installer left pending (it was stopped mid-operation:
        the lease it held expired and this controller took it over) is undone
        first: helm refuses any operation on a pending release ("another
        operation (install/upgrade/rollback) is in progress"), and only the
        lease holder runs helm, so nothing else is operating on it. A pending
        first install is uninstalled; a pending upgrade or rollback is rolled
        back to the revision before it."""
        code, out = self.run([self.helm, "history", name, "--max", "1", "--output", "json"] + self.helm_scope(ns))
        if code != 0:
            return  # no such release: `upgrade --install` installs it
        try:
            last = json.loads(out[out.index("["):out.rindex("]") + 1])[-1]
            status = str(last.get("status", "")).lower().replace("_", "-")
            rev = int(last.get("revision"))
        except (ValueError, TypeError, IndexError, AttributeError):
            return
        if not status.startswith("pending-"):
            return
        self.log("left %s at revision %d by a stopped installer: undoing it" % (status, rev), name)
        log = os.path.join(self.scratch, "helm-%s-unstick.log" % name)
        if status == "pending-install" or rev <= 1:
            if not self.uninstall(name, ns):
                self.log("could not uninstall the pending release", name)
            return
        args = [self.helm, "rollback", name, str(rev - 1), "--wait"] + self.helm_scope(ns)
        args += ["--timeout", str(timeout) if self.helm_major == 2 else "%ss" % timeout]
        code, out = self.run(args, out=log)
        if code != 0:
            self.log("could not roll the pending release back (helm exited %d)" % code, name)

    def install_guarded(self, r):
        try:
            return self.install(r)
        except Exception as e:  # noqa: BLE001 - one release's bug must not stop the others
            return "failed", "the installer failed on %s: %s: %s\n" % (r["name"], e.__class__.__name__, e)

    def release_missing(self, name, ns):
        """True only when helm says it has no such release (Helm 3's
        `release: not found`, driver.ErrReleaseNotFound in
        pkg/storage/driver/driver.go, v3.16.3; Helm 2's `release: "NAME" not
        found`); a failure of any other kind (the API server unreachable:
        history asks IsReachable first) is not taken for it."""
        code, out = self.run([self.helm, "history", name, "--max", "1"] + self.helm_scope(ns))
        return code != 0 and ("release: not found" in out or 'release: "%s" not found' % name in out)

    def uninstall(self, name, ns):
        """Uninstalls a release; True once it is gone. One helm does not know
        is gone already: a restore brought back a snapshot taken before it
        was installed, or a run uninstalled it and stopped before the record
        said so. helm's uninstall of it fails (`--ignore-not-found` is Helm
        3.13's, and `helm.binary` may name an older helm), and a dropped
        release that fails to go stays in the record and is tried again on
        every run, so the plan is never done."""
        if self.release_missing(name, ns):
            self.log("not installed (helm knows no such release): nothing to uninstall", name)
            return True
        if self.helm_major == 2:
            args = [self.helm, "delete", "--purge", name, "--tiller-namespace", self.tiller_ns]
        else:
            args = [self.helm, "uninstall", name, "--namespace", ns, "--wait"]
        try:
            self.retried(args, out=os.path.join(self.scratch, "helm-%s.log" % name))
            return True
        except RuntimeError as e:
            try:
                why = secrets.blank(str(e), self.store)
            except OSError:
                why = "(helm's output could not be blanked of secrets)"
            self.log("could not be uninstalled: %s" % why, name)
            return False

    # --- one plan ---------------------------------------------------------
    def load_plan(self, plan):
        self.plan = plan
        p = self.plan
        self.cluster = p["cluster"]
        self.status_uri = p["statusURI"]
        self.attempts = p["retries"]["attempts"]
        self.delay = paths.knob("RETRY_DELAY", p["retries"]["delaySeconds"])
        self.helm_major = p["helm"]["version"]
        self.tiller_ns = p["helm"]["tiller"]["namespace"]
        self.concurrency = p.get("concurrency") or DEFAULT_CONCURRENCY
        self.releases = p["releases"]
        self.by_name = dict((r["name"], r) for r in self.releases)

    def load_installed(self):
        """The installed record. Only a record that is not there is taken for
        "nothing installed" (awscall.listed_object tells "missing" from
        "denied"); any other answer raises Stop."""
        where = self.installed_uri
        try:
            listed = listed_object(self.aws, self.installed_bucket, self.installed_key)
        except AwsError as e:
            raise Stop("cannot read the installed record %s: %s" % (where, e))
        if listed is None:
            return Record({"releases": []}, None)
        path = os.path.join(self.work, "installed-read.json")
        try:
            meta = self.aws(["s3api", "get-object", "--bucket", self.installed_bucket, "--key", self.installed_key,
                             path])
            doc = jsonio.read(path)
        except (AwsError, jsonio.JsonError) as e:
            raise Stop("cannot read the installed record %s: %s" % (where, e))
        etag = (meta or {}).get("ETag")
        if not isinstance(doc, dict) or not isinstance(doc.get("releases", []), list) or not etag:
            raise Stop("the installed record %s is not one this program wrote" % where)
        return Record(doc, etag)

    def record(self, final=False):
        """Writes the record: this plan, the releases installed now, on the
        condition that it is still the one this run read or wrote last."""
        with self.record_lock:
            if self.lease is not None and self.lease.lost.is_set():
                raise Stop("the installer's lease was taken over: the new holder goes on from the record")
            doc = {"plan": self.plan_sha, "secretsVersions": self.record_versions,
                   "releases": sorted(self.rec.values(), key=lambda r: r["name"]),
                   "manifestObjects": self.manifest_record, "holder": self.holder, "updatedAt": now_iso()}
            if self.retry_after is not None:
                doc["retryAfter"] = self.retry_after
            path = os.path.join(self.work, "installed.json")
            jsonio.write(path, doc)
            cond = ["--if-match", self.record_etag] if self.record_etag else ["--if-none-match", "*"]
            try:
                out = self.aws(["s3api", "put-object", "--bucket", self.installed_bucket, "--key", self.installed_key,
                                "--body", path, "--content-type", "application/json"] + cond)
            except AwsError as e:
                if lease.lost(e):
                    raise Stop("the installed record %s was written by another controller: %s"
                               % (self.installed_uri, e))
                raise Stop("cannot record the installed releases in %s: %s" % (self.installed_uri, e))
            etag = (out or {}).get("ETag")
            if not etag:
                raise Stop("S3 gave no ETag for the installed record %s" % self.installed_uri)
            self.record_etag = etag

    def install_releases(self, installed):
        """Installs the plan's releases, in parallel as schedule.decide allows."""
        rels = [schedule.Release(r["name"], tuple(r.get("dependsOn") or ()), bool(r.get("bootstrap")))
                for r in self.releases]
        for r in self.releases:
            old = installed.get(r["name"])
            if old is not None and current(old, r):
                # Installed exactly as this plan has it (by an earlier plan, or
                # by this one before its installer stopped): signalled from the
                # record (signal_recorded), never installed again.
                self.finished[r["name"]] = "ready"
                self.log("unchanged", r["name"])
        gate = None
        running = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, int(self.concurrency))) as pool:
            while True:
                d = schedule.decide(rels, self.finished, set(running), self.concurrency)
                for name, dep, phase in d.skip:
                    self.finish(name, "skipped", "skipped: it depends on %s, which is %s\n" % (dep, phase))
                if d.skip:
                    continue
                for name in d.start:
                    r = self.by_name[name]
                    if not r.get("bootstrap"):
                        if gate is None:
                            # The bootstrap addons are in (decide starts no other before).
                            self.apply_manifests()
                            gate = self.ready_node_gate()
                            if gate:
                                self.wait_manifest_rollouts()
                        if not gate:
                            self.finish(name, "failed", "no node became Ready within %ss (is a CNI addon marked "
                                                        "bootstrap: true?)\n" % self.plan["nodeReadyTimeoutSeconds"])
                            continue
                    running[name] = pool.submit(self.install_guarded, r)
                if not running:
                    left = [r.name for r in rels if r.name not in self.finished]
                    if not left:
                        return
                    if not d.start:
                        for name in left:  # a dependency cycle: render refuses one, so never expected
                            self.finish(name, "skipped", "skipped: its dependencies never finished\n")
                        return
                    continue
                done, _ = concurrent.futures.wait(list(running.values()),
                                                  return_when=concurrent.futures.FIRST_COMPLETED)
                for name in [n for n, f in running.items() if f in done]:
                    phase, message = running.pop(name).result()
                    self.finish(name, phase, message)

    def reconcile(self):
        os.makedirs(self.work, exist_ok=True)
        try:
            ptr = self.pointer()
            self.plan_sha, self.plan_uri = ptr["sha256"], ptr["uri"]
        except (AwsError, jsonio.JsonError, KeyError, TypeError) as e:
            self.log("cannot read the plan pointer %s: %s" % (self.plan_parameter, e))
            return 1
        run_id = self.plan_sha + ("-" + self.secrets_version if self.secrets_version else "")
        try:
            raw = bundle.fetch(self.aws, self.plan_uri, self.plan_sha,
                               os.path.join(self.work, "bundles", self.plan_sha + ".json"))
            doc = bundle.read(raw)
            self.load_plan(bundle.plan(doc))
            attach_secrets(self.releases, ptr.get("secrets"))
        except (bundle.BundleError, OSError, KeyError, TypeError) as e:
            self.log("cannot read the addon bundle %s: %s" % (self.plan_uri, e))
            return 1
        self.prune_bundles()
        try:
            record = self.load_installed()
        except Stop as e:
            self.log("%s; nothing is installed or uninstalled" % e)
            return 1
        settled = self.signal_recorded(record.doc)
        what = outcome(record.doc, self.plan_sha, self.secrets_version, self.releases, time.time())
        if what == DONE:
            return 0
        if what == LATER:
            self.log("plan %s: the releases that failed are tried again after %s"
                     % (self.plan_sha, lease.iso(record.doc["retryAfter"])))
            return 0
        held = self.held_by_versions()
        if held:
            self.log(held)
            return 0
        self.lease = lease.Lease(self.aws, self.bucket, self.prefix, self.holder, log=self.log)
        try:
            if not self.lease.acquire(run_id):
                return 0
        except lease.LeaseError as e:
            self.log(str(e))
            return 1
        self.scratch = os.path.join(self.tmp, self.plan_sha)
        try:
            self.lease.start_renewing()
            return self.install_plan(doc, settled)
        except Stop as e:
            self.log(str(e))
            self.join_signals()
            return 1
        finally:
            self.lease.release()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def held_by_versions(self):
        """Why the plan waits for the nodes' kubelets, or None: a controller
        on an older minor than the plan's holds it always, a worker only while
        the stack is being updated (the pools roll after the control plane,
        and the minor-pinned addons after the pools: upgrade.py
        `nodes_behind`). Outside an update, a worker left on the older minor
        (its pool's roll failed, or a node kube-aws does not manage) holds
        nothing: the skew policy allows kubelets older than the control plane,
        and no plan would ever be installed otherwise. Unknown counts as none."""
        version = self.plan.get("kubernetesVersion")
        if not version:
            return None
        code, text = self.run(["kubectl", "get", "nodes", "-o", "json"])
        try:
            controllers, workers = upgrade.nodes_behind(jsonio.parse(text, "kubectl get nodes"), version) \
                if code == 0 else ([], [])
        except jsonio.JsonError:
            return None
        if controllers:
            return "plan %s is for Kubernetes %s: it waits until every controller runs it (behind: %s)" \
                % (self.plan_sha, version, ", ".join(controllers))
        if workers and cfn.stack_in_progress(self.aws, self.stack):
            return "plan %s is for Kubernetes %s: it waits until the update has rolled the pools (behind: %s)" \
                % (self.plan_sha, version, ", ".join(workers))
        return None

    def prune_bundles(self):
        d = os.path.join(self.work, "bundles")
        for f in os.listdir(d) if os.path.isdir(d) else []:
            if f != self.plan_sha + ".json":
                try:
                    os.unlink(os.path.join(d, f))
                except OSError:
                    pass

    def install_plan(self, doc, settled):
        """Installs the plan, under the lease, from the record as it is now."""
        record = self.load_installed()  # the last holder may have got further since the tick began
        if outcome(record.doc, self.plan_sha, self.secrets_version, self.releases, time.time()) != INSTALL:
            return 0
        self.record_etag = record.etag
        installed = recorded(record.doc)
        self.rec = dict((n, dict(e)) for n, e in installed.items())
        self.manifest_record = [o for o in record.doc.get("manifestObjects") or []
                                if isinstance(o, list) and len(o) == 4 and all(isinstance(x, str) for x in o)]
        self.record_versions = list(record.doc.get("secretsVersions", [])) if record.doc.get("plan") == self.plan_sha \
            else []
        # Signals nothing waits for any more: noted, so no tick asks again.
        for name, wc in settled:
            if self.rec.get(name, {}).get("waitCondition") == wc:
                self.rec[name]["signalled"] = True
        try:
            secrets.decrypt_plugin_secrets(self.aws, self.runtime, self.node)
        except secrets.SecretsError as e:
            raise Stop("cannot decrypt the plugin secrets: %s" % e)
        self.addons = os.path.join(self.scratch, "plan")
        try:
            os.makedirs(self.tmp, mode=0o700, exist_ok=True)
            os.makedirs(self.scratch, mode=0o700, exist_ok=True)
            bundle.unpack_doc(doc, self.addons, self.store)
        except (bundle.BundleError, OSError) as e:
            raise Stop("cannot unpack the addon bundle %s: %s" % (self.plan_uri, e))
        self.finished = {}
        self.bad = 0
        dropped = sorted(n for n in installed if n not in self.by_name)
        try:
            self.log("plan %s: waiting for the apiserver's /readyz" % self.plan_sha)
            if not self.wait_until(self.plan["readyzTimeoutSeconds"], self.readyz):
                raise Fatal("the apiserver did not answer /readyz within %ss" % self.plan["readyzTimeoutSeconds"])
            if self.plan["helm"]["tiller"].get("install"):
                self.log("installing Tiller in namespace %s" % self.tiller_ns)
                self.install_tiller()
            if self.releases or dropped:
                self.install_helm()
            if self.releases:
                self.log("plan %s: %s" % (self.plan_sha, self.service_route_gate()))
        except Fatal as e:
            self.log(str(e))
            for r in self.releases:
                if not current(installed.get(r["name"]), r):
                    self.finish(r["name"], "failed", str(e) + "\n")
            self.retry_after = int(time.time()) + paths.knob("RETRY_FAILED_SECONDS", DEFAULT_RETRY_FAILED_SECONDS)
            self.record()
            self.join_signals()
            return 1
        self.install_releases(installed)
        self.apply_manifests()
        # Releases the plan dropped, after the rest is in (a replacement may take over first).
        kept = 0
        for name in dropped:
            if self.uninstall(name, installed[name].get("namespace", "")):
                self.log("uninstalled (dropped from the plan)", name)
                with self.record_lock:
                    self.rec.pop(name, None)
                    self.record()
            else:
                kept += 1
        with self.record_lock:
            if self.bad or kept:
                self.retry_after = int(time.time()) + paths.knob("RETRY_FAILED_SECONDS",
                                                                 DEFAULT_RETRY_FAILED_SECONDS)
            else:
                self.retry_after = None
                if self.secrets_version not in self.record_versions:
                    self.record_versions.append(self.secrets_version)
            self.record()
        ok = sum(1 for p in self.finished.values() if p == "ready")
        self.log("done: %d ready, %d failed or skipped, %d dropped; waiting for the signals" % (ok, self.bad,
                                                                                              len(dropped) - kept))
        self.join_signals()
        return 1 if self.bad or kept else 0

    def join_signals(self):
        for t in self.signals:
            t.join()


def on_sigterm(signum, frame):
    # systemd stops the unit with SIGTERM: unwind, so the lease is released
    # and the tmpfs directory removed (finally: in reconcile).
    sys.exit(128 + signum)


def run(argv):
    log = Console("kube-aws-addons")
    if argv:
        log("usage: kube-aws-node reconcile")
        return 2
    try:
        runtime = jsonio.read(paths.etc("runtime.json"))
        reconciler = jsonio.read(paths.etc("addons", "reconciler.json"))
        node = jsonio.read(paths.etc("node.json"))
    except jsonio.JsonError as e:
        log(str(e))
        return 1
    posix_signal.signal(posix_signal.SIGTERM, on_sigterm)
    return Reconciler(log, Aws(runtime["region"]), runtime, reconciler, node).reconcile()


