//! Plugins that act on the operator's machine (issue 18): `kube-aws NAME`
//! running `kube-aws-NAME` from PATH or a plugin's command, and the plugin
//! lifecycle hooks around render (order, environment, secrets, timeout,
//! `--no-hooks`, validate). Work trees are written by `kube-aws init` in a
//! temporary directory; plugin programs are small sh scripts.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common;

use assert_cmd::Command;
use common::output_text;

fn kube_aws(dir: &Path) -> Command {
    let mut c = Command::cargo_bin("kube-aws").unwrap();
    let cache = std::env::temp_dir().join(format!("kube-aws-cmds-test-cache-{}", std::process::id()));
    c.env("NO_COLOR", "1").env("XDG_CACHE_HOME", cache).current_dir(dir);
    c
}

/// PATH with `bin` first.
fn path_with(bin: &Path) -> std::ffi::OsString {
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    std::env::join_paths(paths).unwrap()
}

fn write_exec(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fresh work tree (`kube-aws init`) whose cluster.yaml enables `plugins`
/// with the given settings (YAML lines under each name).
fn work_tree(plugins: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wt");
    let out = Command::cargo_bin("kube-aws")
        .unwrap()
        .arg("init")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let file = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut block = String::from("plugins:\n");
    for (name, settings) in plugins {
        block.push_str(&format!("  {name}:\n    enabled: true\n"));
        for line in settings.lines() {
            block.push_str(&format!("    {line}\n"));
        }
    }
    assert!(text.contains("\nplugins: {}\n"), "init's cluster.yaml changed shape");
    std::fs::write(&file, text.replace("\nplugins: {}\n", &format!("\n{block}"))).unwrap();
    tmp
}

fn wt(tmp: &tempfile::TempDir) -> PathBuf {
    tmp.path().join("wt")
}

fn plugin(dir: &Path, name: &str, spec: &str) {
    let p = dir.join("plugins").join(name);
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(
        p.join("plugin.yaml"),
        format!("apiVersion: kube-aws/v1\nkind: Plugin\nmetadata:\n  name: {name}\n  version: 0.1.0\nspec:\n{spec}"),
    )
    .unwrap();
}

#[test]
fn external_command_on_path_gets_its_arguments_byte_for_byte_and_its_exit_code_is_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let out = tmp.path().join("args");
    write_exec(
        &bin.join("kube-aws-hello"),
        "#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$OUT\"\nprintf '%s' \"$KUBE_AWS_DIR\" > \"$OUT.dir\"\nexit 7\n",
    );
    let args: Vec<&OsStr> = vec![
        OsStr::new("a b"),
        OsStr::new("--help"),
        OsStr::new("-v"),
        OsStr::from_bytes(b"caf\xe9\xff"),
        OsStr::new(""),
    ];
    let o = kube_aws(tmp.path())
        .env("PATH", path_with(&bin))
        .env("OUT", &out)
        .arg("hello")
        .args(&args)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", output_text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("error:"),
        "{}",
        output_text(&o)
    );
    let mut want = Vec::new();
    for a in &args {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    assert_eq!(std::fs::read(&out).unwrap(), want);
    assert!(Path::new(&std::fs::read_to_string(out.with_extension("dir")).unwrap()).is_absolute());

    // --help lists it in its own section.
    let help = kube_aws(tmp.path())
        .env("PATH", path_with(&bin))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    let section = text
        .split("Plugin commands:")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(section.contains("hello"), "{text}");

    // An unknown name with nothing on PATH.
    let o = kube_aws(tmp.path())
        .env("PATH", path_with(&bin))
        .arg("nosuch")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(output_text(&o).contains("\"nosuch\" is not a kube-aws command, and no kube-aws-nosuch is on PATH"));
}

#[test]
fn built_in_commands_cannot_be_shadowed() {
    // From PATH: `kube-aws schema` stays the built-in.
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let marker = tmp.path().join("ran");
    write_exec(&bin.join("kube-aws-schema"), "#!/bin/sh\ntouch \"$MARK\"\n");
    let o = kube_aws(tmp.path())
        .env("PATH", path_with(&bin))
        .env("MARK", &marker)
        .args(["schema", "plugin"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"$schema\""));
    assert!(!marker.exists());

    // From a plugin: a located error.
    let t = work_tree(&[("tool", "")]);
    plugin(
        &wt(&t),
        "tool",
        "  commands:\n    - name: render\n      run: bin/render\n",
    );
    write_exec(&wt(&t).join("plugins/tool/bin/render"), "#!/bin/sh\nexit 0\n");
    for args in [&["plugins", "list"][..], &["other"][..]] {
        let o = kube_aws(&wt(&t)).args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", output_text(&o));
        let text = output_text(&o);
        assert!(
            text.contains("plugins/tool/plugin.yaml:8:")
                && text.contains(
                    "spec.commands[0].name: \"render\" is a built-in kube-aws command and cannot be shadowed"
                ),
            "{text}"
        );
    }
}

