//! mco-api
