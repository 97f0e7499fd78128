//! A core `Secret`'s type-specific rules, as kube-apiserver's validation of a Secret and its
//! registry strategy have them: the keys and total size of `data`, the keys each built-in
//! `type` requires, what an update may not change, and the warnings a `kubernetes.io/tls`
//! Secret earns when its certificate and key do not make a key pair.
//!
//! Messages are kube-apiserver's words; `data` is read decoded (its values are base64 in JSON).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use crate::error::Cause;
use crate::objects::meta;
use crate::registry::ResourceInfo;

/// The most bytes a Secret's `data` may hold, its values summed.
pub const MAX_SECRET_SIZE: usize = 1024 * 1024;

const SERVICE_ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
const TYPE_SA_TOKEN: &str = "kubernetes.io/service-account-token";
const TYPE_DOCKERCFG: &str = "kubernetes.io/dockercfg";
const TYPE_DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
const TYPE_BASIC_AUTH: &str = "kubernetes.io/basic-auth";
const TYPE_SSH_AUTH: &str = "kubernetes.io/ssh-auth";
const TYPE_TLS: &str = "kubernetes.io/tls";
const IMMUTABLE_SET: &str = "Forbidden: field is immutable when `immutable` is set";

/// Whether `info` is the core group's Secret.
pub fn is_secret(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "secrets"
}

/// A Secret without a `type` (or an empty one) is `Opaque`, as kube-apiserver's defaulting
/// makes it on every decoded request.
pub fn default_type(info: &ResourceInfo, obj: &mut Value) {
    if !is_secret(info) {
        return;
    }
    if let Some(o) = obj.as_object_mut()
        && o.get("type")
            .is_none_or(|t| t.is_null() || t.as_str() == Some(""))
    {
        o.insert("type".into(), Value::String("Opaque".into()));
    }
}

/// `data` decoded: each key with its bytes (a value that is not base64 counts as its text).
fn data(obj: &Value) -> BTreeMap<&str, Vec<u8>> {
    let engine = &base64::engine::general_purpose::STANDARD;
    obj.get("data")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let bytes = match v {
                Value::String(s) => engine.decode(s).unwrap_or_else(|_| s.as_bytes().to_vec()),
                _ => Vec::new(),
            };
            (k.as_str(), bytes)
        })
        .collect()
}

fn secret_type(obj: &Value) -> &str {
    obj.get("type").and_then(Value::as_str).unwrap_or("")
}

/// kube-apiserver's checks of a Secret being created (and of what an update would store).
pub fn validate(info: &ResourceInfo, obj: &Value) -> Vec<Cause> {
    if !is_secret(info) {
        return Vec::new();
    }
    let data = data(obj);
    let mut causes = Vec::new();
    let mut total = 0usize;
    for (key, value) in &data {
        for msg in config_map_key_errors(key) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                &format!("data[{key}]"),
                format!("Invalid value: {}: {msg}", go_quote(key)),
            ));
        }
        total += value.len();
    }
    if total > MAX_SECRET_SIZE {
        causes.push(Cause::new(
            "FieldValueTooLong",
            "data",
            format!("Too long: may not be more than {MAX_SECRET_SIZE} bytes"),
        ));
    }
    let required = |causes: &mut Vec<Cause>, field: &str| {
        causes.push(Cause::new("FieldValueRequired", field, "Required value"));
    };
    let json_valued = |causes: &mut Vec<Cause>, key: &str| match data.get(key) {
        None => required(causes, &format!("data[{key}]")),
        Some(bytes) => {
            if let Some(err) = go_unmarshal_map_error(bytes) {
                causes.push(Cause::new(
                    "FieldValueInvalid",
                    &format!("data[{key}]"),
                    format!("Invalid value: \"<secret contents redacted>\": {err}"),
                ));
            }
        }
    };
    match secret_type(obj) {
        TYPE_SA_TOKEN => {
            let named = meta(obj)
                .get("annotations")
                .and_then(|a| a.get(SERVICE_ACCOUNT_NAME))
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
            if !named {
                required(
                    &mut causes,
                    &format!("metadata.annotations[{SERVICE_ACCOUNT_NAME}]"),
                );
            }
        }
        TYPE_DOCKERCFG => json_valued(&mut causes, ".dockercfg"),
        TYPE_DOCKER_CONFIG_JSON => json_valued(&mut causes, ".dockerconfigjson"),
        TYPE_BASIC_AUTH if !data.contains_key("username") && !data.contains_key("password") => {
            required(&mut causes, "data[username]");
            required(&mut causes, "data[password]");
        }
        TYPE_SSH_AUTH if data.get("ssh-privatekey").is_none_or(Vec::is_empty) => {
            required(&mut causes, "data[ssh-privatekey]");
        }
        TYPE_TLS => {
            for key in ["tls.crt", "tls.key"] {
                if !data.contains_key(key) {
                    required(&mut causes, &format!("data[{key}]"));
                }
            }
        }
        _ => {}
    }
    causes
}