#[test]
fn a_plugin_command_runs_from_its_directory_only_while_the_plugin_is_enabled() {
    let t = work_tree(&[("tool", "")]);
    let dir = wt(&t);
    plugin(
        &dir,
        "tool",
        "  commands:\n    - name: greet\n      description: Say hello\n      run: bin/greet.sh\n",
    );
    write_exec(
        &dir.join("plugins/tool/bin/greet.sh"),
        "#!/bin/sh\necho \"hi $1 from $(basename \"$KUBE_AWS_PLUGIN_DIR\")\"\nexit 4\n",
    );
    let o = kube_aws(&dir).args(["greet", "you"]).output().unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", output_text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hi you from tool\n");

    let list = kube_aws(&dir).args(["plugins", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("greet ") && l.contains("tool") && l.ends_with("Say hello")),
        "{text}"
    );
    let json = kube_aws(&dir).args(["plugins", "list", "-o", "json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let tool = v.as_array().unwrap().iter().find(|p| p["name"] == "tool").unwrap();
    assert_eq!(tool["commands"][0]["name"], "greet");
    let help = kube_aws(&dir).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.split("Plugin commands:").nth(1).is_some_and(|section| section
            .lines()
            .any(|l| l.trim_start().starts_with("greet ") && l.ends_with(" Say hello (plugin tool)"))),
        "{help}"
    );

    // Disabled: not run, and the message says how to enable it.
    let cfg = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("  tool:\n    enabled: true\n", "  tool:\n    enabled: false\n"),
    )
    .unwrap();
    let o = kube_aws(&dir).args(["greet", "you"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        output_text(&o).contains("plugin \"tool\" declares it: enable the plugin"),
        "{}",
        output_text(&o)
    );
}

#[test]
fn a_run_path_outside_the_plugin_or_not_executable_is_a_located_error() {
    let t = work_tree(&[("tool", "")]);
    let dir = wt(&t);
    write_exec(&dir.join("outside.sh"), "#!/bin/sh\ntouch \"$MARK\"\n");
    let marker = dir.join("ran");
    let cases = [
        (
            "../../outside.sh",
            "spec.commands[0].run: \"../../outside.sh\" escapes the plugin directory",
        ),
        ("/bin/sh", "spec.commands[0].run: \"/bin/sh\" is absolute"),
        ("plain.sh", "plain.sh is not executable (chmod +x it)"),
        ("missing.sh", "\"missing.sh\" does not exist in"),
        ("link.sh", "resolves to"),
    ];
    std::fs::create_dir_all(dir.join("plugins/tool")).unwrap();
    std::fs::write(dir.join("plugins/tool/plain.sh"), "#!/bin/sh\n").unwrap();
    std::os::unix::fs::symlink(dir.join("outside.sh"), dir.join("plugins/tool/link.sh")).unwrap();
    for (run, want) in cases {
        plugin(
            &dir,
            "tool",
            &format!("  commands:\n    - name: go\n      run: {run}\n"),
        );
        let o = kube_aws(&dir).env("MARK", &marker).arg("go").output().unwrap();
        let text = output_text(&o);
        assert_eq!(o.status.code(), Some(1), "{run}: {text}");
        assert!(
            text.contains("plugins/tool/plugin.yaml:9:") && text.contains(want),
            "{run}: {text}"
        );
        assert!(!marker.exists(), "{run} ran");
    }
}

