pub mod apiserver;
pub mod controller;
pub mod manifests;
pub mod render;
