"""moto server, as `moto_server`, with narrow patches for moto bugs that our
real rendered templates hit. Everything else about moto stays real.

Run it with the tools venv's python, with moto_server's own arguments:

    .venv-tools/bin/python tests/support/moto_server.py -H 127.0.0.1 -p PORT

Each patch below names the moto function it replaces, the bug, and why AWS
accepts what moto refuses. A patch checks the moto version it was written
against and refuses to start on any other, so that a moto upgrade makes us
look again instead of silently patching code that changed.

Patches (moto 5.2.5):

1. elbv2 FakeLoadBalancer.create_from_cloudformation_json ignores the `Type`
   property of AWS::ElasticLoadBalancingV2::LoadBalancer, so every load
   balancer created through CloudFormation becomes an "application" load
   balancer; a `Protocol: TCP` listener on it is then refused with
   "Listener protocol 'TCP' must be one of 'HTTP, HTTPS'". AWS documents
   `Type` (application | network | gateway, default application) on the
   resource, and a network load balancer takes TCP listeners: kube-aws puts
   the API server behind one. The direct API (CreateLoadBalancer) in moto
   does honour the type; only the CloudFormation path drops it. The patch
   passes `Type` (and `IpAddressType`, dropped the same way) through.

2. cloudformation Stack (the model behind AWS::CloudFormation::Stack) has no
   get_cfn_attribute, although its has_cfn_attr says yes to every name: so
   `Fn::GetAtt [Child, Outputs.Name]` raises AttributeError inside
   CreateStack (HTTP 500, the root stack stuck in CREATE_IN_PROGRESS) when a
   resource property uses it, and drops the output when an Output uses it.
   AWS documents `Outputs.NestedStackOutputName` as the return value of
   Fn::GetAtt on AWS::CloudFormation::Stack; it is how a root stack hands one
   nested stack's outputs (subnets, security groups, the API endpoint) to
   another. The patch returns the child's output value, and raises moto's own
   "attribute does not exist" error for any other name or a missing output.

3. cloudformation Stack.stack_resources on a deleted stack re-creates every
   resource of its template: DeleteStack pops the resources out of the lazy
   ResourceMap, and the next ListStackResources / DescribeStackResources on
   the deleted stack's ID iterates the map, which parses and creates each
   missing resource anew (for nested stacks: whole new child stacks, VPCs,
   load balancers, auto scaling groups, left behind CREATE_COMPLETE). AWS
   keeps a deleted stack readable by its ID and creates nothing when it is
   read; `kube-aws destroy --wait` reads the stack's resources until it is
   gone. The patch reports no resources for a stack in DELETE_COMPLETE (AWS
   would list them as DELETE_COMPLETE; moto keeps no per-resource status).

4. ec2 RouteTable (AWS::EC2::RouteTable) has no CloudFormation delete, so
   DeleteStack leaves the route table in place; the VPC's delete then fails
   with DependencyViolation (moto refuses while a VPC has more than its main
   route table), the failure escapes the stack's delete, and moto drops the
   whole nested stack from both its live and its deleted stacks, with its VPC,
   route table and gateway still there. AWS deletes a stack's route table
   with the stack (after its routes and associations, which depend on it).
   The patch gives RouteTable the delete that moto's ResourceMap calls; moto
   retries a resource that fails on a dependency in a later pass.

5. iam access_control IAMPolicyStatement._check_element_matches: with IAM
   enforced (tests/it/node_iam_moto.rs switches it on through
   /moto-api/reset-auth), moto authorizes every request of a service other
   than S3, SQS, IAM and STS against the resource "*", because it does not
   compute the request's resource; a statement scoped to an ARN (the plan
   pointer's ssm:GetParameter, the stack's cloudformation:SignalResource)
   then never matches and every such call is refused. AWS matches the
   request's actual resource against the statement's. The patch lets the
   unknown resource "*" match any Resource element, so moto still enforces
   the action for these services; their resources are checked by
   tests/it/node_iam.rs against the rendered policies. S3 requests carry
   their bucket and object ARN and are matched as they were.

6. iam access_control IAMPolicy.__init__ reads an inline policy as a JSON
   string (as PutRolePolicy stores it) or as a managed policy, but the
   inline policies of an AWS::IAM::Role created through CloudFormation
   (`Policies`, and AWS::IAM::Policy attached to a role) are stored as the
   template's dict: with IAM enforced, every request of such a role fails
   with KeyError 'policy_document' (HTTP 500). AWS evaluates the document
   whatever API created it. The patch serialises a dict document first.

7. Not a bug but a missing feature: moto stores lifecycle hooks and never
   acts on them (no Terminating:Wait, no CompleteLifecycleAction). The
   termination lifecycle actions AWS documents are added by
   tests/support/moto_lifecycle.py (its docstring says what and what not).

8. Not a bug but a missing feature, and opt-in (KUBE_AWS_MOTO_SIGNALS=1):
   moto ignores CreationPolicy and has no SignalResource, so its stacks
   complete at once. tests/support/moto_signals.py adds a group's
   CreationPolicy and the signals (its docstring says what and what not).

9. iam access_control IAMRequestBase.__init__ names the action after the
   request's SigV4 signing name (`<service>:<Action>`), and CloudWatch signs
   as `monitoring`: with IAM enforced, a PutMetricData allowed by a policy's
   `cloudwatch:PutMetricData` is refused as "not authorized to perform:
   monitoring:PutMetricData". AWS's action prefix for CloudWatch is
   `cloudwatch` (Service Authorization Reference, Amazon CloudWatch). The
   patch renames the prefix of the actions of that signing name only.

10. Missing feature: moto's CloudFormation has no model for
   AWS::CloudWatch::Alarm (moto/cloudwatch/models.py: `Alarm` is a plain
   BaseModel, only `Dashboard` is a CloudFormationModel), so
   cloudformation/parsing.py resource_class_from_type logs "No Moto
   CloudFormation support for AWS::CloudWatch::Alarm" and the stack is
   created without its alarms. AWS creates the alarm as PutMetricAlarm would
   (AWS::CloudWatch::Alarm reference: Ref is the alarm name, Fn::GetAtt Arn
   its ARN; a changed AlarmName replaces the alarm). The patch adds that
   model for the single-metric form, through moto's own put_metric_alarm and
   delete_alarms; `Metrics` (metric math) is refused rather than dropped.

11. iam ManagedPolicy (AWS::IAM::ManagedPolicy) has no delete: moto's
   CloudFormation leaves the policy attached when it deletes a stack (or the
   old copy of a nested stack it recreates on update), and then cannot delete
   the role it is attached to (DeleteConflict "must detach all policies
   first"), so the stack's deletion fails. AWS's CloudFormation deletes the
   policy first (it depends on the role through `Roles`), detaching it from
   every role, group and user. The patch gives the policy that delete: detach
   from each entity, then DeletePolicy, through moto's own backend calls;
   moto's delete loop retries the role afterwards.

12. sts AssumeRoleWithWebIdentity is a call without AWS credentials (AWS:
   "Calling AssumeRoleWithWebIdentity does not require the use of AWS
   security credentials"; the caller proves itself with the token). With IAM
   enforced, moto checks a signature on it like any other call and fails with
   KeyError 'HTTP_AUTHORIZATION' (HTTP 500); without enforcement it accepts
   any string as the token for any role (sts/models.py
   assume_role_with_web_identity is assume_role: no token, no trust policy).
   The patch lets the unsigned call through and checks the token the way STS
   does, in the part that moto can hold: the JWT's signature (RS256 or
   ES256) against the JWKS that the issuer's discovery document names, read
   from moto's own S3 when the issuer is an S3 bucket's virtual-hosted URL
   (kube-aws's default issuer, published by `up`); its `exp`; and the role's
   trust policy: a statement allowing sts:AssumeRoleWithWebIdentity whose
   StringEquals conditions `<issuer host/path>:sub` and `:aud` equal the
   token's claims. Anything else is refused as STS refuses it
   (InvalidIdentityToken / AccessDenied, HTTP 400/403). Not checked: the IAM
   OIDC provider object (moto's CloudFormation has no AWS::IAM::OIDCProvider,
   so the trust policy's Federated principal is not resolved) with its client
   IDs and TLS thumbprint.

13. route53 create_route53_zone_id draws 22 characters from A-Z0-9, so a
   hosted zone's ID starts with any of them (its own comment says "New ID's
   look like this Z1RWWTK7Y8UDDQ"). AWS's zone IDs start with "Z" (up to 32
   characters), and the external-dns plugin's `hostedZoneId` parameter
   takes only those. The patch keeps moto's draw and makes its first
   character "Z".

14. iam access_control IAMRequestBase._create_aws_request recomputes a
   request's SigV4 signature over `body or data`; Route 53's responses keep
   the request's headers as `data`, so a request with an empty body (every
   GET: ListHostedZones, ListResourceRecordSets) is hashed as if the
   headers were its payload, and with IAM enforced every such call fails
   with SignatureDoesNotMatch (HTTP 403, an empty error code as botocore
   reads it). SigV4 hashes the body: empty for these. The patch signs a GET,
   HEAD or DELETE with an empty body over an empty payload when `data` is
   not the body (a mapping); POSTs (the query protocol's form data, which
   moto keeps as `data`) are signed as they were.

15. autoscaling FakeAutoScalingGroup.create_from_cloudformation_json (and
   update, which calls it) passes `MixedInstancesPolicy` as `{}` when the
   template has none, where the API path (CreateAutoScalingGroup) passes
   None; DescribeAutoScalingGroups then returns an empty
   `<MixedInstancesPolicy/>` for every group made by CloudFormation. AWS
   returns no MixedInstancesPolicy for a group without one, and the
   cluster-autoscaler (1.35, cloudprovider/aws/auto_scaling_groups.go
   buildAsgFromAWS) dereferences the policy's LaunchTemplate whenever the
   element is present: it panicked at start on the bed's worker group. The
   patch keeps None for a template without the property, as the API does.

16. Not a bug but a missing operation: moto has no ec2
   DescribeInstanceTopology (HTTP 500, NotImplementedError). The AWS cloud
   controller manager (cloud-provider-aws 1.35, pkg/providers/v1/topology.go)
   asks it for every node it initializes and on each status update, and
   retries the 500. AWS returns no entry for an instance whose type has no
   topology information (EC2 API reference, DescribeInstanceTopology: only
   some instance families are listed); the bed's instances are of such
   types. The patch answers an empty `instanceSet`.

17. cloudformation parsing.clean_json answers `Fn::GetAZs ""` with
   us-east-1's zones (its DEFAULT_REGION) whatever the stack's region, so a
   subnet `Fn::Select [0, Fn::GetAZs ""]` of a us-west-2 stack is in
   "us-east-1a", and so is every instance launched into it. AWS documents
   the empty string as the stack's own region (CloudFormation user guide,
   Fn::GetAZs: "Specifying an empty string is equivalent to specifying
   AWS::Region"). The cloud controller manager looks the instance's zone up
   in the region's DescribeAvailabilityZones and refused to initialize the
   node ("Could not get zone ID from zone name us-east-1a"). The patch
   gives the empty string the stack's region.
"""

