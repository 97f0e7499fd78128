//! TokenReview, SubjectAccessReview and LocalSubjectAccessReview, as a delegating component
//! (kube-rbac-proxy, a metrics endpoint's filter) sends them: who may send them, and what the
//! server answers about a token or another user.

use crate::common;

use common::send;
use mco_apiserver::Identity;
use serde_json::{Value, json};

const AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SARS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

fn lsars(ns: &str) -> String {
    format!("/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews")
}

async fn create(client: &kube::Client, path: &str, v: Value) -> Value {
    let a = send(client, "POST", path, "application/json", &v).await;
    assert_eq!(a.code, 201, "{path}: {:?}", a.body);
    a.body
}

/// Namespace `demo` with ServiceAccounts `reader` and `nobody`, Node `worker-0`, and a
/// ClusterRole `metrics-reader` (get `/metrics`) bound to `reader`.
async fn seed(admin: &kube::Client) {
    for (path, o) in [
        ("/api/v1/namespaces", json!({"metadata": {"name": "demo"}})),
        (
            "/api/v1/namespaces/demo/serviceaccounts",
            json!({"metadata": {"name": "reader"}}),
        ),
        (
            "/api/v1/namespaces/demo/serviceaccounts",
            json!({"metadata": {"name": "nobody"}}),
        ),
        ("/api/v1/nodes", json!({"metadata": {"name": "worker-0"}})),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            json!({"metadata": {"name": "metrics-reader"},
                "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            json!({"metadata": {"name": "metrics-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": "demo"}]}),
        ),
    ] {
        create(admin, path, o).await;
    }
}

fn token_review(spec: Value) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
}

fn sar(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec})
}

#[tokio::test]
async fn a_token_review_names_the_tokens_user_as_kube_does() {
    let s = common::start().await;
    let admin = s.admin().await;
    seed(&admin).await;
    let uid = |path: &str| {
        let admin = admin.clone();
        let path = path.to_string();
        async move {
            let a = send(&admin, "GET", &path, "application/json", &Value::Null).await;
            a.body["metadata"]["uid"].as_str().unwrap().to_string()
        }
    };
    let sa_uid = uid("/api/v1/namespaces/demo/serviceaccounts/reader").await;
    let node_uid = uid("/api/v1/nodes/worker-0").await;
    let token = s
        .handle
        .mint_token(Identity::service_account(
            "demo",
            "reader",
            Some("worker-0"),
        ))
        .await
        .unwrap();

    let answer = create(&admin, TOKEN_REVIEWS, token_review(json!({"token": token}))).await;
    let st = &answer["status"];
    assert_eq!(st["authenticated"], json!(true), "{answer}");
    assert_eq!(st["audiences"], json!([AUDIENCE]));
    let user = &st["user"];
    assert_eq!(user["username"], json!("system:serviceaccount:demo:reader"));
    assert_eq!(user["uid"], json!(sa_uid));
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:demo",
            "system:authenticated"
        ])
    );
    let extra = &user["extra"];
    assert_eq!(
        extra["authentication.kubernetes.io/node-name"],
        json!(["worker-0"])
    );
    assert_eq!(
        extra["authentication.kubernetes.io/node-uid"],
        json!([node_uid])
    );
    let credential = extra["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap();
    assert!(credential.starts_with("TokenSHA256="), "{credential}");
    assert!(
        !credential.contains(&token),
        "the token itself is never echoed as its id"
    );
    assert_eq!(answer["spec"]["token"], json!(token));

    // A token this server never issued, as kube-apiserver answers one.
    let answer = create(
        &admin,
        TOKEN_REVIEWS,
        token_review(json!({"token": "garbage"})),
    )
    .await;
    assert_eq!(
        answer["status"],
        json!({"user": {}, "error": "invalid bearer token"})
    );
    // A good token for audiences it is not for.
    let answer = create(
        &admin,
        TOKEN_REVIEWS,
        token_review(json!({"token": token, "audiences": ["foo"]})),
    )
    .await;
    assert_eq!(
        answer["status"],
        json!({"user": {}, "error": format!("[invalid bearer token, token audiences [\"{AUDIENCE}\"] is invalid for the target audiences [\"foo\"]]")})
    );
    // One of them in common is enough, and only that one is reported.
    let answer = create(
        &admin,
        TOKEN_REVIEWS,
        token_review(json!({"token": token, "audiences": ["foo", AUDIENCE]})),
    )
    .await;
    assert_eq!(answer["status"]["authenticated"], json!(true));
    assert_eq!(answer["status"]["audiences"], json!([AUDIENCE]));

    // The admin's own token: system:masters, no extras.
    let kubeconfig = std::fs::read_to_string(s.kubeconfig()).unwrap();
    let admin_token = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .unwrap()
        .trim_matches('"');
    let answer = create(
        &admin,
        TOKEN_REVIEWS,
        token_review(json!({"token": admin_token})),
    )
    .await;
    assert_eq!(
        answer["status"]["user"],
        json!({"username": "admin", "groups": ["system:masters", "system:authenticated"]})
    );
}

