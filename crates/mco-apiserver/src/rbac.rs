//! Evaluation of `rbac.authorization.k8s.io/v1` objects, kube-apiserver's semantics.
//!
//! Pure: the objects come as a [`Policy`], so the matcher is tested without a server.
//! Like kube's RBAC authorizer this only ever allows; a request no rule allows is denied.

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};

/// An authenticated user: kube's user name and groups.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// A ServiceAccount's user, with the groups kube's token authenticator adds.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }
}

/// What a request does (kube's `authorizer.Attributes`): a resource request, or with `path`
/// a non-resource one (then only `verb` and `path` count).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// The object's name; empty for collections.
    pub name: String,
    /// Empty at the cluster scope.
    pub namespace: String,
    /// Set for a non-resource request (`/version`, `/apis`): the URL path.
    pub path: Option<String>,
}

/// A snapshot of the RBAC objects. The server builds one per change to them and shares it,
/// so authorizing a request reads typed rules by reference instead of parsing them.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub cluster_roles: Vec<ClusterRole>,
    pub roles: Vec<Role>,
    pub cluster_role_bindings: Vec<ClusterRoleBinding>,
    pub role_bindings: Vec<RoleBinding>,
}

impl Policy {
    /// Collects the RBAC kinds among `objects`; others are ignored.
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a serde_json::Value>) -> Policy {
        let mut p = Policy::default();
        for o in objects {
            let kind = o.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            let v = o.clone();
            match kind {
                "ClusterRole" => p.cluster_roles.extend(serde_json::from_value(v).ok()),
                "Role" => p.roles.extend(serde_json::from_value(v).ok()),
                "ClusterRoleBinding" => p
                    .cluster_role_bindings
                    .extend(serde_json::from_value(v).ok()),
                "RoleBinding" => p.role_bindings.extend(serde_json::from_value(v).ok()),
                _ => {}
            }
        }
        p
    }
}

/// The ClusterRoles and ClusterRoleBindings of kube's bootstrap policy that every authenticated
/// user and every ServiceAccount holds (`system:basic-user`, `system:discovery`,
/// `system:public-info-viewer`, `system:service-account-issuer-discovery`,
/// `system:cluster-trust-bundle-discovery`), and `system:auth-delegator`, which kube ships
/// unbound for delegating components to be bound to. The embedded server does not store them;
/// the authorizer adds them, so access reviews and rule lists answer as kube-apiserver's do.
pub fn bootstrap() -> (Vec<ClusterRole>, Vec<ClusterRoleBinding>) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let strings = |items: &[&str]| items.iter().map(|i| i.to_string()).collect::<Vec<_>>();
    let resource = |group: &str, resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(strings(&[group])),
        resources: Some(strings(resources)),
        verbs: strings(verbs),
        ..Default::default()
    };
    let urls = |urls: &[&str]| PolicyRule {
        non_resource_urls: Some(strings(urls)),
        verbs: strings(&["get"]),
        ..Default::default()
    };
    let roles = [
        (
            "system:auth-delegator",
            vec![
                resource("authentication.k8s.io", &["tokenreviews"], &["create"]),
                resource(
                    "authorization.k8s.io",
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
            &[][..],
        ),
        (
            "system:basic-user",
            vec![
                resource(
                    "authorization.k8s.io",
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                resource(
                    "authentication.k8s.io",
                    &["selfsubjectreviews"],
                    &["create"],
                ),
            ],
            &["system:authenticated"][..],
        ),
        (
            "system:cluster-trust-bundle-discovery",
            vec![resource(
                "certificates.k8s.io",
                &["clustertrustbundles"],
                &["get", "list", "watch"],
            )],
            &["system:serviceaccounts"][..],
        ),
        (
            "system:discovery",
            vec![urls(&[
                "/livez",
                "/readyz",
                "/healthz",
                "/version",
                "/version/",
                "/openapi",
                "/openapi/*",
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
            ])],
            &["system:authenticated"][..],
        ),
        (
            "system:public-info-viewer",
            vec![urls(&[
                "/livez",
                "/readyz",
                "/healthz",
                "/version",
                "/version/",
            ])],
            &["system:authenticated", "system:unauthenticated"][..],
        ),
        (
            "system:service-account-issuer-discovery",
            vec![urls(&[
                "/.well-known/openid-configuration",
                "/.well-known/openid-configuration/",
                "/openid/v1/jwks",
                "/openid/v1/jwks/",
            ])],
            &["system:serviceaccounts"][..],
        ),
    ];
    let meta = |name: &str| ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    let mut cluster_roles = Vec::new();
    let mut bindings = Vec::new();
    for (name, rules, groups) in roles {
        cluster_roles.push(ClusterRole {
            metadata: meta(name),
            rules: Some(rules),
            ..Default::default()
        });
        if groups.is_empty() {
            continue;
        }
        bindings.push(ClusterRoleBinding {
            metadata: meta(name),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: name.into(),
            },
            subjects: Some(
                groups
                    .iter()
                    .map(|g| Subject {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Group".into(),
                        name: g.to_string(),
                        namespace: None,
                    })
                    .collect(),
            ),
        });
    }
    (cluster_roles, bindings)
}

impl Policy {
    /// This policy with [`bootstrap`]'s roles and bindings, where the store has none of
    /// those names (a stored one wins, as kube's reconciled objects do).
    pub fn with_bootstrap(mut self) -> Policy {
        let (roles, bindings) = bootstrap();
        for r in roles {
            if self
                .cluster_role(r.metadata.name.as_deref().unwrap_or(""))
                .is_none()
            {
                self.cluster_roles.push(r);
            }
        }
        for b in bindings {
            if !self
                .cluster_role_bindings
                .iter()
                .any(|s| s.metadata.name == b.metadata.name)
            {
                self.cluster_role_bindings.push(b);
            }
        }
        self
    }
}

impl Policy {
    fn cluster_role(&self, name: &str) -> Option<&ClusterRole> {
        self.cluster_roles
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
    }
    fn role(&self, namespace: &str, name: &str) -> Option<&Role> {
        self.roles.iter().find(|r| {
            r.metadata.namespace.as_deref() == Some(namespace)
                && r.metadata.name.as_deref() == Some(name)
        })
    }
}

fn has(items: &[String], want: &str) -> bool {
    items.iter().any(|i| i == "*" || i == want)
}

/// Whether a rule's `nonResourceURLs` entry covers `path`: exactly, `*`, or as a prefix
/// ending in `*` (kube's `NonResourceURLMatches`).
fn url_matches(rule_url: &str, path: &str) -> bool {
    match rule_url.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => rule_url == path,
    }
}

