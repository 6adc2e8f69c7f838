//! Plugin lifecycle hooks on the deploy path, against moto server (issue 18):
//! `up --wait` on a real work tree runs preUp, the render hooks around its
//! render, and postUp with the stack outputs; a post-render hook's file is
//! published with the rest of `rendered/`; `destroy --yes --wait` runs
//! preDestroy and postDestroy. Each hook appends `<hook> <step>` to a log in
//! the work tree.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::MotoEnv as Env;

const BUCKET: &str = "kube-aws-hooks";

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

fn text(o: &std::process::Output) -> String {
    common::output_text(o)
}

#[test]
fn deploy_hooks_run_in_order_and_post_render_files_are_published() {
    let env = Env::new();
    let wt = env.work_tree(&[BUCKET]);
    let (dir, kms) = (wt.path(), wt.kms.clone());
    // aws-vpc-cni and the cloud controller manager have charts on the internet, out of reach here.
    write(
        &dir.join("cluster.yaml"),
        &format!(
            "clusterName: demo\nregion: us-west-2\ns3URI: s3://{BUCKET}/clusters\nkmsKeyARN: {kms}\n\
             worker:\n  nodePools:\n    - name: general\n      count: 1\n\
             plugins:\n  aws-vpc-cni: {{enabled: false}}\n  aws-cloud-controller-manager: {{enabled: false}}\n  hello: {{enabled: true}}\n"
        ),
    );
    write(
        &dir.join("plugins/hello/plugin.yaml"),
        "apiVersion: kube-aws/v1\nkind: Plugin\nmetadata:\n  name: hello\n  version: 0.1.0\nspec:\n  hooks:\n\
         \x20   preRender: [{run: hook.sh}]\n    postRender: [{run: hook.sh}]\n    preUp: [{run: hook.sh}]\n\
         \x20   postUp: [{run: hook.sh}]\n    preDestroy: [{run: hook.sh}]\n    postDestroy: [{run: hook.sh}]\n",
    );
    let hook = dir.join("plugins/hello/hook.sh");
    write(
        &hook,
        "#!/bin/sh\nset -e\necho \"$KUBE_AWS_HOOK $KUBE_AWS_STEP\" >> \"$KUBE_AWS_DIR/hooks.log\"\n\
         if [ \"$KUBE_AWS_HOOK\" = postRender ]; then\n  mkdir -p \"$KUBE_AWS_RENDERED/plugins/hello\"\n  \
         echo 'from a post-render hook' > \"$KUBE_AWS_RENDERED/plugins/hello/note.txt\"\nfi\n\
         if [ -n \"${KUBE_AWS_OUTPUTS:-}\" ]; then cp \"$KUBE_AWS_OUTPUTS\" \"$KUBE_AWS_DIR/outputs-$KUBE_AWS_HOOK.json\"; fi\n",
    );
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();

    let up = env.kube_aws(dir, &["up", "--wait", "--timeout", "2m"]);
    assert!(up.status.success(), "{}", text(&up));
    let log = std::fs::read_to_string(dir.join("hooks.log")).unwrap();
    assert_eq!(log, "preUp up\npreRender render\npostRender render\npostUp up\n");

    // postUp saw the root stack's outputs.
    let outputs: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("outputs-postUp.json")).unwrap()).unwrap();
    assert!(
        outputs
            .as_object()
            .is_some_and(|o| !o.is_empty() && o.values().all(|v| v.is_string())),
        "{outputs}"
    );
    assert!(!dir.join("outputs-preUp.json").exists());

    // The hook's file is published, content-addressed like every other.
    let objs = tempfile::tempdir().unwrap();
    env.aws(&[
        "s3",
        "cp",
        "--recursive",
        "--quiet",
        &format!("s3://{BUCKET}/clusters/demo/plugins/"),
        objs.path().to_str().unwrap(),
    ]);
    let published = common::files_under(objs.path());
    assert!(
        published
            .iter()
            .any(|p| p.ends_with("note.txt") && std::fs::read_to_string(p).unwrap() == "from a post-render hook\n"),
        "{published:?}"
    );

    std::fs::remove_file(dir.join("hooks.log")).unwrap();
    let destroy = env.kube_aws(dir, &["destroy", "--yes", "--wait", "--timeout", "2m"]);
    assert!(destroy.status.success(), "{}", text(&destroy));
    let log = std::fs::read_to_string(dir.join("hooks.log")).unwrap();
    assert_eq!(log, "preDestroy destroy\npostDestroy destroy\n");
}
