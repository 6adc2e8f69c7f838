//! The node program `kube-aws-node` (src/node/kube_aws_node, Python 3.9
//! standard library; botocore when the node has it, for the calls of
//! sdkcall.py), shipped as files in every node's cloud-config: the
//! package under [`LIB_DIR`] and its launcher at [`LAUNCHER`]. Its
//! subcommands (`bootstrap`, `secrets`, `reconcile`, …) are dispatched by
//! src/node/kube_aws_node/cli.py.

/// Where the package lives on a node.
pub const LIB_DIR: &str = "/opt/kube-aws/lib/kube_aws_node";
/// The launcher: `kube-aws-node COMMAND`.
pub const LAUNCHER: &str = "/opt/kube-aws/bin/kube-aws-node";

/// The program's files, listed and gzipped by build.rs: `LAUNCHER_FILE`
/// (text, gzip) and `MODULES` (name, text, gzip), every `*.py` of
/// src/node/kube_aws_node, sorted.
mod generated {
    include!(concat!(env!("OUT_DIR"), "/node_program.rs"));
}
pub use generated::MODULES;

/// One file of the program on a node.
pub struct ProgramFile {
    pub path: String,
    pub mode: &'static str,
    pub text: &'static str,
    /// `text` gzipped (build.rs), as the cloud-configs carry it
    /// (`encoding: gz+b64`, which cloud-init's write_files decodes:
    /// cloudinit/config/cc_write_files.py `canonicalize_extraction`).
    pub gzip: &'static [u8],
}

/// Every file of the program on a node.
pub fn files() -> Vec<ProgramFile> {
    let (text, gzip) = generated::LAUNCHER_FILE;
    let mut v = vec![ProgramFile {
        path: LAUNCHER.to_string(),
        mode: "0755",
        text,
        gzip,
    }];
    v.extend(MODULES.iter().map(|(name, text, gzip)| ProgramFile {
        path: format!("{LIB_DIR}/{name}"),
        mode: "0644",
        text,
        gzip,
    }));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shipping list is the package: no module left out, none listed twice.
    #[test]
    fn every_module_of_the_package_is_shipped_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/kube_aws_node");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .collect();
        on_disk.sort();
        let shipped: Vec<String> = MODULES.iter().map(|(n, _, _)| n.to_string()).collect();
        assert_eq!(shipped, on_disk, "build.rs must list every module, sorted");
        assert!(files().iter().any(|f| f.path == LAUNCHER && f.mode == "0755"));
    }

    /// What the cloud-configs carry is the program: each gzip (build.rs)
    /// decompresses to its file's text.
    #[test]
    fn each_gzip_is_its_files_text() {
        use std::io::Read;
        for f in files() {
            let mut text = String::new();
            flate2::read::GzDecoder::new(f.gzip).read_to_string(&mut text).unwrap();
            assert_eq!(text, f.text, "{}", f.path);
            assert_eq!(f.gzip[9], 255, "{}: the gzip names no operating system", f.path);
        }
    }
}
