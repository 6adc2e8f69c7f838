"""CloudFormation signals: a node's CreationPolicy and the addons' wait conditions.

Invariant: a wait condition is signalled only while DescribeStackResource says
it waits (CREATE_IN_PROGRESS); one that is complete, failed or gone is never
signalled; a signal failure never raises (the caller's work is done). Only a
stack in an *_IN_PROGRESS state (DescribeStacks) can have one that waits.
"""
from .awscall import AwsError


def signal(aws, stack, logical_id, unique_id, status):
    """SignalResource; True when CloudFormation took it."""
    try:
        aws(["cloudformation", "signal-resource", "--stack-name", stack, "--logical-resource-id", logical_id,
             "--unique-id", unique_id, "--status", status], attempts=3)
        return True
    except AwsError:
        return False


def resource_state(aws, stack, logical_id):
    """The resource's status, "missing" when the stack has no such resource, "error" otherwise."""
    try:
        out = aws(["cloudformation", "describe-stack-resource", "--stack-name", stack,
                   "--logical-resource-id", logical_id], attempts=1)
    except AwsError as e:
        return "missing" if "does not exist" in e.message else "error"
    try:
        return out["StackResourceDetail"]["ResourceStatus"]
    except (TypeError, KeyError):
        return "error"


def stack_in_progress(aws, stack):
    """True unless DescribeStacks says the stack is in no *_IN_PROGRESS state
    (only then can a wait condition of it wait); an error counts as True."""
    try:
        out = aws(["cloudformation", "describe-stacks", "--stack-name", stack], attempts=2)
        return str(out["Stacks"][0]["StackStatus"]).endswith("_IN_PROGRESS")
    except (AwsError, TypeError, KeyError, IndexError):
        return True
