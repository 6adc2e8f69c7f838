//! The timelines scripts/bench-node.sh prints from the real-node bed
//! (tests/it/real_node/bed.rs): a node's boot step by step from its
//! container's start, and the addons' bring-up on a controller from the
//! releases' status objects and the reconciler's journal. No test here.

use super::*;

/// A node's boot, step by step, from its container's start: cloud-init's
/// stages (their start, from /var/lib/cloud/data/status.json), each step of
/// the node program (as its boot log showed it) and Ready; each row's
/// duration runs to the next row, and the slowest is named. What
/// scripts/bench-node.sh prints.
pub fn timeline(n: &BedNode, f: &Followed) -> String {
    let mut rows: Vec<(String, f64)> = Vec::new();
    let status = std::fs::read_to_string(n.node.rootfs().join("var/lib/cloud/data/status.json")).unwrap_or_default();
    let status: serde_json::Value = serde_json::from_str(&status).unwrap_or_default();
    let t0 = n
        .booted_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    for stage in ["init-local", "init", "modules-config", "modules-final"] {
        if let Some(t) = status["v1"][stage]["start"].as_f64() {
            rows.push((format!("cloud-init {stage}"), t - t0));
        }
    }
    for (s, t) in &f.steps {
        rows.push((format!("step {s}"), t.as_secs_f64()));
    }
    if let Ok(t) = &f.outcome {
        rows.push(("Ready".into(), t.as_secs_f64()));
    }
    rows.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = format!(
        "{} ({}, {}): seconds from the container's start\n",
        n.node.name, n.role, n.inst.dns
    );
    let mut slowest = (String::new(), 0.0f64);
    for (i, (what, at)) in rows.iter().enumerate() {
        let took = rows.get(i + 1).map(|(_, next)| next - at);
        if let Some(d) = took {
            if d > slowest.1 {
                slowest = (what.clone(), d);
            }
        }
        out.push_str(&format!(
            "  {at:7.1}  {:>7}  {what}\n",
            took.map(|d| format!("{d:.1}")).unwrap_or_default()
        ));
    }
    out.push_str(&format!("  slowest: {} ({:.1}s)\n", slowest.0, slowest.1));
    out
}

/// The addons' bring-up on a controller, from its container's start: each
/// release's install started and ready (its status object's `startedAt`
/// and `updatedAt`, which the reconciler writes at "installing" and at its
/// last phase, to the second), the first and the last addon Ready, and the
/// slowest release. What scripts/bench-node.sh prints after the boot
/// timelines (issue 41, "Timing").
pub fn addon_timeline(bed: &MotoBed, n: &BedNode, releases: &[&str]) -> String {
    let t0 = n
        .booted_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    let at = |v: &serde_json::Value, k: &str| -> f64 {
        let s = v[k].as_str().unwrap_or_default();
        let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{k} {s:?} in {v}: {e}"));
        t.duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
            - t0
    };
    let mut rows = Vec::new();
    for r in releases {
        let path = bed.dir().join(format!("status-{r}.json"));
        bed.aws(&[
            "s3api",
            "get-object",
            "--bucket",
            BED_BUCKET,
            "--key",
            &format!("clusters/{BED_CLUSTER}/status/addons/{r}.json"),
            path.to_str().unwrap(),
        ]);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["phase"], "ready", "{r}: {v}");
        rows.push((r.to_string(), at(&v, "startedAt"), at(&v, "updatedAt")));
    }
    rows.sort_by(|a, b| a.2.total_cmp(&b.2));
    let mut out = format!(
        "{} addons: seconds from the container's start (started, ready, took)\n",
        n.node.name
    );
    for (r, s, e) in &rows {
        out.push_str(&format!("  {s:7.1}  {e:7.1}  {:6.1}  {r}\n", e - s));
    }
    // The reconciler's own gates before the first release (issue 37's
    // fixed gates), from its journal: when its service started (the timer),
    // asked /readyz (after the plan, the lease and the plugin secrets), and
    // began the first install (after /readyz, the manifests, the helm client).
    let journal = n
        .node
        .sh("journalctl --no-pager -o short-unix -u kube-aws-addons.service | head -200");
    let mark = |needle: &str| -> Option<f64> {
        journal
            .lines()
            .find(|l| l.contains(needle))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|t| t.parse::<f64>().ok())
            .map(|t| t - t0)
    };
    let show = |t: Option<f64>| t.map_or("-".to_string(), |t| format!("{t:.1}s"));
    out.push_str(&format!(
        "  reconciler: service started {}, asked /readyz {}, first install {}\n",
        show(mark("Starting kube-aws-addons.service")),
        show(mark("waiting for the apiserver's /readyz")),
        show(mark(": installing"))
    ));
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        let slowest = rows.iter().max_by(|a, b| (a.2 - a.1).total_cmp(&(b.2 - b.1))).unwrap();
        out.push_str(&format!(
            "  first addon Ready {:.1}s ({}); all addons Ready {:.1}s; slowest release: {} ({:.1}s)\n",
            first.2,
            first.0,
            last.2,
            slowest.0,
            slowest.2 - slowest.1
        ));
    }
    out
}