/// kube-apiserver's checks of a Secret being updated from `old` to `new`: its type does not
/// change, and once `immutable` is set neither it nor `data` does; then `new` as created.
pub fn validate_update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<Cause> {
    if !is_secret(info) {
        return Vec::new();
    }
    let mut causes = Vec::new();
    let (old_type, new_type) = (secret_type(old), secret_type(new));
    if old_type != new_type {
        causes.push(Cause::new(
            "FieldValueInvalid",
            "type",
            format!(
                "Invalid value: {}: field is immutable",
                serde_json::to_string(new_type).unwrap_or_default()
            ),
        ));
    }
    let immutable = |v: &Value| v.get("immutable").and_then(Value::as_bool) == Some(true);
    if immutable(old) {
        if !immutable(new) {
            causes.push(Cause::new(
                "FieldValueForbidden",
                "immutable",
                IMMUTABLE_SET,
            ));
        }
        if data(old) != data(new) {
            causes.push(Cause::new("FieldValueForbidden", "data", IMMUTABLE_SET));
        }
    }
    causes.extend(validate(info, new));
    causes
}

/// The warnings kube-apiserver returns for a Secret it accepts: for a `kubernetes.io/tls` one,
/// why its `tls.crt` and `tls.key` are not a key pair, in Go's `crypto/tls` words.
pub fn warnings(info: &ResourceInfo, obj: &Value) -> Vec<String> {
    if !is_secret(info) || secret_type(obj) != TYPE_TLS {
        return Vec::new();
    }
    let data = data(obj);
    let empty = Vec::new();
    let cert = data.get("tls.crt").unwrap_or(&empty);
    let key = data.get("tls.key").unwrap_or(&empty);
    match key_pair_error(cert, key) {
        Some(e) => vec![e],
        None => Vec::new(),
    }
}

/// A `Warning` header's value for `text`, as kube-apiserver writes it: code 299, no agent.
pub fn warning_header(text: &str) -> String {
    let mut s = String::from("299 - \"");
    for c in text.chars() {
        if c == '"' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s.push('"');
    s
}

/// Why `key` is not a valid ConfigMap or Secret key, in apimachinery's words and order.
fn config_map_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let valid = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if !valid {
        // apimachinery's RegexError: each example is followed by ", " and joined by " or ".
        errs.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.' \
             (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is \
             '[-._a-zA-Z0-9]+')"
                .to_string(),
        );
    }
    if key == "." {
        errs.push("must not be '.'".into());
    } else if key == ".." {
        errs.push("must not be '..'".into());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".into());
    }
    errs
}

