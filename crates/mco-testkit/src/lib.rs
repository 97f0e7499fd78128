//! Shared helpers of mco's tests, so each crate's tests say what they check rather than how
//! to wait, start a server or spell a Node.
//!
//! - [`eventually`], [`eventually_with_last`] and [`eventually_blocking`]: poll a condition
//!   until a deadline.
//! - [`NodeBuilder`], [`PoolBuilder`], [`MachineConfigBuilder`]: chained builders for the three
//!   kinds nearly every test makes, as typed objects ([`NodeBuilder::build`]) or as JSON
//!   ([`NodeBuilder::json`]) for tests of the API machinery.
//! - With the `server` feature, [`server`]: the embedded API server in a temp dir, and helpers
//!   for its clients.
//!
//! - With the `browser` feature, [`browser`]: a headless Chromium through chromedriver.
//!
//! A dev-dependency only; never published.

#[cfg(feature = "browser")]
pub mod browser;
mod build;
mod poll;
#[cfg(feature = "server")]
pub mod server;

pub use build::{MachineConfigBuilder, NodeBuilder, PoolBuilder};
pub use poll::{eventually, eventually_blocking, eventually_with_last};
#[cfg(feature = "server")]
pub use server::TestServer;
