//! Identities behind bearer tokens, the tokens themselves, their authorization, and the node
//! guard ([`crate::admission`]) keyed on them. Impersonated users are [`Identity::User`]
//! (`crate::impersonation`).
//!
//! Authorization: `Admin` bypasses RBAC (like `system:masters`). A `ServiceAccount` is always
//! authorized by the RBAC objects in the store ([`crate::rbac`]), as kube-apiserver would. The
//! older `Controller` and `Node` identities, which the embedded cluster hands out today, are
//! not subject to RBAC at all (only to the node guard), so nothing changes for them
//! whatever RBAC objects exist; callers that want least privilege mint `ServiceAccount`
//! tokens instead. Discovery, OpenAPI, `/version` and health paths are open to every
//! authenticated user, as kube's `system:discovery` and `system:public-info-viewer` make them.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use std::sync::{Arc, Mutex, RwLock};

use crate::error::{ApiError, Error};
use crate::impersonation::MASTERS;
use crate::rbac::{self, Policy, User};
use crate::store::{IssuedRow, Store, TokenRow, token_digest};

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Identity {
    Admin,
    Controller,
    /// A node's daemon; it carries its node name.
    Node(String),
    /// A ServiceAccount's token, optionally bound to a node like kube's bound tokens with the
    /// `authentication.kubernetes.io/node-name` extra.
    ServiceAccount {
        namespace: String,
        name: String,
        node: Option<String>,
    },
    /// Someone a caller impersonates (`Impersonate-User`), or the user of a client certificate
    /// (`crate::client_cert`): authorized by RBAC as this user, bypassing it only as a member of
    /// `system:masters`. Never stored with a token.
    User {
        user: User,
        /// `Impersonate-Uid`; empty when none was given.
        uid: String,
        /// `Impersonate-Extra-*`, keys lowercased.
        extra: BTreeMap<String, Vec<String>>,
    },
}

/// The user extra a node-bound ServiceAccount token carries (kube's `NodeNameKey`).
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

impl Identity {
    pub fn parse(s: &str) -> Option<Identity> {
        match s {
            "admin" => Some(Identity::Admin),
            "controller" => Some(Identity::Controller),
            _ if s.starts_with("sa:") => {
                let mut parts = s["sa:".len()..].splitn(3, ':');
                let namespace = parts.next().filter(|p| !p.is_empty())?.to_string();
                let name = parts.next().filter(|p| !p.is_empty())?.to_string();
                let node = match parts.next() {
                    Some("") => return None,
                    n => n.map(String::from),
                };
                Some(Identity::ServiceAccount {
                    namespace,
                    name,
                    node,
                })
            }
            _ => s
                .strip_prefix("node:")
                .filter(|n| !n.is_empty())
                .map(|n| Identity::Node(n.to_string())),
        }
    }

