//! Secrets validated by their type as kube-apiserver does: `data`'s keys and total size, the
//! keys each built-in type requires, what an update may not change, and the `Warning` headers
//! a `kubernetes.io/tls` Secret whose certificate and key are not a key pair earns. Every
//! refusal stores nothing, on create, update, each patch type and server-side apply.

use crate::common;

use base64::Engine as _;
use serde_json::{Value, json};

const NS: &str = "/api/v1/namespaces/default/secrets";

fn b64(s: impl AsRef<[u8]>) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

use common::{Answer, send};

async fn create(client: &kube::Client, secret: Value) -> Answer {
    send(client, "POST", NS, "application/json", &secret).await
}

async fn get(client: &kube::Client, name: &str) -> Answer {
    send(
        client,
        "GET",
        &format!("{NS}/{name}"),
        "application/json",
        &Value::Null,
    )
    .await
}

fn secret(name: &str, kind: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": kind, "data": data})
}

/// Asserts a 422 Invalid with kube-apiserver's message and causes.
fn invalid(a: &Answer, message: &str, causes: &[(&str, &str, &str)]) {
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["reason"], "Invalid", "{}", a.body);
    assert_eq!(a.message(), message);
    let got: Vec<(String, String, String)> = a.body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap().to_string(),
                c["field"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String, String)> = causes
        .iter()
        .map(|(r, f, m)| (r.to_string(), f.to_string(), m.to_string()))
        .collect();
    assert_eq!(got, want);
}

const KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

#[tokio::test]
async fn data_keys_must_be_config_map_keys() {
    let s = common::start().await;
    let c = s.admin().await;
    let a = create(&c, secret("bad-key", "Opaque", json!({"a b": b64("x")}))).await;
    invalid(
        &a,
        &format!("Secret \"bad-key\" is invalid: data[a b]: Invalid value: \"a b\": {KEY_MSG}"),
        &[(
            "FieldValueInvalid",
            "data[a b]",
            &format!("Invalid value: \"a b\": {KEY_MSG}"),
        )],
    );
    let a = create(&c, secret("dots", "Opaque", json!({"..x": ""}))).await;
    invalid(
        &a,
        "Secret \"dots\" is invalid: data[..x]: Invalid value: \"..x\": must not start with '..'",
        &[(
            "FieldValueInvalid",
            "data[..x]",
            "Invalid value: \"..x\": must not start with '..'",
        )],
    );
    let long = "k".repeat(254);
    let a = create(&c, secret("long", "Opaque", json!({ long.clone(): "" }))).await;
    assert!(
        a.message()
            .ends_with(&format!("\"{long}\": must be no more than 253 characters")),
        "{}",
        a.message()
    );
    assert_eq!(get(&c, "bad-key").await.code, 404);
    // A good key is stored, and a type left out is Opaque.
    let a = create(
        &c,
        json!({"metadata": {"name": "good"}, "data": {"-._aZ9": b64("x")}}),
    )
    .await;
    assert_eq!(a.code, 201, "{}", a.body);
    assert_eq!(a.body["type"], "Opaque");
    // A merge patch adding a bad key is refused and changes nothing.
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/good"),
        "application/merge-patch+json",
        &json!({"data": {"no/slash": ""}}),
    )
    .await;
    assert_eq!(a.code, 422, "{}", a.body);
    assert_eq!(a.body["details"]["causes"][0]["field"], "data[no/slash]");
    assert_eq!(
        get(&c, "good").await.body["data"],
        json!({"-._aZ9": b64("x")})
    );
    s.handle.shutdown().await;
}

