//! `charts lock`: each release resolved against its source (an index, an
//! OCI registry, a local chart), fetched into the cache and digested, and
//! the lock written whole; an entry whose source and constraint did not
//! change is kept unless `update` is asked for.

use super::*;

/// Inputs of `lock_charts`.
#[derive(Debug, Clone)]
pub struct LockOptions {
    /// The work tree.
    pub dir: PathBuf,
    pub releases: Vec<Release>,
    /// Re-resolve every release, also those whose lock entry still matches.
    pub update: bool,
    pub fetch: FetchOptions,
    /// Cache root (charts without a digest in their index are downloaded once to hash them).
    pub cache_dir: PathBuf,
}

/// What `lock_charts` did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LockReport {
    pub file: PathBuf,
    pub charts: Vec<LockedChart>,
    /// Releases whose existing entry was kept.
    pub kept: Vec<String>,
    /// Index entries skipped as invalid, and similar notes.
    pub warnings: Vec<String>,
    pub requests: usize,
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string()
}

/// Resolves every release and writes the lock.
pub async fn lock_charts(opts: LockOptions) -> Result<LockReport, LockError> {
    let existing = load_lock(&opts.dir)?;
    let http = Http::new(opts.fetch.clone()).map_err(|source| LockError::Fetch {
        release: String::new(),
        source: Box::new(source),
    })?;
    let cache = ChartCache::new(&opts.cache_dir);
    let mut warnings = Vec::new();
    let mut kept = Vec::new();
    let mut todo = Vec::new();
    let mut done: Vec<(usize, ChartVersion)> = Vec::new();
    for (i, r) in opts.releases.iter().enumerate() {
        if matches!(r.source, ChartSource::Path(_)) {
            // A lock describes the bytes on disk: a local chart is read again
            // every time (cheap), and its entry kept only if they are the same.
            todo.push(i);
            continue;
        }
        let keep = (!opts.update)
            .then(|| check_lock(&existing, std::slice::from_ref(r)).ok())
            .flatten()
            .and_then(|_| entry_for(&existing, r).cloned());
        match keep {
            Some(v) => {
                kept.push(r.name.clone());
                done.push((i, v));
            }
            None => todo.push(i),
        }
    }
    // Each repository's index is fetched once, all of them at the same time.
    let mut repos: Vec<String> = Vec::new();
    for &i in &todo {
        if let ChartSource::Repo(u) = &opts.releases[i].source {
            let u = u.trim_end_matches('/').to_string();
            if !repos.contains(&u) {
                repos.push(u);
            }
        }
    }
    let texts = bounded(repos.clone(), opts.fetch.concurrency, |u| {
        let http = &http;
        async move { http.get_index(&u).await }
    })
    .await;
    let mut indexes: HashMap<String, String> = HashMap::new();
    for (u, t) in repos.into_iter().zip(texts) {
        let text = t.map_err(|source| LockError::Fetch {
            release: opts
                .releases
                .iter()
                .find(|r| matches!(&r.source, ChartSource::Repo(x) if x.trim_end_matches('/') == u))
                .map(|r| r.name.clone())
                .unwrap_or_default(),
            source: Box::new(source),
        })?;
        indexes.insert(u, text);
    }
    let resolved = bounded(todo, opts.fetch.concurrency, |i| {
        let (http, cache, indexes, dir) = (&http, &cache, &indexes, &opts.dir);
        let r = &opts.releases[i];
        async move {
            resolve_release(http, cache, indexes, dir, r)
                .await
                .map(|(v, w)| (i, v, w))
        }
    })
    .await;
    for res in resolved {
        let (i, mut v, w) = res?;
        warnings.extend(w);
        let r = &opts.releases[i];
        if matches!(r.source, ChartSource::Path(_)) && !opts.update {
            if let Some(old) = entry_for(&existing, r).filter(|o| {
                o.version == v.version
                    && o.digest_hex() == v.digest
                    && check_lock(&existing, std::slice::from_ref(r)).is_ok()
            }) {
                v = old.clone();
                kept.push(r.name.clone());
            }
        }
        done.push((i, v));
    }
    done.sort_by_key(|(i, _)| *i);

    let mut entries: IndexMap<String, Vec<ChartVersion>> = IndexMap::new();
    let mut charts = Vec::new();
    for (i, mut v) in done {
        let r = &opts.releases[i];
        v.annotations.insert(SOURCE_ANNOTATION.into(), source_ref(&r.source));
        v.annotations.insert(RELEASE_ANNOTATION.into(), r.name.clone());
        charts.push(locked_chart(r, &v));
        entries.entry(r.chart.clone()).or_default().push(v);
    }
    entries.sort_keys();
    let file = existing.file.clone();
    write_lock(&opts.dir.join(LOCK_FILE), &entries).map_err(|source| LockError::Write {
        file: file.clone(),
        source,
    })?;
    Ok(LockReport {
        file,
        charts,
        kept,
        warnings,
        requests: http.request_count(),
    })
}

/// Writes a Helm index (apiVersion v1) holding `entries`.
pub fn write_lock(path: &Path, entries: &IndexMap<String, Vec<ChartVersion>>) -> std::io::Result<()> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out<'a> {
        api_version: &'a str,
        entries: &'a IndexMap<String, Vec<ChartVersion>>,
        generated: String,
    }
    let body = serde_yaml::to_string(&Out {
        api_version: "v1",
        entries,
        generated: now_rfc3339(),
    })
    .map_err(std::io::Error::other)?;
    let text = format!("# The chart lock, written by `kube-aws charts lock`: a Helm repository index.\n{body}");
    crate::fsutil::write_atomic(path, text.as_bytes())
}