    /// A ServiceAccount identity, bound to `node` if given.
    pub fn service_account(namespace: &str, name: &str, node: Option<&str>) -> Identity {
        Identity::ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
            node: node.map(String::from),
        }
    }

    /// The node this identity acts for, if any: the owner-node guard keys on it.
    pub fn node(&self) -> Option<&str> {
        match self {
            Identity::Node(n) => Some(n),
            Identity::ServiceAccount { node, .. } => node.as_deref(),
            Identity::User { extra, .. } => match extra.get(NODE_NAME_EXTRA).map(Vec::as_slice) {
                Some([n]) => Some(n),
                _ => None,
            },
            _ => None,
        }
    }

    /// The user RBAC authorizes this identity as; `None` for identities it does not govern
    /// (`admin`, members of `system:masters`, and the older `controller` and `node:<name>`).
    pub fn rbac_user(&self) -> Option<User> {
        match self {
            Identity::ServiceAccount {
                namespace, name, ..
            } => Some(User::service_account(namespace, name)),
            Identity::User { user, .. } if !user.groups.iter().any(|g| g == MASTERS) => {
                Some(user.clone())
            }
            _ => None,
        }
    }

    /// The user this identity authenticates as, as a TokenReview reports it: `admin` is a
    /// member of `system:masters`; every token's user is in `system:authenticated`.
    pub fn user(&self) -> User {
        use crate::impersonation::AUTHENTICATED;
        match self {
            Identity::Admin => User {
                name: self.user_name(),
                groups: vec![MASTERS.into(), AUTHENTICATED.into()],
            },
            Identity::Controller | Identity::Node(_) => User {
                name: self.user_name(),
                groups: vec![AUTHENTICATED.into()],
            },
            Identity::ServiceAccount {
                namespace, name, ..
            } => User::service_account(namespace, name),
            Identity::User { user, .. } => user.clone(),
        }
    }

    /// The user name a kubeconfig shows for this identity.
    pub fn user_name(&self) -> String {
        match self {
            Identity::Admin => "admin".into(),
            Identity::Controller => "controller".into(),
            Identity::Node(n) => format!("node-{n}"),
            Identity::ServiceAccount {
                namespace, name, ..
            } => format!("system:serviceaccount:{namespace}:{name}"),
            Identity::User { user, .. } => user.name.clone(),
        }
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::Admin => f.write_str("admin"),
            Identity::Controller => f.write_str("controller"),
            Identity::Node(n) => write!(f, "node:{n}"),
            Identity::ServiceAccount {
                namespace,
                name,
                node,
            } => {
                write!(f, "sa:{namespace}:{name}")?;
                match node {
                    Some(n) => write!(f, ":{n}"),
                    None => Ok(()),
                }
            }
            // Not a form `parse` reads: impersonated users have no tokens.
            Identity::User { user, .. } => write!(f, "user={}", user.name),
        }
    }
}

pub use crate::admission::{MCN_GROUP, MCN_PLURAL};

/// The node guard ([`crate::admission`]) for `id`'s write `w`: an identity bound to a node may
/// change only its own Node and MachineConfigNode, and of its Node only what the daemon
/// owns. `None` means allowed; identities bound to no node are not guarded.
pub fn node_guard(id: &Identity, w: &crate::admission::Write) -> Option<String> {
    crate::admission::node_guard(id.node()?, w)
}

/// The store keys (`group/plural`) of the RBAC resources the policy is read from.
const CLUSTER_ROLES: &str = "rbac.authorization.k8s.io/clusterroles";
const ROLES: &str = "rbac.authorization.k8s.io/roles";
const CLUSTER_ROLE_BINDINGS: &str = "rbac.authorization.k8s.io/clusterrolebindings";
const ROLE_BINDINGS: &str = "rbac.authorization.k8s.io/rolebindings";

/// The RBAC policy as of the store's last change to an RBAC resource. Every request from a
/// ServiceAccount is authorized, and reading the bindings and roles out of the store each
/// time made RBAC a visible share of the server's CPU under load.
#[derive(Default)]
pub struct PolicyCache(Mutex<Option<(u64, Arc<Policy>)>>);

impl PolicyCache {
    pub fn get(&self, store: &Store) -> Arc<Policy> {
        // Read the generation before the objects: a change in between leaves a newer policy
        // under an older generation, which the next call rebuilds; never the reverse.
        let generation = [CLUSTER_ROLES, ROLES, CLUSTER_ROLE_BINDINGS, ROLE_BINDINGS]
            .into_iter()
            .map(|gr| store.changed_at(gr))
            .max()
            .unwrap_or(0);
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, p)) = held.as_ref()
            && *at == generation
        {
            return p.clone();
        }
        fn all<T: serde::de::DeserializeOwned>(store: &Store, gr: &str) -> Vec<T> {
            let (_, items, _) = store.list(gr, None, None, None, &|_| true);
            items
                .iter()
                .filter_map(|v| serde_json::from_value(v.as_ref().clone()).ok())
                .collect()
        }
        let p = Arc::new(
            Policy {
                cluster_roles: all(store, CLUSTER_ROLES),
                roles: all(store, ROLES),
                cluster_role_bindings: all(store, CLUSTER_ROLE_BINDINGS),
                role_bindings: all(store, ROLE_BINDINGS),
            }
            .with_bootstrap(),
        );
        *held = Some((generation, p.clone()));
        p
    }
}

