"""CloudFormation resource signals for moto, which has none. Opt-in: the
moto server applies this only when KUBE_AWS_MOTO_SIGNALS=1 (the real-node
bed's `up --wait` test), so every other test keeps moto's stacks that
complete at once.

moto 5.2.5 creates a stack's resources synchronously, ignores every
CreationPolicy and answers SignalResource with "not yet implemented". The
CloudFormation user guide ("CreationPolicy attribute", "SignalResource" in
the API reference) documents what this adds, for resources of type
AWS::AutoScaling::AutoScalingGroup with a CreationPolicy.ResourceSignal and
only while their stack is being created:

- The group is not created until it has received `Count` SUCCESS signals
  (each UniqueId counted once): its stack stays CREATE_IN_PROGRESS, and so
  does every stack that holds that one as a nested stack. Each signal is an
  event of the group ("Received SUCCESS signal with UniqueId ..."); at the
  count the group is CREATE_COMPLETE, and each stack whose resources are all
  created completes, then its parent.
- A FAILURE signal fails the group (CREATE_FAILED, "Received 1 FAILURE
  signal(s) out of N. Unable to satisfy 100% MinSuccessfulInstancesPercent
  requirement"); its stack is CREATE_FAILED, the nested-stack resource in the
  parent CREATE_FAILED ("Embedded stack ... was not successfully created:
  The following resource(s) failed to create: [Group]."), and the root goes
  ROLLBACK_IN_PROGRESS then ROLLBACK_COMPLETE, as `--on-failure ROLLBACK`
  (kube-aws up's default) does.
- A signal to a resource that does not wait for one is refused with
  ValidationError, as AWS does.
- ListStackResources says each such group's and each nested stack's own
  status (moto's says CREATE_COMPLETE for every resource, always), so a
  watcher keeps reading a nested stack's events until it has settled.

- The same for an AWS::CloudFormation::WaitCondition with a
  CreationPolicy.ResourceSignal (the addons' wait conditions, signalled by
  the node's addon reconciler), which moto otherwise does not create at all
  (parsing.NULL_MODELS): it waits for `Count` SUCCESS signals; a FAILURE
  signal fails it ("WaitCondition received failed message: ...") and its
  stack rolls back. DescribeStackResource says its own status (the
  reconciler signals only while it is CREATE_IN_PROGRESS).

Not modelled: the policy's Timeout, MinSuccessfulInstancesPercent other than
100, OnFailure DELETE or DO_NOTHING, a wait condition's DependsOn (it waits,
and takes signals, from its stack's creation on, where CloudFormation
creates it only after what it depends on), wait condition handles,
UpdatePolicy's WaitOnResourceSignals (moto's updates complete at once), and
the rollback's deletes (moto keeps the resources; only the statuses and
events say rolled back).
"""

from moto.autoscaling.models import FakeAutoScalingGroup
from moto.cloudformation import models as cfn_models
from moto.cloudformation.exceptions import ValidationError
from moto.cloudformation.parsing import ResourceMap
from moto.cloudformation.responses import CloudFormationResponse, StackResourceDTO
from moto.core.responses import ActionResult, EmptyResult

STACK = "AWS::CloudFormation::Stack"
GROUP = "AWS::AutoScaling::AutoScalingGroup"
WAIT_CONDITION = "AWS::CloudFormation::WaitCondition"


class _WaitCondition(object):
    """An AWS::CloudFormation::WaitCondition with a CreationPolicy (moto
    models none: parsing.NULL_MODELS), so that it can wait for its signal."""
    cf_resource_type = WAIT_CONDITION

    def __init__(self, stack_id, logical):
        self.logical_resource_id = logical
        self.physical_resource_id = "%s/%s" % (stack_id, logical)

    def is_created(self):
        return _group_is_created(self)

    def delete(self, account_id, region_name):
        pass


def _getitem(original):
    """ResourceMap.__getitem__: a group or a wait condition with a
    ResourceSignal policy, created while its stack is CREATE_IN_PROGRESS,
    waits for its signals."""

    def getitem(self, key):
        instance = original(self, key)
        spec = (getattr(self, "_resource_json_map", None) or {}).get(key) or {}
        if instance is None and isinstance(spec, dict) and spec.get("Type") == WAIT_CONDITION \
                and (spec.get("CreationPolicy") or {}).get("ResourceSignal"):
            stack = _backend(self._account_id, self._region_name).stacks.get(original(self, "AWS::StackId"))
            if stack is None or stack.status != "CREATE_IN_PROGRESS":
                return instance
            policy = spec["CreationPolicy"]["ResourceSignal"]
            instance = _WaitCondition(stack.stack_id, key)
            instance._kube_aws_signal = {"count": int(policy.get("Count", 1)), "ids": set(),
                                         "state": "waiting", "logical": key}
            self._parsed_resources[key] = instance
            return instance
        if not isinstance(instance, FakeAutoScalingGroup) or hasattr(instance, "_kube_aws_signal"):
            return instance
        spec = (getattr(self, "_resource_json_map", None) or {}).get(key) or {}
        policy = (spec.get("CreationPolicy") or {}).get("ResourceSignal")
        stack = _backend(self._account_id, self._region_name).stacks.get(original(self, "AWS::StackId"))
        if policy and stack is not None and stack.status == "CREATE_IN_PROGRESS":
            instance._kube_aws_signal = {"count": int(policy.get("Count", 1)), "ids": set(),
                                         "state": "waiting", "logical": key}
        return instance

    return getitem


def _group_is_created(self):
    s = getattr(self, "_kube_aws_signal", None)
    return s is None or s["state"] == "complete"


def _stack_is_created(self):
    return self.status != "CREATE_IN_PROGRESS"


def _backend(account_id, region_name):
    return cfn_models.cloudformation_backends[account_id][region_name]