import base64
import json
import os
import sys
import time
from urllib.parse import urlparse

import moto
from moto.autoscaling import models as autoscaling_models
from moto.cloudformation import models as cloudformation_models
from moto.cloudformation.exceptions import UnformattedGetAttTemplateException
from moto.cloudwatch import models as cloudwatch_models
from moto.core.authorization import ActionAuthenticatorMixin
from moto.core.exceptions import _RESTError
from moto.core.common_models import CloudFormationModel
from moto.ec2.models.route_tables import RouteTable
from moto.elbv2 import models as elbv2_models
from moto.route53 import models as route53_models
from moto.iam import access_control
from moto.iam import models as iam_models
from moto.utilities.utils import get_partition
from moto.server import main

import moto_lifecycle
import moto_signals

PATCHED_FOR = "5.2.5"


def _lb_create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
    # Same as moto 5.2.5's body, plus Type and IpAddressType.
    properties = cloudformation_json["Properties"]
    elbv2_backend = elbv2_models.elbv2_backends[account_id][region_name]
    return elbv2_backend.create_load_balancer(
        resource_name,
        properties.get("SecurityGroups"),
        properties.get("Subnets"),
        scheme=properties.get("Scheme", "internet-facing"),
        loadbalancer_type=properties.get("Type"),
        ip_address_type=properties.get("IpAddressType", "ipv4"),
    )


