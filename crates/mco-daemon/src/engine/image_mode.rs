//! On-cluster image mode as the update engine sees it: a node's target is the pair
//! (`desiredConfig`, `desiredImage`), applied as the rendered config with the image embedded.
//! The embedding is [`mco_api::image_mode::embed`]'s, which the machine config server shares.

pub use mco_api::image_mode::embed::{embed, image_of, image_text, join, split};
