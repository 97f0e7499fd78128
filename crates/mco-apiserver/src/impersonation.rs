//! `Impersonate-*` headers, as kube-apiserver's constrained impersonation filter (on by
//! default since 1.36) treats them: a request asking to act as someone else runs as that user
//! once the caller is authorized for it, in one of the modes kube tries in order:
//!
//! - `arbitrary-node` (a `system:node:<name>` user, nothing else asked),
//! - `serviceaccount` (a `system:serviceaccount:<ns>:<name>` user, nothing else asked),
//! - `user-info` (any other user, with groups, uid and extras),
//!
//! each needing `impersonate-on:<mode>:<verb>` on the request itself and `impersonate:<mode>`
//! on the user (group `authentication.k8s.io`), then the `legacy` mode: `impersonate` on
//! `users`/`groups`/`serviceaccounts` (core group), `uids`/`userextras/<key>`
//! (`authentication.k8s.io`). A refusal is the first mode's error. kube's `associated-node` mode
//! (a node-bound ServiceAccount acting as its own node) is not offered.

use std::collections::BTreeMap;

use crate::auth::{Identity, PolicyCache};
use crate::error::ApiError;
use crate::rbac::{self, User};
use crate::store::Store;

const AUTHENTICATION: &str = "authentication.k8s.io";
pub const MASTERS: &str = "system:masters";
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
pub(crate) const ANONYMOUS: &str = "system:anonymous";
/// Checks of this many groups or extra values first try the wildcard name `*`, as kube does.
const MANY: usize = 4;
/// Bounds on what a request may ask for (here, and a SubjectAccessReview's groups and extras),
/// so one request cannot make the server evaluate RBAC without end.
pub(crate) const MAX_VALUES: usize = 64;
pub(crate) const MAX_VALUE_LEN: usize = 1024;

/// What a request's `Impersonate-*` headers ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Reads the `Impersonate-*` headers: `None` if there are none, 400 for groups, a uid or
/// extras without a user (kube's words), or for more or longer values than the bounds.
pub fn wanted(headers: &http::HeaderMap) -> Result<Option<Wanted>, ApiError> {
    let text = |v: &http::HeaderValue, header: &str| {
        let t = v
            .to_str()
            .map_err(|_| ApiError::bad_request(format!("the {header} header is not valid text")))?;
        if t.len() > MAX_VALUE_LEN {
            return Err(ApiError::bad_request(format!(
                "the {header} header is longer than {MAX_VALUE_LEN} bytes"
            )));
        }
        Ok(t.to_string())
    };
    let mut w = Wanted::default();
    let mut count = 0;
    let mut any = false;
    for (name, value) in headers {
        let header = name.as_str();
        let Some(kind) = header.strip_prefix("impersonate-") else {
            continue;
        };
        any = true;
        count += 1;
        if count > MAX_VALUES {
            return Err(ApiError::bad_request(format!(
                "more than {MAX_VALUES} Impersonate-* header values"
            )));
        }
        match kind {
            "user" if w.name.is_empty() => w.name = text(value, "Impersonate-User")?,
            "uid" if w.uid.is_empty() => w.uid = text(value, "Impersonate-Uid")?,
            "group" => w.groups.push(text(value, "Impersonate-Group")?),
            _ => {
                if let Some(key) = kind.strip_prefix("extra-") {
                    let v = text(value, header)?;
                    w.extra.entry(unescape(key)).or_default().push(v);
                }
            }
        }
    }
    if !any {
        return Ok(None);
    }
    if w.name.is_empty() {
        if w.uid.is_empty() && w.groups.is_empty() && w.extra.is_empty() {
            return Ok(None);
        }
        return Err(ApiError::bad_request(format!(
            "requested {} without impersonating a user name",
            go_syntax(&w)
        )));
    }
    Ok(Some(w))
}