/// kube-apiserver's authorizer chain for `id`: whether `req` is allowed, and the reason.
/// Identities RBAC does not govern are allowed with no reason, as kube's privileged-group
/// authorizer answers for `system:masters`.
pub(crate) fn decide(
    policy: &PolicyCache,
    store: &Store,
    id: &Identity,
    req: &rbac::Request,
) -> (bool, String) {
    match id.rbac_user() {
        None => (true, String::new()),
        Some(user) => rbac::decide(&policy.get(store), &user, req),
    }
}

/// Authorizes a request: 403 in kube-apiserver's words when RBAC denies it.
/// `attributes` are the request's RBAC attributes, worked out only for identities RBAC governs.
pub(crate) fn authorize(
    policy: &PolicyCache,
    store: &Store,
    id: &Identity,
    attributes: impl FnOnce() -> rbac::Request,
) -> Result<(), ApiError> {
    let Some(user) = id.rbac_user() else {
        return Ok(());
    };
    let req = attributes();
    let (allowed, reason) = rbac::decide(&policy.get(store), &user, &req);
    if allowed {
        Ok(())
    } else {
        Err(ApiError::forbidden(rbac::forbidden_message_with(
            &user, &req, &reason,
        )))
    }
}

/// Bearer tokens and whom they stand for, keyed by their digest ([`token_digest`]): the store
/// keeps them durably (its `tokens` table); this is the copy every request is authenticated
/// against. Neither holds a token itself.
///
/// Each start of the server has a number ([`Store::boot`]). Minting a token for an identity
/// revokes that identity's tokens of earlier starts, so a restart that hands a node new
/// credentials takes the old ones away; tokens minted in the same run stay valid together.
///
/// Tokens issued by TokenRequest ([`crate::token_request`]) are held apart, in the store's
/// `issued_tokens` table and here: they expire, a start does not revoke them, and one bound to
/// an object authenticates only while that object exists (looked up on each use, so an object
/// deleted before a restart ends its tokens after it too).
#[derive(Default)]
pub struct Tokens {
    /// Minted tokens by digest, with the start that minted them.
    minted: RwLock<HashMap<String, (Identity, u64)>>,
    issued: crate::token_request::Issued,
    /// Where a bound token's object is looked up: it authenticates only while that exists.
    store: Option<Arc<Store>>,
}

impl Tokens {
    /// The tokens the store read at open. A row naming no identity this server knows, or an
    /// issued token's row this server cannot read, is skipped: its token authenticates nobody.
    pub fn load(store: &Arc<Store>) -> Tokens {
        let mut tokens = HashMap::new();
        for row in store.take_tokens() {
            if let Some(id) = Identity::parse(&row.identity) {
                tokens.insert(row.token, (id, row.boot));
            }
        }
        let issued = store.take_issued().into_iter().filter_map(|row| {
            let t: crate::token_request::IssuedToken = serde_json::from_str(&row.json).ok()?;
            Some((row.token, t))
        });
        Tokens {
            minted: RwLock::new(tokens),
            issued: crate::token_request::Issued::load(issued),
            store: Some(store.clone()),
        }
    }

