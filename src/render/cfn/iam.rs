//! IAM in the stacks: the statements of each node role, and the roles of
//! plugin service accounts (IRSA) with the cluster's OIDC provider.

use serde_json::{json, Map, Value};

use super::super::layout;
use super::super::plan::camel;
use super::super::secrets::{CONTEXT_CLUSTER, CONTEXT_SECRET};
use super::super::{Ctx, RenderError, RenderInput};
use super::etcd::etcd_statements;
use super::group::Group;
use super::names::decrypt_keys;

/// The content-addressed secret bundles (`secrets/<sha256>/bundle.json`):
/// a node reads the one its stack's pointer names, never the latest.
const SECRET_BUNDLES: &str = "secrets/*/bundle.json";

/// A node role's policies: the statements every node of its kind needs
/// inline, and the larger sets (etcd's, the keys', each plugin's) in managed
/// policies of their own, so that the role stays within IAM's 10,240
/// characters of inline policies with real names (iam_size.rs).
pub(super) struct NodePolicies {
    pub inline: Vec<Value>,
    pub managed: Vec<ManagedSet>,
}

/// Statements for one managed policy (or more, if they do not fit one).
pub(super) struct ManagedSet {
    /// The logical ID's middle: `<Prefix><id>Policy`.
    pub id: String,
    /// What the statements are for, in the policy's description.
    pub what: String,
    pub statements: Vec<Value>,
}

