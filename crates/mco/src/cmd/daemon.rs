//! `mco daemon`: the per-node daemon, and `mco daemon firstboot-complete-machineconfig`. The
//! command line lives in [`mco_daemon::cli`], shared with the `mco-daemon` executable.

pub use mco_daemon::cli::{Args, run};