/// Percent-decodes an extra key as kube's `url.PathUnescape`; a malformed one is kept as is.
fn unescape(key: &str) -> String {
    let b = key.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => return key.to_string(),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// `w` as Go's `%#v` prints a `*user.DefaultInfo`, the form of kube's 400 message.
fn go_syntax(w: &Wanted) -> String {
    let strings = |v: &[String]| {
        if v.is_empty() {
            "[]string(nil)".to_string()
        } else {
            let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
            format!("[]string{{{}}}", items.join(", "))
        }
    };
    let extra = if w.extra.is_empty() {
        "map[string][]string(nil)".to_string()
    } else {
        let items: Vec<String> = w
            .extra
            .iter()
            .map(|(k, v)| format!("{k:?}:{}", strings(v)))
            .collect();
        format!("map[string][]string{{{}}}", items.join(", "))
    };
    format!(
        "&user.DefaultInfo{{Name:{:?}, UID:{:?}, Groups:{}, Extra:{extra}}}",
        w.name,
        w.uid,
        strings(&w.groups)
    )
}

/// `system:serviceaccount:<ns>:<name>` split, as kube's `SplitUsername`.
fn service_account_name(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// `system:node:<name>` with a DNS subdomain name, as kube's `isNodeUsername`.
fn node_name(user: &str) -> Option<&str> {
    let n = user.strip_prefix("system:node:")?;
    let ok = !n.is_empty()
        && n.len() <= 253
        && n.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    ok.then_some(n)
}

/// The impersonation modes kube tries, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ArbitraryNode,
    ServiceAccount,
    UserInfo,
    Legacy,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ArbitraryNode => "arbitrary-node",
            Mode::ServiceAccount => "serviceaccount",
            Mode::UserInfo => "user-info",
            Mode::Legacy => "legacy",
        }
    }

    fn constrained(self) -> bool {
        self != Mode::Legacy
    }

    /// Whether this mode considers `w` at all.
    fn applies(self, w: &Wanted) -> bool {
        let only_name = w.uid.is_empty() && w.groups.is_empty() && w.extra.is_empty();
        match self {
            Mode::ArbitraryNode => only_name && node_name(&w.name).is_some(),
            Mode::ServiceAccount => only_name && service_account_name(&w.name).is_some(),
            Mode::UserInfo => {
                node_name(&w.name).is_none() && service_account_name(&w.name).is_none()
            }
            Mode::Legacy => true,
        }
    }

    /// The verb of the checks on the wanted user: `impersonate:<mode>` or `impersonate`.
    fn verb(self) -> String {
        match self {
            Mode::Legacy => "impersonate".into(),
            m => format!("impersonate:{}", m.name()),
        }
    }

    /// The group of `users`, `groups` and `serviceaccounts` in the checks.
    fn group(self) -> &'static str {
        if self.constrained() {
            AUTHENTICATION
        } else {
            ""
        }
    }
}

/// Who asks: the caller as RBAC sees it (`None`: allowed everything).
struct Checker<'a> {
    policy: &'a rbac::Policy,
    requestor: Option<User>,
}