    pub fn identity_for(&self, token: &str) -> Option<Identity> {
        let digest = token_digest(token);
        if let Some((id, _)) = self
            .minted
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&digest)
        {
            return Some(id.clone());
        }
        let t = self.issued_by_digest(&digest)?;
        Some(Identity::ServiceAccount {
            namespace: t.namespace,
            name: t.service_account,
            node: t.node,
        })
    }

    /// The TokenRequest that issued `token`, while it is valid: a TokenReview reports its
    /// audiences and bound object.
    pub fn issued(&self, token: &str) -> Option<crate::token_request::IssuedToken> {
        self.issued_by_digest(&token_digest(token))
    }

    fn issued_by_digest(&self, digest: &str) -> Option<crate::token_request::IssuedToken> {
        let t = self
            .issued
            .get(digest, jiff::Timestamp::now().as_second())?;
        if let (Some((ns, r)), Some(store)) = (&t.bound, &self.store) {
            let stored = store.get(&format!("/{}", r.kind.resource()), ns, &r.name);
            let uid = stored
                .as_deref()
                .and_then(|o| o.pointer("/metadata/uid")?.as_str());
            if !crate::token_request::still_bound(&r.uid, uid) {
                return None;
            }
        }
        Some(t)
    }

    /// Holds a token a TokenRequest issued, until it expires, and has the store keep it
    /// (its digest, never the token) so that it outlives a restart.
    pub async fn issue(
        &self,
        token: &str,
        t: crate::token_request::IssuedToken,
        now: i64,
    ) -> Result<(), IssueError> {
        let digest = token_digest(token);
        let row = IssuedRow {
            token: digest.clone(),
            expires_at: t.expires_at,
            json: serde_json::to_string(&t).map_err(|e| Error::Data(e.to_string()))?,
        };
        // Held first, so that the bound on how many are held also bounds the rows.
        self.issued.insert(digest.clone(), t, now)?;
        if let Some(store) = &self.store
            && let Err(e) = store.save_issued(row, now).await
        {
            // Its caller never sees the token: nothing may authenticate with it.
            self.issued.remove(&digest);
            return Err(e.into());
        }
        Ok(())
    }

    /// Stores `token` for `identity` as minted by this start. With `replace`, the
    /// identity's tokens of earlier starts are revoked in the same commit.
    async fn save(
        &self,
        store: &Store,
        token: &str,
        identity: Identity,
        replace: bool,
    ) -> Result<(), Error> {
        let digest = token_digest(token);
        let boot = store.boot();
        store
            .save_token(TokenRow {
                token: digest.clone(),
                identity: identity.to_string(),
                boot,
                replace,
            })
            .await?;
        let mut t = self.minted.write().unwrap_or_else(|e| e.into_inner());
        if replace {
            t.retain(|_, (id, b)| *id != identity || *b >= boot);
        }
        t.insert(digest, (identity, boot));
        Ok(())
    }

    /// Keeps an existing token across this start: a later mint for its identity in this run
    /// does not revoke it (the admin token users hold in `DIR/kubeconfig`).
    pub async fn keep(&self, store: &Store, token: &str) -> Result<(), Error> {
        let Some(id) = self.identity_for(token) else {
            return Ok(());
        };
        self.save(store, token, id, false).await
    }

    /// Creates a durable bearer token for `id`, revoking its tokens of earlier starts.
    pub async fn mint(&self, store: &Store, id: Identity) -> Result<String, Error> {
        let t = new_token();
        self.save(store, &t, id, true).await?;
        Ok(t)
    }
}