/// The policies of a node role, with its scope's plugin statements.
/// Nodes write nothing secret (locks and status reports), so they only ever
/// decrypt, and only their own bundle entries: workers their plugin secrets,
/// never a PKI key or the init token (the KMS encryption-context condition
/// names each entry); the join token comes from its parameter (controllers
/// mint it).
pub(super) fn node_policies(input: &RenderInput, ctx: &Ctx, g: &Group) -> NodePolicies {
    let obj = |key: &str| format!("arn:aws:s3:::{}/{}/{key}", ctx.bucket, ctx.key_prefix);
    let mut read = vec![obj(&layout::userdata_objects(g.role)), obj(SECRET_BUNDLES)];
    let mut write = vec![];
    if g.controller {
        read.push(obj(&format!("{}*", layout::CHARTS_DIR)));
        read.push(obj(&format!("{}/*", layout::ADDONS_DIR)));
        // What controllers write they may read back: the addon installer's
        // lease (lease.py) and restore requests under bootstrap/; the
        // installed record, the upgrade and reconfiguration status (upgrade.py,
        // reconfigure.py) under status/. One prefix grant each instead of an
        // ARN per object: no wider than the write grant below.
        for dir in [layout::BOOTSTRAP_DIR, layout::STATUS_DIR] {
            read.push(obj(&format!("{dir}*")));
            write.push(obj(&format!("{dir}*")));
        }
    }
    let mut s =
        vec![json!({"Sid": "ReadClusterObjects", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": read})];
    if g.controller {
        s.push(
            json!({"Sid": "WriteBootstrapAndStatus", "Effect": "Allow", "Action": ["s3:PutObject"], "Resource": write}),
        );
        s.extend(lock_statements(ctx));
        // The kubelet serving-certificate approver checks each request against
        // the cluster's instances; DescribeInstances has no resource-level scope.
        s.push(json!({"Sid": "DescribeInstancesForCsrApproval", "Effect": "Allow",
            "Action": ["ec2:DescribeInstances"], "Resource": "*"}));
        s.extend(reconciler_statements(ctx));
    } else {
        // A failed boot publishes its report (blanked of secrets) for `kube-aws status`.
        s.push(
            json!({"Sid": "WriteFailureReport", "Effect": "Allow", "Action": ["s3:PutObject"],
            "Resource": [obj(&format!("{}*", layout::NODE_REPORTS_DIR))]}),
        );
    }
    s.push(json!({
        "Sid": "ReadOwnSecretBundlePointer", "Effect": "Allow", "Action": ["ssm:GetParameter"],
        "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{}",
            layout::secret_bundle_parameter(&ctx.cluster, g.role))},
    }));
    s.push(json!({
        "Sid": "SignalOwnStack", "Effect": "Allow", "Action": ["cloudformation:SignalResource"],
        "Resource": {"Fn::Sub": "arn:${AWS::Partition}:cloudformation:${AWS::Region}:${AWS::AccountId}:stack/${AWS::StackName}/*"},
    }));
    let (token, token_keys) = join_token_statements(input, ctx, g.controller);
    s.extend(token);
    let mut managed = Vec::new();
    if g.controller {
        managed.push(ManagedSet {
            id: "Etcd".into(),
            what: "etcd backups, restores and metrics".into(),
            statements: etcd_statements(input, ctx),
        });
    }
    // Every statement that names the decrypt-key list, in one policy: the
    // list grows with key rotations (iam_size.rs MAX_RETIRED_KEYS).
    let mut keys = token_keys;
    if input.cluster.kms_key_arn.is_some() && !g.secrets.is_empty() {
        // Under every key the bundles were encrypted with: a node whose stack
        // still points at the bundle before a key rotation decrypts it too.
        keys.insert(
            0,
            json!({
                "Sid": "DecryptOwnSecrets", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": decrypt_keys(),
                "Condition": {"StringEquals": {
                    format!("kms:EncryptionContext:{CONTEXT_CLUSTER}"): ctx.cluster,
                    format!("kms:EncryptionContext:{CONTEXT_SECRET}"): g.secrets,
                }},
            }),
        );
    }
    if !keys.is_empty() {
        managed.push(ManagedSet {
            id: "Keys".into(),
            what: "the cluster key: own secrets and the join token".into(),
            statements: keys,
        });
    }
    // Each plugin's statements in a policy of its own, in the plugins' order.
    let mut plugins: Vec<ManagedSet> = Vec::new();
    for st in &g.hooks.iam_statements {
        match plugins.iter_mut().find(|m| m.what == format!("plugin {}", st.plugin)) {
            Some(m) => m.statements.push(st.statement.clone()),
            None => plugins.push(ManagedSet {
                id: format!("Plugin{}", camel(&st.plugin)),
                what: format!("plugin {}", st.plugin),
                statements: vec![st.statement.clone()],
            }),
        }
    }
    managed.extend(plugins);
    NodePolicies { inline: s, managed }
}

/// The join token's SecureString parameter (join_token.py): every node reads
/// it, controllers also write it. Parameter Store encrypts and decrypts a
/// standard SecureString with the key itself (kms:Encrypt, kms:Decrypt),
/// with the encryption context `PARAMETER_ARN` = the parameter's ARN
/// (https://docs.aws.amazon.com/kms/latest/developerguide/services-parameter-store.html),
/// so the key grants are conditioned on exactly this parameter, through SSM.
/// Without `kmsKeyARN` the parameter is under the account's aws/ssm key,
/// whose key policy already lets callers SSM allows use it through SSM.
/// Decrypt is granted under the retired keys too ([`decrypt_keys`]): after a
/// key rotation the published token stays under the old key until the
/// controllers mint the next one (within half its TTL), and workers must
/// still join meanwhile; controllers encrypt under `kmsKeyARN` only.
/// Returns the parameter's statements and the key's.
pub(super) fn join_token_statements(input: &RenderInput, ctx: &Ctx, controller: bool) -> (Vec<Value>, Vec<Value>) {
    let arn = format!(
        "arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{}",
        layout::bootstrap_token_parameter(&ctx.cluster)
    );
    let ssm = if controller {
        vec!["ssm:GetParameter", "ssm:PutParameter"]
    } else {
        vec!["ssm:GetParameter"]
    };
    let s = vec![json!({"Sid": "JoinToken", "Effect": "Allow", "Action": ssm, "Resource": {"Fn::Sub": arn}})];
    let mut keys = Vec::new();
    if let Some(k) = &input.cluster.kms_key_arn {
        let condition = json!({"StringEquals": {
            "kms:ViaService": {"Fn::Sub": "ssm.${AWS::Region}.amazonaws.com"},
            "kms:EncryptionContext:PARAMETER_ARN": {"Fn::Sub": arn},
        }});
        keys.push(
            json!({"Sid": "JoinTokenKey", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": decrypt_keys(),
            "Condition": condition}),
        );
        if controller {
            keys.push(
                json!({"Sid": "JoinTokenKeyEncrypt", "Effect": "Allow", "Action": ["kms:Encrypt"], "Resource": k,
            "Condition": condition}),
            );
        }
    }
    (s, keys)
}

/// The join lock (`kube-aws-node bootstrap`, src/node/kube_aws_node/locks.py):
/// a controller takes it with a conditional PutObject (above), finds its age
/// or that it is gone with a listing of exactly its key, and deletes it when
/// it has joined or when it is stale. A listing rather than HeadObject: S3
/// answers HeadObject on a missing key with 403 unless the caller may list
/// the bucket (S3 API reference, HeadObject, "Permissions"), and the lock is
/// missing as often as not. The listing is granted under `bootstrap/` only.
/// The certificate renewal (certs.py) and reconfiguration take the same lock.
pub(super) fn lock_statements(ctx: &Ctx) -> Vec<Value> {
    let dir = format!("{}/{}", ctx.key_prefix, layout::BOOTSTRAP_DIR);
    vec![
        json!({"Sid": "ReleaseJoinLock", "Effect": "Allow", "Action": ["s3:DeleteObject"],
            "Resource": ([layout::JOIN_LOCK, layout::TOKEN_LOCK].map(|l| format!("arn:aws:s3:::{}/{}/{l}", ctx.bucket, ctx.key_prefix)))}),
        json!({"Sid": "ListLocks", "Effect": "Allow", "Action": ["s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{}", ctx.bucket)],
            "Condition": {"StringLike": {"s3:prefix": [format!("{dir}*")]}}}),
    ]
}

