//! Verified downloads of locked charts into the content-addressed cache,
//! many at a time (the client is `http.rs`, registries `oci.rs`).

use futures::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::chart::cache::ChartCache;
use crate::chart::http::describe;
pub use crate::chart::http::{bounded, FetchError, FetchOptions, Http};
pub use crate::chart::oci::OciRef;
use crate::digest::{sha256_hex, Sha256Stream};

impl Http {
    /// Downloads `url` (https or an `oci://` chart reference) into the cache,
    /// checking its sha256 against `expected` before it enters the cache.
    pub async fn download_verified(
        &self,
        cache: &ChartCache,
        chart: &str,
        version: &str,
        url: &str,
        expected: &str,
    ) -> Result<std::path::PathBuf, FetchError> {
        let cache_err = |source: std::io::Error| FetchError::Cache {
            path: cache.root().display().to_string(),
            source,
        };
        self.retry(|| async {
            let resp = if url.starts_with("oci://") {
                let r = OciRef::parse(url)?;
                self.oci_get(&r, &format!("blobs/sha256:{expected}"), "*/*").await?
            } else {
                let resp = self.send(url, &[]).await?;
                if !resp.status().is_success() {
                    return Err(Self::status_error(url, resp.status()));
                }
                resp
            };
            let tmp = cache.temp_file().map_err(cache_err)?;
            let mut file = tokio::fs::File::from_std(tmp.reopen().map_err(cache_err)?);
            let mut hasher = Sha256Stream::default();
            let mut stream = resp.bytes_stream();
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| FetchError::Unreachable {
                    url: url.to_string(),
                    reason: describe(&e),
                })?;
                hasher.update(&chunk);
                file.write_all(&chunk).await.map_err(cache_err)?;
            }
            file.flush().await.map_err(cache_err)?;
            file.sync_all().await.map_err(cache_err)?;
            drop(file);
            let actual = hasher.finish().into_hex();
            if actual != expected {
                // The temporary file is deleted on drop: nothing enters the cache.
                return Err(FetchError::DigestMismatch {
                    chart: chart.into(),
                    version: version.into(),
                    url: url.into(),
                    expected: expected.into(),
                    actual,
                });
            }
            cache.commit(tmp, expected).map_err(cache_err)
        })
        .await
    }
}

/// Inputs of `fetch_charts`.
#[derive(Debug, Clone)]
pub struct FetchChartsOptions {
    /// The work tree (for `path:` charts).
    pub dir: std::path::PathBuf,
    pub charts: Vec<crate::chart::lock::LockedChart>,
    pub fetch: FetchOptions,
    pub cache_dir: std::path::PathBuf,
}

/// What `fetch_charts` did.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FetchReport {
    /// Charts downloaded now.
    pub downloaded: Vec<String>,
    /// Charts already in the cache (no request made).
    pub cached: Vec<String>,
    /// Chart directories, which are read in place.
    pub local: Vec<String>,
    pub requests: usize,
}

/// Makes sure every locked chart is in the cache, downloading the missing
/// ones at most `concurrency` at a time. The first failure is returned after
/// the others finish; a failed chart never enters the cache.
pub async fn fetch_charts(opts: FetchChartsOptions) -> Result<FetchReport, FetchError> {
    let http = Http::new(opts.fetch.clone())?;
    let cache = ChartCache::new(&opts.cache_dir);
    let mut report = FetchReport {
        downloaded: Vec::new(),
        cached: Vec::new(),
        local: Vec::new(),
        requests: 0,
    };
    let mut todo = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for c in &opts.charts {
        let label = format!("{} {}", c.chart, c.version);
        let Some(hex) = c.digest.clone() else {
            report.local.push(label);
            continue;
        };
        if cache.contains(&hex) {
            report.cached.push(label);
        } else if seen.insert(hex.clone()) {
            todo.push((c.clone(), hex, label));
        }
    }
    let progress = crate::progress::Progress::new(todo.len() as u64, "fetching charts", opts.fetch.progress);
    let results = bounded(todo, opts.fetch.concurrency, |(c, hex, label)| {
        let (http, cache, progress, dir) = (&http, &cache, &progress, &opts.dir);
        async move {
            let res = if let Some(p) = c.source.strip_prefix("path:") {
                store_local(cache, dir, p, &c, &hex)
            } else {
                match c.urls.first() {
                    Some(url) => http
                        .download_verified(cache, &c.chart, &c.version, url, &hex)
                        .await
                        .map(|_| ()),
                    None => Err(FetchError::Oci {
                        reference: c.source.clone(),
                        reason: format!("chart {:?} {} has no download URL in the lock", c.chart, c.version),
                    }),
                }
            };
            progress.inc();
            res.map(|_| label)
        }
    })
    .await;
    progress.finish();
    report.requests = http.request_count();
    for r in results {
        report.downloaded.push(r?);
    }
    Ok(report)
}

fn store_local(
    cache: &ChartCache,
    dir: &std::path::Path,
    rel: &str,
    c: &crate::chart::lock::LockedChart,
    hex: &str,
) -> Result<(), FetchError> {
    let path = dir.join(rel);
    let bytes = crate::reader::read_bytes(
        dir,
        std::path::Path::new(rel),
        std::path::Path::new(rel),
        &crate::reader::ARCHIVE_LIMIT,
    )
    .map_err(|e| FetchError::Cache {
        path: path.display().to_string(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let actual = sha256_hex(&bytes);
    if actual != hex {
        return Err(FetchError::DigestMismatch {
            chart: c.chart.clone(),
            version: c.version.clone(),
            url: path.display().to_string(),
            expected: hex.into(),
            actual,
        });
    }
    cache.store(&bytes).map(|_| ()).map_err(|e| FetchError::Cache {
        path: cache.root().display().to_string(),
        source: e,
    })
}
