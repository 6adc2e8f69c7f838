"""What a node's boot checks on its host before it configures anything:
the Kubernetes packages baked into the image at the pinned versions, the
process's capabilities, the node's IP, and containerd's configuration for
what the host allows. Python 3.9, standard library only.

Invariant: pure, or reads only (`/proc`, the commands' versions); nothing
here changes the host.
"""
import ipaddress
import re


# The commands of the Kubernetes packages (node.json kubernetesPackages,
# `NAME-VERSION` specs) and how each prints its version.
PACKAGE_COMMANDS = {
    "kubelet": ["kubelet", "--version"],  # Kubernetes v1.35.4
    "kubeadm": ["kubeadm", "version", "-o", "short"],  # v1.35.4
    "kubectl": ["kubectl", "version", "--client"],  # Client Version: v1.35.4
    "cri-tools": ["crictl", "--version"],  # crictl version v1.34.0
}


VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)\b")


def version_matches(spec_version, found, name):
    """Whether `found` ("1.35.4") is what the spec's version ("1.35.4", or
    "1.35.*" for cri-tools) pins. cri-tools is released per minor and pinned to
    the minor; Kubernetes itself pairs a release with the previous minor's
    crictl (build/dependencies.yaml of v1.35 names crictl 1.34.0), so that one
    counts too."""
    want = spec_version.split(".")
    have = found.split(".")
    if want[-1] == "*":
        if name == "cri-tools" and have[0] == want[0] and want[1].isdigit():
            return have[1] in (want[1], str(int(want[1]) - 1))
        return have[:len(want) - 1] == want[:-1]
    return have == want


def baked_packages(specs, run):
    """(True, notes) when every package of `specs` is installed at its pinned
    version (a baked image: the package manager is not needed), else (False,
    notes); `run(args)` returns a command's stdout or None when it cannot run.
    The notes say what was found, for the boot log."""
    notes = []
    baked = True
    for spec in specs:
        name, _, want = spec.rpartition("-")
        command = PACKAGE_COMMANDS.get(name)
        if not name or command is None:
            return False, ["no way to tell the installed version of %s" % spec]
        out = run(command)
        m = VERSION.search(out or "")
        if not m:
            notes.append("%s: not installed" % command[0])
            baked = False
            continue
        found = ".".join(m.groups())
        if version_matches(want, found, name):
            notes.append("%s %s is installed (%s)" % (command[0], found, spec))
        else:
            notes.append("%s %s is installed, not %s" % (command[0], found, spec))
            baked = False
    return baked, notes


def has_cap(name_bit, status_path="/proc/self/status"):
    """Whether this process has capability number `name_bit` (CapEff)."""
    try:
        with open(status_path) as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> name_bit & 1)
    except (OSError, ValueError):
        pass
    return True


def containerd_config(default, pause_image, can_lower_oom):
    """containerd's config from `containerd config default`: runc under the
    systemd cgroup driver (kubeadm's default for the kubelet), the pause image
    kubeadm uses as the sandbox image (containerd's default is an older one,
    which kubeadm warns about and a node without a registry cannot pull), and,
    where this node may not lower OOM scores (no CAP_SYS_RESOURCE: an
    unprivileged or sandboxed host), pods' scores no lower than containerd's
    own, or every pod sandbox fails to start."""
    text = default.replace("SystemdCgroup = false", "SystemdCgroup = true")
    if pause_image:
        text = re.sub(r'(?m)^(\s*sandbox(?:_image)? = )["\'][^"\'\n]*["\']', lambda m: m.group(1) + '"%s"' % pause_image,
                      text)
    if not can_lower_oom:
        text = text.replace("restrict_oom_score_adj = false", "restrict_oom_score_adj = true")
    return text


def node_ip(address):
    """IMDS local-ipv4 when it is an IPv4 address, else "" (no --node-ip: the
    kubelet waits for the cloud controller manager, as before)."""
    try:
        return str(ipaddress.IPv4Address(address.strip()))
    except (ipaddress.AddressValueError, AttributeError):
        return ""
