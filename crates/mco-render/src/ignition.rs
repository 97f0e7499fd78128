//! ignition
