"""The addon reconciler's helm work, one release at a time: the pinned
helm client (and Tiller in Helm v2 mode), `helm upgrade --install --atomic
--wait` with its CRDs, paused replicas and a stopped installer's pending
release undone, the diagnosis of a release that fails (the stuck container
and its last words), the uninstall of a dropped release, and, after a
restore, the releases helm's own storage holds.

Invariant: every command is an argument list; each release's helm output
goes to its own file; what leaves the node is blanked of secrets. The pure
functions decide; `HelmReleases` (mixed into reconcile.py's Reconciler) runs.
"""
import collections
import json
import os
import shutil
import tarfile

from . import bundle, jsonio, secrets
from .addon_record import Fatal, match_present
from .awscall import AwsError


# The pause `kube-aws update --wait` records on a Deployment, with the count
# it had (src/aws/lifecycle/autoscaler.rs PAUSED_REPLICAS_ANNOTATION), and the label
# that finds a release's Deployments (RELEASE_LABEL there).
PAUSED_REPLICAS = "kube-aws.io/paused-replicas"


RELEASE_LABEL = "app.kubernetes.io/instance"


# Helm's own storage of its releases, which `helm list` reads: Helm 3 keeps
# each revision as a Secret in the release's namespace, labelled owner=helm,
# name, status and version (pkg/storage/driver/secrets.go newSecretsObject,
# v3.16.3; an uninstall deletes them, or leaves status=uninstalled with
# --keep-history); Tiller keeps each as a ConfigMap in its own namespace,
# labelled OWNER=TILLER, NAME, STATUS and VERSION (k8s.io/helm
# pkg/storage/driver/cfgmaps.go, v2.17.0; `helm delete` without --purge
# leaves STATUS=DELETED).
HELM_STORAGE = {3: ("secrets", "owner=helm", "name", "status", "version", "uninstalled"),
                2: ("configmaps", "OWNER=TILLER", "NAME", "STATUS", "VERSION", "DELETED")}


def storage_listing(major, tiller_ns):
    """The kubectl command that lists helm's release storage."""
    kind, selector = HELM_STORAGE[major][:2]
    scope = ["-n", tiller_ns] if major == 2 else ["--all-namespaces"]
    return ["kubectl", "get", kind] + scope + ["-l", selector, "-o", "json"]


def present_releases(listing, major):
    """{(name, namespace)} of the releases whose latest revision is not
    uninstalled, from `kubectl get -o json` of helm's storage (the namespace is
    None for Helm 2, whose release names are cluster-wide). Pure."""
    _, _, name_l, status_l, version_l, gone = HELM_STORAGE[major]
    latest = {}
    for item in (listing or {}).get("items") or []:
        meta = (item.get("metadata") or {}) if isinstance(item, dict) else {}
        labels = meta.get("labels") or {}
        name = labels.get(name_l)
        try:
            version = int(labels.get(version_l, ""))
        except ValueError:
            continue
        if not name:
            continue
        key = (name, meta.get("namespace") if major == 3 else None)
        if key not in latest or version > latest[key][0]:
            latest[key] = (version, labels.get(status_l, ""))
    return set(k for k, (_, status) in latest.items() if status != gone)


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


Problem = collections.namedtuple("Problem", "reason line")


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


def tail(text, n):
    return "\n".join(text.splitlines()[-n:])


class HelmReleases(object):
    """The helm side of the Reconciler (reconcile.py), whose commands
    (`run`, `retried`), log and plan it uses."""

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

    def match_restored(self, snapshot):
        """After a restore (the record's `restoredFrom`): the record made to
        name only the releases that etcd, restored from `snapshot`, holds, as
        helm's storage lists them, and written. A listing that fails changes
        nothing: helm's own answers (release_missing) still tell."""
        code, text = self.run(storage_listing(self.helm_major, self.tiller_ns))
        try:
            listing = json.loads(text[text.index("{"):]) if code == 0 else None
        except ValueError:
            listing = None
        if listing is None:
            self.log("cannot list helm's releases after the restore from %s (%s): going on from the record"
                     % (snapshot, tail(text, 3).strip()))
            return
        struck = match_present(self.rec, present_releases(listing, self.helm_major), self.helm_major)
        for name in struck:
            self.log("not in the restored snapshot %s: struck from the record" % snapshot, name)
        self.log("the record matches the releases the restored snapshot holds: %s"
                 % (", ".join(sorted(self.rec)) or "none"))
        self.record()

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
