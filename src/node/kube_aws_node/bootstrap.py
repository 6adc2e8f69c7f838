"""`kube-aws-node bootstrap`: a node's boot, run by cloud-init (through the
user-data stub) once the full cloud-config's files are in place. Every value
comes from the data files /etc/kube-aws/{runtime,node,kubeadm}.json.

Steps: metadata (IMDS: instance id, private DNS name as node name, MAC),
network (systemd-networkd manages the primary ENI only), secrets (secrets.py:
decrypt, place the cluster PKI on controllers, fill plugin files), packages
(the Kubernetes packages at the exact patch; none when the image
already has them at those versions, as a baked AMI does), kernel (modprobe;
a module the kernel already has is fine when modprobe cannot load it),
containerd (kubeadm's pause image as the sandbox image), plugin units; then the first controller (the S3 init lock, If-None-Match) runs
`kubeadm init` with the bundle's token (valid for the join token TTL) and
publishes the first minted join token (join_token.py); other controllers join the control
plane one at a time (the S3 join lock, released after the join, broken when
stale; under it, stale etcd members are pruned first), except that the replacement of a single controller restores etcd's
newest snapshot and inits on it (etcd_restore.restore_if_needed); workers join.
Every join uses the controllers' current join token (join_token.current). Controllers then start the CSR approver's and the addon
reconciler's timers (the reconciler installs the CNI, without which no node
is Ready). Each node signals its auto scaling group's CreationPolicy only
once its own Node object is Ready (`kubectl get node NAME` with admin.conf on
controllers, the kubelet's kubeconfig on workers), or FAILURE with the
reason after a timeout.

Invariant: whatever step fails signals FAILURE at once (not after the
group's timeout) and publishes a report (node, role, step, command, the last
lines of this boot's log with every decrypted secret blanked) to
s3://<bucket>/<prefix>/status/nodes/<instance-id>.json, which
`kube-aws status` prints; kubeadm's own output (it shows the token) never
reaches the boot log.
"""
import contextlib
import io
import os
import re
import signal
import subprocess
import time

from . import (apihost, cfn, etcd, etcd_lifecycle, etcd_restore, fsutil, health, join_token, jsonio, kubeadmcfg, locks,
               paths, reconfigure, restore_takeover, secrets, upgrade)
from .awscall import Aws, AwsError
from .host_checks import baked_packages, containerd_config, has_cap, node_ip
from .retry import poll
from .console import Console

IMDS = "http://169.254.169.254/latest"
NODE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


def how_it_ended(code):
    """`exit 1`, or `killed by signal 9 (SIGKILL)` for the negative code
    subprocess gives a command a signal ended (kube-aws status says the same:
    src/aws/wait/mod.rs NodeReport::how_it_ended)."""
    if code >= 0:
        return "exit %d" % code
    try:
        return "killed by signal %d (%s)" % (-code, signal.Signals(-code).name)
    except ValueError:
        return "killed by signal %d" % -code


# Kernel modules the node needs, and what shows the running kernel has each
# (loaded, or built in) when modprobe cannot load it: a container node has no
# /lib/modules of the host's kernel.
KERNEL_FEATURES = {
    "overlay": "/sys/module/overlay",
    "br_netfilter": "/proc/sys/net/bridge/bridge-nf-call-iptables",
}


CAP_SYS_RESOURCE = 24


class StepFailed(Exception):
    def __init__(self, code, command, message=""):
        Exception.__init__(self, message or command)
        self.code = code
        self.command = command
        self.message = message


