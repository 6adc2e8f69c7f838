//! The size limits of user input, and how an input over one is refused:
//! the leaf that the reader (src/reader.rs), the YAML guard
//! (src/located.rs `check_yaml`) and the chart archive reader share, so
//! none of them imports another for a number. docs/limits.md lists them.

/// The most a chart archive may unpack to, all files together.
pub const MAX_ARCHIVE_TOTAL: u64 = 100 * 1024 * 1024;

/// A size limit and what to do when a file exceeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
    /// What the limit is for (`"a YAML or text input"`).
    pub what: &'static str,
    /// How to stay under it.
    pub fix: &'static str,
}

/// cluster.yaml, plugin.yaml, plugin templates and files, values files, the chart lock.
pub const TEXT_LIMIT: Limit = Limit {
    bytes: 4 * 1024 * 1024,
    what: "text inputs (cluster.yaml, plugin.yaml and plugin files, values files, charts-index/index.yaml)",
    fix: "split the values over several files listed in charts[].values, or keep large data out of the work tree",
};

/// A chart repository's index.yaml given on the command line (`charts resolve
/// --repo-index`); public repositories' indexes reach tens of megabytes.
pub const INDEX_LIMIT: Limit = Limit {
    bytes: 64 * 1024 * 1024,
    what: "chart repository indexes",
    fix: "use a smaller repository index",
};

/// A local chart archive (`charts[].path` to a `.tgz`), the same as the
/// unpacked total the archive reader allows.
pub const ARCHIVE_LIMIT: Limit = Limit {
    bytes: MAX_ARCHIVE_TOTAL,
    what: "local chart archives",
    fix: "publish the chart to a repository instead",
};

/// The message for a file over `limit`.
pub fn too_large(size: u64, limit: &Limit) -> String {
    format!(
        "the file is {size} bytes, over the {}-byte limit for {} ({}; see docs/limits.md)",
        limit.bytes, limit.what, limit.fix
    )
}
