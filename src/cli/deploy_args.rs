//! Flags shared by the deploy commands (`up`, `status`, `update`, `destroy`),
//! and the process's one async runtime, which every command that reaches the
//! network (AWS, chart repositories) runs its calls on: the library is async
//! and never builds a runtime of its own.

use std::time::Duration;

use crate::aws::AwsOptions;

/// Where AWS is: the standard chain, with overrides.
#[derive(Debug, Clone, clap::Args)]
pub struct AwsArgs {
    /// A profile from ~/.aws/config (default: AWS_PROFILE, else "default")
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The region (default: cluster.yaml's region)
    #[arg(long, value_name = "REGION")]
    pub region: Option<String>,
}

impl AwsArgs {
    pub fn options(&self) -> AwsOptions {
        AwsOptions {
            profile: self.profile.clone(),
            region: self.region.clone(),
        }
    }
}

/// Waiting for the stack and the addons.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Follow the stack and the addons until they are done or failed
    #[arg(long)]
    pub wait: bool,
    /// Give up waiting after this long (the stack is left as it is), e.g. 45m,
    /// 1h30m. Default: until CloudFormation ends the operation, which bounds
    /// every resource it waits on by its rendered timeout
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Option<Duration>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 45m, 90s, 1h30m"))
}

/// The process's one runtime, built on first use: every command's async work
/// runs on it through `block_on` (never nested: call it outside async code).
pub fn runtime() -> anyhow::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = RUNTIME.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    Ok(RUNTIME.get_or_init(|| rt))
}

/// What to publish.
#[derive(Debug, Clone, clap::Args)]
pub struct PublishArgs {
    /// Publish <dir>/rendered exactly as it is (e.g. after reviewing it) instead of rendering
    /// again; its charts must be in the cache, and plugin secrets are not re-encrypted
    #[arg(long)]
    pub use_rendered: bool,
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// What builds or drives a runtime: only `runtime()` above may.
    const RUNTIME_CALLS: [&str; 5] = [
        "runtime::Builder",
        "Runtime::new",
        "tokio::main",
        "block_on(",
        "block_in_place",
    ];

    /// `text` without its `#[cfg(test)]` items, and the names of the
    /// out-of-line test modules it declares (`#[cfg(test)] mod tests;`).
    fn without_tests(text: &str) -> (String, Vec<String>) {
        let (mut kept, mut test_mods, mut rest) = (String::new(), Vec::new(), text);
        while let Some(at) = rest.find("#[cfg(test)]") {
            kept.push_str(&rest[..at]);
            let item = &rest[at..];
            let (semi, brace) = (item.find(';'), item.find('{'));
            let end = match (semi, brace) {
                (Some(s), b) if b.is_none_or(|b| s < b) => {
                    if let Some(name) = item[..s].trim_end().rsplit(' ').next() {
                        if item[..s].contains("mod ") {
                            test_mods.push(name.to_string());
                        }
                    }
                    s + 1
                }
                (_, Some(b)) => {
                    let mut depth = 0usize;
                    let close = item[b..].char_indices().find_map(|(i, c)| {
                        match c {
                            '{' => depth += 1,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        (depth == 0).then_some(b + i + 1)
                    });
                    close.unwrap_or(item.len())
                }
                _ => item.len(),
            };
            rest = &item[end..];
        }
        kept.push_str(rest);
        (kept, test_mods)
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// Runtime calls in the library (src/ outside src/cli/), test code left out.
    fn library_runtime_calls(src: &Path) -> Vec<String> {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut test_dirs = Vec::new();
        let mut code = Vec::new();
        for f in &files {
            let (kept, test_mods) = without_tests(&std::fs::read_to_string(f).unwrap());
            let stem = f.file_stem().unwrap().to_string_lossy();
            let mod_dir = if ["mod", "lib", "main"].contains(&stem.as_ref()) {
                f.parent().unwrap().to_path_buf()
            } else {
                f.with_extension("")
            };
            test_dirs.extend(test_mods.iter().map(|m| mod_dir.join(m)));
            code.push((f, kept));
        }
        let mut found = Vec::new();
        for (f, kept) in code {
            let test_only = test_dirs.iter().any(|d| f.with_extension("") == *d || f.starts_with(d));
            if f.starts_with(src.join("cli")) || test_only {
                continue;
            }
            for (n, line) in kept.lines().enumerate() {
                if RUNTIME_CALLS.iter().any(|c| line.contains(c)) {
                    found.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
        found
    }

    #[test]
    fn only_the_cli_builds_a_runtime() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let found = library_runtime_calls(&src);
        assert!(
            found.is_empty(),
            "the library builds or drives a runtime (async fns only; the CLI's runtime() runs them):\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn the_scan_sees_library_code_and_skips_test_code() {
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() { rt.block_on(x); }\n}\nfn b() { rt.block_on(y); }\n#[cfg(test)]\nmod more;\n";
        let (kept, test_mods) = without_tests(text);
        assert_eq!(kept.matches("block_on(").count(), 1, "{kept}");
        assert!(kept.contains("rt.block_on(y)"), "{kept}");
        assert_eq!(test_mods, vec!["more".to_string()]);
    }
}
