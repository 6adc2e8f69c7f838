//! The HTTP client charts are fetched with: timeouts, retries with
//! exponential backoff on 429/5xx/connection errors, a request count, and
//! `bounded`, which runs many requests at a time in input order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;

/// How downloads behave.
#[derive(Debug, Clone)]
pub struct FetchOptions {
    /// Downloads at the same time.
    pub concurrency: usize,
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    pub read_timeout: Duration,
    /// Retries after the first attempt (429, 5xx, connection errors only).
    pub retries: u32,
    /// The first retry's delay; each later one doubles.
    pub backoff: Duration,
    /// Draw a progress bar (only ever on a TTY).
    pub progress: bool,
}

impl Default for FetchOptions {
    fn default() -> Self {
        FetchOptions {
            concurrency: 8,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(250),
            progress: true,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("GET {url}: HTTP {status}{hint}")]
    Status { url: String, status: u16, hint: String },
    #[error("chart {chart:?} {version}: digest mismatch for {url}: expected sha256:{expected}, got sha256:{actual}; nothing was cached (if the repository republished the chart, run `kube-aws charts lock --update`)")]
    DigestMismatch {
        chart: String,
        version: String,
        url: String,
        expected: String,
        actual: String,
    },
    #[error("OCI {reference}: {reason}")]
    Oci { reference: String, reason: String },
    #[error("chart cache {path}: {source}")]
    Cache { path: String, source: std::io::Error },
}

impl FetchError {
    fn retryable(&self) -> bool {
        match self {
            FetchError::Unreachable { .. } => true,
            FetchError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// An HTTP client shared by one run: counts requests, caches OCI tokens.
pub struct Http {
    client: reqwest::Client,
    opts: FetchOptions,
    requests: AtomicUsize,
    /// Anonymous OCI bearer tokens by `registry/repository` (see `oci.rs`).
    pub(super) tokens: Mutex<HashMap<String, String>>,
}

pub(super) fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        src = cause.source();
    }
    s
}

impl Http {
    pub fn new(opts: FetchOptions) -> Result<Http, FetchError> {
        let client = reqwest::Client::builder()
            .connect_timeout(opts.connect_timeout)
            .read_timeout(opts.read_timeout)
            .user_agent(concat!("kube-aws/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::Unreachable {
                url: String::new(),
                reason: describe(&e),
            })?;
        Ok(Http {
            client,
            opts,
            requests: AtomicUsize::new(0),
            tokens: Mutex::new(HashMap::new()),
        })
    }

    pub fn options(&self) -> &FetchOptions {
        &self.opts
    }

    /// Requests sent so far (retries included).
    pub fn request_count(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Runs `attempt` with exponential backoff while it fails retryably.
    pub(super) async fn retry<T, F, Fut>(&self, mut attempt: F) -> Result<T, FetchError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, FetchError>>,
    {
        let mut delay = self.opts.backoff;
        let mut n = 0;
        loop {
            match attempt().await {
                Err(e) if e.retryable() && n < self.opts.retries => {
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                    n += 1;
                }
                other => return other,
            }
        }
    }

    pub(super) async fn send(&self, url: &str, headers: &[(&str, String)]) -> Result<reqwest::Response, FetchError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut req = self.client.get(url);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        req.send().await.map_err(|e| FetchError::Unreachable {
            url: url.to_string(),
            reason: describe(&e),
        })
    }

    pub(super) fn status_error(url: &str, status: reqwest::StatusCode) -> FetchError {
        let hint = match status.as_u16() {
            404 => " (not found: check the repository URL, chart name and version)".to_string(),
            401 | 403 => " (access denied: kube-aws reads public repositories only)".to_string(),
            _ => String::new(),
        };
        FetchError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            hint,
        }
    }

    /// GETs a whole body, with retries.
    pub async fn get_bytes(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        self.retry(|| async {
            let resp = self.send(url, &[]).await?;
            if !resp.status().is_success() {
                return Err(Self::status_error(url, resp.status()));
            }
            // Chunks go straight into one buffer sized from Content-Length, so a
            // 16 MB index costs 16 MB (no doubling while the body grows).
            let mut resp = resp;
            let mut body = Vec::with_capacity(resp.content_length().unwrap_or(0).min(1 << 30) as usize);
            while let Some(chunk) = resp.chunk().await.map_err(|e| FetchError::Unreachable {
                url: url.to_string(),
                reason: describe(&e),
            })? {
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        })
        .await
    }

    /// A repository's index.yaml text.
    pub async fn get_index(&self, repo_url: &str) -> Result<String, FetchError> {
        let url = format!("{}/index.yaml", repo_url.trim_end_matches('/'));
        let bytes = self.get_bytes(&url).await?;
        String::from_utf8(bytes).map_err(|_| FetchError::Status {
            url,
            status: 200,
            hint: ": the index is not UTF-8 text".into(),
        })
    }
}

/// Runs jobs with at most `limit` at a time, keeping input order in the output.
pub async fn bounded<T, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Vec<Fut::Output>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future,
{
    let mut out: Vec<(usize, Fut::Output)> = futures::stream::iter(items.into_iter().enumerate().map(|(i, t)| {
        let fut = f(t);
        async move { (i, fut.await) }
    }))
    .buffer_unordered(limit.max(1))
    .collect()
    .await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, o)| o).collect()
}
