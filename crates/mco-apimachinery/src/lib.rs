//! Kubernetes API machinery as pure functions over JSON values: no I/O, no clocks
//! except where a caller passes one in. The embedded API server is built on it.

pub mod apply;
pub mod defaults;
pub mod jsonpath;
pub mod openapi;
pub mod patch;
pub mod quantity;
pub mod schema;
pub mod selector;
pub mod table;
pub mod validation;
pub mod value;
pub mod yaml;
