//! plugin.yaml loader with templates: the input is a plugin.yaml, then
//! (after a line `#---template---`) the text of its `values.yaml.tera`. Both
//! go into a copy of tests/fixtures/every-hook, whose cluster.yaml enables
//! the plugin, and every plugin is resolved (parameters, every template).
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const SEP: &str = "\n#---template---\n";

struct Tree {
    _tmp: tempfile::TempDir,
    plugin: PathBuf,
    cluster: kube_aws::config::Cluster,
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

fn tree() -> &'static Tree {
    static T: OnceLock<Tree> = OnceLock::new();
    T.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/every-hook");
        copy_dir(&fixture, tmp.path());
        let cluster = kube_aws::config::load_cluster(tmp.path()).expect("the fixture loads");
        Tree {
            plugin: tmp.path().join("plugins/everything"),
            _tmp: tmp,
            cluster,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (manifest, template) = text.split_once(SEP).unwrap_or((text, ""));
    let t = tree();
    if std::fs::write(t.plugin.join("plugin.yaml"), manifest).is_err()
        || std::fs::write(t.plugin.join("values.yaml.tera"), template).is_err()
    {
        return;
    }
    let _ = kube_aws::plugin::resolve_plugins(&t.cluster);
});