/// The addon reconciler reads exactly the plan pointer, lists exactly the
/// installed record's key (so that a missing record is a 404-like empty
/// listing, never a 403 taken for "nothing installed"), and asks its own
/// stack whether it is in progress and whether a wait condition still waits
/// before signalling it.
pub(super) fn reconciler_statements(ctx: &Ctx) -> Vec<Value> {
    let name = super::super::cloudconfig::plan_parameter_name(ctx);
    vec![
        json!({"Sid": "ReadAddonPlanPointer", "Effect": "Allow", "Action": ["ssm:GetParameter"],
            "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:ssm:${{AWS::Region}}:${{AWS::AccountId}}:parameter{name}")}}),
        json!({"Sid": "ListInstalledRecord", "Effect": "Allow", "Action": ["s3:ListBucket"],
            "Resource": [format!("arn:aws:s3:::{}", ctx.bucket)],
            "Condition": {"StringEquals": {"s3:prefix": [format!("{}/{}", ctx.key_prefix, layout::INSTALLED_RELEASES)]}}}),
        // The addons' wait conditions are in the root stack, named after the cluster.
        json!({"Sid": "SignalAddonWaitConditions", "Effect": "Allow",
            "Action": ["cloudformation:SignalResource", "cloudformation:DescribeStackResource", "cloudformation:DescribeStacks"],
            "Resource": {"Fn::Sub": format!("arn:${{AWS::Partition}}:cloudformation:${{AWS::Region}}:${{AWS::AccountId}}:stack/{}/*", ctx.cluster)}}),
    ]
}

/// The logical ID of the cluster's IAM OIDC provider (root stack).
pub const OIDC_PROVIDER: &str = "ServiceAccountIssuer";

/// The logical ID of a service account's role: `SaRole<Namespace><Name>`.
pub fn service_account_role_id(namespace: &str, name: &str) -> String {
    format!("SaRole{}{}", camel(namespace), camel(name))
}

/// IAM roles for service accounts, in the root stack: the IAM OIDC provider
/// for the cluster's service-account issuer (audience `sts.amazonaws.com`),
/// and per plugin service account a role with its statements, assumable only
/// with a token for exactly that service account (src/irsa.rs
/// `trust_policy`). No ThumbprintList: the issuer is served by S3 (or by
/// `issuerURL`), and IAM verifies the JWKS endpoint's certificate against its
/// own library of trusted root CAs, using thumbprints only for an IdP whose
/// certificate no trusted CA signs (IAM API reference,
/// UpdateOpenIDConnectProviderThumbprint; the property is optional in
/// AWS::IAM::OIDCProvider).
pub(super) fn service_account_resources(input: &RenderInput, root: &mut Map<String, Value>) -> Result<(), RenderError> {
    let issuer = crate::irsa::issuer_url(&input.cluster);
    let mut r = Map::new();
    r.insert(
        OIDC_PROVIDER.into(),
        json!({"Type": "AWS::IAM::OIDCProvider", "Properties": {
            "Url": issuer,
            "ClientIdList": [crate::irsa::AUDIENCE],
        }}),
    );
    for sa in &input.plugins.service_accounts {
        let id = service_account_role_id(&sa.namespace, &sa.name);
        if r.contains_key(&id) {
            return Err(RenderError::Plugin {
                plugin: sa.plugin.clone(),
                message: format!(
                    "service account {}/{}: its role's logical ID {id:?} is another service account's too (rename one)",
                    sa.namespace, sa.name
                ),
            });
        }
        r.insert(
            id,
            json!({"Type": "AWS::IAM::Role", "Properties": {
                "RoleName": sa.role_name,
                "Path": "/",
                "Description": format!("kube-aws cluster {}: service account {}/{} (plugin {})",
                    input.cluster.cluster_name, sa.namespace, sa.name, sa.plugin),
                "AssumeRolePolicyDocument": crate::irsa::trust_policy(
                    json!({"Ref": OIDC_PROVIDER}), &issuer, &sa.namespace, &sa.name),
                "Policies": [{"PolicyName": format!("kube-aws-{}", sa.plugin), "PolicyDocument": {
                    "Version": "2012-10-17", "Statement": sa.statements}}]}}),
        );
    }
    let resources = root
        .entry("Resources")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| RenderError::Template {
            name: "root".into(),
            message: "Resources is not an object".into(),
        })?;
    resources.extend(r);
    if let Some(o) = root.get_mut("Outputs").and_then(Value::as_object_mut) {
        o.insert(
            "ServiceAccountIssuerArn".into(),
            json!({"Value": {"Ref": OIDC_PROVIDER}}),
        );
    }
    Ok(())
}
