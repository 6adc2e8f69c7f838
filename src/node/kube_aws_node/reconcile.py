"""`kube-aws-node reconcile`: the addon reconciler, run by
kube-aws-addons.service from its timer on every controller.

It reads the control-plane stack's plan pointer (the SSM parameter named in
/etc/kube-aws/addons/reconciler.json: the addon bundle's S3 URI and sha256)
and, once per plan and secrets version, under an S3 lock so that one
controller does it, installs that plan: wait for /readyz; Helm v2 mode:
install Tiller and wait for it; install the pinned helm client (sha256
checked); then the releases. A release whose wait condition is the one
installed last time (its ID hashes chart, digest, values, namespace) is left
alone and not signalled. The others start as soon as their dependencies are
ready, up to the plan's `concurrency` at once (schedule.py decides): bootstrap
addons first; then the plugin manifests and the Ready-node gate; each
release fetches its chart from S3 (sha256 checked), runs `helm upgrade
--install --wait`, waits for its CRDs to be Established, writes one status
object to S3 and signals its wait condition (cfn.py). A failed release's
dependants are skipped with the reason. Releases of the last installed plan
that this plan no longer lists are uninstalled; what is installed is recorded
in S3 (installedURI) for the next plan, whichever controller installs it.

Invariant: every command is an argument list; each release's helm output
goes to its own file and its log lines carry its name, so nothing
interleaves mid-line; every message leaving the node is blanked of secrets.
"""
import concurrent.futures
import datetime
import os
import shutil
import subprocess
import tarfile
import threading
import time

from . import bundle, cfn, jsonio, locks, paths, schedule, secrets
from .awscall import Aws, AwsError
from .console import Console
from .retry import retry

DEFAULT_CONCURRENCY = 4


class Fatal(Exception):
    """Nothing can be installed: every release is reported failed with this message."""


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def tail(text, n):
    return "\n".join(text.splitlines()[-n:])