#[tokio::test]
async fn token_reviews_are_bounded_and_need_a_token() {
    let s = common::start().await;
    let admin = s.admin().await;
    let a = send(
        &admin,
        "POST",
        TOKEN_REVIEWS,
        "application/json",
        &token_review(json!({})),
    )
    .await;
    assert_eq!(
        (a.code, a.message()),
        (400, "token is required for TokenReview in authentication")
    );
    // At the limit a token is looked up (and not found); past it, the field is named.
    let at_limit = "x".repeat(8 * 1024);
    let answer = create(
        &admin,
        TOKEN_REVIEWS,
        token_review(json!({"token": at_limit})),
    )
    .await;
    assert_eq!(answer["status"]["error"], json!("invalid bearer token"));
    let a = send(
        &admin,
        "POST",
        TOKEN_REVIEWS,
        "application/json",
        &token_review(json!({"token": format!("{at_limit}x")})),
    )
    .await;
    assert_eq!(a.code, 422, "{:?}", a.body);
    assert_eq!(
        a.causes(),
        [(
            "FieldValueTooLong".to_string(),
            "spec.token".to_string(),
            "Too long: may not be more than 8192 bytes".to_string()
        )]
    );
    let audiences: Vec<String> = (0..65).map(|i| format!("a{i}")).collect();
    let a = send(
        &admin,
        "POST",
        TOKEN_REVIEWS,
        "application/json",
        &token_review(json!({"token": "t", "audiences": audiences})),
    )
    .await;
    assert_eq!(a.code, 422, "{:?}", a.body);
    assert!(
        a.message()
            .ends_with("spec.audiences: Too many: 65: must have at most 64 items"),
        "{}",
        a.message()
    );
}

