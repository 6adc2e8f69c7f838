//! Rebuild when the built-in layer changes: `include_dir!` embeds
//! `plugins/` but cargo does not track the files it reads.
fn main() {
    println!("cargo:rerun-if-changed=plugins");
}
