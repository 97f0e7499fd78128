//! The integration tests of mco-apimachinery: kubectl's write flows, OpenAPI, schemas, tables.
//!
//! One test binary for the crate's integration tests (one link instead of one per file);
//! each module is a former `tests/<name>.rs`.

mod apply_kubectl_flows;
mod decoders_fuzz;
mod openapi_documents;
mod schema_properties;
mod schema_real_crds;
mod schema_validation;
mod table_printing;