/// Two plugins with hooks around render: `alpha` (with a secret parameter)
/// and `beta`. Each hook appends `<plugin> <hook>` to `$KUBE_AWS_DIR/hooks.log`.
fn hooked_tree(alpha_extra: &str) -> tempfile::TempDir {
    let t = work_tree(&[("alpha", "greeting: bonjour\ntoken: s3cr3t-token-value"), ("beta", "")]);
    let dir = wt(&t);
    // A secret parameter needs a key to encrypt it with.
    let cfg = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{text}kmsKeyARN: arn:aws:kms:us-west-2:111122223333:key/k\n"),
    )
    .unwrap();
    let hook = "#!/bin/sh\necho \"$KUBE_AWS_PLUGIN $KUBE_AWS_HOOK $*\" >> \"$KUBE_AWS_DIR/hooks.log\"\n\
                env > \"$KUBE_AWS_DIR/env-$KUBE_AWS_PLUGIN-$KUBE_AWS_HOOK\"\n\
                cp \"$KUBE_AWS_PARAMS\" \"$KUBE_AWS_DIR/params-$KUBE_AWS_PLUGIN.json\"\n\
                echo \"said by $KUBE_AWS_PLUGIN\"\n\
                if [ -n \"$FAIL\" ] && [ \"$KUBE_AWS_HOOK\" = preRender ]; then exit 3; fi\n";
    for name in ["alpha", "beta"] {
        let extra = if name == "alpha" { alpha_extra } else { "" };
        plugin(
            &dir,
            name,
            &format!(
                "  parameters:\n    greeting: {{type: string}}\n    token: {{type: string, secret: true}}\n  hooks:\n    preRender:\n      - run: hook.sh\n        args: [one, \"two words\"]\n    postRender:\n      - run: hook.sh\n{extra}"
            ),
        );
        write_exec(&dir.join("plugins").join(name).join("hook.sh"), hook);
    }
    t
}

#[test]
fn render_hooks_run_in_plugin_order_with_the_documented_environment_and_no_secret() {
    let t = hooked_tree("");
    let dir = wt(&t);
    let o = kube_aws(&dir).args(["render", "-v"]).output().unwrap();
    let text = output_text(&o);
    assert!(o.status.success(), "{text}");
    let log = std::fs::read_to_string(dir.join("hooks.log")).unwrap();
    assert_eq!(
        log,
        "alpha preRender one two words\nbeta preRender one two words\nalpha postRender \nbeta postRender \n"
    );
    // Streamed and prefixed; -v names each hook first.
    assert!(
        text.contains("[alpha] said by alpha\n") && text.contains("[beta] said by beta\n"),
        "{text}"
    );
    assert!(
        text.contains("[alpha] running hook preRender[0] (hook.sh \"one\" \"two words\")"),
        "{text}"
    );

    let env = std::fs::read_to_string(dir.join("env-alpha-preRender")).unwrap();
    let abs = std::fs::canonicalize(&dir).unwrap();
    for (k, v) in [
        ("KUBE_AWS_CLUSTER", "wt".to_string()),
        ("KUBE_AWS_REGION", "us-west-2".to_string()),
        ("KUBE_AWS_STEP", "render".to_string()),
        ("KUBE_AWS_RENDERED", abs.join("rendered").display().to_string()),
        ("KUBE_AWS_PLUGIN_DIR", abs.join("plugins/alpha").display().to_string()),
    ] {
        assert!(env.lines().any(|l| l == format!("{k}={v}")), "{k}={v} not in\n{env}");
    }
    assert!(
        env.contains("KUBE_AWS_PARAMS=") && !env.contains("KUBE_AWS_OUTPUTS="),
        "{env}"
    );
    // The hook ran from the work tree (PWD) .
    assert!(env.lines().any(|l| l == format!("PWD={}", abs.display())), "{env}");

    let params: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("params-alpha.json")).unwrap()).unwrap();
    assert_eq!(params, serde_json::json!({"greeting": "bonjour"}));
    for f in [
        "env-alpha-preRender",
        "env-alpha-postRender",
        "env-beta-preRender",
        "params-alpha.json",
    ] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.contains("s3cr3t-token-value"), "the secret leaked into {f}");
    }
    assert!(!text.contains("s3cr3t-token-value"));
}