/// A string quoted as Go's `%q` (`strconv.Quote`) does.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c == ' ' || !(c.is_control() || c.is_whitespace()) => out.push(c),
            c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push_str(&format!("\\U{:08x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// The syntax error Go's `encoding/json` reports for `bytes`, or none when they are JSON.
pub(crate) fn go_json_syntax_error(bytes: &[u8]) -> Option<String> {
    Scanner { b: bytes, i: 0 }.document().err()
}

/// The error Go's `json.Unmarshal` gives decoding `bytes` into a `map[string]interface{}`,
/// or none.
fn go_unmarshal_map_error(bytes: &[u8]) -> Option<String> {
    let mut s = Scanner { b: bytes, i: 0 };
    if let Err(e) = s.document() {
        return Some(e);
    }
    let first = bytes.iter().find(|b| !b" \t\r\n".contains(b)).copied();
    let kind = match first {
        Some(b'{') | Some(b'n') => return None,
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't') | Some(b'f') => "bool",
        _ => "number",
    };
    Some(format!(
        "json: cannot unmarshal {kind} into Go value of type map[string]interface {{}}"
    ))
}

/// Go's `encoding/json` syntax check, with its error messages.
struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

const EOF: &str = "unexpected end of JSON input";

impl Scanner<'_> {
    fn peek(&self) -> Result<u8, String> {
        self.b.get(self.i).copied().ok_or_else(|| EOF.to_string())
    }

    fn skip_ws(&mut self) {
        while self.i < self.b.len() && b" \t\r\n".contains(&self.b[self.i]) {
            self.i += 1;
        }
    }

    fn bad(&self, context: &str) -> String {
        format!(
            "invalid character {} {context}",
            go_quote_char(self.b[self.i])
        )
    }

    fn document(&mut self) -> Result<(), String> {
        self.skip_ws();
        self.value()?;
        self.skip_ws();
        if self.i < self.b.len() {
            return Err(self.bad("after top-level value"));
        }
        Ok(())
    }

    fn value(&mut self) -> Result<(), String> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => self.string(),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            _ => Err(self.bad("looking for beginning of value")),
        }
    }

    fn object(&mut self) -> Result<(), String> {
        self.i += 1;
        self.skip_ws();
        if self.peek()? == b'}' {
            self.i += 1;
            return Ok(());
        }
        loop {
            if self.peek()? != b'"' {
                return Err(self.bad("looking for beginning of object key string"));
            }
            self.string()?;
            self.skip_ws();
            if self.peek()? != b':' {
                return Err(self.bad("after object key"));
            }
            self.i += 1;
            self.skip_ws();
            self.value()?;
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.skip_ws();
                }
                b'}' => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.bad("after object key:value pair")),
            }
        }
    }

    fn array(&mut self) -> Result<(), String> {
        self.i += 1;
        self.skip_ws();
        if self.peek()? == b']' {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.value()?;
            self.skip_ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.skip_ws();
                }
                b']' => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(self.bad("after array element")),
            }
        }
    }

    fn string(&mut self) -> Result<(), String> {
        self.i += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            self.i += 1;
                            for _ in 0..4 {
                                if !self.peek()?.is_ascii_hexdigit() {
                                    return Err(self.bad("in \\u hexadecimal character escape"));
                                }
                                self.i += 1;
                            }
                        }
                        _ => return Err(self.bad("in string escape code")),
                    }
                }
                c if c < 0x20 => return Err(self.bad("in string literal")),
                _ => self.i += 1,
            }
        }
    }

    fn digits(&mut self) {
        while self.i < self.b.len() && self.b[self.i].is_ascii_digit() {
            self.i += 1;
        }
    }

    fn number(&mut self) -> Result<(), String> {
        if self.peek()? == b'-' {
            self.i += 1;
            if !self.peek()?.is_ascii_digit() {
                return Err(self.bad("in numeric literal"));
            }
        }
        if self.peek()? == b'0' {
            self.i += 1;
        } else {
            self.digits();
        }
        if self.i < self.b.len() && self.b[self.i] == b'.' {
            self.i += 1;
            if !self.peek()?.is_ascii_digit() {
                return Err(self.bad("after decimal point in numeric literal"));
            }
            self.digits();
        }
        if self.i < self.b.len() && matches!(self.b[self.i], b'e' | b'E') {
            self.i += 1;
            if matches!(self.peek()?, b'+' | b'-') {
                self.i += 1;
            }
            if !self.peek()?.is_ascii_digit() {
                return Err(self.bad("in exponent of numeric literal"));
            }
            self.digits();
        }
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<(), String> {
        for (n, want) in word.bytes().enumerate() {
            if n > 0 && self.peek()? != want {
                return Err(self.bad(&format!(
                    "in literal {word} (expecting {})",
                    go_quote_char(want)
                )));
            }
            self.i += 1;
        }
        Ok(())
    }
}