def _event(stack, logical, physical, rtype, status, reason=None):
    stack.events.append(cfn_models.Event(
        stack_id=stack.stack_id, stack_name=stack.name, logical_resource_id=logical,
        physical_resource_id=physical, resource_type=rtype, resource_status=status,
        resource_status_reason=reason, resource_properties=None))


def _parent(backend, child):
    """(parent stack, logical id) of a nested stack, or (None, None)."""
    for stack in backend.stacks.values():
        for logical, instance in getattr(stack.resource_map, "_parsed_resources", {}).items():
            if instance is child:
                return stack, logical
    return None, None


def _complete(backend, stack):
    if stack.status != "CREATE_IN_PROGRESS" or not stack.resource_map.creation_complete():
        return
    stack.mark_creation_complete()
    parent, logical = _parent(backend, stack)
    if parent is not None:
        _event(parent, logical, stack.stack_id, STACK, "CREATE_COMPLETE")
        _complete(backend, parent)


def _fail(backend, stack, failed):
    reason = "The following resource(s) failed to create: [%s]." % failed
    parent, logical = _parent(backend, stack)
    if parent is None:
        stack._add_stack_event("ROLLBACK_IN_PROGRESS", resource_status_reason=reason + " Rollback requested by user.")
        stack._add_stack_event("ROLLBACK_COMPLETE")
        stack.status = "ROLLBACK_COMPLETE"
        return
    stack._add_stack_event("CREATE_FAILED", resource_status_reason=reason)
    stack.status = "CREATE_FAILED"
    _event(parent, logical, stack.stack_id, STACK, "CREATE_FAILED",
           "Embedded stack %s was not successfully created: %s" % (stack.stack_id, reason))
    _fail(backend, parent, logical)


def _signal_resource(self):
    name = self._get_param("StackName")
    logical = self._get_param("LogicalResourceId")
    unique = self._get_param("UniqueId")
    status = self._get_param("Status")
    backend = self.cloudformation_backend
    stack = backend.get_stack(name)
    group = getattr(stack.resource_map, "_parsed_resources", {}).get(logical)
    s = getattr(group, "_kube_aws_signal", None)
    if s is None or s["state"] != "waiting" or stack.status != "CREATE_IN_PROGRESS":
        raise ValidationError(message="Resource %s in stack %s is not waiting for a signal" % (logical, stack.stack_id))
    if status not in ("SUCCESS", "FAILURE"):
        raise ValidationError(message="Status %r is not SUCCESS or FAILURE" % status)
    rtype = WAIT_CONDITION if isinstance(group, _WaitCondition) else GROUP
    _event(stack, logical, group.physical_resource_id, rtype, "CREATE_IN_PROGRESS",
           "Received %s signal with UniqueId %s" % (status, unique))
    if status == "FAILURE":
        s["state"] = "failed"
        reason = "WaitCondition received failed message: 'FAILURE' for uniqueId: %s" % unique \
            if rtype == WAIT_CONDITION else \
            "Received 1 FAILURE signal(s) out of %d. Unable to satisfy 100%% MinSuccessfulInstancesPercent " \
            "requirement" % s["count"]
        _event(stack, logical, group.physical_resource_id, rtype, "CREATE_FAILED", reason)
        _fail(backend, stack, logical)
        return EmptyResult()
    s["ids"].add(unique)
    if len(s["ids"]) >= s["count"]:
        s["state"] = "complete"
        _event(stack, logical, group.physical_resource_id, rtype, "CREATE_COMPLETE")
        _complete(backend, stack)
    return EmptyResult()


def _resource_status(resource):
    s = getattr(resource, "_kube_aws_signal", None)
    if s is not None:
        return {"waiting": "CREATE_IN_PROGRESS", "failed": "CREATE_FAILED"}.get(s["state"], "CREATE_COMPLETE")
    if isinstance(resource, cfn_models.Stack):
        status = resource.status
        if status.startswith("ROLLBACK") or status == "CREATE_FAILED":
            return "CREATE_FAILED"
        return status if status.startswith("CREATE_") else "CREATE_COMPLETE"
    return "CREATE_COMPLETE"


def _list_stack_resources(original):
    def list_stack_resources(self):
        result = original(self)
        stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
        by_id = getattr(stack.resource_map, "_parsed_resources", {})
        for summary in result.result["StackResourceSummaries"]:
            resource = by_id.get(summary["LogicalResourceId"])
            if resource is not None:
                summary["ResourceStatus"] = _resource_status(resource)
        return result

    return list_stack_resources


def _describe_stack_resource(original):
    """DescribeStackResource says a waiting resource's own status (moto's
    says the stack's): the reconciler signals a wait condition only while
    it is CREATE_IN_PROGRESS."""
    def describe_stack_resource(self):
        stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
        resource = getattr(stack.resource_map, "_parsed_resources", {}).get(self._get_param("LogicalResourceId"))
        if getattr(resource, "_kube_aws_signal", None) is None:
            return original(self)
        detail = StackResourceDTO(stack, resource)
        detail.resource_status = _resource_status(resource)
        return ActionResult({"StackResourceDetail": detail})

    return describe_stack_resource


def apply():
    ResourceMap.__getitem__ = _getitem(ResourceMap.__getitem__)
    FakeAutoScalingGroup.is_created = _group_is_created
    cfn_models.Stack.is_created = _stack_is_created
    assert not hasattr(CloudFormationResponse, "signal_resource")
    CloudFormationResponse.signal_resource = _signal_resource
    CloudFormationResponse.list_stack_resources = _list_stack_resources(CloudFormationResponse.list_stack_resources)
    CloudFormationResponse.describe_stack_resource = _describe_stack_resource(
        CloudFormationResponse.describe_stack_resource)
