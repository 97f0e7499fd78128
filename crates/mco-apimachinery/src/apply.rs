//! apply