impl Checker<'_> {
    /// kube's `checkAuthorization`: 403 with the authorizer's reason when `req` is denied.
    fn check(&self, req: &rbac::Request) -> Result<(), ApiError> {
        let Some(user) = &self.requestor else {
            return Ok(());
        };
        let (allowed, reason) = rbac::decide(self.policy, user, req);
        if allowed {
            Ok(())
        } else {
            Err(refusal(user, req, &reason))
        }
    }

    /// The wanted user as `mode` grants it, or its first refusal.
    fn mode(&self, mode: Mode, w: &Wanted, request: &rbac::Request) -> Result<Wanted, ApiError> {
        if mode.constrained() {
            self.check(&rbac::Request {
                verb: format!("impersonate-on:{}:{}", mode.name(), request.verb),
                ..request.clone()
            })?;
        }
        let verb = mode.verb();
        let attrs = |group: &str, resource: &str, name: &str| rbac::Request {
            verb: verb.clone(),
            api_group: group.into(),
            resource: resource.into(),
            name: name.into(),
            ..Default::default()
        };
        let mut actual = w.clone();
        // The user name.
        let mut user = attrs(mode.group(), "users", &w.name);
        if mode.constrained()
            && let Some(node) = node_name(&w.name)
        {
            user.resource = "nodes".into();
            user.name = node.into();
            actual.groups = vec!["system:nodes".into()];
        }
        if let Some((ns, name)) = service_account_name(&w.name) {
            user.resource = "serviceaccounts".into();
            user.namespace = ns.into();
            user.name = name.into();
            if mode.constrained() && !w.groups.is_empty() {
                return Err(self.refuse(
                    &user,
                    &format!(
                        "when impersonating a service account, cannot impersonate groups {}",
                        go_quoted(&w.groups)
                    ),
                ));
            }
            if w.groups.is_empty() {
                actual.groups = vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{ns}"),
                ];
            }
        }
        self.check(&user)?;
        if !w.uid.is_empty() {
            self.check(&attrs(AUTHENTICATION, "uids", &w.uid))?;
        }
        // The groups.
        if !w.groups.is_empty() {
            let mut g = attrs(mode.group(), "groups", "");
            if mode.constrained() {
                if w.groups.iter().any(String::is_empty) {
                    return Err(
                        self.refuse(&g, "impersonating the empty string group is not allowed")
                    );
                }
                if w.groups.iter().any(|x| x == MASTERS) {
                    g.name = MASTERS.into();
                    return Err(
                        self.refuse(&g, "impersonating the system:masters group is not allowed")
                    );
                }
            }
            let all = mode.constrained() && w.groups.len() >= MANY && {
                g.name = "*".into();
                self.check(&g).is_ok()
            };
            if !all {
                for group in &w.groups {
                    g.name = group.clone();
                    self.check(&g)?;
                }
            }
        }
        // The extras.
        if !w.extra.is_empty() {
            let mut e = attrs(AUTHENTICATION, "userextras", "");
            if mode.constrained()
                && let Err(why) = validate_extra(&w.extra)
            {
                return Err(self.refuse(&e, &why));
            }
            let values: usize = w.extra.values().map(Vec::len).sum();
            let all = mode.constrained() && (w.extra.len() >= MANY || values >= MANY) && {
                e.subresource = Some("*".into());
                e.name = "*".into();
                self.check(&e).is_ok()
            };
            if !all {
                for (key, vs) in &w.extra {
                    e.subresource = Some(key.clone());
                    for v in vs {
                        e.name = v.clone();
                        self.check(&e)?;
                    }
                }
            }
        }
        if actual.name == ANONYMOUS {
            ensure(&mut actual.groups, UNAUTHENTICATED);
        } else if !actual.groups.iter().any(|g| g == UNAUTHENTICATED) {
            ensure(&mut actual.groups, AUTHENTICATED);
        }
        Ok(actual)
    }

    /// A refusal of `req` with kube's fixed `reason`.
    fn refuse(&self, req: &rbac::Request, reason: &str) -> ApiError {
        let anyone = User {
            name: String::new(),
            groups: vec![],
        };
        refusal(self.requestor.as_ref().unwrap_or(&anyone), req, reason)
    }
}

/// kube's `ForbiddenStatusError`. `rbac::forbidden_message` qualifies the resource by its
/// group, as `NewForbidden` does.
fn refusal(user: &User, req: &rbac::Request, reason: &str) -> ApiError {
    ApiError::forbidden(rbac::forbidden_message_with(user, req, reason))
}

/// Go's `%q` of a string slice: `["a" "b"]`.
pub(crate) fn go_quoted(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", q.join(" "))
}

fn ensure(groups: &mut Vec<String>, group: &str) {
    if !groups.iter().any(|g| g == group) {
        groups.push(group.into());
    }
}

/// kube's `validateExtra` for constrained modes (keys lowercase, no empty keys or values).
fn validate_extra(extra: &BTreeMap<String, Vec<String>>) -> Result<(), String> {
    for (key, values) in extra {
        if key.is_empty() {
            return Err("impersonating the empty string key in extra is not allowed".into());
        }
        if *key != key.to_lowercase() {
            return Err(format!(
                "impersonating a non-lowercase key in extra is not allowed: {key:?}"
            ));
        }
        if values.is_empty() {
            return Err("impersonating empty values in extra is not allowed".into());
        }
        if values.iter().any(String::is_empty) {
            return Err("impersonating the empty string value in extra is not allowed".into());
        }
    }
    Ok(())
}

/// The user a caller acts as: who `caller` is (`None`: not authenticated, kube's
/// `system:anonymous`) as RBAC sees it. `admin` and a client certificate's user in
/// `system:masters` may impersonate anyone; the older
/// `controller` and `node:<name>` identities, which RBAC does not govern, are checked as a
/// user of their name that no binding names, so they may not: impersonating would shed the
/// node guard.
fn requestor(caller: Option<&Identity>) -> Option<User> {
    match caller {
        None => Some(User {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
        }),
        Some(Identity::Admin) => None,
        Some(id @ (Identity::Controller | Identity::Node(_))) => Some(User {
            name: id.user_name(),
            groups: vec![AUTHENTICATED.into()],
        }),
        // A ServiceAccount, or a client certificate's user (`None` in `system:masters`).
        Some(id) => id.rbac_user(),
    }
}

