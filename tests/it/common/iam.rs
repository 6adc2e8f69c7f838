//! IAM on moto for tests that run a node's calls under its role: an admin
//! user made while moto still lets anyone in, enforcement switched on
//! (`/moto-api/reset-auth`), and a rendered role assumed by the admin in
//! place of EC2's instance profile (tests/it/node_iam_moto.rs says what moto
//! does and does not check).

use std::process::Command;

use serde_json::{json, Value};

use super::MotoEnv as Env;

pub struct Creds {
    pub key: String,
    pub secret: String,
    pub token: Option<String>,
}

/// The aws CLI as `who`, against `env`'s moto (loaded once: super::aws_cli).
pub fn aws_as(env: &Env, who: &Creds, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new(super::tool("aws"));
    env.apply(&mut cmd);
    cmd.env("AWS_ACCESS_KEY_ID", &who.key)
        .env("AWS_SECRET_ACCESS_KEY", &who.secret);
    if let Some(t) = &who.token {
        cmd.env("AWS_SESSION_TOKEN", t);
    }
    cmd.args(args).args(["--output", "json"]);
    let o = super::aws_cli::output(&cmd);
    (o.status.success(), super::output_text(&o))
}

pub fn must(env: &Env, who: &Creds, args: &[&str]) -> Value {
    let (ok, out) = aws_as(env, who, args);
    assert!(ok, "aws {args:?}: {out}");
    serde_json::from_str(out.trim()).unwrap_or(Value::Null)
}

/// Switches moto's IAM enforcement on (every later request is checked).
pub fn enforce_iam(env: &Env) {
    let o = Command::new("curl")
        .args([
            "-fsS",
            "-X",
            "POST",
            "-H",
            "Content-Type: text/plain",
            "--data-binary",
            "0",
        ])
        .arg(format!("{}/moto-api/reset-auth", env.moto.url()))
        .output()
        .unwrap();
    assert!(o.status.success(), "reset-auth: {}", super::output_text(&o));
}

/// An admin user and its access key, made while moto still lets anyone in.
pub fn admin(env: &Env) -> (Creds, String) {
    env.aws(&["iam", "create-user", "--user-name", "admin"]);
    env.aws(&[
        "iam",
        "put-user-policy",
        "--user-name",
        "admin",
        "--policy-name",
        "all",
        "--policy-document",
        r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}"#,
    ]);
    let k = env.aws_json(&["iam", "create-access-key", "--user-name", "admin"]);
    let arn = env.aws_json(&["iam", "get-user", "--user-name", "admin"])["User"]["Arn"]
        .as_str()
        .unwrap()
        .to_string();
    let c = Creds {
        key: k["AccessKey"]["AccessKeyId"].as_str().unwrap().into(),
        secret: k["AccessKey"]["SecretAccessKey"].as_str().unwrap().into(),
        token: None,
    };
    (c, arn)
}

/// The rendered role whose name holds `logical` (CloudFormation names it
/// `<stack>-<logical>-<suffix>`), assumed by the admin.
pub fn assume(env: &Env, admin: &Creds, admin_arn: &str, logical: &str) -> Creds {
    let roles = must(env, admin, &["iam", "list-roles"]);
    let name = roles["Roles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["RoleName"].as_str().unwrap().to_string())
        .find(|n| n.contains(&format!("-{logical}-")))
        .unwrap_or_else(|| panic!("no role {logical} in moto: {roles}"));
    // EC2's instance profile stands aside: the admin may assume the role.
    let trust = json!({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": {"AWS": admin_arn}, "Action": "sts:AssumeRole"}]});
    must(
        env,
        admin,
        &[
            "iam",
            "update-assume-role-policy",
            "--role-name",
            &name,
            "--policy-document",
            &trust.to_string(),
        ],
    );
    let arn = must(env, admin, &["iam", "get-role", "--role-name", &name])["Role"]["Arn"]
        .as_str()
        .unwrap()
        .to_string();
    let s = must(
        env,
        admin,
        &["sts", "assume-role", "--role-arn", &arn, "--role-session-name", logical],
    );
    let c = &s["Credentials"];
    Creds {
        key: c["AccessKeyId"].as_str().unwrap().into(),
        secret: c["SecretAccessKey"].as_str().unwrap().into(),
        token: Some(c["SessionToken"].as_str().unwrap().into()),
    }
}
