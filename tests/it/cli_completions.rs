//! `kube-aws completions bash|zsh|fish` (issue 30, item 9): each script is
//! generated, names the built-in commands and the work tree's plugin
//! commands; the bash script is loaded into a real bash and asked to
//! complete `kube-aws gr` and `kube-aws ren`.
//!
//! Does not run zsh or fish (not installed on the test machines): their
//! scripts are checked for the names only.

use std::path::Path;

use assert_cmd::Command;

const PLUGIN: &str = "apiVersion: kube-aws/v1
kind: Plugin
metadata: {name: tool, version: 0.1.0}
enabledByDefault: true
spec:
  commands:
    - name: greet
      description: Say hello
      run: bin/greet.sh
";

fn tree(root: &Path) {
    std::fs::write(
        root.join("cluster.yaml"),
        "clusterName: demo\nregion: us-west-2\ns3URI: s3://bucket-1/kube-aws\n",
    )
    .unwrap();
    let bin = root.join("plugins/tool/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(root.join("plugins/tool/plugin.yaml"), PLUGIN).unwrap();
    std::fs::write(bin.join("greet.sh"), "#!/bin/sh\necho hello\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(bin.join("greet.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn script(dir: &Path, shell: &str) -> String {
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .current_dir(dir)
        .env("PATH", "/usr/bin:/bin")
        .args(["completions", shell])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn completions_name_builtin_and_plugin_commands() {
    let tmp = tempfile::tempdir().unwrap();
    tree(tmp.path());
    for shell in ["bash", "zsh", "fish"] {
        let s = script(tmp.path(), shell);
        for word in ["render", "update", "completions", "greet", "lock-timeout"] {
            assert!(s.contains(word), "{shell}: no {word}");
        }
    }
    // The bash script in a real bash: complete `kube-aws gr` and `kube-aws ren`.
    let file = tmp.path().join("kube-aws.bash");
    std::fs::write(&file, script(tmp.path(), "bash")).unwrap();
    let complete = |word: &str| {
        let prog = format!(
            "source {}; COMP_WORDS=(kube-aws {word}); COMP_CWORD=1; COMP_LINE='kube-aws {word}'; COMP_POINT=${{#COMP_LINE}}; \
             f=$(complete -p kube-aws | sed -E 's/.*-F ([^ ]+).*/\\1/'); \
             $f kube-aws {word} kube-aws; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        );
        let out = std::process::Command::new("bash").args(["-c", &prog]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(complete("gr").trim(), "greet");
    assert_eq!(complete("ren").trim(), "render");
}