def node_ready(node):
    """(ready, reason) of a Node object as `kubectl get node -o json` prints it."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return True, ""
            return False, "%s: %s" % (c.get("reason", ""), c.get("message", ""))
    return False, "no Ready condition yet"


class Boot(object):
    def __init__(self):
        self.rt = jsonio.read(paths.etc("runtime.json"))
        self.node = jsonio.read(paths.etc("node.json"))
        self.role = self.node["role"]
        self.work = paths.path(paths.WORK)
        os.makedirs(self.work, exist_ok=True)
        self.log_path = os.path.join(self.work, "bootstrap.log")
        self.say = Console("kube-aws", tee=self.log_path, timestamps=False)
        self.store = secrets.store_dir()
        self.aws = Aws(self.rt["region"], scrub=self.blank)
        self.step_name = "start"
        self.instance_id = ""
        self.node_name = ""

    def blank(self, text):
        try:
            return secrets.blank(text, self.store)
        except OSError:
            return "(could not be blanked of secrets, so it is left out)"

    def step(self, name):
        self.step_name = name
        self.say("step " + name)

    def sh(self, args, capture=False, private_out=None):
        """Runs a command; its output goes to the console and the boot log, or to the
        private file `private_out` (0600); with `capture`, stdout is returned."""
        command = " ".join(args)
        try:
            if private_out is not None:
                fd = os.open(private_out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
                out = ""
            elif capture:
                p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   universal_newlines=True, errors="replace")
                self.say.raw(p.stderr)
                out = p.stdout
            else:
                p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, universal_newlines=True, errors="replace")
                for line in p.stdout:
                    self.say.raw(line)
                p.wait()
                out = ""
        except OSError as e:
            self.say("%s: %s" % (args[0], e.strerror))
            raise StepFailed(127, command)
        if p.returncode != 0:
            raise StepFailed(p.returncode, command)
        return out

    # --- signals and the failure report ------------------------------------
    def unique_id(self):
        return self.instance_id or os.uname()[1]

    def signal(self, status):
        cfn.signal(self.aws, self.rt["stackName"], self.rt["asgLogicalId"], self.unique_id(), status)

    def report(self, code, command):
        """The failure report, blanked of every secret this node decrypted. Best effort."""
        lines = paths.knob("REPORT_LINES", 60)
        try:
            with open(self.log_path, errors="replace") as f:
                log = "".join(f.readlines()[-lines:])
        except OSError:
            log = ""
        out = os.path.join(self.work, "failure.json")
        jsonio.write(out, {
            "instanceId": self.unique_id(),
            "nodeName": self.node_name,
            "role": self.rt.get("role", self.role),
            "stack": self.rt.get("stackName", ""),
            "asgLogicalId": self.rt.get("asgLogicalId", ""),
            "step": self.step_name,
            "exitCode": code,
            "command": self.blank(command).strip(),
            "log": self.blank(log),
            "timestamp": int(time.time()),
        }, mode=0o600)
        try:
            self.aws(["s3", "cp", "--only-show-errors", "--sse", "AES256", "--content-type", "application/json",
                      out, "s3://%s/%s/status/nodes/%s.json" % (self.rt["bucket"], self.rt["keyPrefix"],
                                                                self.unique_id())])
        except AwsError as e:
            self.say("cannot publish the failure report: %s" % e)

    def fail(self, code, command):
        self.say("step %s failed (%s): %s" % (self.step_name, how_it_ended(code), self.blank(command)))
        try:
            self.report(code, command)
        except Exception as e:  # noqa: BLE001 - the FAILURE signal matters more than the report
            self.say("cannot write the failure report: %s" % e.__class__.__name__)
        self.signal("FAILURE")
        if self.role == "controller":
            # Outside a stack operation the signal goes nowhere: out of service.
            if health.mark_unhealthy(self.aws, self.instance_id or ""):
                self.say("marked this controller Unhealthy in its group: it will be replaced")
        return code or 1

    # --- steps --------------------------------------------------------------
    def imds(self, token, what):
        return self.sh(["curl", "-fsS", "-H", "X-aws-ec2-metadata-token: " + token, IMDS + "/meta-data/" + what],
                       capture=True).strip()

    def metadata(self):
        self.step("metadata")
        token = self.sh(["curl", "-fsS", "-X", "PUT", "-H", "X-aws-ec2-metadata-token-ttl-seconds: 300",
                         IMDS + "/api/token"], capture=True).strip()
        self.instance_id = self.imds(token, "instance-id")
        # The node's name is its private DNS name, as EC2 (and the cloud
        # controller manager) knows it; kubeadm gets it as data, in its config.
        name = self.imds(token, "local-hostname").lower()
        mac = self.imds(token, "mac").lower()
        if not NODE_NAME.fullmatch(name):
            raise StepFailed(1, "IMDS local-hostname",
                             "IMDS local-hostname %r is not a DNS name Kubernetes accepts as a node name" % name)
        if not MAC.fullmatch(mac):
            raise StepFailed(1, "IMDS mac", "IMDS mac %r is not a MAC address" % mac)
        self.node_name = name
        self.mac = mac
        try:
            self.local_ipv4 = self.imds(token, "local-ipv4")
        except StepFailed:
            self.local_ipv4 = ""
        jsonio.write(paths.path(paths.INSTANCE_JSON),
                     {"instanceId": self.instance_id, "nodeName": name, "mac": mac})

    def network(self):
        # AL2023's amazon-ec2-net-utils makes systemd-networkd manage every ENI
        # (80-ec2.network), which races the VPC CNI on the ENIs it attaches. As
        # the EKS AMI does (awslabs/amazon-eks-ami nodeadm
        # internal/system/networking.go), match that network to the primary ENI
        # only; the udev rule for hot-plugged ENIs is masked by the empty
        # /etc/udev/rules.d/99-vpc-policy-routes.rules cloud-init writes.
        self.step("network")
        fsutil.write_atomic(
            paths.path("/etc/systemd/network/80-ec2.network.d/10-kube-aws-primary-eni-only.conf"),
            ("# kube-aws: systemd-networkd manages the primary ENI only; the VPC CNI owns the others.\n"
             "[Match]\nPermanentMACAddress=%s\n" % self.mac).encode("utf-8"), mode=0o644)
        self.sh(["networkctl", "reload"])

    def host(self):
        self.step("secrets")
        self.say("secrets: AWS calls in %s" % self.aws.backend())
        try:
            secrets.decrypt_all(self.aws, self.rt, self.node)
        except secrets.SecretsError as e:
            raise StepFailed(1, "kube-aws-node secrets", str(e))
        # The Kubernetes packages, pinned to the exact patch (node.json). The
        # repository excludes them so no later `dnf upgrade` moves them.
        # An image that already has them at the exact version (a baked AMI)
        # needs no package manager; Amazon Linux 2023 installs them.
        self.step("packages")
        specs = list(self.node["kubernetesPackages"])
        baked, notes = baked_packages(specs, self.output_of)
        for n in notes:
            self.say(n)
        if baked:
            self.say("the Kubernetes packages are installed at the pinned versions: no dnf install")
        else:
            self.sh(["dnf", "install", "-y", "--disableexcludes=kubernetes"] + specs)
        self.step("kernel")
        for module, present in sorted(KERNEL_FEATURES.items()):
            try:
                self.sh(["modprobe", module])
            except StepFailed:
                if not os.path.exists(present):
                    raise
                self.say("the kernel has %s already (%s)" % (module, present))
        self.sh(["sysctl", "--system"], capture=True)
        self.step("containerd")
        config = containerd_config(self.sh(["containerd", "config", "default"], capture=True), self.pause_image(),
                                   has_cap(CAP_SYS_RESOURCE))
        fsutil.write_atomic(paths.path("/etc/containerd/config.toml"), config.encode("utf-8"), mode=0o644)
        self.sh(["systemctl", "daemon-reload"])
        # A restart, not `enable --now`: on an image where containerd already
        # runs (a baked AMI that enables it) the new config must take effect.
        self.sh(["systemctl", "enable", "containerd"])
        self.sh(["systemctl", "restart", "containerd"])
        self.sh(["systemctl", "enable", "kubelet"])
        self.step("plugin-units")
        for unit in self.node.get("enableUnits", []):
            # `--`: a unit name is never read as an option.
            self.sh(["systemctl", "enable", "--now", "--", unit])

    def output_of(self, args):
        """A command's stdout, or None when it cannot run or fails."""
        try:
            p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               universal_newlines=True, errors="replace")
        except OSError:
            return None
        return p.stdout if p.returncode == 0 else None

    def pause_image(self):
        """The pause image this kubeadm uses (`kubeadm config images list`), or ""."""
        out = self.output_of(["kubeadm", "config", "images", "list", "--kubernetes-version",
                              "v" + self.node["kubernetesVersion"].lstrip("v")]) or ""
        return next((line.strip() for line in out.splitlines() if "/pause:" in line), "")

    def kubeadm_patches(self):
        """The plugin patches of /etc/kube-aws/kubeadm.d (reconfigure.py reads them the same way)."""
        return reconfigure.kubeadm_patches()

    def join_token(self):
        """The controllers' current join token (join_token.py), kept in the
        store so that every report blanks it."""
        self.step("join-token")
        try:
            token = join_token.current(self.aws, join_token.settings(self.node)["parameter"], say=self.say)
        except join_token.TokenError as e:
            raise StepFailed(1, "read the join token", e.message)
        target = os.path.join(self.store, "kubeadm", "join-token")
        os.makedirs(self.store, mode=0o700, exist_ok=True)
        os.chmod(self.store, 0o700)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fsutil.write_atomic(target, token.encode("utf-8"))
        return token

    def kubeadm_config(self, mode, name="kubeadm.yaml"):
        if mode == "init":
            # The bundle's token (controllers only) joins nothing for long: it
            # expires after the TTL, and joins use the minted ones.
            with open(os.path.join(self.store, "kubeadm", "bootstrap-token")) as f:
                token = f.read().strip()
        else:
            token = self.join_token()
            self.step("kubeadm-join")
        version = self.sh(["kubeadm", "version", "-o", "short"], capture=True).strip()
        ttl = join_token.settings(self.node)["ttl"]
        docs = jsonio.read(paths.etc("kubeadm.json"))["documents"]
        if mode == "init":
            # The cluster-wide documents come with the addon plan, not the
            # user data (reconfigure.py): a change of them replaces no node.
            try:
                docs = reconfigure.with_published(docs, self.published)
            except reconfigure.ReconfigureError as e:
                raise StepFailed(1, "read the kubeadm configuration", e.message)
        path = os.path.join(self.work, name)
        documents = kubeadmcfg.documents(docs, self.rt, self.node_name, mode, token, version, ttl,
                                         node_ip=node_ip(getattr(self, "local_ipv4", "")))
        fsutil.write_atomic(path, kubeadmcfg.text(
            kubeadmcfg.patch(documents, self.kubeadm_patches(), mode)).encode("utf-8"))
        return path

    def upgrade_config(self, version):
        """The UpgradeConfiguration file of `kubeadm upgrade apply|node` (kubeadmcfg.upgrade_documents)."""
        path = os.path.join(self.work, "kubeadm-upgrade-config.yaml")
        fsutil.write_atomic(path, kubeadmcfg.text(
            kubeadmcfg.upgrade_documents(version, self.kubeadm_patches())).encode("utf-8"))
        return path

    def published(self):
        """The addon plan's ClusterConfiguration and KubeletConfiguration (reconfigure.py)."""
        return reconfigure.published_documents(self.aws, self.rt, self.node, self.work, self.store)

    def lock_key(self, name):
        return "%s/bootstrap/%s" % (self.rt["keyPrefix"], name)

    def join_control_plane(self):
        # Two `kubeadm join --control-plane` at once race on etcd membership:
        # one joins at a time, under the join lock.
        self.step("join-lock")
        key = "%s/%s" % (self.rt["keyPrefix"], locks.JOIN_LOCK)
        try:
            etag = locks.acquire(self.aws, self.rt["bucket"], key, self.unique_id(),
                          wait_seconds=paths.knob("JOIN_LOCK_WAIT", 1800),
                          stale_seconds=paths.knob("JOIN_LOCK_STALE", 1800),
                          poll_seconds=paths.knob("JOIN_LOCK_POLL", 10), log=self.say)
        except locks.LockError as e:
            raise StepFailed(1, "take the join lock", str(e))
        try:
            self.prune_stale_members()
            self.step("kubeadm-join")
            config = self.kubeadm_config("control-plane")
            # This controller's ClusterConfiguration and KubeletConfiguration
            # reach kubeadm-config and kubelet-config first, and a newer
            # controller upgrades the cluster as it joins (upgrade.py), all
            # under the join lock: one controller at a time.
            try:
                upgrade.Upgrader(self, self.node["kubernetesVersion"]).join(
                    self.kubeadm_config("init", "kubeadm-upgrade.yaml"),
                    lambda: self.sh(["kubeadm", "join", "--config", config]))
            except upgrade.UpgradeError as e:
                self.withdraw_member()
                raise StepFailed(1, "kubernetes upgrade", str(e))
            except StepFailed:
                self.withdraw_member()
                raise
        finally:
            try:
                if not locks.release(self.aws, self.rt["bucket"], key, etag):
                    self.say("the join lock was taken over after it went stale: left to its new holder")
            except AwsError as e:
                self.say("cannot release the join lock (it goes stale): %s" % e)

    def prune_stale_members(self):
        """Under the join lock, before the join adds a member: removes the
        members of controllers that are gone without their lifecycle hook
        (a lost instance, a hook past its timeout), by the watch's own rules
        (etcd.py: seen stale twice a minute apart, a minority at most). A
        member left behind would count in the quorum the join needs. The
        check's failure does not stop the join: it is the old behaviour, and
        the watch on the other controllers keeps looking every minute."""
        self.step("etcd-prune")
        # lifecycle_main print()s what it finds and removes: into the boot log
        # (the real-node bed found those lines missing from it, left in the
        # block-buffered stdout until the program exited; tests/it/real_node.rs).
        out, code, error = io.StringIO(), 0, None
        try:
            with contextlib.redirect_stdout(out):
                code = etcd_lifecycle.lifecycle_main(["prune"], self.aws)
        except Exception as e:  # noqa: BLE001 - see the docstring
            error = e
        for line in out.getvalue().splitlines():
            self.say(self.blank(line))
        if error is not None:
            self.say("cannot check for stale etcd members (%s): joining anyway" % self.blank(str(error)))
        elif code != 0:
            self.say("the stale etcd member check exited %d: joining anyway" % code)

    def withdraw_member(self):
        """The join failed: before the join lock is released, the etcd member
        it may have added is taken back (etcd_lifecycle.py `withdraw`), so that the
        next joiner and the quorum see the membership as it was before. Its
        own failure is said and does not hide the join's."""
        out, code, error = io.StringIO(), 0, None
        try:
            with contextlib.redirect_stdout(out):
                code = etcd_lifecycle.lifecycle_main(["withdraw"], self.aws)
        except Exception as e:  # noqa: BLE001 - the join's failure is the one reported
            error = e
        for line in out.getvalue().splitlines():
            self.say(self.blank(line))
        if error is not None:
            self.say("cannot take back this join's etcd member (%s): the others' lifecycle watch prunes it "
                     "once this instance is gone" % self.blank(str(error)))
        elif code != 0:
            self.say("the failed join's etcd member was not taken back (exit %d): the others' lifecycle watch "
                     "prunes it once this instance is gone" % code)

    def kubeadm(self):
        if self.role != "controller":
            self.step("kubeadm-join")
            self.sh(["kubeadm", "join", "--config", self.kubeadm_config("worker")])
            return
        self.step("init-lock")
        try:
            first = locks.take(self.aws, self.rt["bucket"], self.lock_key("init-lock"), self.unique_id())
        except locks.LockError as e:
            raise StepFailed(1, "take the init lock", str(e))
        if not first:
            self.join_or_restore()
            return
        self.init()
        self.after_init(None, restored=False)

    def init(self, extra=()):
        self.step("kubeadm-init")
        config = self.kubeadm_config("init")
        # Until the bootstrap ends, this controller's API is the only one (apihost.py).
        self.api_pinned = apihost.pin(getattr(self, "local_ipv4", ""), self.rt["apiEndpoint"], self.say)
        # kubeadm prints the join commands with the token: keep them out of the
        # boot log (cloud-init-output.log), in a private file.
        init_log = os.path.join(self.work, "kubeadm-init.log")
        try:
            self.sh(["kubeadm", "init", "--config", config] + list(extra), private_out=init_log)
        except StepFailed as e:
            self.say("kubeadm init failed; its output is in %s (it may show the bootstrap token)" % init_log)
            raise e
        # Joining nodes wait for the first minted token (join_token.current).
        self.step("join-token")
        code = join_token.main([], self.aws, instance={"instanceId": self.unique_id(), "nodeName": self.node_name},
                               say=self.say)
        if code != 0:
            raise StepFailed(code, "kube-aws-node bootstrap-token")

    def join_or_restore(self):
        """A controller of a cluster that already existed: join it, or, when
        its only controller was replaced (one controller, no API answers),
        restore etcd's newest snapshot and `kubeadm init` on it
        (etcd_restore.restore_if_needed decides; docs/deploy.md "Updating safely").
        When the decision cannot be made (no settings parameter, EC2 or S3
        unreachable), it joins, as a controller always did."""
        self.step("etcd-restore-check")
        try:
            plan = etcd_restore.restore_if_needed(self.aws, say=self.say)
        except Exception as e:  # noqa: BLE001 - any failure falls back to the join
            self.say("cannot decide on an etcd restore (%s): joining" % self.blank(str(e)))
            plan = {"action": "join"}
        if plan["action"] == "fail":
            raise StepFailed(1, "restore etcd", plan.get("reason", ""))
        if plan["action"] == "restored":
            # Never an older control plane over a newer one's data (upgrade.py).
            recorded = self.recorded_version()
            why = upgrade.restore_refusal(recorded, self.node["kubernetesVersion"])
            if why:
                raise StepFailed(1, "restore etcd", why)
            # kubeadm's preflight refuses a non-empty /var/lib/etcd: it now
            # holds the restored snapshot on purpose.
            self.init(["--ignore-preflight-errors=DirAvailable--var-lib-etcd"])
            # The snapshot's old controllers out of the API before the
            # others join (etcd_restore.finish_restore says why).
            try:
                etcd_restore.finish_restore(etcd.Node(self.aws, etcd.imds_get), plan, self.node_name, say=self.say)
            except Exception as e:  # noqa: BLE001 - the joiners then wait out their limit and join
                self.say("cannot finish the restore's cleanup: %s" % self.blank(str(e)))
            # A snapshot of an older control plane: upgraded as an HA
            # cluster's first new controller upgrades it (upgrade.py).
            self.after_init(recorded, restored=True)
            return
        self.join_control_plane()

    def recorded_version(self):
        """The version the control plane last reached (upgrade.py's status object), or None."""
        return upgrade.recorded_version(self.aws, self.rt["bucket"], self.rt["keyPrefix"], self.work)

    def after_init(self, recorded, restored):
        try:
            restore_takeover.after_init(self, self.node["kubernetesVersion"], recorded, restored)
        except upgrade.UpgradeError as e:
            raise StepFailed(1, "kubernetes upgrade", str(e))

    def wait_node_ready(self):
        """Returns once this node's Node object is Ready; StepFailed with the reason after the timeout."""
        self.step("node-ready")
        # A kubelet's credentials may read its own Node object (the Node
        # authorizer: "Kubelets are limited to reading their own Node objects",
        # https://kubernetes.io/docs/reference/access-authn-authz/node/).
        conf = paths.ADMIN_CONF if self.role == "controller" else paths.KUBELET_CONF
        args = ["kubectl", "--kubeconfig", paths.path(conf), "get", "node", self.node_name, "-o", "json"]
        limit = paths.knob("NODE_READY_TIMEOUT", 900)
        last = {"reason": ""}

        def ready():
            p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, errors="replace")
            if p.returncode != 0:
                last["reason"] = (p.stderr.strip().splitlines() or ["kubectl exited %d" % p.returncode])[-1]
                return False
            try:
                ok, last["reason"] = node_ready(jsonio.parse(p.stdout, "kubectl get node"))
            except jsonio.JsonError as e:
                ok, last["reason"] = False, str(e)
            return ok
        if not poll(ready, limit, paths.knob("POLL_INTERVAL", 5)):
            raise StepFailed(1, " ".join(args), "node %s is not Ready after %ss: %s" % (self.node_name, limit,
                                                                                       last["reason"]))
        self.say("node %s is Ready" % self.node_name)

    def boot(self):
        try:
            return self.boot_steps()
        finally:
            if getattr(self, "api_pinned", False):
                apihost.unpin()

    def boot_steps(self):
        try:
            self.metadata()
            self.network()
            self.host()
            self.kubeadm()
            # What this node joined (or initialized) with, then the timer that
            # applies a later ClusterConfiguration or KubeletConfiguration in
            # place (reconfigure.py).
            self.step("reconfigure-timer")
            reconfigure.record_boot(self.role, lambda args: self.sh(args, capture=True), self.rt, self.node_name,
                                    self.say, self.published)
            self.sh(["systemctl", "enable", "--now", "kube-aws-reconfigure.timer"])
            if self.role == "controller":
                # The reconciler installs the CNI: no node is Ready before it runs.
                self.step("timers")
                # Approves kubelet serving certificates (serverTLSBootstrap) that
                # match the cluster's instances; see kube-aws-csr-approver.
                self.sh(["systemctl", "enable", "--now", "kube-aws-csr-approver.timer"])
                self.step("installer")
                self.sh(["systemctl", "enable", "--now", "kube-aws-addons.timer"])
                # Mints join tokens before the published one is half through its TTL.
                self.sh(["systemctl", "enable", "--now", "kube-aws-bootstrap-token.timer"])
            self.wait_node_ready()
        except StepFailed as e:
            if e.message:
                self.say(self.blank(e.message))
            return self.fail(e.code, e.command)
        except Exception as e:  # noqa: BLE001 - any failure must signal, not leave the group waiting
            self.say(self.blank("%s: %s" % (e.__class__.__name__, e)))
            return self.fail(1, "kube-aws-node bootstrap")
        self.signal("SUCCESS")
        return 0


def run(argv):
    if argv:
        Console("kube-aws")("usage: kube-aws-node bootstrap")
        return 2
    return Boot().boot()
