//! mco-render
