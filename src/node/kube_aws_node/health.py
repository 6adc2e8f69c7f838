"""A controller that fails its bootstrap takes itself out of service.

Invariant: only a controller calls it, only on its own instance, and only
after a bootstrap step failed; it never raises (the FAILURE signal and the
failure report come first). During a stack operation the FAILURE signal
fails the group's CreationPolicy or rolling update; outside one (a
replacement after a scale-in, a health replacement, a Spot interruption)
that signal goes nowhere, and without this the broken controller would stay
in service. Marked Unhealthy, the group replaces it (EC2 Auto Scaling
SetInstanceHealth; the termination lifecycle hook removes its etcd member,
etcd_lifecycle.py `leave`). The grace period is not respected: the failure is known.
"""
from .awscall import AwsError


def mark_unhealthy(aws, instance_id):
    """SetInstanceHealth Unhealthy for `instance_id`; True when taken."""
    if not instance_id or not instance_id.startswith("i-"):
        return False
    try:
        aws(["autoscaling", "set-instance-health", "--instance-id", instance_id, "--health-status", "Unhealthy",
             "--no-should-respect-grace-period"], attempts=3)
        return True
    except AwsError:
        return False
