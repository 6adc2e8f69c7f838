//! The HTTP client's retry policy against a scripted 127.0.0.1 server:
//! 429 and 5xx are retried with backoff, other 4xx are not, and a refused
//! connection is retried then reported naming the URL.
//! Also the OCI anonymous bearer-token challenge, with a scripted registry.
//! Not covered: read timeouts on a stalled body.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kube_aws::chart::fetch::{FetchError, FetchOptions, Http};

/// Serves `statuses` in order (the last one repeats), counting requests.
fn scripted(statuses: Vec<u16>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let n = c.fetch_add(1, Ordering::SeqCst);
            let status = statuses[n.min(statuses.len() - 1)];
            let body = if status == 200 { "hello" } else { "" };
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (url, count)
}

fn opts() -> FetchOptions {
    FetchOptions {
        retries: 3,
        backoff: Duration::from_millis(10),
        progress: false,
        ..FetchOptions::default()
    }
}

fn get(url: &str) -> Result<Vec<u8>, FetchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = Http::new(opts()).unwrap();
    rt.block_on(http.get_bytes(url))
}

#[test]
fn retries_429_and_5xx_then_succeeds() {
    let (url, count) = scripted(vec![503, 429, 500, 200]);
    assert_eq!(get(&format!("{url}/x")).unwrap(), b"hello");
    assert_eq!(count.load(Ordering::SeqCst), 4);
}

#[test]
fn gives_up_after_the_retries() {
    let (url, count) = scripted(vec![502]);
    let err = get(&format!("{url}/x")).unwrap_err().to_string();
    assert!(err.contains("HTTP 502"), "{err}");
    assert_eq!(count.load(Ordering::SeqCst), 4);
}

#[test]
fn other_4xx_are_not_retried() {
    for status in [404, 403, 400] {
        let (url, count) = scripted(vec![status]);
        let err = get(&format!("{url}/x")).unwrap_err().to_string();
        assert!(
            err.contains(&format!("HTTP {status}")) && err.contains(&format!("{url}/x")),
            "{err}"
        );
        assert_eq!(count.load(Ordering::SeqCst), 1, "{status}");
    }
}

#[test]
fn refused_connections_name_the_url() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let err = get(&format!("http://127.0.0.1:{port}/index.yaml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("cannot reach http://127.0.0.1:{port}/index.yaml")),
        "{err}"
    );
}

/// A registry that wants an anonymous bearer token, like ghcr.io or Docker Hub.
#[test]
fn oci_anonymous_bearer_token_flow() {
    use kube_aws::chart::fetch::OciRef;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    let digest = "ab".repeat(32);
    let manifest = format!(
        r#"{{"schemaVersion":2,"layers":[{{"mediaType":"application/vnd.cncf.helm.chart.content.v1.tar+gzip","digest":"sha256:{digest}","size":1}}]}}"#
    );
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = vec![0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]).to_string();
            let path = req.split_whitespace().nth(1).unwrap_or("").to_string();
            let authed = req.to_ascii_lowercase().contains("authorization: bearer t0k");
            log.lock().unwrap().push(format!("{path} {authed}"));
            let (status, extra, body) = if path.starts_with("/token") {
                (200, String::new(), r#"{"token":"t0k"}"#.to_string())
            } else if !authed {
                let challenge = format!(
                    "www-authenticate: Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"reg\",scope=\"repository:charts/app:pull\"\r\n"
                );
                (401, challenge, String::new())
            } else {
                (200, String::new(), manifest.clone())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status} X\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let http = Http::new(opts()).unwrap();
    let r = OciRef::parse(&format!("oci://127.0.0.1:{port}/charts/app")).unwrap();
    let got = rt.block_on(http.oci_chart_digest(&r, "1.0.0")).unwrap();
    assert_eq!(got, digest);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(seen[0], "/v2/charts/app/manifests/1.0.0 false");
    assert!(
        seen[1].starts_with("/token?service=reg&scope=repository%3Acharts%2Fapp%3Apull"),
        "{seen:?}"
    );
    assert_eq!(seen[2], "/v2/charts/app/manifests/1.0.0 true");
    // The token is reused: a second call goes straight through.
    rt.block_on(http.oci_chart_digest(&r, "1.0.0")).unwrap();
}
