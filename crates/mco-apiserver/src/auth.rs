//! Identities behind bearer tokens, and the one admission rule this server enforces.

use std::fmt;

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    Admin,
    Controller,
    /// A node's daemon; it carries its node name.
    Node(String),
}

impl Identity {
    pub fn parse(s: &str) -> Option<Identity> {
        match s {
            "admin" => Some(Identity::Admin),
            "controller" => Some(Identity::Controller),
            _ => s
                .strip_prefix("node:")
                .filter(|n| !n.is_empty())
                .map(|n| Identity::Node(n.to_string())),
        }
    }

    /// The user name a kubeconfig shows for this identity.
    pub fn user_name(&self) -> String {
        match self {
            Identity::Admin => "admin".into(),
            Identity::Controller => "controller".into(),
            Identity::Node(n) => format!("node-{n}"),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Admin => f.write_str("admin"),
            Identity::Controller => f.write_str("controller"),
            Identity::Node(n) => write!(f, "node:{n}"),
        }
    }
}

pub const MCN_GROUP: &str = "machineconfiguration.openshift.io";
pub const MCN_PLURAL: &str = "machineconfignodes";

/// A node identity may write only its own node's MachineConfigNode (upstream does this
/// with a ValidatingAdmissionPolicy); `None` means allowed.
pub fn mcn_guard(id: &Identity, group: &str, plural: &str, name: &str) -> Option<String> {
    match id {
        Identity::Node(node) if group == MCN_GROUP && plural == MCN_PLURAL && node != name => Some(
            format!("updates to MCN {name} can only be done from the MCN's owner node"),
        ),
        _ => None,
    }
}

/// A fresh random bearer token.
pub fn new_token() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..40)
        .map(|_| {
            let n: u8 = rng.random_range(0..36);
            if n < 10 {
                (b'0' + n) as char
            } else {
                (b'a' + n - 10) as char
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_round_trips() {
        for id in [
            Identity::Admin,
            Identity::Controller,
            Identity::Node("worker-0".into()),
        ] {
            assert_eq!(Identity::parse(&id.to_string()), Some(id));
        }
        assert_eq!(Identity::parse("node:"), None);
    }

    #[test]
    fn node_may_write_only_its_own_mcn() {
        let n = Identity::Node("worker-0".into());
        assert!(mcn_guard(&n, MCN_GROUP, MCN_PLURAL, "worker-0").is_none());
        assert_eq!(
            mcn_guard(&n, MCN_GROUP, MCN_PLURAL, "worker-1").unwrap(),
            "updates to MCN worker-1 can only be done from the MCN's owner node"
        );
        assert!(mcn_guard(&Identity::Controller, MCN_GROUP, MCN_PLURAL, "worker-1").is_none());
        assert!(mcn_guard(&n, "", "configmaps", "x").is_none());
    }

    #[test]
    fn tokens_are_distinct() {
        assert_ne!(new_token(), new_token());
        assert_eq!(new_token().len(), 40);
    }
}
