//! kube-aws's integration tests, one test binary (as cargo and ripgrep do):
//! each module was a crate of its own under tests/, and each of those linked
//! the AWS SDK and the whole library again. One binary links once; the
//! modules keep their headers, which say what each covers and what not.
//! Shared helpers: `common` (real servers, the control-plane test bed, the
//! built-in charts) and `render_fixtures`. Snapshots: tests/it/snapshots,
//! named `it__<module>__<name>.snap`. Run one module with
//! `cargo test --test it <module>::`.

mod common;
mod render_fixtures;

mod autoscaler_pause_testbed;
mod bad_addons;
mod bad_cluster;
mod bad_lock;
mod bad_plugin;
mod catalogue;
mod cert_renewal_real_node;
mod chart_archive;
mod chart_fetch;
mod chart_helm;
mod chart_index;
mod chart_oci;
mod cli;
mod cli_completions;
mod control_plane_status_moto;
mod controllers_real_node;
mod deploy_moto;
mod deploy_real_tree_moto;
mod deploy_wait_moto;
mod destroy_api_testbed;
mod destroy_sweep_moto;
mod docs;
mod encryption_testbed;
mod etcd_status_moto;
mod example;
mod exposure;
mod fuzz_corpus;
mod helm_binary_moto;
mod helm_pause_testbed;
mod hooks_moto;
mod hostile_dirs;
mod hostile_inputs;
mod hostile_io;
mod hostile_lock;
mod hostile_parsers;
mod iam_limits;
mod installer;
mod installer_testbed;
mod issuer_moto;
mod join_token;
mod key_rotation_moto;
mod kubeconfig_moto;
mod node_access_moto;
mod node_bootstrap;
mod node_iam;
mod node_iam_moto;
mod node_program;
mod node_secrets;
mod nth_testbed;
mod pki;
mod plugin_commands;
mod plugins;
mod real_charts;
mod real_node;
mod render;
mod restore_moto;
mod role_names_moto;
mod secret_rotation;
mod servers;
mod template_growth;
mod testbed;
mod update_rolls_moto;
mod update_safety_moto;
mod upgrade_moto;
mod webhook_cert_testbed;
mod workers;
mod workers_moto;