class Reconciler(object):
    def __init__(self, log, aws, runtime, reconciler):
        self.log = log
        self.aws = aws
        self.stack = runtime["stackName"]
        self.bucket = runtime["bucket"]
        self.prefix = runtime["keyPrefix"]
        self.secrets_version = runtime.get("secretsVersion") or ""
        self.plan_parameter = reconciler["planParameter"]
        self.installed_uri = reconciler["installedURI"]
        self.work = paths.path(paths.WORK + "/addons")
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

    def must(self, args, out=None):
        code, text = self.run(args, out)
        if code != 0:
            raise RuntimeError(tail(text, 20) or "%s exited %d" % (args[0], code))
        return text

    def retried(self, args, out=None, name=""):
        return retry(lambda: self.must(args, out), self.attempts, self.delay,
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
                return
            time.sleep(delay)
        self.log("cannot signal %s for %s" % (wc, name))

    def finish(self, name, phase, message=""):
        self.finished[name] = phase
        self.status(name, phase, message)
        self.signal(name, "SUCCESS" if phase == "ready" else "FAILURE")
        if phase != "ready":
            self.bad += 1
        self.log(phase, name)

    # --- cluster waits --------------------------------------------------
    def wait_until(self, seconds, probe):
        end = time.time() + seconds
        while True:
            if probe():
                return True
            if time.time() >= end:
                return False
            time.sleep(self.poll)

    def readyz(self):
        return self.run(["kubectl", "get", "--raw=/readyz"])[1].strip() == "ok"

    def a_node_is_ready(self):
        code, text = self.run(["kubectl", "get", "nodes", "-o", 'jsonpath={range .items[*]}'
                               '{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'])
        return code == 0 and "True" in text.split()

    def apply_manifests(self):
        if self.manifests_done:
            return
        self.manifests_done = True
        for m in self.plan.get("manifests", []):
            try:
                self.retried(["kubectl", "apply", "--server-side", "-f", os.path.join(self.addons, m)])
            except RuntimeError:
                self.log("manifest %s could not be applied" % m)

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
        b = self.plan["helm"]["binary"]
        tgz = os.path.join(self.work, "helm.tgz")
        try:
            self.retried(["curl", "-fsSL", "-o", tgz, b["url"]])
            if bundle.sha256_file(tgz) != b["sha256"]:
                raise RuntimeError("helm tarball sha256 differs from the plan")
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
            raise Fatal("cannot install the helm client from %s" % b["url"])

    def describe_failure(self, name, ns, helm_log):
        with open(helm_log, errors="replace") as f:
            out = ["helm failed for %s:" % name, tail(f.read(), 40)]
        out.append("--- pods not running in namespace %s ---" % ns)
        out.append(tail(self.run(["kubectl", "-n", ns, "get", "pods",
                                  "--field-selector=status.phase!=Running,status.phase!=Succeeded"])[1], 20))
        out.append("--- warning events in namespace %s ---" % ns)
        out.append(tail(self.run(["kubectl", "-n", ns, "get", "events", "--field-selector=type=Warning",
                                  "--sort-by=.lastTimestamp"])[1], 20))
        return "\n".join(out) + "\n"

    def wait_crds(self, r, tgz):
        """None when every CRD of the release is Established, else the reason."""
        d = os.path.join(self.work, "crds-" + r["name"])
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
                return "CRD file crds/%s is not in the chart archive" % f
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
        tgz = os.path.join(self.work, name + ".tgz")
        try:
            self.aws(["s3", "cp", "--only-show-errors", r["chartObject"], tgz])
        except AwsError as e:
            return "failed", "%s\ncannot fetch the chart from %s\n" % (e, r["chartObject"])
        if bundle.sha256_file(tgz) != r["sha256"]:
            return "failed", "chart archive %s does not match its sha256 %s\n" % (r["chartObject"], r["sha256"])
        timeout = r["timeoutSeconds"]
        args = [self.helm, "upgrade", "--install", name, tgz, "--namespace", r["namespace"], "--wait",
                "-f", os.path.join(self.addons, r["valuesFile"])]
        if self.helm_major == 2:
            args += ["--timeout", str(timeout), "--tiller-namespace", self.tiller_ns]
        else:
            args += ["--timeout", "%ss" % timeout]
            if r.get("createNamespace"):
                args.append("--create-namespace")
        helm_log = os.path.join(self.work, "helm-%s.log" % name)
        try:
            self.retried(args, out=helm_log, name=name)
        except RuntimeError:
            return "failed", self.describe_failure(name, r["namespace"], helm_log)
        if r.get("crds"):
            why = self.wait_crds(r, tgz)
            if why is not None:
                return "failed", why + "\n"
        return "ready", ""

    def install_guarded(self, r):
        try:
            return self.install(r)
        except Exception as e:  # noqa: BLE001 - one release's bug must not stop the others
            return "failed", "the installer failed on %s: %s: %s\n" % (r["name"], e.__class__.__name__, e)

    def uninstall(self, name, ns):
        if self.helm_major == 2:
            args = [self.helm, "delete", "--purge", name, "--tiller-namespace", self.tiller_ns]
        else:
            args = [self.helm, "uninstall", name, "--namespace", ns, "--wait"]
        try:
            self.retried(args, out=os.path.join(self.work, "helm-%s.log" % name))
            return True
        except RuntimeError:
            return False

    # --- one plan ---------------------------------------------------------
    def load_plan(self, addons):
        self.addons = addons
        self.plan = jsonio.read(os.path.join(addons, "plan.json"))
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
        path = os.path.join(self.work, "installed.json")
        try:
            self.aws(["s3", "cp", "--only-show-errors", self.installed_uri, path], attempts=1)
            doc = jsonio.read(path)
        except (AwsError, jsonio.JsonError):
            doc = {"releases": []}
        return dict((r["name"], r) for r in doc.get("releases", []) if r.get("name"))

    def record(self, kept):
        rel = [{"name": n, "namespace": self.by_name[n]["namespace"],
                "waitCondition": self.by_name[n]["waitCondition"]}
               for n, phase in self.finished.items() if phase == "ready"]
        rel += kept
        path = os.path.join(self.work, "installed.json")
        jsonio.write(path, {"plan": self.plan_sha, "releases": sorted(rel, key=lambda r: r["name"])})
        try:
            self.aws(["s3", "cp", "--only-show-errors", "--content-type", "application/json", path,
                      self.installed_uri])
        except AwsError as e:
            self.log("cannot record the installed releases: %s" % e)

    def install_releases(self, installed):
        """Installs the plan's releases, in parallel as schedule.decide allows."""
        rels = [schedule.Release(r["name"], tuple(r.get("dependsOn") or ()), bool(r.get("bootstrap")))
                for r in self.releases]
        for r in self.releases:
            old = installed.get(r["name"])
            if old is not None and old.get("waitCondition") == r["waitCondition"]:
                # Installed by an earlier plan exactly as this one has it; its
                # wait condition is complete, so nothing waits for a signal.
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
                            gate = self.wait_until(self.plan["nodeReadyTimeoutSeconds"], self.a_node_is_ready)
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
            self.plan_sha, plan_uri = ptr["sha256"], ptr["uri"]
        except (AwsError, jsonio.JsonError, KeyError, TypeError) as e:
            self.log("cannot read the plan pointer %s: %s" % (self.plan_parameter, e))
            return 1
        run_id = self.plan_sha + ("-" + self.secrets_version if self.secrets_version else "")
        done_file = os.path.join(self.work, "done-" + run_id)
        # A plan this controller installed, or saw another controller take, is done.
        if os.path.exists(done_file):
            return 0
        addons = os.path.join(self.work, "plans", self.plan_sha)
        try:
            bundle.unpack(self.aws, plan_uri, self.plan_sha, addons, self.store)
        except (bundle.BundleError, OSError) as e:
            self.log("cannot unpack the addon bundle %s: %s" % (plan_uri, e))
            return 1
        try:
            mine = locks.take(self.aws, self.bucket, "%s/bootstrap/installer-%s" % (self.prefix, run_id))
        except locks.LockError as e:
            self.log(str(e))
            return 1
        if not mine:
            self.log("plan %s is another controller's to install" % self.plan_sha)
            open(done_file, "w").close()
            return 0
        self.load_plan(addons)
        self.finished = {}
        self.bad = 0
        installed = self.load_installed()
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
        except Fatal as e:
            self.log(str(e))
            for r in self.releases:
                self.finish(r["name"], "failed", str(e) + "\n")
            self.join_signals()
            return 1
        self.install_releases(installed)
        self.apply_manifests()
        # Releases the plan dropped, after the rest is in (a replacement may take over first).
        kept = []
        for name in dropped:
            ns = installed[name].get("namespace", "")
            if self.uninstall(name, ns):
                self.log("uninstalled (dropped from the plan)", name)
            else:
                self.log("could not be uninstalled; see %s" % os.path.join(self.work, "helm-%s.log" % name), name)
                kept.append({"name": name, "namespace": ns, "waitCondition": installed[name].get("waitCondition", "")})
        self.record(kept)
        open(done_file, "w").close()
        ok = sum(1 for p in self.finished.values() if p == "ready")
        self.log("done: %d ready, %d failed or skipped, %d dropped; waiting for the signals" % (ok, self.bad,
                                                                                              len(dropped)))
        self.join_signals()
        return 1 if self.bad else 0

    def join_signals(self):
        for t in self.signals:
            t.join()


def run(argv):
    log = Console("kube-aws-addons")
    if argv:
        log("usage: kube-aws-node reconcile")
        return 2
    try:
        runtime = jsonio.read(paths.etc("runtime.json"))
        reconciler = jsonio.read(paths.etc("addons", "reconciler.json"))
    except jsonio.JsonError as e:
        log(str(e))
        return 1
    return Reconciler(log, Aws(runtime["region"]), runtime, reconciler).reconcile()


