//! Two build steps:
//! - rebuild when the built-in layer changes: `include_dir!` embeds
//!   `plugins/` and `values/` but cargo does not track the files it reads;
//! - list the node program's modules (`src/node`) and gzip each file once,
//!   here, for the cloud-configs (src/render/node_program.rs `files`): every
//!   node role's cloud-config carries the program, so compressing it per
//!   render would cost each run what it costs once here.
//!
//! The gzip is deterministic for a given flate2 (pinned by Cargo.lock): no
//! file name, modification time 0, the best level. A flate2 that compresses
//! differently changes the cloud-configs' bytes and so rolls the nodes on the
//! next `update`, as any change of the program does.

use std::io::Write;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=plugins");
    println!("cargo:rerun-if-changed=values");
    println!("cargo:rerun-if-changed=src/node/kube_aws_node");
    println!("cargo:rerun-if-changed=src/node/kube-aws-node");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    if let Err(e) = gzip_node_program(Path::new(&out)) {
        panic!("build.rs: cannot gzip the node program: {e}");
    }
}

/// Writes `node_program.rs`: `LAUNCHER_FILE` and `MODULES`, each file of
/// the program as (its module name,) its text and its gzip, included from
/// the source and from `OUT_DIR`. The modules are every `*.py` of
/// src/node/kube_aws_node, sorted: adding one ships it.
fn gzip_node_program(out: &Path) -> std::io::Result<()> {
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("src/node");
    let mut modules: Vec<String> = std::fs::read_dir(src.join("kube_aws_node"))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".py"))
        .collect();
    modules.sort();
    let dir = out.join("node_program");
    std::fs::create_dir_all(dir.join("kube_aws_node"))?;
    // (the source's path, the gzip's path), both absolute.
    let gzip = |name: &str| -> std::io::Result<(String, String)> {
        let from = src.join(name);
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::best());
        gz.write_all(&std::fs::read(&from)?)?;
        let to = dir.join(format!("{name}.gz"));
        std::fs::write(&to, gz.finish()?)?;
        Ok((from.display().to_string(), to.display().to_string()))
    };
    let (text, gz) = gzip("kube-aws-node")?;
    let mut rs = format!(
        "pub const LAUNCHER_FILE: (&str, &[u8]) = (include_str!({text:?}), include_bytes!({gz:?}));\n\
         pub const MODULES: &[(&str, &str, &[u8])] = &[\n"
    );
    for m in &modules {
        let (text, gz) = gzip(&format!("kube_aws_node/{m}"))?;
        rs.push_str(&format!(
            "    ({m:?}, include_str!({text:?}), include_bytes!({gz:?})),\n"
        ));
    }
    rs.push_str("];\n");
    std::fs::write(out.join("node_program.rs"), rs)
}