#[tokio::test]
async fn data_may_hold_one_mebibyte_and_not_a_byte_more() {
    let s = common::start().await;
    let c = s.admin().await;
    const MAX: usize = 1024 * 1024;
    // Two values, so that what counts is their sum.
    let at = secret(
        "at-limit",
        "Opaque",
        json!({"a": b64(vec![b'a'; MAX - 10]), "b": b64([b'b'; 10])}),
    );
    let a = create(&c, at).await;
    assert_eq!(a.code, 201, "{}", a.message());
    let over = secret(
        "over",
        "Opaque",
        json!({"a": b64(vec![b'a'; MAX - 10]), "b": b64([b'b'; 11])}),
    );
    let a = create(&c, over).await;
    invalid(
        &a,
        "Secret \"over\" is invalid: data: Too long: may not be more than 1048576 bytes",
        &[(
            "FieldValueTooLong",
            "data",
            "Too long: may not be more than 1048576 bytes",
        )],
    );
    assert_eq!(get(&c, "over").await.code, 404);
    // One byte more by a patch is refused too, and the stored Secret is as it was.
    let before = get(&c, "at-limit").await.body;
    for (ct, patch) in [
        (
            "application/merge-patch+json",
            json!({"data": {"c": b64("c")}}),
        ),
        (
            "application/json-patch+json",
            json!([{"op": "add", "path": "/data/c", "value": b64("c")}]),
        ),
        (
            "application/strategic-merge-patch+json",
            json!({"stringData": {"c": "c"}}),
        ),
    ] {
        let a = send(&c, "PATCH", &format!("{NS}/at-limit"), ct, &patch).await;
        assert_eq!(a.code, 422, "{ct}: {}", a.message());
        assert_eq!(
            a.message(),
            "Secret \"at-limit\" is invalid: data: Too long: may not be more than 1048576 bytes"
        );
    }
    let after = get(&c, "at-limit").await.body;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(after["data"], before["data"]);
    s.handle.shutdown().await;
}

/// A 422's causes: reason, field and message.
type Causes = Vec<(&'static str, String, &'static str)>;