/// A byte quoted as `encoding/json`'s scanner does in its errors (`'x'`).
fn go_quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".into(),
        b'"' => "'\"'".into(),
        _ => {
            let q = go_quote(&char::from(c).to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    }
}

// ------------------------------------------------------------ tls.X509KeyPair's errors

/// The PEM blocks in `input` that decode, as Go's `encoding/pem` finds them: type and bytes.
fn pem_blocks(input: &[u8]) -> Vec<(String, Vec<u8>)> {
    let text = String::from_utf8_lossy(input);
    let mut blocks = Vec::new();
    let mut rest: &str = &text;
    while let Some(at) = find_begin(rest) {
        let after = &rest[at + "-----BEGIN ".len()..];
        let Some(line_end) = after.find('\n') else {
            break;
        };
        let line = after[..line_end].trim_end_matches('\r');
        let Some(kind) = line.strip_suffix("-----") else {
            rest = after;
            continue;
        };
        let body = &after[line_end + 1..];
        let end = format!("-----END {kind}-----");
        let Some(end_at) = body.find(&end) else {
            rest = after;
            continue;
        };
        let encoded: String = body[..end_at]
            .lines()
            .filter(|l| !l.contains(':'))
            .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
            .collect();
        match base64::engine::general_purpose::STANDARD.decode(encoded) {
            Ok(bytes) => {
                blocks.push((kind.to_string(), bytes));
                rest = &body[end_at + end.len()..];
            }
            Err(_) => rest = after,
        }
    }
    blocks
}

/// Where the next `-----BEGIN ` starting a line is.
fn find_begin(s: &str) -> Option<usize> {
    const BEGIN: &str = "-----BEGIN ";
    if s.starts_with(BEGIN) {
        return Some(0);
    }
    s.find(&format!("\n{BEGIN}")).map(|i| i + 1)
}

/// One DER element at the start of `b`: its tag, contents and the bytes after it.
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &x| (acc << 8) | x as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// A SubjectPublicKeyInfo's algorithm, its parameters (none for an absent or NULL one) and
/// its key bits.
type PublicKey<'a> = (&'a [u8], Option<&'a [u8]>, &'a [u8]);

fn spki(b: &[u8]) -> Option<PublicKey<'_>> {
    let (0x30, body, _) = der(b)? else {
        return None;
    };
    let (0x30, alg, rest) = der(body)? else {
        return None;
    };
    let (0x03, bits, _) = der(rest)? else {
        return None;
    };
    let (0x06, oid, params) = der(alg)? else {
        return None;
    };
    let params = der(params).and_then(|(tag, p, _)| (tag != 0x05).then_some(p));
    Some((oid, params, bits))
}

/// The SubjectPublicKeyInfo of a DER certificate.
fn cert_spki(cert: &[u8]) -> Option<&[u8]> {
    let (0x30, body, _) = der(cert)? else {
        return None;
    };
    let (0x30, mut tbs, _) = der(body)? else {
        return None;
    };
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs)?.2;
    }
    // serialNumber, signature, issuer, validity, subject; then subjectPublicKeyInfo.
    for _ in 0..5 {
        tbs = der(tbs)?.2;
    }
    let (0x30, contents, after) = der(tbs)? else {
        return None;
    };
    let whole = contents.len() + (tbs.len() - contents.len() - after.len());
    Some(&tbs[..whole])
}