/// Whether `rule` grants `req` (kube's `RuleAllows`).
pub fn rule_allows(rule: &PolicyRule, req: &Request) -> bool {
    if let Some(path) = &req.path {
        let urls = rule.non_resource_urls.as_deref().unwrap_or_default();
        return has(&rule.verbs, &req.verb) && urls.iter().any(|u| url_matches(u, path));
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    let resources = rule.resources.as_deref().unwrap_or_default();
    if !has(&rule.verbs, &req.verb) || !has(groups, &req.api_group) {
        return false;
    }
    let resource_ok = match &req.subresource {
        None => has(resources, &req.resource),
        Some(sub) => {
            let combined = format!("{}/{sub}", req.resource);
            resources
                .iter()
                .any(|r| r == "*" || *r == combined || *r == format!("*/{sub}"))
        }
    };
    if !resource_ok {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => !req.name.is_empty() && names.contains(&req.name),
    }
}

/// Whether `subject` names `user`; `binding_ns` is the namespace a ServiceAccount subject
/// without one defaults to (kube's rule for RoleBindings).
pub fn subject_matches(subject: &Subject, user: &User, binding_ns: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user.name,
        "Group" => user.groups.contains(&subject.name),
        "ServiceAccount" => {
            let ns = subject.namespace.as_deref().unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{}", subject.name)
        }
        _ => false,
    }
}

/// The rules `role_ref` grants, or kube's error when the role does not exist.
fn rules_of<'a>(
    p: &'a Policy,
    role_ref: &RoleRef,
    binding_ns: &str,
) -> Result<&'a [PolicyRule], String> {
    let rules = match role_ref.kind.as_str() {
        "ClusterRole" => p
            .cluster_role(&role_ref.name)
            .map(|r| r.rules.as_deref().unwrap_or_default()),
        "Role" if !binding_ns.is_empty() => p
            .role(binding_ns, &role_ref.name)
            .map(|r| r.rules.as_deref().unwrap_or_default()),
        _ => {
            return Err(format!(
                "unsupported role reference kind: {:?}",
                role_ref.kind
            ));
        }
    };
    rules.ok_or_else(|| {
        format!(
            "{}.rbac.authorization.k8s.io {:?} not found",
            role_ref.kind.to_lowercase(),
            role_ref.name
        )
    })
}

/// kube's `describeSubject`: a ServiceAccount as `name/namespace`.
fn describe_subject(s: &Subject, binding_ns: &str) -> String {
    match s.kind.as_str() {
        "ServiceAccount" => {
            let ns = s
                .namespace
                .as_deref()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            format!("{} {:?}", s.kind, format!("{}/{ns}", s.name))
        }
        _ => format!("{} {:?}", s.kind, s.name),
    }
}

