"""Auto Scaling termination lifecycle actions for moto, which has none.

moto 5.2.5 stores lifecycle hooks (PutLifecycleHook, DescribeLifecycleHooks)
but never acts on them: TerminateInstanceInAutoScalingGroup terminates at once,
and CompleteLifecycleAction / RecordLifecycleActionHeartbeat are not
implemented (moto answers "not yet implemented"). aws-node-termination-handler
needs all three (pkg/monitor/sqsevent/asg-lifecycle-event.go@v1.25.6:
continueLifecycleAction, recordLifecycleActionHeartbeat). This adds what the
Auto Scaling user guide documents for a termination hook ("Amazon EC2 Auto
Scaling lifecycle hooks", "Complete a lifecycle action", "EventBridge events
for Amazon EC2 Auto Scaling"), for TerminateInstanceInAutoScalingGroup only:

- An instance of a group with an autoscaling:EC2_INSTANCE_TERMINATING hook
  goes to `Terminating:Wait` instead of being terminated, and EventBridge gets
  the event AWS sends (source aws.autoscaling, detail-type "EC2
  Instance-terminate Lifecycle Action", detail with LifecycleActionToken,
  AutoScalingGroupName, LifecycleHookName, EC2InstanceId, LifecycleTransition,
  Origin, Destination), which moto's events backend routes through the
  account's rules to their targets (an SQS queue).
- CompleteLifecycleAction (by token or instance ID) ends the action; when all
  the instance's termination hooks are done it goes `Terminating:Proceed` and
  is terminated (moto's own terminate: detached, EC2 terminated). For a
  termination hook both CONTINUE and ABANDON terminate the instance. An
  action that is not waiting is refused with ValidationError, as AWS does.
- RecordLifecycleActionHeartbeat restarts the hook's HeartbeatTimeout.
- When a HeartbeatTimeout passes, the hook's DefaultResult is applied, as if
  completed with it.

Not modelled: the global timeout (48 h or 100 heartbeats), launch hooks,
terminations the group decides itself (scale-in, rebalancing, health checks:
moto does not drive those through terminate_instance), notification targets
other than EventBridge, the scaling activity history (moto keeps none). How
each action ended (completed or timed out) is logged on stderr
(KUBE_AWS_TEST_SERVER_LOG keeps it).
"""

import json
import sys
import threading
import time
import uuid

from moto.autoscaling import models as asg_models
from moto.autoscaling.exceptions import ValidationError
from moto.autoscaling.responses import AutoScalingResponse
from moto.core.responses import EmptyResult

TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"

_lock = threading.RLock()
# (backend id, instance id) -> {"backend", "group", "decrement", "hooks": {name: action}}
_waiting = {}


def _log(msg):
    print(f"moto lifecycle: {msg}", file=sys.stderr, flush=True)


def _instance_state(backend, instance_id):
    for group in backend.autoscaling_groups.values():
        for state in group.instance_states:
            if state.instance.id == instance_id:
                return group, state
    return None, None


def _terminate(original):
    def terminate_instance(self, instance_id, should_decrement):
        group, state = _instance_state(self, instance_id)
        if state is None:
            return original(self, instance_id, should_decrement)
        hooks = [
            h
            for h in self.lifecycle_hooks.values()
            if h.auto_scaling_group_name == group.name and h.lifecycle_transition == TERMINATING
        ]
        key = (id(self), instance_id)
        with _lock:
            if key in _waiting:
                # Already waiting: AWS answers with the activity under way.
                return asg_models.TerminateInstanceActivity(state.instance, group.desired_capacity)
            if not hooks:
                return original(self, instance_id, should_decrement)
            state.lifecycle_state = "Terminating:Wait"
            now = time.monotonic()
            actions = {}
            for h in hooks:
                actions[h.name] = {
                    "token": str(uuid.uuid4()),
                    "timeout": h.heartbeat_timeout,
                    "deadline": now + h.heartbeat_timeout,
                    "default": h.default_result,
                }
            _waiting[key] = {"backend": self, "group": group.name, "decrement": should_decrement, "hooks": actions}
        from moto.events.models import events_backends

        events = events_backends[self.account_id][self.region_name]
        for name, a in actions.items():
            detail = {
                "Origin": "AutoScalingGroup",
                "Destination": "EC2",
                "LifecycleActionToken": a["token"],
                "AutoScalingGroupName": group.name,
                "LifecycleHookName": name,
                "EC2InstanceId": instance_id,
                "LifecycleTransition": TERMINATING,
            }
            events.put_events(
                [
                    {
                        "Source": "aws.autoscaling",
                        "DetailType": "EC2 Instance-terminate Lifecycle Action",
                        "Detail": json.dumps(detail),
                        "Resources": [group.arn],
                    }
                ]
            )
            _log(f"{instance_id} Terminating:Wait on hook {name} ({a['timeout']} s)")
        return asg_models.TerminateInstanceActivity(state.instance, group.desired_capacity)

    return terminate_instance


