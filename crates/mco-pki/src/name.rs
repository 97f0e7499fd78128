//! Names printed as Go's `pkix.Name.String()` prints them, so mco and upstream report the same
//! text.

use x509_parser::x509::X509Name;

/// The attributes Go's `pkix.Name` keeps by name, in the order `ToRDNSequence` emits them.
const GO_ORDER: [(&str, &str); 9] = [
    ("2.5.4.6", "C"),
    ("2.5.4.8", "ST"),
    ("2.5.4.7", "L"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.17", "POSTALCODE"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("2.5.4.3", "CN"),
    ("2.5.4.5", "SERIALNUMBER"),
];

/// A name as Go's `pkix.Name.String()` prints it: the known attributes regrouped in Go's order,
/// other attributes after them (by dotted OID), the sequence reversed and joined with `,`, and
/// several values of one attribute joined with `+`.
pub(crate) fn go_name(name: &X509Name<'_>) -> String {
    let attrs: Vec<(String, String)> = name
        .iter_attributes()
        .map(|a| {
            let value = match a.as_str() {
                Ok(s) => s.to_owned(),
                Err(_) => String::from_utf8_lossy(a.as_slice()).into_owned(),
            };
            (a.attr_type().to_id_string(), value)
        })
        .collect();
    let mut rdns: Vec<String> = vec![];
    for (oid, short) in GO_ORDER {
        let values: Vec<String> = attrs
            .iter()
            .filter(|(o, _)| o == oid)
            .map(|(_, v)| format!("{short}={}", escape(v)))
            .collect();
        if !values.is_empty() {
            rdns.push(values.join("+"));
        }
    }
    for (oid, value) in &attrs {
        if !GO_ORDER.iter().any(|(o, _)| o == oid) {
            rdns.push(format!("{oid}={}", escape(value)));
        }
    }
    rdns.reverse();
    rdns.join(",")
}

/// RFC 2253 escaping, as Go's `AttributeTypeAndValue` printing does it.
fn escape(v: &str) -> String {
    let chars: Vec<char> = v.chars().collect();
    let mut out = String::with_capacity(v.len());
    for (i, &c) in chars.iter().enumerate() {
        let edge_space = c == ' ' && (i == 0 || i == chars.len() - 1);
        if matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || edge_space
            || (i == 0 && c == '#')
        {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
