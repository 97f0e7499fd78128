pub mod apiserver;
pub mod controller;
pub mod daemon;
pub mod doctor;
pub mod manifests;
pub mod render;
pub mod status;