def _stack_get_cfn_attribute(self, attribute_name):
    prefix = "Outputs."
    if attribute_name.startswith(prefix):
        key = attribute_name[len(prefix) :]
        if key in self.output_map.outputs:
            output = self.output_map[key]
            if output is not None:
                return output.value
    raise UnformattedGetAttTemplateException()


def _deleted_stack_resources(original):
    def stack_resources(self):
        if self.status == "DELETE_COMPLETE":
            return []
        return original.fget(self)

    return property(stack_resources)


def _route_table_delete(self, account_id, region_name):
    self.ec2_backend.delete_route_table(self.id)


def _managed_policy_delete(self, account_id, region_name):
    backend = iam_models.iam_backends[account_id][get_partition(region_name)]
    for role in list(backend.roles.values()):
        if self.arn in role.managed_policies:
            backend.detach_role_policy(self.arn, role.name)
    for group in list(backend.groups.values()):
        if self.arn in group.managed_policies:
            backend.detach_group_policy(self.arn, group.name)
    for user in list(backend.users.values()):
        if self.arn in user.managed_policies:
            backend.detach_user_policy(self.arn, user.name)
    backend.delete_policy(self.arn)


def _resource_unknown_matches_any(original):
    def check(self, statement_element, value):
        if statement_element == "Resource" and value == "*":
            return True
        return original(self, statement_element, value)

    return check


