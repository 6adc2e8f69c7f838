//! Safe archive reading: a good chart reads, and a corpus of hostile tarballs
//! (generated here) is refused, each error naming the entry.
//! Not covered: zip bombs beyond the 100 MiB total (tested with many files
//! of 4 MiB of zeros, which compress to almost nothing).

use flate2::write::GzEncoder;
use kube_aws::chart::read_chart_archive;

enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(&'static str),
    HardLink(&'static str),
    CharDevice,
    Fifo,
}

/// A gzipped tar built entry by entry, writing names into raw headers so that
/// paths the tar crate refuses to write (`..`, absolute) can be made too.
fn tarball(entries: Vec<(&str, Kind)>) -> Vec<u8> {
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (name, kind) in entries {
        let mut h = tar::Header::new_gnu();
        {
            let raw = &mut h.as_old_mut().name;
            raw.fill(0);
            raw[..name.len()].copy_from_slice(name.as_bytes());
        }
        h.set_mode(0o644);
        let data: Vec<u8> = match kind {
            Kind::File(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                d
            }
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                vec![]
            }
            Kind::Symlink(t) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_link_name(t).unwrap();
                vec![]
            }
            Kind::HardLink(t) => {
                h.set_entry_type(tar::EntryType::Link);
                h.set_link_name(t).unwrap();
                vec![]
            }
            Kind::CharDevice => {
                h.set_entry_type(tar::EntryType::Char);
                vec![]
            }
            Kind::Fifo => {
                h.set_entry_type(tar::EntryType::Fifo);
                vec![]
            }
        };
        h.set_size(data.len() as u64);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn chart_yaml(name: &str) -> Kind {
    Kind::File(format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\nkubeVersion: '>=1.20.0-0'\n").into_bytes())
}

#[test]
fn reads_a_good_chart() {
    let t = tarball(vec![
        ("app/", Kind::Dir),
        ("app/Chart.yaml", chart_yaml("app")),
        ("app/values.yaml", Kind::File(b"a: 1\n".to_vec())),
        ("app/values.schema.json", Kind::File(br#"{"type":"object"}"#.to_vec())),
        (
            "app/crds/b.yaml",
            Kind::File(b"kind: CustomResourceDefinition\n".to_vec()),
        ),
        (
            "app/crds/a.yaml",
            Kind::File(b"kind: CustomResourceDefinition\n".to_vec()),
        ),
        ("app/templates/x.yaml", Kind::File(b"x\n".to_vec())),
    ]);
    let c = read_chart_archive(&t, "app-1.0.0.tgz", Some("app")).unwrap();
    assert_eq!(c.metadata.name, "app");
    assert_eq!(c.metadata.kube_version.as_deref(), Some(">=1.20.0-0"));
    assert_eq!(c.values.as_deref(), Some("a: 1\n"));
    assert_eq!(c.schema.unwrap()["type"], "object");
    assert_eq!(c.crds, vec!["crds/a.yaml", "crds/b.yaml"]);
}

#[test]
fn refuses_hostile_tarballs_naming_the_entry() {
    let big = vec![0u8; 5 * 1024 * 1024 + 1];
    let four_mib = vec![0u8; 4 * 1024 * 1024];
    let mut bomb = vec![("app/Chart.yaml", chart_yaml("app"))];
    let names: Vec<String> = (0..26).map(|i| format!("app/files/f{i}")).collect();
    for n in &names {
        bomb.push((n.as_str(), Kind::File(four_mib.clone())));
    }
    // (label, entries, the entry the error names, a word of the reason)
    type Case<'a> = (&'a str, Vec<(&'a str, Kind)>, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            "absolute",
            vec![("/etc/passwd", Kind::File(b"x".to_vec()))],
            "/etc/passwd",
            "absolute",
        ),
        (
            "dotdot",
            vec![
                ("app/Chart.yaml", chart_yaml("app")),
                ("app/../../x", Kind::File(b"x".to_vec())),
            ],
            "app/../../x",
            "..",
        ),
        (
            "symlink",
            vec![
                ("app/Chart.yaml", chart_yaml("app")),
                ("app/l", Kind::Symlink("/etc/passwd")),
            ],
            "app/l",
            "symbolic link",
        ),
        (
            "hardlink",
            vec![
                ("app/Chart.yaml", chart_yaml("app")),
                ("app/h", Kind::HardLink("/etc/passwd")),
            ],
            "app/h",
            "hard link",
        ),
        (
            "device",
            vec![("app/Chart.yaml", chart_yaml("app")), ("app/dev", Kind::CharDevice)],
            "app/dev",
            "device",
        ),
        (
            "fifo",
            vec![("app/Chart.yaml", chart_yaml("app")), ("app/p", Kind::Fifo)],
            "app/p",
            "pipe",
        ),
        (
            "big file",
            vec![("app/Chart.yaml", chart_yaml("app")), ("app/big", Kind::File(big))],
            "app/big",
            "5 MiB",
        ),
        // The decompressed stream is capped as a whole (a gzip bomb), so the
        // refusal comes before any entry can be named.
        ("bomb", bomb, "", "100 MiB"),
        (
            "wrong top dir",
            vec![("other/Chart.yaml", chart_yaml("app"))],
            "other",
            "not the chart's name",
        ),
        (
            "two top dirs",
            vec![
                ("app/Chart.yaml", chart_yaml("app")),
                ("evil/x", Kind::File(b"x".to_vec())),
            ],
            "evil/x",
            "one top-level directory",
        ),
    ];
    for (label, entries, entry, reason) in cases {
        let t = tarball(entries);
        let err = read_chart_archive(&t, "evil.tgz", None).unwrap_err().to_string();
        assert!(
            entry.is_empty() || err.contains(&format!("{entry:?}")),
            "{label}: {err}"
        );
        assert!(err.contains(reason), "{label}: {err}");
        assert!(err.contains("evil.tgz"), "{label}: {err}");
    }
    // Not a dir but fine as a file: an empty archive and garbage are clear errors.
    let err = read_chart_archive(b"not gzip", "junk.tgz", None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("junk.tgz"), "{err}");
}
