//! The summary `render` prints: each stack with its size, each user-data part
//! with its size, and the addons in install order with their chart versions.
//! Read back from the rendered files, so it shows exactly what was written.

use std::fmt;

use serde::Serialize;

use super::Rendered;

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Sized {
    pub name: String,
    pub bytes: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AddonLine {
    pub name: String,
    pub chart: String,
    pub chart_version: String,
    pub namespace: String,
    pub bootstrap: bool,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub stacks: Vec<Sized>,
    pub user_data: Vec<Sized>,
    /// In install order, as the plan lists them.
    pub addons: Vec<AddonLine>,
}

/// Summarizes rendered output.
pub fn summarize(r: &Rendered) -> Summary {
    let sized = |prefix: &str| -> Vec<Sized> {
        r.files
            .iter()
            .filter_map(|(path, bytes)| {
                path.strip_prefix(prefix).map(|name| Sized {
                    name: name.to_string(),
                    bytes: bytes.len(),
                })
            })
            .collect()
    };
    let addons = r
        .text("addons/plan.json")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        .and_then(|plan| plan.get("releases").and_then(|v| v.as_array()).cloned())
        .unwrap_or_default()
        .iter()
        .map(|rel| {
            let s = |k: &str| rel.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
            AddonLine {
                name: s("name"),
                chart: s("chart"),
                chart_version: s("chartVersion"),
                namespace: s("namespace"),
                bootstrap: rel.get("bootstrap").and_then(|v| v.as_bool()).unwrap_or(false),
            }
        })
        .collect();
    Summary {
        stacks: sized("stacks/"),
        user_data: sized("userdata/"),
        addons,
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "stacks:")?;
        for s in &self.stacks {
            writeln!(f, "  {:<40} {:>9} bytes", s.name, s.bytes)?;
        }
        writeln!(f, "user-data:")?;
        for s in &self.user_data {
            writeln!(f, "  {:<40} {:>9} bytes", s.name, s.bytes)?;
        }
        writeln!(f, "addons, in install order:")?;
        if self.addons.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (i, a) in self.addons.iter().enumerate() {
            let boot = if a.bootstrap { " (bootstrap)" } else { "" };
            writeln!(
                f,
                "  {:>2}. {:<24} {} {} in {}{boot}",
                i + 1,
                a.name,
                a.chart,
                a.chart_version,
                a.namespace
            )?;
        }
        Ok(())
    }
}