def _policy_from_dict(original):
    def init(self, policy):
        if isinstance(policy, dict) and "policy_document" not in policy and "Statement" in policy:
            policy = json.dumps(policy)
        original(self, policy)

    return init


def _cloudwatch_action_prefix(init):
    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self._action.startswith("monitoring:"):
            self._action = "cloudwatch:" + self._action[len("monitoring:"):]

    return patched


class _CfnAlarm(CloudFormationModel):
    """AWS::CloudWatch::Alarm (patch 10): the backend's Alarm behind it."""

    # moto's model metaclass (core/base_backend.py InstanceTrackerMeta) files
    # a model under the service its module is in.
    __module__ = "moto.cloudwatch.models"

    def __init__(self, alarm, account_id, region_name):
        self.alarm = alarm
        self.account_id = account_id
        self.region_name = region_name

    @staticmethod
    def cloudformation_name_type():
        return "AlarmName"

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudWatch::Alarm"

    @property
    def physical_resource_id(self):
        return self.alarm.name

    @classmethod
    def has_cfn_attr(cls, attr):
        return attr == "Arn"

    def get_cfn_attribute(self, attribute_name):
        if attribute_name == "Arn":
            return self.alarm.alarm_arn
        raise UnformattedGetAttTemplateException()

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        p = cloudformation_json["Properties"]
        if "Metrics" in p:
            raise NotImplementedError("tests/support/moto_server.py: AWS::CloudWatch::Alarm with Metrics")
        backend = cloudwatch_models.cloudwatch_backends[account_id][region_name]
        number = lambda k: None if p.get(k) is None else int(p[k])  # noqa: E731
        alarm = backend.put_metric_alarm(
            name=resource_name,
            namespace=p.get("Namespace"),
            metric_name=p.get("MetricName"),
            comparison_operator=p["ComparisonOperator"],
            evaluation_periods=int(p["EvaluationPeriods"]),
            period=number("Period"),
            threshold=None if p.get("Threshold") is None else float(p["Threshold"]),
            statistic=p.get("Statistic"),
            description=p.get("AlarmDescription"),
            dimensions=p.get("Dimensions", []),
            alarm_actions=p.get("AlarmActions", []),
            datapoints_to_alarm=number("DatapointsToAlarm"),
            extended_statistic=p.get("ExtendedStatistic"),
            ok_actions=p.get("OKActions"),
            insufficient_data_actions=p.get("InsufficientDataActions"),
            unit=p.get("Unit"),
            actions_enabled=p.get("ActionsEnabled", True) in (True, "true", "True"),
            treat_missing_data=p.get("TreatMissingData"),
            evaluate_low_sample_count_percentile=p.get("EvaluateLowSampleCountPercentile"),
        )
        return cls(alarm, account_id, region_name)

    @classmethod
    def update_from_cloudformation_json(cls, original_resource, new_resource_name, cloudformation_json, account_id, region_name):
        if original_resource.alarm.name != new_resource_name:
            original_resource.delete(account_id, region_name)
        return cls.create_from_cloudformation_json(new_resource_name, cloudformation_json, account_id, region_name)

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
        cloudwatch_models.cloudwatch_backends[account_id][region_name].delete_alarms([resource_name])

    def delete(self, account_id, region_name):
        cloudwatch_models.cloudwatch_backends[account_id][region_name].delete_alarms([self.alarm.name])