/// What [`visit_rules`] calls: the binding's description (made only when asked) and a rule or
/// the error of a missing role; `false` stops the walk.
type Visitor<'a, 'v> = dyn FnMut(&dyn Fn() -> String, Result<&'a PolicyRule, String>) -> bool + 'v;

/// Visits the rules of one binding's role (or the error of a missing one); `false` once `visit`
/// asks to stop.
fn visit_role<'a>(
    p: &'a Policy,
    role_ref: &RoleRef,
    binding_ns: &str,
    source: &dyn Fn() -> String,
    visit: &mut Visitor<'a, '_>,
) -> bool {
    match rules_of(p, role_ref, binding_ns) {
        Ok(rules) => rules.iter().all(|r| visit(source, Ok(r))),
        Err(e) => visit(source, Err(e)),
    }
}

/// Calls `visit` with each rule bound to `user` for `namespace`, in kube's rule resolver's
/// order (ClusterRoleBindings, then the namespace's RoleBindings), with the binding's words
/// as kube's authorizer names it (`ClusterRoleBinding "b" of ClusterRole "r" to User "u"`);
/// a binding whose role is missing is visited once with `Err`. Stops when `visit` says so.
fn visit_rules<'a>(p: &'a Policy, user: &User, namespace: &str, visit: &mut Visitor<'a, '_>) {
    let first = |subjects: &'a Option<Vec<Subject>>, ns: &str| {
        subjects
            .iter()
            .flatten()
            .find(|s| subject_matches(s, user, ns))
    };
    for b in &p.cluster_role_bindings {
        let Some(subject) = first(&b.subjects, "") else {
            continue;
        };
        let source = || {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                b.metadata.name.as_deref().unwrap_or(""),
                b.role_ref.kind,
                b.role_ref.name,
                describe_subject(subject, "")
            )
        };
        if !visit_role(p, &b.role_ref, "", &source, visit) {
            return;
        }
    }
    if namespace.is_empty() {
        return;
    }
    for b in p
        .role_bindings
        .iter()
        .filter(|b| b.metadata.namespace.as_deref() == Some(namespace))
    {
        let Some(subject) = first(&b.subjects, namespace) else {
            continue;
        };
        let source = || {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{namespace}", b.metadata.name.as_deref().unwrap_or("")),
                b.role_ref.kind,
                b.role_ref.name,
                describe_subject(subject, namespace)
            )
        };
        if !visit_role(p, &b.role_ref, namespace, &source, visit) {
            return;
        }
    }
}

/// kube's RBAC authorizer's answer: whether a rule bound to `user` allows `req`, and its reason
/// (`RBAC: allowed by ...`, or on a denial the missing roles met on the way, else empty).
pub fn decide(p: &Policy, user: &User, req: &Request) -> (bool, String) {
    let mut allowed = None;
    let mut errors = Vec::new();
    visit_rules(p, user, &req.namespace, &mut |source, rule| match rule {
        Ok(r) if rule_allows(r, req) => {
            allowed = Some(format!("RBAC: allowed by {}", source()));
            false
        }
        Ok(_) => true,
        Err(e) => {
            errors.push(e);
            true
        }
    });
    match allowed {
        Some(reason) => (true, reason),
        None => (false, aggregate_reason(&errors)),
    }
}

/// `RBAC: <errors>` as apimachinery's aggregate prints them (`[a, b]` for more than one).
fn aggregate_reason(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => format!("RBAC: {one}"),
        many => format!("RBAC: [{}]", many.join(", ")),
    }
}

/// Whether any binding reachable for `req`'s scope grants it to `user`. ClusterRoleBindings
/// apply everywhere; RoleBindings (to a Role or a ClusterRole) only in their namespace.
pub fn authorize(p: &Policy, user: &User, req: &Request) -> bool {
    decide(p, user, req).0
}

/// The rules bound to `user` in `namespace` (cluster-wide ones included), in kube's rule
/// resolver's order, and the error for missing roles (then the list is incomplete).
pub fn rules_for(p: &Policy, user: &User, namespace: &str) -> (Vec<PolicyRule>, String) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    visit_rules(p, user, namespace, &mut |_, rule| {
        match rule {
            Ok(r) => rules.push(r.clone()),
            Err(e) => errors.push(e),
        }
        true
    });
    let error = match errors.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    (rules, error)
}

/// kube-apiserver's 403 message for a denied request.
pub fn forbidden_message(user: &User, req: &Request) -> String {
    forbidden_message_with(user, req, "")
}

