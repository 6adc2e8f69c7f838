//! kube-aws: bring up a Kubernetes cluster on AWS with its addons deployed and
//! ready. The stages form a pipeline, one module each (see docs/architecture):
//! `cli` → `config` → `plugin` → `chart` → `render` → `aws`, with the
//! lifecycle operations (`ops`) between the command line and the rest.

pub mod aws;
pub mod chart;
pub mod cli;
pub mod config;
pub mod deep;
pub mod digest;
pub mod fsutil;
pub mod irsa;
pub mod kubeconfig;
pub mod limits;
pub mod located;
pub mod ops;
pub mod pipeline;
pub mod pki;
pub mod plugin;
pub mod progress;
pub mod reader;
pub mod render;