class _WebIdentityRefused(_RESTError):
    """STS's refusal of a web identity token (patch 12)."""

    def __init__(self, code, status, message):
        super().__init__(code, message)
        self.code = status


def _b64url(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _jwks_of(issuer):
    """The issuer's JWKS from moto's S3: the discovery document's jwks_uri."""
    from moto.s3.models import s3_backends

    def read(url):
        u = urlparse(url)
        host = u.hostname or ""
        if u.scheme != "https" or ".s3." not in host or not host.endswith(".amazonaws.com"):
            raise _WebIdentityRefused("InvalidIdentityToken", 400, f"issuer {issuer} is not an S3 bucket of this moto")
        bucket = host.split(".s3.")[0]
        key = u.path.lstrip("/")
        for account in list(s3_backends.keys()):
            backend = s3_backends[account]["aws"]
            if bucket in backend.buckets:
                return json.loads(backend.get_object(bucket, key).value)
        raise _WebIdentityRefused("InvalidIdentityToken", 400, f"no bucket {bucket} for issuer {issuer}")

    disco = read(issuer.rstrip("/") + "/.well-known/openid-configuration")
    if disco.get("issuer") != issuer:
        raise _WebIdentityRefused("InvalidIdentityToken", 400, "the discovery document names another issuer")
    return read(disco["jwks_uri"])


def _verify_signature(header, signed, sig, jwks):
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    num = lambda v: int.from_bytes(_b64url(v), "big")  # noqa: E731
    for k in jwks.get("keys", []):
        if header.get("kid") and k.get("kid") != header["kid"]:
            continue
        try:
            if header.get("alg") == "ES256" and k.get("kty") == "EC":
                key = ec.EllipticCurvePublicNumbers(num(k["x"]), num(k["y"]), ec.SECP256R1()).public_key()
                der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
                key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
                return
            if header.get("alg") == "RS256" and k.get("kty") == "RSA":
                key = rsa.RSAPublicNumbers(num(k["e"]), num(k["n"])).public_key()
                key.verify(sig, signed, padding.PKCS1v15(), hashes.SHA256())
                return
        except InvalidSignature:
            pass
    raise _WebIdentityRefused("InvalidIdentityToken", 400, "the token's signature is not the issuer's")


def _check_web_identity(querystring):
    """Patch 12: the token and the role's trust policy, as STS checks them."""
    from moto.iam.models import iam_backends

    q = lambda k: (querystring.get(k) or [""])[0]  # noqa: E731
    token, role_arn = q("WebIdentityToken"), q("RoleArn")
    try:
        h, c, s = token.split(".")
        header, claims, sig = json.loads(_b64url(h)), json.loads(_b64url(c)), _b64url(s)
    except ValueError:
        raise _WebIdentityRefused("InvalidIdentityToken", 400, "the token is not a JWT")
    issuer = claims.get("iss", "")
    _verify_signature(header, f"{h}.{c}".encode(), sig, _jwks_of(issuer))
    if float(claims.get("exp", 0)) < time.time():
        raise _WebIdentityRefused("ExpiredTokenException", 400, "the token has expired")
    account = role_arn.split(":")[4] if role_arn.count(":") >= 5 else ""
    try:
        role = iam_backends[account]["aws"].get_role_by_arn(role_arn)
    except Exception:
        raise _WebIdentityRefused("AccessDenied", 403, f"no role {role_arn}")
    trust = role.assume_role_policy_document
    trust = json.loads(trust) if isinstance(trust, str) else trust
    hp = issuer.removeprefix("https://")
    aud = claims.get("aud")
    auds = aud if isinstance(aud, list) else [aud]
    for st in trust.get("Statement", []):
        actions = st.get("Action")
        actions = actions if isinstance(actions, list) else [actions]
        cond = st.get("Condition", {}).get("StringEquals", {})
        if (
            st.get("Effect") == "Allow"
            and "sts:AssumeRoleWithWebIdentity" in actions
            and cond.get(f"{hp}:sub") == claims.get("sub")
            and cond.get(f"{hp}:aud") in auds
        ):
            return
    raise _WebIdentityRefused(
        "AccessDenied", 403, f"Not authorized to perform sts:AssumeRoleWithWebIdentity ({claims.get('sub')} on {role_arn})"
    )


def _web_identity_unsigned(original):
    def authenticate(self, iam_request_cls, resource="*"):
        if self._get_action() == "AssumeRoleWithWebIdentity":
            _check_web_identity(self.querystring)
            return
        return original(self, iam_request_cls, resource)

    return authenticate


def _zone_id_like_aws(original):
    def create(*args, **kwargs):
        return "Z" + original(*args, **kwargs)[1:]

    return create


def _empty_body_signed_empty(original):
    def create(self):
        if self._method in ("GET", "HEAD", "DELETE") and not self._body and not isinstance(self._data, (str, bytes)):
            saved = self._data
            self._data = b""
            try:
                return original(self)
            finally:
                self._data = saved
        return original(self)

    return create


def _asg_no_empty_mixed_policy(original):
    def create(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        group = original.__func__(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        if "MixedInstancesPolicy" not in cloudformation_json.get("Properties", {}):
            group.mixed_instances_policy = None
        return group

    return classmethod(create)


def _describe_instance_topology(self):
    """Patch 16: no topology for any instance, as AWS answers for types without it."""
    return (
        '<DescribeInstanceTopologyResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
        "<requestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</requestId><instanceSet/>"
        "</DescribeInstanceTopologyResponse>"
    )


def _get_azs_of_the_stack_region(original):
    """Patch 17: `Fn::GetAZs ""` is the stack's region's zones."""

    def clean(resource_json, resources_map):
        if isinstance(resource_json, dict) and resource_json.get("Fn::GetAZs", None) == "":
            resource_json = {"Fn::GetAZs": resources_map._region_name}
        return original(resource_json, resources_map)

    return clean


def apply_patches():
    if moto.__version__ != PATCHED_FOR:
        sys.exit(
            f"tests/support/moto_server.py patches moto {PATCHED_FOR}, found {moto.__version__}: "
            "check each patch against the new moto, then update PATCHED_FOR"
        )
    elbv2_models.FakeLoadBalancer.create_from_cloudformation_json = classmethod(_lb_create_from_cloudformation_json)
    assert not hasattr(cloudformation_models.Stack, "get_cfn_attribute")
    cloudformation_models.Stack.get_cfn_attribute = _stack_get_cfn_attribute
    assert not hasattr(RouteTable, "delete")
    RouteTable.delete = _route_table_delete
    assert not hasattr(iam_models.ManagedPolicy, "delete")
    iam_models.ManagedPolicy.delete = _managed_policy_delete
    cloudformation_models.Stack.stack_resources = _deleted_stack_resources(cloudformation_models.Stack.stack_resources)
    statement = access_control.IAMPolicyStatement
    statement._check_element_matches = _resource_unknown_matches_any(statement._check_element_matches)
    access_control.IAMPolicy.__init__ = _policy_from_dict(access_control.IAMPolicy.__init__)
    moto_lifecycle.apply()
    if os.environ.get("KUBE_AWS_MOTO_SIGNALS") == "1":
        moto_signals.apply()
    base = access_control.IAMRequestBase
    base.__init__ = _cloudwatch_action_prefix(base.__init__)
    # Patch 10: a subclass is a model once defined (parsing.get_model_list is
    # CloudFormationModel.__subclasses__(), cached on its first call, which
    # comes with the first stack: after this).
    models = CloudFormationModel.__subclasses__()
    assert [m for m in models if m.cloudformation_type() == "AWS::CloudWatch::Alarm"] == [_CfnAlarm]
    base._create_aws_request = _empty_body_signed_empty(base._create_aws_request)
    route53_models.create_route53_zone_id = _zone_id_like_aws(route53_models.create_route53_zone_id)
    group = autoscaling_models.FakeAutoScalingGroup
    group.create_from_cloudformation_json = _asg_no_empty_mixed_policy(group.create_from_cloudformation_json)
    from moto.cloudformation import parsing
    from moto.ec2.responses import EC2Response

    parsing.clean_json = _get_azs_of_the_stack_region(parsing.clean_json)

    assert not hasattr(EC2Response, "describe_instance_topology")
    EC2Response.describe_instance_topology = _describe_instance_topology
    mixin = ActionAuthenticatorMixin
    mixin._authenticate_and_authorize_action = _web_identity_unsigned(mixin._authenticate_and_authorize_action)


if __name__ == "__main__":
    apply_patches()
    sys.exit(main(sys.argv[1:]))
