//! A read-only live web dashboard of the fleet: pools with progress and ETA, every node coloured
//! by its phase, a node's detail, seed 002's MachineConfigNode table and recent Events.
//!
//! [`view`] is the pure view model, [`html`] renders it, [`live`] keeps it current from watches
//! and [`server`] serves it (GET only; loopback, or a bearer token).

pub mod html;
pub mod live;
pub mod server;
pub mod view;

pub use server::{Config, Dashboard, Error, serve};