#[test]
fn a_failing_pre_render_hook_leaves_rendered_untouched_and_no_hooks_skips_them() {
    let t = hooked_tree("");
    let dir = wt(&t);
    let o = kube_aws(&dir).arg("render").output().unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let before = tree(&dir.join("rendered"));
    // A change render would show.
    let cfg = dir.join("cluster.yaml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("count: 2", "count: 3")).unwrap();

    let o = kube_aws(&dir).arg("render").env("FAIL", "1").output().unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("plugin \"alpha\": hook preRender[0] (hook.sh) exited with code 3; render aborted"),
        "{text}"
    );
    assert!(tree(&dir.join("rendered")) == before, "rendered/ changed");
    let log = std::fs::read_to_string(dir.join("hooks.log")).unwrap();
    assert!(
        !log.contains("beta preRender\n") && log.ends_with("alpha preRender one two words\n"),
        "{log}"
    );

    // --no-hooks: the same failing hook is skipped and render goes through.
    std::fs::remove_file(dir.join("hooks.log")).unwrap();
    let o = kube_aws(&dir)
        .args(["render", "--no-hooks"])
        .env("FAIL", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert!(!dir.join("hooks.log").exists());
    let now: Vec<(PathBuf, Vec<u8>)> = common::files_under(&dir.join("rendered"))
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    assert!(before != now, "the change did not render");

    // validate and plugins show run no hook.
    for args in [
        &["validate"][..],
        &["plugins", "show", "alpha"][..],
        &["plugins", "list"][..],
    ] {
        let o = kube_aws(&dir).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", output_text(&o));
        assert!(!dir.join("hooks.log").exists(), "{args:?} ran a hook");
    }
}

#[test]
fn a_post_render_hook_may_add_files_only_under_its_own_directory() {
    let t = hooked_tree("      - run: add.sh\n");
    let dir = wt(&t);
    write_exec(
        &dir.join("plugins/alpha/add.sh"),
        "#!/bin/sh\nmkdir -p \"$KUBE_AWS_RENDERED/plugins/alpha\"\necho extra > \"$KUBE_AWS_RENDERED/plugins/alpha/extra.txt\"\n\
         if [ -n \"$EVIL\" ]; then echo x > \"$KUBE_AWS_RENDERED/evil.txt\"; fi\n",
    );
    let o = kube_aws(&dir).arg("render").output().unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    assert_eq!(
        std::fs::read_to_string(dir.join("rendered/plugins/alpha/extra.txt")).unwrap(),
        "extra\n"
    );
    let before = tree(&dir.join("rendered"));
    let o = kube_aws(&dir).arg("render").env("EVIL", "1").output().unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("plugin \"alpha\": hook postRender[1] (add.sh) changed evil.txt in the rendered directory; a post-render hook may only add files under plugins/alpha/"),
        "{text}"
    );
    // The hook ran on the new output before the swap: a failing one leaves
    // the previous rendered/ exactly as it was, and no staging directory.
    assert_eq!(tree(&dir.join("rendered")), before);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(".rendered."))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Every file under `root` with its bytes, sorted by path.
fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out: Vec<(PathBuf, Vec<u8>)> = common::files_under(root)
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p.strip_prefix(root).unwrap().to_path_buf(), bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_hook_past_its_timeout_is_killed_with_its_children() {
    let t = work_tree(&[("slow", "")]);
    let dir = wt(&t);
    plugin(
        &dir,
        "slow",
        "  hooks:\n    preRender:\n      - run: slow.sh\n        timeout: 1s\n",
    );
    // The hook leaves a child that holds its output pipe open.
    write_exec(
        &dir.join("plugins/slow/slow.sh"),
        "#!/bin/sh\nsleep 60 &\necho $! > \"$KUBE_AWS_DIR/child.pid\"\necho started\nwait\n",
    );
    let start = Instant::now();
    let o = kube_aws(&dir).arg("render").output().unwrap();
    let took = start.elapsed();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert!(
        text.contains("plugin \"slow\": hook preRender[0] (slow.sh) timed out after 1s; its process group was killed"),
        "{text}"
    );
    assert!(text.contains("[slow] started"), "{text}");
    assert!(!dir.join("rendered").exists());
    let pid = std::fs::read_to_string(dir.join("child.pid")).unwrap();
    let proc = PathBuf::from(format!("/proc/{}", pid.trim()));
    let deadline = Instant::now() + Duration::from_secs(5);
    // Gone, or a zombie waiting for init to reap it.
    while proc.exists()
        && !std::fs::read_to_string(proc.join("stat")).is_ok_and(|s| s.contains(") Z "))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let alive = proc.exists() && !std::fs::read_to_string(proc.join("stat")).is_ok_and(|s| s.contains(") Z "));
    assert!(!alive, "the hook's child {} survived", pid.trim());
}

#[test]
fn bad_hooks_are_located() {
    let t = work_tree(&[("bad", "")]);
    let dir = wt(&t);
    plugin(&dir, "bad", "  hooks:\n    preRendr:\n      - run: x.sh\n");
    let o = kube_aws(&dir).arg("render").output().unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("plugins/bad/plugin.yaml:") && text.contains("did you mean \"preRender\""),
        "{text}"
    );

    plugin(
        &dir,
        "bad",
        "  hooks:\n    preRender:\n      - run: ../x.sh\n        timeout: soon\n",
    );
    let o = kube_aws(&dir).arg("render").output().unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("spec.hooks.preRender[0].run: \"../x.sh\" escapes the plugin directory"),
        "{text}"
    );
    assert!(
        text.contains("spec.hooks.preRender[0].timeout: \"soon\" is not a duration"),
        "{text}"
    );
    // validate finds the same, without running anything.
    let o = kube_aws(&dir).arg("validate").output().unwrap();
    let text = output_text(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("spec.hooks.preRender[0].run: \"../x.sh\" escapes the plugin directory"),
        "{text}"
    );
    assert!(
        text.contains("spec.hooks.preRender[0].timeout: \"soon\" is not a duration"),
        "{text}"
    );

    // plugins show names the hook (it never runs it).
    plugin(&dir, "bad", "  hooks:\n    postUp:\n      - run: notify.sh\n");
    let o = kube_aws(&dir).args(["plugins", "show", "bad"]).output().unwrap();
    assert!(
        output_text(&o).contains("postUp hook notify.sh (runs on your machine)"),
        "{}",
        output_text(&o)
    );
}

