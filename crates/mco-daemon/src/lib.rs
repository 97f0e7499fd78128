//! mco-daemon