/// [`forbidden_message`] with the authorizer's `reason` appended (`...: reason`), as
/// kube-apiserver words a refusal that has one.
pub fn forbidden_message_with(user: &User, req: &Request, reason: &str) -> String {
    let why = if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    };
    if let Some(path) = &req.path {
        return format!(
            "forbidden: User {:?} cannot {} path {path:?}{why}",
            user.name, req.verb
        );
    }
    let qualified = if req.api_group.is_empty() {
        req.resource.clone()
    } else {
        format!("{}.{}", req.resource, req.api_group)
    };
    let resource = match &req.subresource {
        Some(sub) => format!("{}/{sub}", req.resource),
        None => req.resource.clone(),
    };
    let scope = if req.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", req.namespace)
    };
    let reason = format!(
        "User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, req.verb, req.api_group
    );
    if req.name.is_empty() {
        format!("{qualified} is forbidden: {reason}{why}")
    } else {
        format!("{qualified} \"{}\" is forbidden: {reason}{why}", req.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn s(items: &[&str]) -> Option<Vec<String>> {
        Some(items.iter().map(|i| i.to_string()).collect())
    }

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            api_groups: s(groups),
            resources: s(resources),
            verbs: s(verbs).unwrap_or_default(),
            ..Default::default()
        }
    }

    fn req(verb: &str, group: &str, resource: &str, sub: Option<&str>, name: &str) -> Request {
        Request {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.map(String::from),
            name: name.into(),
            namespace: String::new(),
            path: None,
        }
    }

    #[test]
    fn verbs_groups_and_wildcards() {
        let r = rule(&[""], &["nodes"], &["get", "list"]);
        assert!(rule_allows(&r, &req("get", "", "nodes", None, "a")));
        assert!(rule_allows(&r, &req("list", "", "nodes", None, "")));
        assert!(!rule_allows(&r, &req("patch", "", "nodes", None, "a")));
        assert!(!rule_allows(&r, &req("get", "apps", "nodes", None, "a")));
        assert!(!rule_allows(&r, &req("get", "", "pods", None, "a")));
        let any = rule(&["*"], &["*"], &["*"]);
        assert!(rule_allows(
            &any,
            &req("deletecollection", "x.io", "y", None, "")
        ));
    }

    #[test]
    fn subresources_are_separate_resources() {
        let r = rule(&[""], &["pods"], &["create", "get"]);
        assert!(!rule_allows(
            &r,
            &req("create", "", "pods", Some("eviction"), "p")
        ));
        let e = rule(&[""], &["pods/eviction"], &["create"]);
        assert!(rule_allows(
            &e,
            &req("create", "", "pods", Some("eviction"), "p")
        ));
        assert!(!rule_allows(&e, &req("create", "", "pods", None, "")));
        let st = rule(&["g"], &["*/status"], &["patch"]);
        assert!(rule_allows(
            &st,
            &req("patch", "g", "mcn", Some("status"), "a")
        ));
        assert!(!rule_allows(&st, &req("patch", "g", "mcn", None, "a")));
        let star = rule(&["g"], &["*"], &["patch"]);
        assert!(rule_allows(
            &star,
            &req("patch", "g", "mcn", Some("status"), "a")
        ));
    }

    #[test]
    fn resource_names_need_a_named_request() {
        let r = PolicyRule {
            resource_names: s(&["mco-controller"]),
            ..rule(&["coordination.k8s.io"], &["leases"], &["get", "list"])
        };
        let lease = |verb: &str, name: &str| req(verb, "coordination.k8s.io", "leases", None, name);
        assert!(rule_allows(&r, &lease("get", "mco-controller")));
        assert!(!rule_allows(&r, &lease("get", "other")));
        assert!(!rule_allows(&r, &lease("list", "")));
    }

    fn meta(name: &str, ns: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(String::from),
            ..Default::default()
        }
    }

    fn role_ref(kind: &str, name: &str) -> RoleRef {
        RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    fn subject(kind: &str, name: &str, ns: Option<&str>) -> Subject {
        Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: ns.map(String::from),
            ..Default::default()
        }
    }

    fn policy() -> Policy {
        Policy {
            cluster_roles: vec![
                ClusterRole {
                    metadata: meta("read-nodes", None),
                    rules: Some(vec![rule(&[""], &["nodes"], &["get"])]),
                    ..Default::default()
                },
                ClusterRole {
                    metadata: meta("read-cm", None),
                    rules: Some(vec![rule(&[""], &["configmaps"], &["get"])]),
                    ..Default::default()
                },
            ],
            roles: vec![Role {
                metadata: meta("leases", Some("ns1")),
                rules: Some(vec![rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["update"],
                )]),
            }],
            cluster_role_bindings: vec![ClusterRoleBinding {
                metadata: meta("nodes", None),
                role_ref: role_ref("ClusterRole", "read-nodes"),
                subjects: Some(vec![subject("Group", "system:serviceaccounts:ns1", None)]),
            }],
            role_bindings: vec![
                RoleBinding {
                    metadata: meta("cm", Some("ns1")),
                    role_ref: role_ref("ClusterRole", "read-cm"),
                    subjects: Some(vec![subject("User", "alice", None)]),
                },
                RoleBinding {
                    metadata: meta("leases", Some("ns1")),
                    role_ref: role_ref("Role", "leases"),
                    // No namespace: the binding's own.
                    subjects: Some(vec![subject("ServiceAccount", "sa", None)]),
                },
            ],
        }
    }

    #[test]
    fn bindings_scope_and_subjects() {
        let p = policy();
        let sa = User::service_account("ns1", "sa");
        let other = User::service_account("ns2", "sa");
        let alice = User {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
        };
        let node = req("get", "", "nodes", None, "a");
        assert!(authorize(&p, &sa, &node), "group binding");
        assert!(!authorize(&p, &other, &node));
        let mut lease = req("update", "coordination.k8s.io", "leases", None, "l");
        lease.namespace = "ns1".into();
        assert!(
            authorize(&p, &sa, &lease),
            "role binding, defaulted SA namespace"
        );
        assert!(!authorize(&p, &other, &lease));
        let mut cm = req("get", "", "configmaps", None, "c");
        cm.namespace = "ns1".into();
        assert!(
            authorize(&p, &alice, &cm),
            "cluster role bound in a namespace"
        );
        cm.namespace = "ns2".into();
        assert!(
            !authorize(&p, &alice, &cm),
            "only in the binding's namespace"
        );
        cm.namespace.clear();
        assert!(!authorize(&p, &alice, &cm), "not at the cluster scope");
    }

    #[test]
    fn from_objects_reads_each_kind() {
        let objs = [
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "r"}, "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]}),
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "r"},
                "subjects": [{"kind": "User", "name": "u"}]}),
            serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}}),
        ];
        let p = Policy::from_objects(&objs);
        let u = User {
            name: "u".into(),
            groups: vec![],
        };
        assert!(authorize(&p, &u, &req("get", "", "nodes", None, "n")));
        assert!(!authorize(&p, &u, &req("list", "", "nodes", None, "")));
    }

    #[test]
    fn forbidden_messages_match_kube() {
        let u = User::service_account("mco-system", "mco-daemon");
        let mut r = req("get", "", "secrets", None, "s");
        r.namespace = "default".into();
        assert_eq!(
            forbidden_message(&u, &r),
            "secrets \"s\" is forbidden: User \"system:serviceaccount:mco-system:mco-daemon\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\""
        );
        let r = req(
            "delete",
            "machineconfiguration.openshift.io",
            "machineconfigs",
            None,
            "",
        );
        assert_eq!(
            forbidden_message(&u, &r),
            "machineconfigs.machineconfiguration.openshift.io is forbidden: User \"system:serviceaccount:mco-system:mco-daemon\" cannot delete resource \"machineconfigs\" in API group \"machineconfiguration.openshift.io\" at the cluster scope"
        );
        let r = req("create", "", "pods", Some("eviction"), "p");
        assert!(forbidden_message(&u, &r).contains("cannot create resource \"pods/eviction\""));
    }

    #[test]
    fn auth_delegator_is_in_the_policy_but_bound_to_nobody() {
        let sa = User::service_account("mco-system", "mco-controller");
        let review = |group: &str, resource: &str| req("create", group, resource, None, "");
        let bare = Policy::default().with_bootstrap();
        assert!(!authorize(
            &bare,
            &sa,
            &review("authentication.k8s.io", "tokenreviews")
        ));
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "delegate"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
            "subjects": [{"kind": "ServiceAccount", "name": "mco-controller", "namespace": "mco-system"}]});
        let bound = Policy::from_objects([&binding]).with_bootstrap();
        assert!(authorize(
            &bound,
            &sa,
            &review("authentication.k8s.io", "tokenreviews")
        ));
        assert!(authorize(
            &bound,
            &sa,
            &review("authorization.k8s.io", "subjectaccessreviews")
        ));
        assert!(!authorize(
            &bound,
            &sa,
            &review("authorization.k8s.io", "localsubjectaccessreviews")
        ));
    }
}
