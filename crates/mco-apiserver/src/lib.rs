//! mco-apiserver
