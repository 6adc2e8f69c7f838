//! The chart stage: Helm repository indexes, version resolution, the lock
//! (`charts-index/index.yaml`), concurrent verified fetching into a
//! content-addressed cache, safe archive reading, and values layering.

pub mod archive;
pub mod cache;
pub mod fetch;
pub mod http;
pub mod index;
mod index_scan;
pub mod lock;
pub mod oci;
pub mod prepare;
pub mod values;
pub mod version;

pub use archive::{read_chart_archive, read_chart_dir, ArchiveError, ChartFiles, ChartMetadata};
pub use cache::{default_cache_dir, ChartCache};
pub use fetch::{fetch_charts, FetchChartsOptions, FetchError, FetchOptions, FetchReport};
pub use index::{find_chart, parse_index, resolve_url, resolve_version, ChartLookup, ChartVersion, Index, IndexError};
pub use lock::{check_lock, load_lock, lock_charts, Lock, LockError, LockOptions, LockReport, LockedChart, LOCK_FILE};
pub use prepare::{prepare_releases, HelmV2Mode, PrepareError, PrepareReleasesOptions, PreparedRelease};
pub use values::{
    check_release_values, coalesce, load_user_layers, merge_layers, ReleaseValues, ValuesError, ValuesLayer,
};
pub use version::{parse_version, pick_version, version_satisfies, Constraint, ResolveFailure};
