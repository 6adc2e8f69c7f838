"""The API's name is this controller while it initialises the cluster.

`kubeadm init` reaches the API server it has just started through
admin.conf, whose server is the cluster's endpoint (the API load balancer's
name): its upload-config phase creates the admin ClusterRoleBinding there,
and the bootstrap's steps after it (the first join token, an upgrade after a
restore, the Ready wait) use the same file. At `up` every controller is
registered in the load balancer's target group as it launches and none
answers yet; a Network Load Balancer whose targets all fail their health
checks fails open, routing to every target whatever its health (Elastic
Load Balancing, "Health checks for Network Load Balancer target groups").
Until this controller has passed two checks (20 s: src/render/cfn/network.rs),
a connection may reach a controller with no API server and be refused, and
`kubeadm init` fails ("could not bootstrap the admin user ... connection
refused": seen on the real-node bed when the second of three controllers won
the init lock). Only this node's API server exists then, so from just before
`kubeadm init` until the bootstrap ends, whatever its outcome, the name
resolves here through one /etc/hosts line. Joining nodes never pin: their
discovery needs a controller that already serves.

Invariant: `pin` adds exactly one marked line, first in the file (after
removing any earlier marked line), `unpin` removes the marked lines and nothing else; both
replace the file atomically and keep its mode. `pinned` is pure.
"""
import ipaddress
import os

from . import fsutil, paths

HOSTS = "/etc/hosts"
MARK = "# kube-aws: the API's name is this controller until its bootstrap ends"


def without_pin(text):
    return "".join(line for line in text.splitlines(True) if not line.rstrip("\n").endswith(MARK))


def pinned(text, ip, name):
    """`text` (an /etc/hosts) with one marked line resolving `name` to `ip`,
    first: glibc answers from the first line naming a host, Go's resolver
    dials the addresses of every such line in file order."""
    rest = without_pin(text)
    if rest and not rest.endswith("\n"):
        rest += "\n"
    return "%s %s %s\n" % (ip, name, MARK) + rest


def _rewrite(change):
    p = paths.path(HOSTS)
    try:
        st = os.stat(p)
        with open(p) as f:
            text = f.read()
    except FileNotFoundError:
        st, text = None, ""
    new = change(text)
    if new != text:
        fsutil.write_atomic(p, new.encode("utf-8"), mode=0o644, like=st)


def pin(ip, name, say):
    """Resolves `name` to `ip` on this node; says why not when `ip` is not an
    address (an IMDS without local-ipv4): the boot goes on without it."""
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        say("no address of this node (%r): the API's name is left to DNS" % (ip,))
        return False
    _rewrite(lambda text: pinned(text, ip, name.lower()))
    say("the API's name %s resolves to this controller (%s) until its bootstrap ends" % (name.lower(), ip))
    return True


def unpin():
    _rewrite(without_pin)