def _finish(key, hook, result, by):
    """Ends one hook's action (under _lock); terminates when none is left."""
    entry = _waiting[key]
    del entry["hooks"][hook]
    instance_id = key[1]
    _log(f"{instance_id} hook {hook} ended: {result} by {by}")
    if entry["hooks"] and result != "ABANDON":
        return
    del _waiting[key]
    backend = entry["backend"]
    _, state = _instance_state(backend, instance_id)
    if state is not None:
        state.lifecycle_state = "Terminating:Proceed"
        _ORIGINAL_TERMINATE(backend, instance_id, entry["decrement"])
        _log(f"{instance_id} terminated")


def _find(backend, group, hook, token, instance_id):
    for key, entry in _waiting.items():
        if key[0] != id(backend) or entry["group"] != group:
            continue
        a = entry["hooks"].get(hook)
        if a is None:
            continue
        if (token and a["token"] == token) or (not token and key[1] == instance_id):
            return key, a
    what = f"token {token}" if token else f"instance ID {instance_id}"
    raise ValidationError(f"No active Lifecycle Action found with {what}")


def _complete_lifecycle_action(self):
    result = self._get_param("LifecycleActionResult")
    if result not in ("CONTINUE", "ABANDON"):
        raise ValidationError("LifecycleActionResult must be CONTINUE or ABANDON")
    with _lock:
        key, _ = _find(
            self.autoscaling_backend,
            self._get_param("AutoScalingGroupName"),
            self._get_param("LifecycleHookName"),
            self._get_param("LifecycleActionToken"),
            self._get_param("InstanceId"),
        )
        _finish(key, self._get_param("LifecycleHookName"), result, "complete")
    return EmptyResult()


def _record_lifecycle_action_heartbeat(self):
    with _lock:
        _, a = _find(
            self.autoscaling_backend,
            self._get_param("AutoScalingGroupName"),
            self._get_param("LifecycleHookName"),
            self._get_param("LifecycleActionToken"),
            self._get_param("InstanceId"),
        )
        a["deadline"] = time.monotonic() + a["timeout"]
    return EmptyResult()


def _expire_loop():
    while True:
        time.sleep(0.5)
        now = time.monotonic()
        with _lock:
            due = [
                (key, hook, a["default"])
                for key, entry in list(_waiting.items())
                for hook, a in list(entry["hooks"].items())
                if a["deadline"] <= now
            ]
            for key, hook, default in due:
                if key in _waiting and hook in _waiting[key]["hooks"]:
                    _finish(key, hook, default, "timeout")


_ORIGINAL_TERMINATE = None


def apply():
    global _ORIGINAL_TERMINATE
    backend = asg_models.AutoScalingBackend
    _ORIGINAL_TERMINATE = backend.terminate_instance
    backend.terminate_instance = _terminate(_ORIGINAL_TERMINATE)
    assert not hasattr(AutoScalingResponse, "complete_lifecycle_action")
    assert not hasattr(AutoScalingResponse, "record_lifecycle_action_heartbeat")
    AutoScalingResponse.complete_lifecycle_action = _complete_lifecycle_action
    AutoScalingResponse.record_lifecycle_action_heartbeat = _record_lifecycle_action_heartbeat
    threading.Thread(target=_expire_loop, name="lifecycle-timeouts", daemon=True).start()
