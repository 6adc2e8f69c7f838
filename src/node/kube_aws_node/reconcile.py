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

The reconciler is four modules: this one drives a plan (the pointer, the
lease, the schedule of releases, the signals and status objects);
addon_record.py holds the installed record and its pure decisions;
helm_release.py the helm side, one release at a time; addon_gates.py the
gates and the plugin manifests. `Reconciler` mixes the last three in.

Invariant: every command is an argument list; each release's helm output
goes to its own file and its log lines carry its name, so nothing
interleaves mid-line; every message leaving the node is blanked of secrets;
filled-in values exist only on tmpfs; the record is written only by the
lease holder, each write conditional on the ETag of the last one read or
written.
"""
import concurrent.futures
import os
import shutil
import signal as posix_signal
import socket
import subprocess
import sys
import threading
import time

from . import bundle, cfn, etcd, jsonio, lease, paths, schedule, secrets, upgrade
from .addon_gates import Gates, reaches
from .addon_record import (DONE, INSTALL, LATER, Fatal, RecordStore, Stop, attach_secrets, current, due_signals,
                           now_iso, outcome, recorded)
from .awscall import Aws, AwsError
from .console import Console
from .helm_release import HelmReleases, tail
from .retry import retry

DEFAULT_CONCURRENCY = 4
# After a run with failures, the same plan is tried again this long after it.
DEFAULT_RETRY_FAILED_SECONDS = 900


class Reconciler(RecordStore, HelmReleases, Gates):
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
        self.instance = jsonio.read(paths.path(paths.INSTANCE_JSON), {}).get("instanceId", "")
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


    # How this host's connections to the kubernetes Service are tried
    # (replaced in tests).
    connect = staticmethod(reaches)


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
        self.lease = lease.Lease(self.aws, self.bucket, self.prefix, self.holder, log=self.log,
                                 instance=self.instance, holder_gone=self.holder_gone)
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

    def holder_gone(self, instance_id):
        """Whether EC2 lists the lease holder's instance as gone (etcd.gone)."""
        return etcd.Node(self.aws, runtime=self.runtime, etcd_json={}).controller_gone(instance_id, self.instance)

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
        try:
            self.log("plan %s: waiting for the apiserver's /readyz" % self.plan_sha)
            if not self.wait_until(self.plan["readyzTimeoutSeconds"], self.readyz):
                raise Fatal("the apiserver did not answer /readyz within %ss" % self.plan["readyzTimeoutSeconds"])
            if record.doc.get("restoredFrom"):
                self.match_restored(record.doc["restoredFrom"])
                installed = dict((n, dict(e)) for n, e in self.rec.items())
            dropped = sorted(n for n in installed if n not in self.by_name)
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


