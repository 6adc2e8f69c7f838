//! The lifecycle steps' AWS halves, below `crate::ops`: deploy (up, update,
//! follow), destroy and its sweep, restore, kubeconfig, and the update's
//! decisions (rolls, rollback scope, version order, the autoscaler's pause, the
//! termination handler's tags).

pub mod autoscaler;
pub mod deploy;
pub mod destroy;
pub mod destroy_api;
pub mod kubeconfig;
pub mod nth_tags;
pub mod restore;
pub mod rollback_scope;
pub mod rolls;
pub mod status;
pub mod sweep;
pub mod update_order;
pub mod update_plan;
pub mod version_change;