#[test]
fn cluster_dump_now_triggers_the_cron_job_through_the_kubeconfig() {
    let t = work_tree(&[("cluster-dump", "")]);
    let dir = wt(&t);
    let bin = t.path().join("bin");
    let log = t.path().join("kubectl.args");
    write_exec(
        &bin.join("kubectl"),
        "#!/bin/sh\nprintf '%s\\n' \"KUBECONFIG=$KUBECONFIG\" \"$@\" > \"$LOG\"\n",
    );
    let o = kube_aws(&dir)
        .env("PATH", path_with(&bin))
        .env("KUBECONFIG", "/tmp/some.kubeconfig")
        .env("LOG", &log)
        .args(["dump-now", "--context", "demo"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", output_text(&o));
    let args = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = args.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "KUBECONFIG=/tmp/some.kubeconfig",
            "--namespace",
            "kube-system",
            "create",
            "job"
        ]
    );
    assert!(lines[5].starts_with("cluster-dump-now-"), "{args}");
    assert_eq!(lines[6..], ["--from=cronjob/cluster-dump", "--context", "demo"]);

    // Without a kubeconfig it says why it cannot.
    let o = kube_aws(&dir)
        .env("PATH", path_with(&bin))
        .env_remove("KUBECONFIG")
        .env("HOME", t.path())
        .arg("dump-now")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        output_text(&o).contains("dump-now: no kubeconfig"),
        "{}",
        output_text(&o)
    );
}

#[test]
fn a_hook_printing_100_mb_is_streamed_not_buffered() {
    let t = work_tree(&[("loud", "")]);
    let dir = wt(&t);
    plugin(&dir, "loud", "  hooks:\n    preRender:\n      - run: loud.sh\n");
    // 100 MB without a newline (the worst case for a line buffer), then
    // kube-aws's (the parent's) peak resident memory so far.
    write_exec(
        &dir.join("plugins/loud/loud.sh"),
        "#!/bin/sh\nhead -c 100000000 /dev/zero\ngrep VmHWM /proc/$PPID/status > \"$KUBE_AWS_DIR/peak\"\n",
    );
    // Not captured: the test would hold the 100 MB itself.
    let status = std::process::Command::new(assert_cmd::cargo::cargo_bin("kube-aws"))
        .arg("render")
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let peak = std::fs::read_to_string(dir.join("peak")).unwrap();
    let kb: u64 = peak.split_whitespace().nth(1).unwrap().parse().unwrap();
    eprintln!("kube-aws peak RSS while a hook printed 100 MB: {kb} kB");
    assert!(kb < 64 * 1024, "kube-aws held {kb} kB: the output was buffered");
}

#[test]
fn ctrl_c_during_a_hook_kills_its_group_and_stops_the_step() {
    let t = work_tree(&[("slow", "")]);
    let dir = wt(&t);
    plugin(&dir, "slow", "  hooks:\n    preRender:\n      - run: slow.sh\n");
    write_exec(
        &dir.join("plugins/slow/slow.sh"),
        "#!/bin/sh\nsleep 60 &\necho $! > \"$KUBE_AWS_DIR/child.pid\"\nwait\n",
    );
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("kube-aws"))
        .arg("render")
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid_file = dir.join("child.pid");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pid_file.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    // What the terminal sends to kube-aws's process group (the hook has its own).
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let start = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(10));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("hook preRender[0] (slow.sh) was interrupted; its process group was killed"),
        "{err}"
    );
    assert!(!dir.join("rendered").exists());
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let proc = PathBuf::from(format!("/proc/{}", pid.trim()));
    let gone = || !proc.exists() || std::fs::read_to_string(proc.join("stat")).is_ok_and(|s| s.contains(") Z "));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(gone(), "the hook's child survived Ctrl-C");
}
