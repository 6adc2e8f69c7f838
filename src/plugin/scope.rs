//! The scopes a plugin's hooks are rendered in (the cluster, the
//! controllers, each node pool): the leaf that resolution, the hooks and
//! the merge share.

use serde_json::{json, Value};

/// One scope a plugin's hooks are rendered in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Cluster,
    Controller,
    Pool(String),
}

impl Scope {
    pub fn context(&self) -> Value {
        match self {
            Scope::Cluster => json!({"role": "cluster", "pool": ""}),
            Scope::Controller => json!({"role": "controller", "pool": ""}),
            Scope::Pool(p) => json!({"role": "worker", "pool": p}),
        }
    }
    /// The key used in secret references.
    pub fn key(&self) -> String {
        match self {
            Scope::Cluster => "cluster".into(),
            Scope::Controller => "controller".into(),
            Scope::Pool(p) => format!("pool-{p}"),
        }
    }
    /// Words for messages.
    pub fn words(&self) -> String {
        match self {
            Scope::Cluster => "the cluster".into(),
            Scope::Controller => "the controller".into(),
            Scope::Pool(p) => format!("node pool {p:?}"),
        }
    }
}
