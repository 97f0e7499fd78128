//! jsonpath