const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// The public key of a DER private key, tried as Go's `crypto/tls` does: PKCS #1, PKCS #8,
/// then SEC 1.
fn private_key_spki(der_key: &[u8]) -> Option<Vec<u8>> {
    use rustls::pki_types::{
        PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
    };
    let tries: [PrivateKeyDer<'_>; 3] = [
        PrivatePkcs1KeyDer::from(der_key).into(),
        PrivatePkcs8KeyDer::from(der_key).into(),
        PrivateSec1KeyDer::from(der_key).into(),
    ];
    tries.iter().find_map(|k| {
        let signer = rustls::crypto::ring::sign::any_supported_type(k).ok()?;
        signer.public_key().map(|p| p.as_ref().to_vec())
    })
}

/// Why Go's `tls.X509KeyPair(cert, key)` fails, in its words, or none.
fn key_pair_error(cert: &[u8], key: &[u8]) -> Option<String> {
    let blocks = pem_blocks(cert);
    let Some((_, leaf)) = blocks.iter().find(|(t, _)| t == "CERTIFICATE") else {
        let skipped: Vec<&str> = blocks.iter().map(|(t, _)| t.as_str()).collect();
        return Some(match skipped.as_slice() {
            [] => "tls: failed to find any PEM data in certificate input".into(),
            [one] if one.ends_with("PRIVATE KEY") => "tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched".into(),
            _ => format!(
                "tls: failed to find \"CERTIFICATE\" PEM block in certificate input after skipping PEM blocks of the following types: [{}]",
                skipped.join(" ")
            ),
        });
    };
    let mut skipped = Vec::new();
    let mut key_der = None;
    for (t, bytes) in pem_blocks(key) {
        if t == "PRIVATE KEY" || t.ends_with(" PRIVATE KEY") {
            key_der = Some(bytes);
            break;
        }
        skipped.push(t);
    }
    let Some(key_der) = key_der else {
        return Some(match skipped.as_slice() {
            [] => "tls: failed to find any PEM data in key input".into(),
            [one] if one == "CERTIFICATE" => {
                "tls: found a certificate rather than a key in the PEM for the private key".into()
            }
            _ => format!(
                "tls: failed to find PEM block with type ending in \"PRIVATE KEY\" in key input after skipping PEM blocks of the following types: [{}]",
                skipped.join(" ")
            ),
        });
    };
    let Some(cert_key) = cert_spki(leaf).and_then(spki) else {
        return Some("x509: malformed certificate".into());
    };
    let Some(private_spki) = private_key_spki(&key_der) else {
        return Some("tls: failed to parse private key".into());
    };
    let Some(private) = spki(&private_spki) else {
        return Some("tls: failed to parse private key".into());
    };
    if ![OID_RSA, OID_EC, OID_ED25519].contains(&cert_key.0) {
        return Some("tls: unknown public key algorithm".into());
    }
    if cert_key.0 != private.0 {
        return Some("tls: private key type does not match public key type".into());
    }
    if cert_key != private {
        return Some("tls: private key does not match public key".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_map_keys_as_apimachinery_judges_them() {
        assert!(config_map_key_errors("tls.crt").is_empty());
        assert!(config_map_key_errors(&"a".repeat(253)).is_empty());
        assert_eq!(
            config_map_key_errors("a b"),
            [
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
            ]
        );
        assert_eq!(
            config_map_key_errors(&"a".repeat(254)),
            ["must be no more than 253 characters"]
        );
        assert_eq!(config_map_key_errors("."), ["must not be '.'"]);
        assert_eq!(config_map_key_errors(".."), ["must not be '..'"]);
        assert_eq!(config_map_key_errors("..a"), ["must not start with '..'"]);
        assert_eq!(config_map_key_errors("").len(), 1);
    }

    #[test]
    fn json_errors_in_go_words() {
        let e = |s: &str| go_unmarshal_map_error(s.as_bytes());
        assert_eq!(e(r#"{"auths":{}}"#), None);
        assert_eq!(e("null"), None);
        assert_eq!(e("").as_deref(), Some("unexpected end of JSON input"));
        assert_eq!(e("{").as_deref(), Some("unexpected end of JSON input"));
        assert_eq!(
            e("not json").as_deref(),
            Some("invalid character 'o' in literal null (expecting 'u')")
        );
        assert_eq!(
            e("x").as_deref(),
            Some("invalid character 'x' looking for beginning of value")
        );
        assert_eq!(
            e("{a}").as_deref(),
            Some("invalid character 'a' looking for beginning of object key string")
        );
        assert_eq!(
            e(r#"{"a" 1}"#).as_deref(),
            Some("invalid character '1' after object key")
        );
        assert_eq!(
            e(r#"{"a":1 "b"}"#).as_deref(),
            Some("invalid character '\"' after object key:value pair")
        );
        assert_eq!(
            e("[1,]").as_deref(),
            Some("invalid character ']' looking for beginning of value")
        );
        assert_eq!(
            e("{} x").as_deref(),
            Some("invalid character 'x' after top-level value")
        );
        assert_eq!(
            e("[]").as_deref(),
            Some("json: cannot unmarshal array into Go value of type map[string]interface {}")
        );
        assert_eq!(
            e("\"s\"").as_deref(),
            Some("json: cannot unmarshal string into Go value of type map[string]interface {}")
        );
        assert_eq!(e("1.").as_deref(), Some("unexpected end of JSON input"));
        assert_eq!(
            e("1.x").as_deref(),
            Some("invalid character 'x' after decimal point in numeric literal")
        );
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a b"), "\"a b\"");
        assert_eq!(go_quote("a\"\\\n\u{1}"), "\"a\\\"\\\\\\n\\x01\"");
        assert_eq!(go_quote_char(b'\''), "'\\''");
        assert_eq!(go_quote_char(b'\n'), "'\\n'");
        assert_eq!(warning_header("say \"hi\""), "299 - \"say \\\"hi\\\"\"");
    }

    fn pem(kind: &str, der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect();
        format!(
            "-----BEGIN {kind}-----\n{}\n-----END {kind}-----\n",
            lines.join("\n")
        )
    }

    #[test]
    fn key_pairs_judged_as_crypto_tls_does() {
        let k1 = rcgen::KeyPair::generate().unwrap();
        let k2 = rcgen::KeyPair::generate().unwrap();
        let ed = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let cert = rcgen::CertificateParams::new(vec!["a.example".into()])
            .unwrap()
            .self_signed(&k1)
            .unwrap()
            .pem();
        let e = |c: &str, k: &str| key_pair_error(c.as_bytes(), k.as_bytes());
        assert_eq!(e(&cert, &k1.serialize_pem()), None);
        assert_eq!(
            e(&cert, &k2.serialize_pem()).as_deref(),
            Some("tls: private key does not match public key")
        );
        assert_eq!(
            e(&cert, &ed.serialize_pem()).as_deref(),
            Some("tls: private key type does not match public key type")
        );
        assert_eq!(
            e("not a cert", "").as_deref(),
            Some("tls: failed to find any PEM data in certificate input")
        );
        assert_eq!(
            e(&k1.serialize_pem(), "").as_deref(),
            Some(
                "tls: failed to find certificate PEM data in certificate input, but did find a private key; PEM inputs may have been switched"
            )
        );
        assert_eq!(
            e(&format!("{}{}", pem("A", b"x"), pem("B", b"y")), "").as_deref(),
            Some(
                "tls: failed to find \"CERTIFICATE\" PEM block in certificate input after skipping PEM blocks of the following types: [A B]"
            )
        );
        assert_eq!(
            e(&cert, "").as_deref(),
            Some("tls: failed to find any PEM data in key input")
        );
        assert_eq!(
            e(&cert, &cert).as_deref(),
            Some("tls: found a certificate rather than a key in the PEM for the private key")
        );
        assert_eq!(
            e(&cert, &pem("EC PRIVATE KEY", b"junk")).as_deref(),
            Some("tls: failed to parse private key")
        );
        assert_eq!(
            e(&pem("CERTIFICATE", b"junk"), &k1.serialize_pem()).as_deref(),
            Some("x509: malformed certificate")
        );
    }
}
