//! The Machine Config Server: serves each pool's rendered config as Ignition over HTTPS, the
//! way a new machine joins (upstream's `pkg/server`, port 22623).
//!
//! - [`accept`]: which spec version a client gets, from its `Accept` header (pure);
//! - [`assemble`]: the served Ignition, rendered config plus appended files (pure);
//! - [`v2_2`]: spec 3.5 → 2.2 for old boot images (pure);
//! - [`source`]: pools and rendered configs, from a cluster or a bootstrap directory;
//! - [`tls`] and [`serve`]: HTTPS within limits.

pub mod accept;
pub mod assemble;
pub mod serve;
pub mod source;
pub mod tls;
pub mod v2_2;

pub use accept::{SpecVersion, negotiate};
pub use serve::{App, Handle, Limits, start};
pub use source::Source;

/// Whether `name` is a valid object name (a lowercase RFC 1123 subdomain, at most 253 bytes):
/// pool names arrive in the URL and name files in a bootstrap directory.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn pool_names_are_object_names() {
        assert!(super::valid_name("worker"));
        assert!(super::valid_name("rendered-worker-0123abc"));
        assert!(super::valid_name(&"a".repeat(63)));
        assert!(!super::valid_name(&"a".repeat(64)));
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        assert!(!super::valid_name(&long));
        assert!(super::valid_name(&long[2..]));
        for bad in ["", "..", "../etc", "Worker", "a_b", "-a", "a/b"] {
            assert!(!super::valid_name(bad), "{bad}");
        }
    }
}
