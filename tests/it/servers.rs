//! The shared server helper itself: servers start on free ports, answer, and
//! are gone (by PID) after the handle drops.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;

fn get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn is_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

#[test]
fn http_server_serves_and_dies_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.yaml"), "apiVersion: v1\nentries: {}\n").unwrap();
    let server = common::start_http(dir.path());
    let pid = server.pid();
    let resp = get(server.port, "/index.yaml");
    assert!(resp.starts_with("HTTP/1.0 200"), "{resp}");
    assert!(resp.contains("entries: {}"));
    drop(server);
    assert!(!is_alive(pid), "http server {pid} still running");
}

#[test]
fn moto_server_answers_and_dies_on_drop() {
    let server = common::start_moto();
    let pid = server.pid();
    let resp = get(server.port, "/moto-api/data.json");
    assert!(resp.contains("200"), "{resp}");
    drop(server);
    assert!(!is_alive(pid), "moto {pid} still running");
}
