//! The integration tests of mco-render: actions, diff, Ignition, merge, reconcile, render.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`.

mod actions_drain;
mod actions_policies;
mod decoders_fuzz;
mod diff_configs;
mod ignition_parse;
mod ignition_validate;
mod merge_rules;
mod policy_cluster;
mod reconcile_rules;
mod render_fixtures;
mod render_pool;
mod render_raw;
