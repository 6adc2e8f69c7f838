"""Where things are on a node, and the timing knobs tests shorten.

Invariant: every path goes through `path()`, so KUBE_AWS_ROOT (tests only)
prefixes all of them; every knob is read here, from the environment, at call
time.
"""
import os

ETC = "/etc/kube-aws"
SECRETS = "/run/kube-aws/secrets"
WORK = "/var/lib/kube-aws"
# The node's instance id, node name and MAC (IMDS, bootstrap's metadata step).
INSTANCE_JSON = WORK + "/instance.json"
HELM_BIN_DIR = "/usr/local/bin"
ADMIN_CONF = "/etc/kubernetes/admin.conf"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"


def root():
    return os.environ.get("KUBE_AWS_ROOT", "")


def path(p):
    """`p` (absolute, as on a node) under KUBE_AWS_ROOT."""
    return root() + p


def etc(*parts):
    return os.path.join(path(ETC), *parts)


def knob(name, default):
    """A number from the environment (KUBE_AWS_<NAME>), else `default`."""
    v = os.environ.get("KUBE_AWS_" + name)
    if v is None or v == "":
        return default
    try:
        return float(v) if "." in v else int(v)
    except ValueError:
        return default
