pub mod apiserver;
pub mod manifests;
pub mod render;
