//! `/metrics`: request counts in the shape of kube-apiserver's `apiserver_request_total`, so the
//! load a controller or a fleet of daemons puts on the server can be read, not guessed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// kube-apiserver's verb: `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `APPLY`, `DELETE`.
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<RequestLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Resource requests served, by verb, group, resource, subresource and response code",
            requests.clone(),
        );
        Metrics { registry, requests }
    }
}

impl Metrics {
    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The count of one `apiserver_request_total` series in the `/metrics` text, 0 when absent.
/// `labels` is the series' label set as the text spells it, `verb="PUT",group="…",…`: tests
/// assert how many requests of a kind a flow made.
pub fn request_total(metrics_text: &str, labels: &str) -> u64 {
    let key = format!("apiserver_request_total{{{labels}}} ");
    metrics_text
        .lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// kube-apiserver's name for a request: a GET of a collection is a LIST (a WATCH with
/// `watch=true`), and a PATCH with the apply content type is an APPLY.
pub fn verb(method: &http::Method, named: bool, watch: bool, apply: bool) -> &'static str {
    match *method {
        http::Method::GET if watch => "WATCH",
        http::Method::GET if named => "GET",
        http::Method::GET => "LIST",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH if apply => "APPLY",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE if named => "DELETE",
        http::Method::DELETE => "DELETECOLLECTION",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn verbs_follow_kube_apiserver() {
        assert_eq!(verb(&Method::GET, false, false, false), "LIST");
        assert_eq!(verb(&Method::GET, true, false, false), "GET");
        assert_eq!(verb(&Method::GET, false, true, false), "WATCH");
        assert_eq!(verb(&Method::PATCH, true, false, true), "APPLY");
        assert_eq!(verb(&Method::PATCH, true, false, false), "PATCH");
        assert_eq!(
            verb(&Method::DELETE, false, false, false),
            "DELETECOLLECTION"
        );
    }

    #[test]
    fn counts_are_encoded() {
        let m = Metrics::default();
        m.requests
            .get_or_create(&RequestLabels {
                verb: "LIST".into(),
                group: "".into(),
                resource: "pods".into(),
                subresource: "".into(),
                code: "200".into(),
            })
            .inc();
        let text = m.encode();
        assert!(
            text.contains(r#"apiserver_request_total{verb="LIST",group="",resource="pods",subresource="",code="200"} 1"#),
            "{text}"
        );
        let pods = r#"verb="LIST",group="",resource="pods",subresource="",code="200""#;
        assert_eq!(request_total(&text, pods), 1);
        assert_eq!(request_total(&text, &pods.replace("200", "404")), 0);
    }
}