fn resolve_err(r: &Release, message: String) -> LockError {
    LockError::Resolve {
        release: r.name.clone(),
        message,
    }
}

fn no_match_message(r: &Release, source: &str, failure: ResolveFailure) -> String {
    match failure {
        ResolveFailure::BadConstraint(e) => format!("bad version constraint {e}"),
        ResolveFailure::NoMatch { newest } => format!(
            "no version of chart {:?} in {source} matches {:?}; newest: {}",
            r.chart,
            r.version.as_deref().unwrap_or("(newest stable)"),
            if newest.is_empty() {
                "none".to_string()
            } else {
                newest.join(", ")
            }
        ),
    }
}

async fn resolve_release(
    http: &Http,
    cache: &ChartCache,
    indexes: &HashMap<String, String>,
    dir: &Path,
    r: &Release,
) -> Result<(ChartVersion, Vec<String>), LockError> {
    let fetch_err = |source| LockError::Fetch {
        release: r.name.clone(),
        source: Box::new(source),
    };
    match &r.source {
        ChartSource::Repo(url) => {
            let text = indexes.get(url.trim_end_matches('/')).map(String::as_str).unwrap_or("");
            let index_url = format!("{}/index.yaml", url.trim_end_matches('/'));
            let lookup = find_chart_version(text, &r.chart, r.version.as_deref(), url, &index_url)
                .map_err(|e| resolve_err(r, e.to_string()))?;
            let Some(chosen) = lookup.chosen else {
                let hint = did_you_mean(&r.chart, &lookup.names);
                return Err(resolve_err(
                    r,
                    format!("chart {:?} is not in {index_url}{hint}", r.chart),
                ));
            };
            let mut v = chosen.map_err(|f| resolve_err(r, no_match_message(r, &index_url, f)))?;
            if v.urls.is_empty() {
                return Err(resolve_err(
                    r,
                    format!("chart {:?} {} has no urls in {index_url}", r.chart, v.version),
                ));
            }
            let mut warnings = lookup.warnings;
            if v.deprecated {
                warnings.push(format!(
                    "release {:?}: chart {:?} {} is deprecated",
                    r.name, r.chart, v.version
                ));
            }
            match v.digest_hex() {
                Some(hex) => v.digest = Some(hex),
                None => {
                    // No usable digest in the index: pin what the URL serves now.
                    let bytes = http.get_bytes(&v.urls[0]).await.map_err(fetch_err)?;
                    let (hex, _) = cache.store(&bytes).map_err(|e| {
                        fetch_err(FetchError::Cache {
                            path: cache.root().display().to_string(),
                            source: e,
                        })
                    })?;
                    v.digest = Some(hex);
                }
            }
            Ok((v, warnings))
        }
        ChartSource::Oci(reference) => {
            let oci = OciRef::parse(reference).map_err(fetch_err)?;
            let tag = match (&oci.tag, r.version.as_deref()) {
                (Some(t), _) => t.clone(),
                (None, wanted) => {
                    let tags = http.oci_tags(&oci).await.map_err(fetch_err)?;
                    // OCI tags cannot hold `+`; Helm writes `_` instead.
                    let versions: Vec<ChartVersion> = tags
                        .iter()
                        .map(|t| t.replace('_', "+"))
                        .filter(|t| parse_version(t).is_some())
                        .map(|t| bare_version(&oci, &t))
                        .collect();
                    resolve_version(&versions, wanted)
                        .map_err(|f| resolve_err(r, no_match_message(r, reference, f)))?
                        .version
                        .replace('+', "_")
                }
            };
            let digest = http.oci_chart_digest(&oci, &tag).await.map_err(fetch_err)?;
            let mut v = bare_version(&oci, &tag.replace('_', "+"));
            v.name = r.chart.clone();
            v.urls = vec![format!("oci://{}/{}:{tag}", oci.registry, oci.repository)];
            v.digest = Some(digest);
            v.created = Some(now_rfc3339());
            Ok((v, Vec::new()))
        }
        ChartSource::Path(p) => {
            let full = dir.join(p);
            let (files, digest) = if full.is_dir() {
                (
                    read_chart_dir(dir, Path::new(p)).map_err(|e| resolve_err(r, e.to_string()))?,
                    None,
                )
            } else {
                let bytes = crate::reader::read_bytes(dir, Path::new(p), Path::new(p), &crate::reader::ARCHIVE_LIMIT)
                    .map_err(|e| resolve_err(r, format!("cannot read chart: {e}")))?;
                let files = read_chart_archive(&bytes, p, None).map_err(|e| resolve_err(r, e.to_string()))?;
                (files, Some(sha256_hex(&bytes)))
            };
            if let Some(w) = r.version.as_deref() {
                if !version_satisfies(&files.metadata.version, w).unwrap_or(false) {
                    return Err(resolve_err(
                        r,
                        format!(
                            "chart at {p:?} is version {}, which does not match {w:?}",
                            files.metadata.version
                        ),
                    ));
                }
            }
            Ok((
                ChartVersion {
                    api_version: files.metadata.api_version.clone().unwrap_or_else(|| "v2".into()),
                    name: files.metadata.name.clone(),
                    version: files.metadata.version.clone(),
                    app_version: None,
                    description: files.metadata.description.clone(),
                    kube_version: files.metadata.kube_version.clone(),
                    deprecated: false,
                    created: Some(now_rfc3339()),
                    digest,
                    urls: Vec::new(),
                    annotations: IndexMap::new(),
                },
                Vec::new(),
            ))
        }
    }
}

fn bare_version(oci: &OciRef, version: &str) -> ChartVersion {
    ChartVersion {
        api_version: "v2".into(),
        name: oci.name().to_string(),
        version: version.to_string(),
        ..ChartVersion::default()
    }
}