/// Who `caller`'s request runs as when it asks for `w`; `request` is the request's own RBAC
/// attributes (the constrained modes check them). 403 in kube's words when no mode allows it.
pub(crate) fn impersonate(
    policy: &PolicyCache,
    store: &Store,
    caller: Option<&Identity>,
    w: &Wanted,
    request: &rbac::Request,
) -> Result<Identity, ApiError> {
    let p = policy.get(store);
    let checker = Checker {
        policy: &p,
        requestor: requestor(caller),
    };
    let mut first = None;
    for mode in [
        Mode::ArbitraryNode,
        Mode::ServiceAccount,
        Mode::UserInfo,
        Mode::Legacy,
    ] {
        if !mode.applies(w) {
            continue;
        }
        match checker.mode(mode, w, request) {
            Ok(actual) => {
                return Ok(Identity::User {
                    user: User {
                        name: actual.name,
                        groups: actual.groups,
                    },
                    uid: actual.uid,
                    extra: actual.extra,
                });
            }
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    Err(first.unwrap_or_else(|| ApiError::forbidden("all impersonation modes failed")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn headers_are_read_as_kube_reads_them() {
        assert_eq!(
            wanted(&headers(&[("user-agent", "kubectl")])).unwrap(),
            None
        );
        let w = wanted(&headers(&[
            ("Impersonate-User", "alice"),
            ("Impersonate-Group", "a"),
            ("Impersonate-Group", "b"),
            ("Impersonate-Uid", "u1"),
            ("Impersonate-Extra-Example.com%2fScopes", "x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(w.name, "alice");
        assert_eq!(w.groups, ["a", "b"]);
        assert_eq!(w.uid, "u1");
        assert_eq!(w.extra["example.com/scopes"], ["x"]);
        let e = wanted(&headers(&[("Impersonate-Group", "a")])).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"a\"}, Extra:map[string][]string(nil)} without impersonating a user name"
        );
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        let e = wanted(&headers(&[("Impersonate-User", &long)])).unwrap_err();
        assert!(e.message.contains("Impersonate-User"), "{}", e.message);
    }

    #[test]
    fn names_are_split_as_kube_splits_them() {
        assert_eq!(
            service_account_name("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(service_account_name("system:serviceaccount:ns"), None);
        assert_eq!(service_account_name("system:serviceaccount:ns:a:b"), None);
        assert_eq!(node_name("system:node:worker-0"), Some("worker-0"));
        assert_eq!(node_name("system:node:Worker"), None);
        assert_eq!(unescape("a%2fb"), "a/b");
        assert_eq!(unescape("a%zz"), "a%zz");
    }

    fn policy(rules: Vec<k8s_openapi::api::rbac::v1::PolicyRule>) -> rbac::Policy {
        let v = serde_json::json!({
            "items": [
                {"kind": "ClusterRole", "metadata": {"name": "imp"}, "rules": rules},
                {"kind": "ClusterRoleBinding", "metadata": {"name": "imp"},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "imp"},
                 "subjects": [{"kind": "User", "name": "bob"}]},
            ]
        });
        rbac::Policy::from_objects(v["items"].as_array().unwrap())
    }

    fn rule(
        group: &str,
        resources: &[&str],
        verbs: &[&str],
    ) -> k8s_openapi::api::rbac::v1::PolicyRule {
        k8s_openapi::api::rbac::v1::PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn run(p: &rbac::Policy, w: &Wanted) -> Result<Wanted, ApiError> {
        let checker = Checker {
            policy: p,
            requestor: Some(User {
                name: "bob".into(),
                groups: vec![AUTHENTICATED.into()],
            }),
        };
        let request = rbac::Request {
            verb: "list".into(),
            resource: "secrets".into(),
            namespace: "kube-system".into(),
            ..Default::default()
        };
        let mut first = None;
        for mode in [
            Mode::ArbitraryNode,
            Mode::ServiceAccount,
            Mode::UserInfo,
            Mode::Legacy,
        ] {
            if mode.applies(w) {
                match checker.mode(mode, w, &request) {
                    Ok(a) => return Ok(a),
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
        }
        Err(first.unwrap())
    }

    fn sa() -> Wanted {
        Wanted {
            name: "system:serviceaccount:mco-system:mco-daemon".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_caller_without_rights_is_refused_in_the_first_modes_words() {
        let e = run(&policy(vec![]), &sa()).unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "secrets is forbidden: User \"bob\" cannot impersonate-on:serviceaccount:list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
        );
    }

    #[test]
    fn legacy_rights_on_serviceaccounts_give_the_service_account_groups() {
        let p = policy(vec![rule("", &["serviceaccounts"], &["impersonate"])]);
        let a = run(&p, &sa()).unwrap();
        assert_eq!(
            a.groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:mco-system",
                AUTHENTICATED
            ]
        );
    }

    #[test]
    fn rights_on_users_do_not_cover_groups() {
        let p = policy(vec![rule("", &["users"], &["impersonate"])]);
        let alice = Wanted {
            name: "alice".into(),
            ..Default::default()
        };
        assert_eq!(run(&p, &alice).unwrap().groups, [AUTHENTICATED]);
        let with_group = Wanted {
            groups: vec!["admins".into()],
            ..alice
        };
        let e = run(&p, &with_group).unwrap_err();
        // The first mode that applies (user-info) refuses on the request itself.
        assert!(
            e.message
                .contains("cannot impersonate-on:user-info:list resource \"secrets\""),
            "{}",
            e.message
        );
        let p = policy(vec![
            rule("", &["users"], &["impersonate"]),
            rule("*", &["*"], &["impersonate-on:user-info:list"]),
            rule(AUTHENTICATION, &["users"], &["impersonate:user-info"]),
        ]);
        let e = run(&p, &with_group).unwrap_err();
        assert_eq!(
            e.message,
            "groups.authentication.k8s.io \"admins\" is forbidden: User \"bob\" cannot impersonate:user-info resource \"groups\" in API group \"authentication.k8s.io\" at the cluster scope"
        );
    }

    #[test]
    fn constrained_modes_refuse_system_masters_and_sa_groups() {
        let p = policy(vec![rule("*", &["*"], &["*"])]);
        let masters = Wanted {
            name: "alice".into(),
            groups: vec![MASTERS.into()],
            ..Default::default()
        };
        // The legacy mode still allows it to a caller with every right, as kube's does.
        assert!(run(&p, &masters).is_ok());
        let p = policy(vec![rule(
            "*",
            &["*"],
            &["impersonate-on:user-info:list", "impersonate:user-info"],
        )]);
        let e = run(&p, &masters).unwrap_err();
        assert!(
            e.message
                .ends_with("impersonating the system:masters group is not allowed"),
            "{}",
            e.message
        );
        let sa_groups = Wanted {
            groups: vec!["g".into()],
            ..sa()
        };
        let e = run(&policy(vec![]), &sa_groups).unwrap_err();
        assert!(
            e.message
                .contains("cannot impersonate resource \"serviceaccounts\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn extras_are_checked_per_key_and_value() {
        let w = Wanted {
            name: "alice".into(),
            extra: BTreeMap::from([("scopes".to_string(), vec!["a".to_string()])]),
            ..Default::default()
        };
        let p = policy(vec![rule("", &["users"], &["impersonate"])]);
        let e = run(&p, &w).unwrap_err();
        assert!(
            e.message.contains("impersonate-on:user-info:list"),
            "{}",
            e.message
        );
        let p = policy(vec![
            rule("", &["users"], &["impersonate"]),
            rule(AUTHENTICATION, &["userextras/scopes"], &["impersonate"]),
        ]);
        assert_eq!(run(&p, &w).unwrap().extra, w.extra);
    }

    #[test]
    fn nobody_unauthenticated_or_unguarded_may_impersonate() {
        for caller in [
            None,
            Some(Identity::Node("worker-0".into())),
            Some(Identity::Controller),
        ] {
            assert!(requestor(caller.as_ref()).is_some(), "{caller:?}");
        }
        assert_eq!(requestor(Some(&Identity::Admin)), None);
        let anon = requestor(None).unwrap();
        let checker = Checker {
            policy: &rbac::Policy::default().with_bootstrap(),
            requestor: Some(anon),
        };
        let e = checker
            .mode(Mode::Legacy, &sa(), &rbac::Request::default())
            .unwrap_err();
        assert_eq!(
            e.message,
            "serviceaccounts \"mco-daemon\" is forbidden: User \"system:anonymous\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"mco-system\""
        );
    }
}