/// Why a TokenRequest's token could not be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error(transparent)]
    TooMany(#[from] crate::token_request::TooManyTokens),
    #[error("storing the token: {0}")]
    Store(#[from] Error),
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
            Identity::service_account("mco-system", "mco-controller", None),
            Identity::service_account("mco-system", "mco-daemon", Some("worker-0")),
        ] {
            assert_eq!(Identity::parse(&id.to_string()), Some(id));
        }
        assert_eq!(Identity::parse("node:"), None);
        assert_eq!(Identity::parse("sa:ns"), None);
        assert_eq!(Identity::parse("sa:ns:name:"), None);
    }

    #[test]
    fn only_identities_bound_to_a_node_are_guarded() {
        let w = crate::admission::Write {
            group: MCN_GROUP,
            plural: MCN_PLURAL,
            status: true,
            name: "worker-1",
            old: None,
            new: None,
        };
        let n = Identity::Node("worker-0".into());
        assert!(
            node_guard(&n, &w)
                .unwrap()
                .contains("updates to MCN worker-1 can only be done from the MCN's owner node")
        );
        assert!(
            node_guard(
                &n,
                &crate::admission::Write {
                    name: "worker-0",
                    ..w
                }
            )
            .is_none()
        );
        assert!(node_guard(&Identity::Controller, &w).is_none());
        assert!(node_guard(&Identity::Admin, &w).is_none());
        let sa = Identity::service_account("mco-system", "mco-daemon", Some("worker-0"));
        assert!(node_guard(&sa, &w).is_some());
        let unbound = Identity::service_account("mco-system", "mco-daemon", None);
        assert!(node_guard(&unbound, &w).is_none());
    }

    #[tokio::test]
    async fn tokens_outlive_the_store_until_a_later_start_replaces_them() {
        use crate::store::Durability;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let node = Identity::Node("worker-0".into());
        let other = Identity::Node("worker-1".into());
        let (first, second, kept) = {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            let tokens = Tokens::load(&store);
            let first = tokens.mint(&store, node.clone()).await.unwrap();
            // Two tokens of one run are valid together.
            let second = tokens.mint(&store, node.clone()).await.unwrap();
            assert_eq!(tokens.identity_for(&first), Some(node.clone()));
            let kept = tokens.mint(&store, other.clone()).await.unwrap();
            store
                .save_token(TokenRow {
                    token: token_digest("stray"),
                    identity: "nobody".into(),
                    boot: store.boot(),
                    replace: false,
                })
                .await
                .unwrap();
            (first, second, kept)
        };
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        assert_eq!(store.boot(), 2);
        let tokens = Tokens::load(&store);
        assert_eq!(tokens.identity_for(&first), Some(node.clone()));
        assert_eq!(tokens.identity_for("stray"), None);
        assert!(
            store.take_tokens().is_empty(),
            "the rows are handed over once"
        );
        let third = tokens.mint(&store, node.clone()).await.unwrap();
        for old in [&first, &second] {
            assert_eq!(tokens.identity_for(old), None, "replaced by this start");
        }
        assert_eq!(tokens.identity_for(&third), Some(node.clone()));
        assert_eq!(
            tokens.identity_for(&kept),
            Some(other.clone()),
            "not replaced"
        );
        drop(store);
        // The revocation is durable.
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        let tokens = Tokens::load(&store);
        assert_eq!(tokens.identity_for(&first), None);
        assert_eq!(tokens.identity_for(&third), Some(node.clone()));
        // A kept token survives a mint for its identity in the same run.
        tokens.keep(&store, &third).await.unwrap();
        tokens.mint(&store, node.clone()).await.unwrap();
        assert_eq!(tokens.identity_for(&third), Some(node));
    }

    fn issued_for(
        bound: Option<(&str, &str)>,
        expires_at: i64,
    ) -> crate::token_request::IssuedToken {
        use crate::token_request::{API_AUDIENCE, BoundKind, BoundRef, IssuedToken};
        IssuedToken {
            namespace: "ns".into(),
            service_account: "robot".into(),
            audiences: vec![API_AUDIENCE.into()],
            expires_at,
            bound: bound.map(|(name, uid)| {
                (
                    "ns".to_string(),
                    BoundRef {
                        kind: BoundKind::Secret,
                        name: name.into(),
                        uid: uid.into(),
                    },
                )
            }),
            node: Some("worker-0".into()),
            credential_id: format!("JTI={}", uuid::Uuid::new_v4()),
        }
    }

    async fn put_secret(store: &Store, name: &str, uid: &str) {
        let v = serde_json::json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}});
        store
            .write(
                "/secrets",
                "ns",
                name,
                false,
                Box::new(move |_| Ok(crate::store::Action::Put(v))),
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn issued_tokens_outlive_the_store_until_they_expire_or_lose_their_object() {
        use crate::store::Durability;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let now = jiff::Timestamp::now().as_second();
        let (plain, held, gone, expired) = (new_token(), new_token(), new_token(), new_token());
        let plain_issued = issued_for(None, now + 3600);
        {
            let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
            let tokens = Tokens::load(&store);
            put_secret(&store, "held", "h-1").await;
            put_secret(&store, "gone", "g-1").await;
            tokens
                .issue(&plain, plain_issued.clone(), now)
                .await
                .unwrap();
            let t = issued_for(Some(("held", "h-1")), now + 3600);
            tokens.issue(&held, t, now).await.unwrap();
            let t = issued_for(Some(("gone", "g-1")), now + 3600);
            tokens.issue(&gone, t, now).await.unwrap();
            // Already past its expiry: stored, but never authenticates.
            let t = issued_for(None, now - 1);
            tokens.issue(&expired, t, now).await.unwrap();
            assert_eq!(tokens.identity_for(&expired), None);
            assert!(tokens.identity_for(&gone).is_some());
            // Deleted before the restart.
            store
                .write(
                    "/secrets",
                    "ns",
                    "gone",
                    false,
                    Box::new(|_| Ok(crate::store::Action::Delete)),
                )
                .await
                .unwrap();
            assert_eq!(tokens.identity_for(&gone), None);
            let conn = rusqlite::Connection::open(&path).unwrap();
            let rows: Vec<(String, String)> = conn
                .prepare("SELECT token, json FROM issued_tokens")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(rows.len(), 4);
            for (digest, json) in &rows {
                assert!(digest.starts_with("sha256:"), "{digest}");
                for t in [&plain, &held, &gone, &expired] {
                    assert!(
                        !json.contains(t.as_str()) && digest != t,
                        "a token is stored"
                    );
                }
            }
        }
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        let tokens = Tokens::load(&store);
        assert_eq!(
            tokens.identity_for(&plain),
            Some(Identity::service_account("ns", "robot", Some("worker-0")))
        );
        assert_eq!(
            tokens.issued(&plain),
            Some(plain_issued),
            "every field kept"
        );
        let (_, r) = tokens.issued(&held).unwrap().bound.unwrap();
        assert_eq!((r.name.as_str(), r.uid.as_str()), ("held", "h-1"));
        assert_eq!(tokens.identity_for(&gone), None, "its Secret was deleted");
        assert_eq!(tokens.identity_for(&expired), None);
        assert_eq!(tokens.issued.len(), 3, "the expired one is not loaded");
        // A Secret made again under the name has another uid: the token stays ended.
        put_secret(&store, "gone", "g-2").await;
        assert_eq!(tokens.identity_for(&gone), None);
    }

    #[tokio::test]
    async fn issued_tokens_loaded_at_the_limit_leave_no_room() {
        use crate::store::Durability;
        use crate::token_request::{MAX_ISSUED, TooManyTokens};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let now = jiff::Timestamp::now().as_second();
        drop(Store::open(&path, 100, Durability::PowerLoss).unwrap());
        {
            let mut conn = rusqlite::Connection::open(&path).unwrap();
            let tx = conn.transaction().unwrap();
            let json = serde_json::to_string(&issued_for(None, now + 3600)).unwrap();
            for i in 0..MAX_ISSUED {
                tx.execute(
                    "INSERT INTO issued_tokens VALUES (?1, ?2, ?3)",
                    rusqlite::params![token_digest(&format!("t{i}")), now + 3600, json],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        let store = Store::open(&path, 100, Durability::PowerLoss).unwrap();
        let tokens = Tokens::load(&store);
        assert_eq!(tokens.issued.len(), MAX_ISSUED);
        assert!(
            tokens
                .identity_for(&format!("t{}", MAX_ISSUED - 1))
                .is_some()
        );
        let e = tokens
            .issue(&new_token(), issued_for(None, now + 3600), now)
            .await
            .unwrap_err();
        assert!(matches!(e, IssueError::TooMany(TooManyTokens)), "{e}");
    }

    #[test]
    fn tokens_are_stored_as_digests() {
        let d = token_digest("abc");
        assert_eq!(
            d,
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn tokens_are_distinct() {
        assert_ne!(new_token(), new_token());
        assert_eq!(new_token().len(), 40);
    }
}
