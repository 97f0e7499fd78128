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

const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// POSTs raw `body` with `headers`; the status and the JSON answer.
async fn post_raw(
    client: &kube::Client,
    path: &str,
    ct: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Value) {
    let mut req = http::Request::builder()
        .method("POST")
        .uri(path)
        .header("content-type", ct);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .send(req.body(kube::client::Body::from(body)).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_self_subject_review_names_the_caller_as_kube_does() {
    let s = common::start().await;
    let admin = s.admin().await;
    seed(&admin).await;
    let ssr = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
        "metadata": {"name": "ignored", "labels": {"a": "b"}}});
    let body = serde_json::to_vec(&ssr).unwrap();

    // The admin; the body's metadata is not kept, only a creation timestamp is set.
    let (code, answer) = post_raw(
        &admin,
        SELF_SUBJECT_REVIEWS,
        "application/json",
        &[],
        body.clone(),
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["kind"], "SelfSubjectReview");
    assert_eq!(answer["apiVersion"], "authentication.k8s.io/v1");
    let meta = answer["metadata"].as_object().unwrap();
    assert_eq!(
        meta.keys().collect::<Vec<_>>(),
        ["creationTimestamp"],
        "{answer}"
    );
    assert_eq!(
        answer["status"],
        json!({"userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]}})
    );

    // A node-bound ServiceAccount token: as a TokenReview of that token reports it.
    let sa_uid = send(
        &admin,
        "GET",
        "/api/v1/namespaces/demo/serviceaccounts/nobody",
        "application/json",
        &Value::Null,
    )
    .await
    .body["metadata"]["uid"]
        .clone();
    let sa = s
        .handle
        .client_for(Identity::service_account(
            "demo",
            "nobody",
            Some("worker-0"),
        ))
        .await
        .unwrap();
    // What `kubectl auth whoami` sends: protobuf. `nobody` has no binding: kube's
    // `system:basic-user` lets every authenticated user ask.
    let captured = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/protobuf/selfsubjectreview-create.bin"
    ))
    .unwrap();
    let (code, answer) = post_raw(
        &sa,
        SELF_SUBJECT_REVIEWS,
        "application/vnd.kubernetes.protobuf",
        &[],
        captured,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    let user = &answer["status"]["userInfo"];
    assert_eq!(user["username"], "system:serviceaccount:demo:nobody");
    assert_eq!(user["uid"], sa_uid);
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/node-name"],
        json!(["worker-0"])
    );
    let credential = user["extra"]["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap();
    assert!(credential.starts_with("TokenSHA256="), "{credential}");

    // Impersonated: the user, uid, groups and extras impersonation made.
    let (code, answer) = post_raw(
        &admin,
        SELF_SUBJECT_REVIEWS,
        "application/json",
        &[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "devs"),
            ("Impersonate-Uid", "u-1"),
            ("Impersonate-Extra-Scopes", "view"),
        ],
        body,
    )
    .await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(
        answer["status"]["userInfo"],
        json!({"username": "jane", "uid": "u-1", "groups": ["devs", "system:authenticated"],
            "extra": {"scopes": ["view"]}})
    );

    // Only create is served.
    let a = send(
        &admin,
        "GET",
        SELF_SUBJECT_REVIEWS,
        "application/json",
        &Value::Null,
    )
    .await;
    assert_eq!(a.code, 405, "{:?}", a.body);
}