#[tokio::test]
async fn each_type_requires_its_keys() {
    let s = common::start().await;
    let c = s.admin().await;
    let req = |f: &str| ("FieldValueRequired", f.to_string(), "Required value");
    // type, data, annotations, the message after `is invalid: `, and the causes.
    type Case = (&'static str, Value, Value, &'static str, Causes);
    let cases: Vec<Case> = vec![
        (
            "kubernetes.io/tls",
            json!({"tls.crt": b64("c")}),
            json!({}),
            "data[tls.key]: Required value",
            vec![req("data[tls.key]")],
        ),
        (
            "kubernetes.io/tls",
            json!({}),
            json!({}),
            "[data[tls.crt]: Required value, data[tls.key]: Required value]",
            vec![req("data[tls.crt]"), req("data[tls.key]")],
        ),
        (
            "kubernetes.io/dockerconfigjson",
            json!({}),
            json!({}),
            "data[.dockerconfigjson]: Required value",
            vec![req("data[.dockerconfigjson]")],
        ),
        (
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": b64("not json")}),
            json!({}),
            "data[.dockerconfigjson]: Invalid value: \"<secret contents redacted>\": invalid character 'o' in literal null (expecting 'u')",
            vec![(
                "FieldValueInvalid",
                "data[.dockerconfigjson]".into(),
                "Invalid value: \"<secret contents redacted>\": invalid character 'o' in literal null (expecting 'u')",
            )],
        ),
        (
            "kubernetes.io/dockercfg",
            json!({".dockercfg": b64("[]")}),
            json!({}),
            "data[.dockercfg]: Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            vec![(
                "FieldValueInvalid",
                "data[.dockercfg]".into(),
                "Invalid value: \"<secret contents redacted>\": json: cannot unmarshal array into Go value of type map[string]interface {}",
            )],
        ),
        (
            "kubernetes.io/dockercfg",
            json!({}),
            json!({}),
            "data[.dockercfg]: Required value",
            vec![req("data[.dockercfg]")],
        ),
        (
            "kubernetes.io/ssh-auth",
            json!({"ssh-privatekey": ""}),
            json!({}),
            "data[ssh-privatekey]: Required value",
            vec![req("data[ssh-privatekey]")],
        ),
        (
            "kubernetes.io/basic-auth",
            json!({"other": ""}),
            json!({}),
            "[data[username]: Required value, data[password]: Required value]",
            vec![req("data[username]"), req("data[password]")],
        ),
        (
            "kubernetes.io/service-account-token",
            json!({}),
            json!({"kubernetes.io/service-account.name": ""}),
            "metadata.annotations[kubernetes.io/service-account.name]: Required value",
            vec![req(
                "metadata.annotations[kubernetes.io/service-account.name]",
            )],
        ),
    ];
    for (i, (kind, data, annotations, message, causes)) in cases.into_iter().enumerate() {
        let name = format!("s{i}");
        let mut body = secret(&name, kind, data);
        body["metadata"]["annotations"] = annotations;
        let a = create(&c, body.clone()).await;
        let causes: Vec<(&str, &str, &str)> = causes
            .iter()
            .map(|(r, f, m)| (*r, f.as_str(), *m))
            .collect();
        invalid(
            &a,
            &format!("Secret \"{name}\" is invalid: {message}"),
            &causes,
        );
        // Server-side apply creating it is refused the same way.
        let a = send(
            &c,
            "PATCH",
            &format!("{NS}/{name}?fieldManager=test"),
            "application/apply-patch+yaml",
            &body,
        )
        .await;
        invalid(
            &a,
            &format!("Secret \"{name}\" is invalid: {message}"),
            &causes,
        );
        assert_eq!(get(&c, &name).await.code, 404, "{kind}");
    }
    // What each type asks for is enough.
    for (i, (kind, data, annotations)) in [
        (
            "kubernetes.io/tls",
            json!({"tls.crt": "", "tls.key": ""}),
            json!({}),
        ),
        (
            "kubernetes.io/dockerconfigjson",
            json!({".dockerconfigjson": b64(r#"{"auths":{}}"#)}),
            json!({}),
        ),
        (
            "kubernetes.io/dockercfg",
            json!({".dockercfg": b64("{}")}),
            json!({}),
        ),
        (
            "kubernetes.io/ssh-auth",
            json!({"ssh-privatekey": b64("k")}),
            json!({}),
        ),
        (
            "kubernetes.io/basic-auth",
            json!({"password": ""}),
            json!({}),
        ),
        (
            "kubernetes.io/service-account-token",
            json!({}),
            json!({"kubernetes.io/service-account.name": "sa"}),
        ),
        ("example.com/anything", json!({}), json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = secret(&format!("ok{i}"), kind, data);
        body["metadata"]["annotations"] = annotations;
        let a = create(&c, body).await;
        assert_eq!(a.code, 201, "{kind}: {}", a.message());
    }
    // An update removing a required key is refused, by PUT and by each patch.
    let tls = get(&c, "ok0").await.body;
    let mut put = tls.clone();
    put["data"].as_object_mut().unwrap().remove("tls.key");
    let patches = [
        ("PUT", "application/json", put),
        (
            "PATCH",
            "application/merge-patch+json",
            json!({"data": {"tls.key": null}}),
        ),
        (
            "PATCH",
            "application/json-patch+json",
            json!([{"op": "remove", "path": "/data/tls.key"}]),
        ),
        (
            "PATCH",
            "application/strategic-merge-patch+json",
            json!({"data": {"tls.key": null}}),
        ),
    ];
    for (method, ct, body) in patches {
        let a = send(&c, method, &format!("{NS}/ok0"), ct, &body).await;
        invalid(
            &a,
            "Secret \"ok0\" is invalid: data[tls.key]: Required value",
            &[("FieldValueRequired", "data[tls.key]", "Required value")],
        );
    }
    assert_eq!(get(&c, "ok0").await.body["data"], tls["data"]);
    s.handle.shutdown().await;
}

#[tokio::test]
async fn type_and_immutable_secrets_do_not_change() {
    let s = common::start().await;
    let c = s.admin().await;
    let a = create(&c, secret("typed", "example.com/a", json!({"k": b64("v")}))).await;
    assert_eq!(a.code, 201);
    let msg =
        "Secret \"typed\" is invalid: type: Invalid value: \"example.com/b\": field is immutable";
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/typed"),
        "application/merge-patch+json",
        &json!({"type": "example.com/b"}),
    )
    .await;
    invalid(
        &a,
        msg,
        &[(
            "FieldValueInvalid",
            "type",
            "Invalid value: \"example.com/b\": field is immutable",
        )],
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/typed?fieldManager=test&force=true"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "typed"}, "type": "example.com/b"}),
    )
    .await;
    assert_eq!(a.message(), msg);
    // A PUT leaving the type out defaults it to Opaque: a change too.
    let mut put = get(&c, "typed").await.body;
    put.as_object_mut().unwrap().remove("type");
    let a = send(&c, "PUT", &format!("{NS}/typed"), "application/json", &put).await;
    assert_eq!(
        a.message(),
        "Secret \"typed\" is invalid: type: Invalid value: \"Opaque\": field is immutable"
    );
    assert_eq!(get(&c, "typed").await.body["type"], "example.com/a");

    let mut frozen = secret("frozen", "Opaque", json!({"k": b64("v")}));
    frozen["immutable"] = json!(true);
    assert_eq!(create(&c, frozen).await.code, 201);
    let forbidden = "Forbidden: field is immutable when `immutable` is set";
    let path = format!("{NS}/frozen");
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"data": {"k": b64("w")}}),
    )
    .await;
    invalid(
        &a,
        &format!("Secret \"frozen\" is invalid: data: {forbidden}"),
        &[("FieldValueForbidden", "data", forbidden)],
    );
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/strategic-merge-patch+json",
        &json!({"stringData": {"new": "x"}}),
    )
    .await;
    assert_eq!(
        a.message(),
        format!("Secret \"frozen\" is invalid: data: {forbidden}")
    );
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"immutable": false}),
    )
    .await;
    invalid(
        &a,
        &format!("Secret \"frozen\" is invalid: immutable: {forbidden}"),
        &[("FieldValueForbidden", "immutable", forbidden)],
    );
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/json-patch+json",
        &json!([{"op": "remove", "path": "/immutable"}, {"op": "remove", "path": "/data"}]),
    )
    .await;
    assert_eq!(
        a.message(),
        format!("Secret \"frozen\" is invalid: [immutable: {forbidden}, data: {forbidden}]")
    );
    // Its metadata still changes.
    let a = send(
        &c,
        "PATCH",
        &path,
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"a": "b"}}}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.message());
    assert_eq!(a.body["data"], json!({"k": b64("v")}));
    // A Secret becomes immutable by an update.
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/typed"),
        "application/merge-patch+json",
        &json!({"immutable": true, "data": {"k": b64("last")}}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.message());
    s.handle.shutdown().await;
}

