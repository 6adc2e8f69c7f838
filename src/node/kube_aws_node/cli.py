"""`kube-aws-node COMMAND [ARGS]`: the dispatch table of the node program.

Invariant: COMMANDS is the one list of subcommands; each names its module and
function, imported only when run. A function marked `aws` gets the node's Aws
helper (region from /etc/kube-aws/runtime.json) as a second argument.
Adding a subcommand is one line here (build.rs ships every module of the
package: src/render/node_program.rs).
"""
import importlib
import sys

from . import jsonio, paths
from .awscall import Aws

# name -> (module, function, wants the Aws helper)
COMMANDS = {
    "bootstrap": ("bootstrap", "run", False),
    "secrets": ("secrets", "run", False),
    "reconcile": ("reconcile", "run", False),
    "csr-approver": ("csr_approver", "main", False),
    "encryption": ("encryption", "main", False),
    "lifecycle": ("etcd_lifecycle", "lifecycle_main", True),
    "etcd-backup": ("etcd_backup", "etcd_backup_main", True),
    "etcd-restore": ("etcd_restore", "etcd_restore_main", True),
    "etcd-maintenance": ("defrag", "maintenance_main", True),
    "certs": ("certs", "main", True),
    "bootstrap-token": ("join_token", "main", True),
    "reconfigure": ("reconfigure", "main", True),
    "etcd-test-restore": ("testrestore", "test_restore_main", True),
}


def runtime_aws():
    """The Aws helper for this node's region (runtime.json)."""
    return Aws(jsonio.read(paths.etc("runtime.json"))["region"])


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print("usage: kube-aws-node {%s} [ARGS]" % ",".join(sorted(COMMANDS)), file=sys.stderr)
        return 2
    module, function, wants_aws = COMMANDS[argv[0]]
    fn = getattr(importlib.import_module("kube_aws_node." + module), function)
    if wants_aws:
        return fn(argv[1:], runtime_aws())
    return fn(argv[1:])