#[tokio::test]
async fn subject_access_reviews_answer_for_the_given_user() {
    let s = common::start().await;
    let admin = s.admin().await;
    seed(&admin).await;
    let metrics = json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
    let mut allowed = metrics.clone();
    allowed["user"] = json!("system:serviceaccount:demo:reader");
    allowed["groups"] = json!(["system:serviceaccounts", "system:serviceaccounts:demo"]);
    let answer = create(&admin, SARS, sar("SubjectAccessReview", allowed)).await;
    assert_eq!(
        answer["status"],
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"metrics-reader\" of ClusterRole \"metrics-reader\" to ServiceAccount \"reader/demo\""})
    );
    let mut denied = metrics.clone();
    denied["user"] = json!("system:serviceaccount:demo:nobody");
    let answer = create(&admin, SARS, sar("SubjectAccessReview", denied)).await;
    assert_eq!(answer["status"], json!({"allowed": false}));
    // Groups count as given: system:authenticated holds system:basic-user.
    let basic = json!({"user": "bob", "groups": ["system:authenticated"],
        "resourceAttributes": {"verb": "create", "group": "authorization.k8s.io", "resource": "selfsubjectaccessreviews"}});
    let answer = create(&admin, SARS, sar("SubjectAccessReview", basic.clone())).await;
    assert_eq!(answer["status"]["allowed"], json!(true), "{answer}");
    let mut bob = basic;
    bob["groups"] = json!([]);
    let answer = create(&admin, SARS, sar("SubjectAccessReview", bob)).await;
    assert_eq!(answer["status"], json!({"allowed": false}));
    // Neither kind of attributes, nor a user: both of kube's errors at once.
    let a = send(
        &admin,
        "POST",
        SARS,
        "application/json",
        &sar("SubjectAccessReview", json!({})),
    )
    .await;
    assert_eq!(a.code, 422);
    assert_eq!(
        a.message(),
        ".authorization.k8s.io \"\" is invalid: [spec: Invalid value: null: exactly one of nonResourceAttributes or resourceAttributes must be specified, spec.user: Invalid value: \"\": at least one of user or group must be specified]"
    );

    // A local review is about its own namespace.
    let in_demo = json!({"user": "system:serviceaccount:demo:reader",
        "resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "demo"}});
    let answer = create(
        &admin,
        &lsars("demo"),
        sar("LocalSubjectAccessReview", in_demo.clone()),
    )
    .await;
    assert_eq!(answer["metadata"]["namespace"], json!("demo"));
    assert_eq!(answer["status"], json!({"allowed": false}));
    let a = send(
        &admin,
        "POST",
        &lsars("other"),
        "application/json",
        &sar("LocalSubjectAccessReview", in_demo),
    )
    .await;
    assert_eq!(a.code, 422, "{:?}", a.body);
    assert_eq!(
        a.message(),
        ".authorization.k8s.io \"\" is invalid: spec.resourceAttributes.namespace: Invalid value: \"demo\": must match metadata.namespace"
    );
}

#[tokio::test]
async fn only_callers_allowed_to_create_reviews_send_them() {
    let s = common::start().await;
    let admin = s.admin().await;
    seed(&admin).await;
    let nobody = s.service_account("demo", "nobody").await;
    let review = token_review(json!({"token": "garbage"}));
    let a = send(&nobody, "POST", TOKEN_REVIEWS, "application/json", &review).await;
    assert_eq!(a.code, 403, "{:?}", a.body);
    assert_eq!(
        a.message(),
        "tokenreviews.authentication.k8s.io is forbidden: User \"system:serviceaccount:demo:nobody\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
    let metrics = sar(
        "SubjectAccessReview",
        json!({"user": "u", "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}),
    );
    let a = send(&nobody, "POST", SARS, "application/json", &metrics).await;
    assert_eq!(a.code, 403, "{:?}", a.body);
    // Unauthenticated, a review is refused like any other write.
    let anonymous = s.handle.local_transport(None);
    let a = send(
        &anonymous,
        "POST",
        TOKEN_REVIEWS,
        "application/json",
        &review,
    )
    .await;
    assert_eq!(a.code, 401, "{:?}", a.body);

    // kube's system:auth-delegator (not stored, part of the policy) grants both.
    create(
        &admin,
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({"metadata": {"name": "nobody-delegates"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": "demo"}]}),
    )
    .await;
    let answer = create(&nobody, TOKEN_REVIEWS, review).await;
    assert_eq!(answer["status"]["error"], json!("invalid bearer token"));
    create(&nobody, SARS, metrics).await;
    // Not local reviews: the role grants only the cluster-wide kinds.
    let a = send(
        &nobody,
        "POST",
        &lsars("demo"),
        "application/json",
        &sar(
            "LocalSubjectAccessReview",
            json!({"user": "u", "resourceAttributes": {"verb": "get", "namespace": "demo"}}),
        ),
    )
    .await;
    assert_eq!(a.code, 403, "{:?}", a.body);
}
