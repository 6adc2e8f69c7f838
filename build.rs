//! Rebuild when the built-in layer changes: `include_dir!` embeds
//! `plugins/` and `values/` but cargo does not track the files it reads.
fn main() {
    println!("cargo:rerun-if-changed=plugins");
    println!("cargo:rerun-if-changed=values");
}
