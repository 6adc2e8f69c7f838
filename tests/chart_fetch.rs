//! The HTTP client's retry policy against a scripted 127.0.0.1 server:
//! 429 and 5xx are retried with backoff, other 4xx are not, and a refused
//! connection is retried then reported naming the URL.
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