fn pem_pair() -> (String, String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let other = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap()
        .pem();
    (cert, key.serialize_pem(), other.serialize_pem())
}

#[tokio::test]
async fn tls_secrets_that_are_no_key_pair_are_warned_about() {
    let s = common::start().await;
    let c = s.admin().await;
    let (cert, key, other) = pem_pair();
    let tls = |name: &str, crt: &str, key: &str| {
        secret(
            name,
            "kubernetes.io/tls",
            json!({"tls.crt": b64(crt), "tls.key": b64(key)}),
        )
    };
    let a = create(&c, tls("not-pem", "not pem", "not pem")).await;
    assert_eq!(a.code, 201);
    assert_eq!(
        a.warnings,
        ["299 - \"tls: failed to find any PEM data in certificate input\""]
    );
    let a = create(&c, tls("pair", &cert, &key)).await;
    assert_eq!(a.code, 201);
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // An update to a key that is not the certificate's is stored, with the warning.
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/pair"),
        "application/merge-patch+json",
        &json!({"data": {"tls.key": b64(&other)}}),
    )
    .await;
    assert_eq!(a.code, 200);
    assert_eq!(
        a.warnings,
        ["299 - \"tls: private key does not match public key\""]
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{NS}/pair?fieldManager=test"),
        "application/apply-patch+yaml",
        &json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pair"}, "stringData": {"tls.key": key}}),
    )
    .await;
    assert_eq!(a.code, 200, "{}", a.message());
    assert!(a.warnings.is_empty(), "{:?}", a.warnings);
    // Other types are not looked at.
    let a = create(&c, secret("opaque", "Opaque", json!({"tls.crt": b64("x")}))).await;
    assert_eq!(a.code, 201);
    assert!(a.warnings.is_empty());
    s.handle.shutdown().await;
}
