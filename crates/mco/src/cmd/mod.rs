pub mod apiserver;
pub mod controller;
pub mod daemon;
pub mod manifests;
pub mod render;
