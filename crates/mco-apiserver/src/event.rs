//! An Event's rules, as kube-apiserver's validation of an Event and its registry strategy have
//! them (Kubernetes 1.37, the version the differential check runs against).
//!
//! Both served APIs, core `v1` and `events.k8s.io/v1`, store the same internal Event; the
//! request's API decides how strictly it is judged:
//!
//! * Every write passes the "legacy" rules. An Event without `eventTime` (the old style) must
//!   be in its involved object's namespace, or in `default` (or no namespace) when that object
//!   is cluster-scoped. An Event with `eventTime` (the new style) about a cluster-scoped
//!   object must be in `default` or `kube-system`, and needs a `reportingController` (a
//!   qualified name), a `reportingInstance`, an `action` and a `reason` of at most 128 bytes
//!   each, and a message (`note`) of at most 1,024 bytes.
//! * A write through `events.k8s.io/v1` is also judged strictly: the name must be a DNS
//!   subdomain, `eventTime` is required, `type` is `Normal` or `Warning`, the deprecated
//!   fields (`deprecatedSource`, `deprecatedFirstTimestamp`, `deprecatedLastTimestamp`,
//!   `deprecatedCount`) stay unset, a `series` counts at least 2 and has a
//!   `lastObservedTime`; an update may change only `series` (and metadata).
//!
//! Field paths are the internal Event's, whichever API was used (`involvedObject`, `message`,
//! `source`, `count`...), except that a core `v1` request names the reporting controller
//! `reportingComponent`, its field there: kube-apiserver prints them so.
//!
//! Neither API defaults anything on an Event beyond the metadata every object gets.

use mco_apimachinery::validation;
use serde_json::Value;

use crate::error::Cause;
use crate::objects::meta_str;
use crate::registry::ResourceInfo;
use crate::secret::go_quote;

/// The most bytes of `reportingInstance`.
pub const REPORTING_INSTANCE_LENGTH_LIMIT: usize = 128;
/// The most bytes of `action`.
pub const ACTION_LENGTH_LIMIT: usize = 128;
/// The most bytes of `reason`.
pub const REASON_LENGTH_LIMIT: usize = 128;
/// The most bytes of the message (`note` in `events.k8s.io/v1`).
pub const NOTE_LENGTH_LIMIT: usize = 1024;

const EVENTS_GROUP: &str = "events.k8s.io";

/// Whether `info` is an Event of either API.
pub fn is_event(info: &ResourceInfo) -> bool {
    info.plural == "events" && (info.group.is_empty() || info.group == EVENTS_GROUP)
}

/// How the request's API judges an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// core `v1`: legacy rules only, the controller named `reportingComponent`.
    CoreV1,
    /// `events.k8s.io/v1beta1`: legacy rules only.
    EventsV1beta1,
    /// `events.k8s.io/v1` (and anything newer): legacy and strict rules.
    Strict,
}

impl Api {
    fn of(info: &ResourceInfo, version: &str) -> Api {
        match (info.group.as_str(), version) {
            ("", _) => Api::CoreV1,
            (_, "v1beta1") => Api::EventsV1beta1,
            _ => Api::Strict,
        }
    }

    fn controller_field(self) -> &'static str {
        match self {
            Api::CoreV1 => "reportingComponent",
            _ => "reportingController",
        }
    }
}

/// An object reference as the internal type holds it (absent strings are empty).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference<'a> {
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
    api_version: &'a str,
    resource_version: &'a str,
    field_path: &'a str,
}

impl<'a> Reference<'a> {
    fn of(v: Option<&'a Value>) -> Reference<'a> {
        let s = |k: &str| {
            v.and_then(|v| v.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        Reference {
            kind: s("kind"),
            namespace: s("namespace"),
            name: s("name"),
            uid: s("uid"),
            api_version: s("apiVersion"),
            resource_version: s("resourceVersion"),
            field_path: s("fieldPath"),
        }
    }

    /// As Go's `encoding/json` writes the internal type, which has no JSON tags.
    fn go_json(&self) -> String {
        format!(
            "{{\"Kind\":{},\"Namespace\":{},\"Name\":{},\"UID\":{},\"APIVersion\":{},\"ResourceVersion\":{},\"FieldPath\":{}}}",
            json_str(self.kind),
            json_str(self.namespace),
            json_str(self.name),
            json_str(self.uid),
            json_str(self.api_version),
            json_str(self.resource_version),
            json_str(self.field_path),
        )
    }
}

/// A point in time as `metav1.Time` or `MicroTime` holds it; `None` is Go's zero time
/// (absent, `null`, empty, or `0001-01-01T00:00:00Z`).
type Time = Option<jiff::Timestamp>;

fn time(v: Option<&Value>) -> Time {
    let t: jiff::Timestamp = v?.as_str()?.parse().ok()?;
    (t != go_zero_time()).then_some(t)
}

fn go_zero_time() -> jiff::Timestamp {
    jiff::Timestamp::from_second(-62_135_596_800).expect("year 1 is in range")
}

/// `metav1.Time` keeps whole seconds once stored.
fn to_second(t: Time) -> Time {
    t.and_then(|t| jiff::Timestamp::from_second(t.as_second()).ok())
}

/// `MicroTime` keeps microseconds.
fn to_micro(t: Time) -> Time {
    t.and_then(|t| jiff::Timestamp::from_microsecond(t.as_microsecond()).ok())
}

/// A time as Go's `json.Marshal` writes a `metav1.Time` (`micro` false) or a `MicroTime`.
fn time_json(t: Time, micro: bool) -> String {
    let Some(t) = t else {
        return "null".into();
    };
    let dt = t.to_zoned(jiff::tz::TimeZone::UTC).datetime();
    let secs = dt.strftime("%Y-%m-%dT%H:%M:%S");
    if micro {
        format!("\"{secs}.{:06}Z\"", dt.subsec_nanosecond() / 1000)
    } else {
        format!("\"{secs}Z\"")
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// The internal Event's fields, read from either API's JSON.
#[derive(Debug, Clone)]
struct Fields<'a> {
    namespace: &'a str,
    name: &'a str,
    generate_name: &'a str,
    involved: Reference<'a>,
    reason: &'a str,
    message: &'a str,
    source: (&'a str, &'a str),
    first_timestamp: Time,
    last_timestamp: Time,
    count: i64,
    type_: &'a str,
    event_time: Time,
    series: Option<(i64, Time)>,
    action: &'a str,
    related: Option<Reference<'a>>,
    reporting_controller: &'a str,
    reporting_instance: &'a str,
}

impl<'a> Fields<'a> {
    fn of(info: &ResourceInfo, obj: &'a Value) -> Fields<'a> {
        let core = info.group.is_empty();
        let pick = |core_name: &str, events_name: &str| {
            obj.get(if core { core_name } else { events_name })
                .filter(|v| !v.is_null())
        };
        let s = |core_name: &str, events_name: &str| {
            pick(core_name, events_name)
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let source = pick("source", "deprecatedSource");
        let source_str = |k: &str| {
            source
                .and_then(|s| s.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let series = obj.get("series").filter(|v| !v.is_null()).map(|s| {
            (
                s.get("count").and_then(Value::as_i64).unwrap_or(0),
                time(s.get("lastObservedTime")),
            )
        });
        Fields {
            namespace: meta_str(obj, "namespace").unwrap_or(""),
            name: meta_str(obj, "name").unwrap_or(""),
            generate_name: meta_str(obj, "generateName").unwrap_or(""),
            involved: Reference::of(pick("involvedObject", "regarding")),
            reason: s("reason", "reason"),
            message: s("message", "note"),
            source: (source_str("component"), source_str("host")),
            first_timestamp: time(pick("firstTimestamp", "deprecatedFirstTimestamp")),
            last_timestamp: time(pick("lastTimestamp", "deprecatedLastTimestamp")),
            count: pick("count", "deprecatedCount")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            type_: s("type", "type"),
            event_time: time(obj.get("eventTime")),
            series,
            action: s("action", "action"),
            related: obj
                .get("related")
                .filter(|v| !v.is_null())
                .map(|r| Reference::of(Some(r))),
            reporting_controller: s("reportingComponent", "reportingController"),
            reporting_instance: s("reportingInstance", "reportingInstance"),
        }
    }
}

fn invalid(field: &str, quoted_value: &str, detail: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {quoted_value}: {detail}"),
    )
}

fn required(field: &str) -> Cause {
    Cause::new("FieldValueRequired", field, "Required value")
}

fn too_long(field: &str, limit: usize) -> Cause {
    invalid(
        field,
        "\"\"",
        &format!("can have at most {limit} characters"),
    )
}

/// kube-apiserver's checks of an Event being created through `version` of `info`'s API.
pub fn validate(info: &ResourceInfo, version: &str, obj: &Value) -> Vec<Cause> {
    if !is_event(info) {
        return Vec::new();
    }
    let api = Api::of(info, version);
    let e = Fields::of(info, obj);
    let mut causes = legacy(&e, api);
    if api == Api::Strict {
        causes.extend(strict_create(&e));
    }
    if causes.is_empty() {
        // The generic metadata check kube-apiserver runs once the Event's own pass.
        causes.extend(path_segment_name(&e));
    }
    causes
}

/// kube-apiserver's checks of an Event being updated from `old` to `new` through `version` of
/// `info`'s API.
pub fn validate_update(info: &ResourceInfo, version: &str, old: &Value, new: &Value) -> Vec<Cause> {
    if !is_event(info) {
        return Vec::new();
    }
    let api = Api::of(info, version);
    let (o, n) = (Fields::of(info, old), Fields::of(info, new));
    let mut causes = legacy(&n, api);
    if api == Api::Strict {
        causes.extend(strict_update(&o, &n));
    }
    causes
}

/// `legacyValidateEvent`: what every Event must satisfy, whichever API wrote it.
fn legacy(e: &Fields<'_>, api: Api) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ns_mismatch = || {
        invalid(
            "involvedObject.namespace",
            &go_quote(e.involved.namespace),
            "does not match event.namespace",
        )
    };
    if e.event_time.is_none() {
        let fits = if e.involved.namespace.is_empty() {
            e.namespace.is_empty() || e.namespace == "default"
        } else {
            e.namespace == e.involved.namespace
        };
        if !fits {
            causes.push(ns_mismatch());
        }
        return causes;
    }
    if e.involved.namespace.is_empty() && e.namespace != "default" && e.namespace != "kube-system" {
        causes.push(ns_mismatch());
    }
    let controller = api.controller_field();
    if e.reporting_controller.is_empty() {
        causes.push(required(controller));
    }
    for msg in validation::qualified_name(e.reporting_controller) {
        causes.push(invalid(controller, &go_quote(e.reporting_controller), &msg));
    }
    if e.reporting_instance.is_empty() {
        causes.push(required("reportingInstance"));
    }
    if e.reporting_instance.len() > REPORTING_INSTANCE_LENGTH_LIMIT {
        causes.push(too_long(
            "reportingInstance",
            REPORTING_INSTANCE_LENGTH_LIMIT,
        ));
    }
    if e.action.is_empty() {
        causes.push(required("action"));
    }
    if e.action.len() > ACTION_LENGTH_LIMIT {
        causes.push(too_long("action", ACTION_LENGTH_LIMIT));
    }
    if e.reason.is_empty() {
        causes.push(required("reason"));
    }
    if e.reason.len() > REASON_LENGTH_LIMIT {
        causes.push(too_long("reason", REASON_LENGTH_LIMIT));
    }
    if e.message.len() > NOTE_LENGTH_LIMIT {
        causes.push(too_long("message", NOTE_LENGTH_LIMIT));
    }
    causes
}

/// `ValidateEventCreate`'s strict part, for `events.k8s.io/v1`.
fn strict_create(e: &Fields<'_>) -> Vec<Cause> {
    let mut causes = Vec::new();
    // ValidateObjectMeta with NameIsDNSSubdomain (labels and annotations are checked for
    // every kind elsewhere).
    if !e.generate_name.is_empty() {
        for msg in validation::dns1123_subdomain_content(&mask_trailing_dash(e.generate_name)) {
            causes.push(invalid(
                "metadata.generateName",
                &go_quote(e.generate_name),
                &msg,
            ));
        }
    }
    if e.name.is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else {
        for msg in validation::dns1123_subdomain_content(e.name) {
            causes.push(invalid("metadata.name", &go_quote(e.name), &msg));
        }
    }
    causes.extend(series(e));
    if e.event_time.is_none() {
        causes.push(required("eventTime"));
    }
    if e.type_ != "Normal" && e.type_ != "Warning" {
        causes.push(invalid(
            "type",
            "\"\"",
            &format!("has invalid value: {}", e.type_),
        ));
    }
    let unset = |causes: &mut Vec<Cause>, field: &str| {
        causes.push(invalid(field, "\"\"", "needs to be unset"));
    };
    if e.first_timestamp.is_some() {
        unset(&mut causes, "firstTimestamp");
    }
    if e.last_timestamp.is_some() {
        unset(&mut causes, "lastTimestamp");
    }
    if e.count != 0 {
        unset(&mut causes, "count");
    }
    if !e.source.0.is_empty() || !e.source.1.is_empty() {
        unset(&mut causes, "source");
    }
    causes
}

/// `validateV1EventSeries`.
fn series(e: &Fields<'_>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some((count, last_observed)) = e.series {
        if count < 2 {
            causes.push(invalid("series.count", "\"\"", "should be at least 2"));
        }
        if last_observed.is_none() {
            causes.push(required("series.lastObservedTime"));
        }
    }
    causes
}

/// `ValidateEventUpdate`'s strict part, for `events.k8s.io/v1`: only `series` may change.
fn strict_update(old: &Fields<'_>, new: &Fields<'_>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let micro_series = |s: Option<(i64, Time)>| s.map(|(c, t)| (c, to_micro(t)));
    if micro_series(new.series) != micro_series(old.series) {
        causes.extend(series(new));
    }
    let mut immutable = |field: &str, changed: bool, value: String| {
        if changed {
            causes.push(invalid(field, &value, "field is immutable"));
        }
    };
    immutable(
        "involvedObject",
        new.involved != old.involved,
        new.involved.go_json(),
    );
    let reason_changed = new.reason != old.reason;
    immutable("reason", reason_changed, go_quote(new.reason));
    immutable("message", new.message != old.message, go_quote(new.message));
    immutable(
        "source",
        new.source != old.source,
        format!(
            "{{\"Component\":{},\"Host\":{}}}",
            json_str(new.source.0),
            json_str(new.source.1)
        ),
    );
    // The stored times are whole seconds; the sent ones are compared as sent.
    immutable(
        "firstTimestamp",
        new.first_timestamp != to_second(old.first_timestamp),
        time_json(new.first_timestamp, false),
    );
    immutable(
        "lastTimestamp",
        new.last_timestamp != to_second(old.last_timestamp),
        time_json(new.last_timestamp, false),
    );
    immutable("count", new.count != old.count, new.count.to_string());
    // Upstream checks the reason twice.
    immutable("reason", reason_changed, go_quote(new.reason));
    immutable("type", new.type_ != old.type_, go_quote(new.type_));
    // Changes below a microsecond are tolerated.
    immutable(
        "eventTime",
        to_micro(new.event_time) != to_micro(old.event_time),
        time_json(new.event_time, true),
    );
    immutable("action", new.action != old.action, go_quote(new.action));
    immutable(
        "related",
        new.related != old.related,
        new.related
            .as_ref()
            .map_or_else(|| "null".to_string(), Reference::go_json),
    );
    immutable(
        "reportingController",
        new.reporting_controller != old.reporting_controller,
        go_quote(new.reporting_controller),
    );
    immutable(
        "reportingInstance",
        new.reporting_instance != old.reporting_instance,
        go_quote(new.reporting_instance),
    );
    causes
}

/// The generic check of every object's name: it must be usable as a path segment.
fn path_segment_name(e: &Fields<'_>) -> Vec<Cause> {
    let mut causes = Vec::new();
    if !e.generate_name.is_empty() {
        for msg in path_segment_errors(e.generate_name, true) {
            causes.push(invalid(
                "metadata.generateName",
                &go_quote(e.generate_name),
                &msg,
            ));
        }
    }
    for msg in path_segment_errors(e.name, false) {
        causes.push(invalid("metadata.name", &go_quote(e.name), &msg));
    }
    causes
}

/// apimachinery's `IsPathSegmentName` (`prefix`: `IsPathSegmentPrefix`).
fn path_segment_errors(name: &str, prefix: bool) -> Vec<String> {
    if !prefix && (name == "." || name == "..") {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

/// A `generateName` is checked with its trailing dash made a letter, as upstream does.
fn mask_trailing_dash(name: &str) -> String {
    match name.strip_suffix('-') {
        Some(rest) if name.len() > 1 => format!("{rest}a"),
        _ => name.to_string(),
    }
}

/// Whether `info` is `events.k8s.io`'s Event: kept in core `v1`'s storage and converted on the
/// way in and out, as kube-apiserver keeps both APIs' Events as one internal Event.
pub fn converts(info: &ResourceInfo) -> bool {
    info.group == EVENTS_GROUP && info.plural == "events"
}

/// An Event of `info`'s API as it is stored: the core `v1` Event as Go writes it (kube-apiserver
/// decodes every write into the typed Event: unknown fields are dropped, unset ones written as
/// their zero values). Other kinds as they are.
pub fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    if converts(info) {
        core_of(&obj)
    } else if is_event(info) {
        core_shape(&obj)
    } else {
        obj
    }
}

/// A body sent through `info`'s API as kube-apiserver decodes it into the typed Event (see
/// [`to_storage`]), in that API's schema: so a PUT of what is stored changes nothing.
pub fn decoded(info: &ResourceInfo, obj: Value) -> Value {
    if converts(info) {
        events_v1_of(&core_of(&obj))
    } else if is_event(info) {
        core_shape(&obj)
    } else {
        obj
    }
}

/// A stored object as `info`'s API serves it: an `events.k8s.io/v1` Event converted from the
/// stored core one; anything else as stored.
pub fn from_storage<'a>(info: &ResourceInfo, stored: &'a Value) -> std::borrow::Cow<'a, Value> {
    if converts(info) {
        std::borrow::Cow::Owned(events_v1_of(stored))
    } else {
        std::borrow::Cow::Borrowed(stored)
    }
}

/// kube-apiserver's field label conversion for `events.k8s.io/v1` Events: each label it
/// supports, with the internal Event's label it selects by (`AddFieldLabelConversionsForEvent`).
pub const EVENTS_V1_FIELD_LABELS: &[(&str, &str)] = &[
    ("metadata.name", "metadata.name"),
    ("metadata.namespace", "metadata.namespace"),
    ("reason", "reason"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.namespace", "involvedObject.namespace"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.uid", "involvedObject.uid"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
];

/// Builds an object field by field, as Go's `encoding/json` writes a typed struct: an
/// `omitempty` string or number only when set, a struct always (`{}` when empty), a time as
/// `null` when unset.
struct GoFields<'a> {
    from: &'a Value,
    out: serde_json::Map<String, Value>,
}

impl<'a> GoFields<'a> {
    fn new(from: &'a Value, api_version: &str) -> Self {
        let mut out = serde_json::Map::new();
        out.insert("apiVersion".into(), Value::String(api_version.into()));
        out.insert("kind".into(), Value::String("Event".into()));
        out.insert(
            "metadata".into(),
            from.get("metadata")
                .cloned()
                .unwrap_or_else(|| Value::Object(Default::default())),
        );
        GoFields { from, out }
    }

    fn get(&self, k: &str) -> Option<&'a Value> {
        self.from.get(k).filter(|v| !v.is_null())
    }

    /// A string: `omitempty` ones only when non-empty, the others always.
    fn string(&mut self, to: &str, from: &str, omit_empty: bool) {
        match self.get(from) {
            Some(Value::String(s)) if s.is_empty() && omit_empty => {}
            Some(v) => {
                self.out.insert(to.into(), v.clone());
            }
            None if omit_empty => {}
            None => {
                self.out.insert(to.into(), Value::String(String::new()));
            }
        }
    }

    /// An `omitempty` integer: only when not zero.
    fn count(&mut self, to: &str, from: &str) {
        if let Some(v) = self.get(from).filter(|v| v.as_i64() != Some(0)) {
            self.out.insert(to.into(), v.clone());
        }
    }

    /// A struct field (an object reference, a source): always written.
    fn object(&mut self, to: &str, from: &str) {
        let v = self
            .get(from)
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        self.out.insert(to.into(), v);
    }

    /// A `metav1.Time` or `MicroTime`: `null` when unset.
    fn time(&mut self, to: &str, from: &str) {
        let v = self
            .get(from)
            .cloned()
            .filter(is_set_time)
            .unwrap_or(Value::Null);
        self.out.insert(to.into(), v);
    }

    /// An optional pointer field (`related`): only when set.
    fn pointer(&mut self, to: &str, from: &str) {
        if let Some(v) = self.get(from) {
            self.out.insert(to.into(), v.clone());
        }
    }

    /// `series`: core `v1`'s count is `omitempty`, `events.k8s.io/v1`'s is not.
    fn series(&mut self, omit_zero_count: bool) {
        let Some(s) = self.get("series") else {
            return;
        };
        let mut m = serde_json::Map::new();
        let count = s.get("count").filter(|v| !v.is_null());
        match count {
            Some(c) if !(omit_zero_count && c.as_i64() == Some(0)) => {
                m.insert("count".into(), c.clone());
            }
            None if !omit_zero_count => {
                m.insert("count".into(), Value::from(0));
            }
            _ => {}
        }
        let t = s
            .get("lastObservedTime")
            .cloned()
            .filter(is_set_time)
            .unwrap_or(Value::Null);
        m.insert("lastObservedTime".into(), t);
        self.out.insert("series".into(), Value::Object(m));
    }
}

fn is_set_time(v: &Value) -> bool {
    match v {
        Value::Null => false,
        // Go's zero time is written as `null`; text that is no time is kept as sent.
        Value::String(s) => {
            !s.is_empty() && s.parse::<jiff::Timestamp>().ok() != Some(go_zero_time())
        }
        _ => true,
    }
}

/// `Convert_v1_Event_To_core_Event`, then the core `v1` Event as Go writes it.
pub(crate) fn core_of(e: &Value) -> Value {
    core_from(e, true)
}

/// The core `v1` Event as Go writes it, read from `events.k8s.io/v1`'s field names or (`from_v1`
/// false) from core `v1`'s own.
fn core_from(e: &Value, from_v1: bool) -> Value {
    let name = |core: &'static str, v1: &'static str| if from_v1 { v1 } else { core };
    let mut f = GoFields::new(e, "v1");
    f.object("involvedObject", name("involvedObject", "regarding"));
    f.string("reason", "reason", true);
    f.string("message", name("message", "note"), true);
    f.object("source", name("source", "deprecatedSource"));
    f.time(
        "firstTimestamp",
        name("firstTimestamp", "deprecatedFirstTimestamp"),
    );
    f.time(
        "lastTimestamp",
        name("lastTimestamp", "deprecatedLastTimestamp"),
    );
    f.count("count", name("count", "deprecatedCount"));
    f.string("type", "type", true);
    f.time("eventTime", "eventTime");
    f.series(true);
    f.string("action", "action", true);
    f.pointer("related", "related");
    f.string(
        "reportingComponent",
        name("reportingComponent", "reportingController"),
        false,
    );
    f.string("reportingInstance", "reportingInstance", false);
    Value::Object(f.out)
}

/// A core `v1` Event as it is stored: as Go writes the typed Event, which kube-apiserver decodes
/// every write into.
pub(crate) fn core_shape(c: &Value) -> Value {
    core_from(c, false)
}

/// `Convert_core_Event_To_v1_Event`, then the `events.k8s.io/v1` Event as Go writes it.
fn events_v1_of(c: &Value) -> Value {
    let mut f = GoFields::new(c, "events.k8s.io/v1");
    f.time("eventTime", "eventTime");
    f.series(false);
    f.string("reportingController", "reportingComponent", true);
    f.string("reportingInstance", "reportingInstance", true);
    f.string("action", "action", true);
    f.string("reason", "reason", true);
    f.object("regarding", "involvedObject");
    f.pointer("related", "related");
    f.string("note", "message", true);
    f.string("type", "type", true);
    f.object("deprecatedSource", "source");
    f.time("deprecatedFirstTimestamp", "firstTimestamp");
    f.time("deprecatedLastTimestamp", "lastTimestamp");
    f.count("deprecatedCount", "count");
    Value::Object(f.out)
}

#[cfg(test)]
mod tests {
    /// The pinned kube-apiserver's words for a label key's name part.
    const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
         must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or \
         '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    use serde_json::json;

    use super::*;
    use crate::registry::Registry;

    fn core() -> ResourceInfo {
        Registry::new().lookup("", "v1", "events").unwrap()
    }

    fn events_v1() -> ResourceInfo {
        Registry::new()
            .lookup(EVENTS_GROUP, "v1", "events")
            .unwrap()
    }

    fn lines(causes: Vec<Cause>) -> Vec<String> {
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn create(info: &ResourceInfo, obj: &Value) -> Vec<String> {
        lines(validate(info, "v1", obj))
    }

    fn update(info: &ResourceInfo, old: &Value, new: &Value) -> Vec<String> {
        lines(validate_update(info, "v1", old, new))
    }

    /// An old-style core Event about a Node, as mco's daemon writes it.
    fn daemon_event(ns: &str) -> Value {
        json!({
            "metadata": {"name": "worker-0.18eec29322d9ccb2", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "worker-0"},
            "reason": "OSUpdateStarted", "message": "Changing OS", "type": "Normal",
            "source": {"component": "machineconfigdaemon", "host": "worker-0"},
            "reportingComponent": "machineconfigdaemon", "reportingInstance": "worker-0",
            "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:04:05Z",
            "count": 1,
        })
    }

    /// A new-style Event as kube-runtime's `Recorder` writes it.
    fn recorder_event() -> Value {
        json!({
            "metadata": {"name": "worker-0.18eec29322d9ccb2", "namespace": "default"},
            "regarding": {"apiVersion": "v1", "kind": "Node", "name": "worker-0"},
            "eventTime": "2026-01-02T03:04:05.123456Z",
            "reportingController": "machineconfigcontroller",
            "reportingInstance": "mco-controller-0",
            "action": "Reconcile", "reason": "RolloutStarted", "note": "rolling", "type": "Normal",
        })
    }

    const NS_MISMATCH: &str =
        "involvedObject.namespace: Invalid value: \"\": does not match event.namespace";

    #[test]
    fn old_style_events_live_in_their_objects_namespace() {
        let info = core();
        assert!(create(&info, &daemon_event("default")).is_empty());
        assert!(create(&info, &daemon_event("")).is_empty());
        assert_eq!(create(&info, &daemon_event("diff")), [NS_MISMATCH]);
        let mut pod = daemon_event("diff");
        pod["involvedObject"] = json!({"kind": "Pod", "name": "p", "namespace": "diff"});
        assert!(create(&info, &pod).is_empty());
        pod["involvedObject"]["namespace"] = json!("other");
        assert_eq!(
            create(&info, &pod),
            ["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"]
        );
        // mco-sim's join event: generateName, no reporting fields.
        let sim = json!({
            "metadata": {"generateName": "worker-0.", "name": "worker-0.abcde", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "worker-0", "apiVersion": "v1"},
            "reason": "Provisioned", "message": "joined", "type": "Normal",
            "source": {"component": "ignition", "host": "worker-0"}, "count": 1,
        });
        assert!(create(&info, &sim).is_empty());
    }

    #[test]
    fn new_style_events_about_cluster_objects_live_in_default_or_kube_system() {
        let info = events_v1();
        let mut e = recorder_event();
        assert!(create(&info, &e).is_empty());
        e["metadata"]["namespace"] = json!("kube-system");
        assert!(create(&info, &e).is_empty());
        e["metadata"]["namespace"] = json!("diff");
        assert_eq!(create(&info, &e), [NS_MISMATCH]);
        // An Event about a namespaced object is not held to its namespace once it has an
        // eventTime.
        e["regarding"] = json!({"kind": "Pod", "name": "p", "namespace": "elsewhere"});
        assert!(create(&info, &e).is_empty());
    }

    #[test]
    fn new_style_events_need_their_reporting_fields() {
        let mut e = recorder_event();
        for k in [
            "reportingController",
            "reportingInstance",
            "action",
            "reason",
        ] {
            e.as_object_mut().unwrap().remove(k);
        }
        let name_part = format!("name part {LABEL_KEY_MSG}");
        assert_eq!(
            create(&events_v1(), &e),
            [
                "reportingController: Required value".to_string(),
                "reportingController: Invalid value: \"\": name part must be non-empty".into(),
                format!("reportingController: Invalid value: \"\": {name_part}"),
                "reportingInstance: Required value".into(),
                "action: Required value".into(),
                "reason: Required value".into(),
            ]
        );
        // Through core v1 the controller is called by its field there; the rules are the
        // legacy ones only.
        let mut c = daemon_event("default");
        c["eventTime"] = json!("2026-01-02T03:04:05.000000Z");
        c["action"] = json!("Update");
        c.as_object_mut().unwrap().remove("reportingComponent");
        assert_eq!(create(&core(), &c)[0], "reportingComponent: Required value");
        c["reportingComponent"] = json!("a/b/c");
        assert_eq!(
            create(&core(), &c),
            [format!(
                "reportingComponent: Invalid value: \"a/b/c\": a valid label key {LABEL_KEY_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )]
        );
        c["reportingComponent"] = json!("example.com/machine-config");
        assert!(create(&core(), &c).is_empty());
        c["reportingComponent"] = json!(format!("x/{}", "a".repeat(64)));
        assert_eq!(
            create(&core(), &c),
            [format!(
                "reportingComponent: Invalid value: \"x/{}\": name part must be no more than 63 bytes",
                "a".repeat(64)
            )]
        );
    }

    #[test]
    fn lengths_are_limited_at_exactly_their_limit() {
        let info = events_v1();
        for (field, path, limit) in [
            (
                "reportingInstance",
                "reportingInstance",
                REPORTING_INSTANCE_LENGTH_LIMIT,
            ),
            ("action", "action", ACTION_LENGTH_LIMIT),
            ("reason", "reason", REASON_LENGTH_LIMIT),
            ("note", "message", NOTE_LENGTH_LIMIT),
        ] {
            let mut e = recorder_event();
            e[field] = json!("x".repeat(limit));
            assert!(create(&info, &e).is_empty(), "{field} at {limit}");
            e[field] = json!("x".repeat(limit + 1));
            assert_eq!(
                create(&info, &e),
                [format!(
                    "{path}: Invalid value: \"\": can have at most {limit} characters"
                )],
                "{field} over {limit}"
            );
            // Bytes count, not characters.
            e[field] = json!("é".repeat(limit / 2 + 1));
            assert_eq!(create(&info, &e).len(), 1, "{field} in bytes");
        }
        // Old-style Events are not limited.
        let mut old = daemon_event("default");
        old["reason"] = json!("x".repeat(REASON_LENGTH_LIMIT + 1));
        assert!(create(&core(), &old).is_empty());
    }

    #[test]
    fn events_k8s_io_v1_is_strict_on_create() {
        let info = events_v1();
        let mut e = recorder_event();
        e.as_object_mut().unwrap().remove("eventTime");
        e["type"] = json!("Info");
        e["deprecatedFirstTimestamp"] = json!("2026-01-02T03:04:05Z");
        e["deprecatedLastTimestamp"] = json!("2026-01-02T03:04:05Z");
        e["deprecatedCount"] = json!(1);
        e["deprecatedSource"] = json!({"host": "worker-0"});
        e["series"] = json!({"count": 1});
        // Without eventTime the legacy rules are the old style's: the Node's Event in default
        // passes them.
        assert_eq!(
            create(&info, &e),
            [
                "series.count: Invalid value: \"\": should be at least 2",
                "series.lastObservedTime: Required value",
                "eventTime: Required value",
                "type: Invalid value: \"\": has invalid value: Info",
                "firstTimestamp: Invalid value: \"\": needs to be unset",
                "lastTimestamp: Invalid value: \"\": needs to be unset",
                "count: Invalid value: \"\": needs to be unset",
                "source: Invalid value: \"\": needs to be unset",
            ]
        );
        let mut e = recorder_event();
        e["series"] = json!({"count": 2, "lastObservedTime": "2026-01-02T03:04:06.000000Z"});
        assert!(create(&info, &e).is_empty());
        // The same Event through core v1 is judged by the legacy rules only.
        let mut c = daemon_event("default");
        c["type"] = json!("Info");
        c["series"] = json!({"count": 1});
        assert!(create(&core(), &c).is_empty());
    }

    #[test]
    fn names_are_dns_subdomains_through_events_k8s_io_and_path_segments_through_core() {
        let mut e = recorder_event();
        e["metadata"]["name"] = json!("Node_A");
        let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        assert_eq!(
            create(&events_v1(), &e),
            [format!(
                "metadata.name: Invalid value: \"Node_A\": {subdomain}"
            )]
        );
        e["metadata"]["name"] = json!("a".repeat(253));
        assert!(create(&events_v1(), &e).is_empty());
        e["metadata"]["name"] = json!("a".repeat(254));
        assert_eq!(
            create(&events_v1(), &e),
            [format!(
                "metadata.name: Invalid value: \"{}\": must be no more than 253 bytes",
                "a".repeat(254)
            )]
        );
        // A legacy error comes first.
        e["metadata"]["namespace"] = json!("diff");
        assert_eq!(create(&events_v1(), &e)[0], NS_MISMATCH);

        let mut c = daemon_event("default");
        c["metadata"]["name"] = json!("Node_A");
        assert!(create(&core(), &c).is_empty());
        c["metadata"]["name"] = json!("a%b");
        assert_eq!(
            create(&core(), &c),
            ["metadata.name: Invalid value: \"a%b\": may not contain '%'"]
        );
        c["metadata"]["name"] = json!("..");
        assert_eq!(
            create(&core(), &c),
            ["metadata.name: Invalid value: \"..\": may not be '..'"]
        );
        // The name is judged only when the Event's own rules pass.
        c["metadata"]["namespace"] = json!("diff");
        assert_eq!(create(&core(), &c), [NS_MISMATCH]);
    }

    #[test]
    fn events_k8s_io_v1_updates_change_only_the_series() {
        let info = events_v1();
        let old = recorder_event();
        // kube-runtime's Recorder counts a repeat by patching the series in.
        let mut new = old.clone();
        new["series"] = json!({"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"});
        assert!(update(&info, &old, &new).is_empty());
        new["series"]["count"] = json!(1);
        assert_eq!(
            update(&info, &old, &new),
            ["series.count: Invalid value: \"\": should be at least 2"]
        );
        // An unchanged bad series is not judged again.
        assert!(update(&info, &new, &new).is_empty());

        let mut new = old.clone();
        new["reason"] = json!("Other");
        assert_eq!(
            update(&info, &old, &new),
            [
                "reason: Invalid value: \"Other\": field is immutable",
                "reason: Invalid value: \"Other\": field is immutable",
            ]
        );
        let mut new = old.clone();
        new["regarding"]["name"] = json!("worker-1");
        new["note"] = json!("changed");
        new["type"] = json!("Warning");
        new["action"] = json!("Drain");
        new["reportingController"] = json!("other");
        new["reportingInstance"] = json!("other-0");
        new["related"] = json!({"kind": "Pod", "name": "p", "namespace": "default"});
        new["deprecatedSource"] = json!({"component": "c"});
        new["deprecatedFirstTimestamp"] = json!("2026-01-02T03:04:05Z");
        new["deprecatedLastTimestamp"] = json!("2026-01-02T03:04:05.5Z");
        new["deprecatedCount"] = json!(3);
        new["eventTime"] = json!("2026-01-02T03:04:06.000000Z");
        assert_eq!(
            update(&info, &old, &new),
            [
                "involvedObject: Invalid value: {\"Kind\":\"Node\",\"Namespace\":\"\",\"Name\":\"worker-1\",\"UID\":\"\",\"APIVersion\":\"v1\",\"ResourceVersion\":\"\",\"FieldPath\":\"\"}: field is immutable",
                "message: Invalid value: \"changed\": field is immutable",
                "source: Invalid value: {\"Component\":\"c\",\"Host\":\"\"}: field is immutable",
                "firstTimestamp: Invalid value: \"2026-01-02T03:04:05Z\": field is immutable",
                "lastTimestamp: Invalid value: \"2026-01-02T03:04:05Z\": field is immutable",
                "count: Invalid value: 3: field is immutable",
                "type: Invalid value: \"Warning\": field is immutable",
                "eventTime: Invalid value: \"2026-01-02T03:04:06.000000Z\": field is immutable",
                "action: Invalid value: \"Drain\": field is immutable",
                "related: Invalid value: {\"Kind\":\"Pod\",\"Namespace\":\"default\",\"Name\":\"p\",\"UID\":\"\",\"APIVersion\":\"\",\"ResourceVersion\":\"\",\"FieldPath\":\"\"}: field is immutable",
                "reportingController: Invalid value: \"other\": field is immutable",
                "reportingInstance: Invalid value: \"other-0\": field is immutable",
            ]
        );
        // Below a microsecond the eventTime may move; the same instant written otherwise is
        // the same time.
        let mut new = old.clone();
        new["eventTime"] = json!("2026-01-02T03:04:05.123456789Z");
        assert!(update(&info, &old, &new).is_empty());
        new["eventTime"] = json!("2026-01-02T04:04:05.123456+01:00");
        assert!(update(&info, &old, &new).is_empty());
        let mut new = old.clone();
        new["related"] = Value::Null;
        assert!(update(&info, &old, &new).is_empty());
        new["regarding"]["uid"] = json!("");
        assert!(update(&info, &old, &new).is_empty());
    }

    #[test]
    fn core_v1_updates_are_judged_as_creates_are() {
        let info = core();
        let old = daemon_event("default");
        let mut new = old.clone();
        new["count"] = json!(2);
        new["reason"] = json!("Other");
        new["lastTimestamp"] = json!("2026-01-02T03:05:00Z");
        assert!(update(&info, &old, &new).is_empty());
        new["involvedObject"]["namespace"] = json!("diff");
        assert_eq!(
            update(&info, &old, &new),
            ["involvedObject.namespace: Invalid value: \"diff\": does not match event.namespace"]
        );
    }

    #[test]
    fn times_print_as_go_marshals_them() {
        let t = time(Some(&json!("2026-01-02T03:04:05.1234567Z")));
        assert_eq!(time_json(t, true), "\"2026-01-02T03:04:05.123456Z\"");
        assert_eq!(time_json(t, false), "\"2026-01-02T03:04:05Z\"");
        assert_eq!(time_json(None, false), "null");
        assert_eq!(time(Some(&json!("0001-01-01T00:00:00Z"))), None);
        assert_eq!(time(Some(&Value::Null)), None);
        assert_eq!(mask_trailing_dash("node-"), "nodea");
        assert_eq!(mask_trailing_dash("-"), "-");
    }

    #[test]
    fn other_kinds_are_not_events() {
        let cm = Registry::new().lookup("", "v1", "configmaps").unwrap();
        assert!(!is_event(&cm));
        assert!(validate(&cm, "v1", &json!({})).is_empty());
    }

    #[test]
    fn a_recorder_event_is_stored_as_go_writes_the_core_event() {
        let mut e = recorder_event();
        e["apiVersion"] = json!("events.k8s.io/v1");
        e["kind"] = json!("Event");
        e["related"] = json!({"kind": "Pod", "name": "p", "namespace": "default"});
        e["series"] = json!({"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"});
        e["unknown"] = json!("dropped, as decoding into the typed Event drops it");
        let stored = to_storage(&events_v1(), e);
        // Go's field order and its zero values: structs `{}`, unset times `null`, the
        // reporting fields (not `omitempty` in core v1) always.
        assert_eq!(
            stored.to_string(),
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "worker-0.18eec29322d9ccb2", "namespace": "default"},
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "worker-0"},
                "reason": "RolloutStarted", "message": "rolling", "source": {},
                "firstTimestamp": null, "lastTimestamp": null, "type": "Normal",
                "eventTime": "2026-01-02T03:04:05.123456Z",
                "series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"},
                "action": "Reconcile",
                "related": {"kind": "Pod", "name": "p", "namespace": "default"},
                "reportingComponent": "machineconfigcontroller",
                "reportingInstance": "mco-controller-0",
            })
            .to_string()
        );
        // And back: the events.k8s.io/v1 Event as Go writes it.
        let served = from_storage(&events_v1(), &stored).into_owned();
        assert_eq!(
            served.to_string(),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "worker-0.18eec29322d9ccb2", "namespace": "default"},
                "eventTime": "2026-01-02T03:04:05.123456Z",
                "series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:00.000000Z"},
                "reportingController": "machineconfigcontroller",
                "reportingInstance": "mco-controller-0",
                "action": "Reconcile", "reason": "RolloutStarted",
                "regarding": {"apiVersion": "v1", "kind": "Node", "name": "worker-0"},
                "related": {"kind": "Pod", "name": "p", "namespace": "default"},
                "note": "rolling", "type": "Normal", "deprecatedSource": {},
                "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null,
            })
            .to_string()
        );
        assert_eq!(
            to_storage(&events_v1(), served.clone()),
            stored,
            "a round trip changes nothing"
        );
    }

    #[test]
    fn a_daemon_event_is_served_through_events_k8s_io_with_its_deprecated_fields() {
        let stored = daemon_event("default");
        let served = from_storage(&events_v1(), &stored).into_owned();
        assert_eq!(
            served.to_string(),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "worker-0.18eec29322d9ccb2", "namespace": "default"},
                "eventTime": null,
                "reportingController": "machineconfigdaemon", "reportingInstance": "worker-0",
                "reason": "OSUpdateStarted",
                "regarding": {"apiVersion": "v1", "kind": "Node", "name": "worker-0"},
                "note": "Changing OS", "type": "Normal",
                "deprecatedSource": {"component": "machineconfigdaemon", "host": "worker-0"},
                "deprecatedFirstTimestamp": "2026-01-02T03:04:05Z",
                "deprecatedLastTimestamp": "2026-01-02T03:04:05Z",
                "deprecatedCount": 1,
            })
            .to_string()
        );
        // Core v1 serves what it stores.
        assert!(matches!(
            from_storage(&core(), &stored),
            std::borrow::Cow::Borrowed(_)
        ));
        // It stores a core Event as Go writes the typed one: what was sent, `apiVersion` and
        // `kind`, and the unset `eventTime` as `null`; unknown fields go.
        let mut sent = stored.clone();
        sent["unknown"] = json!(1);
        let mut want = stored.clone();
        want["apiVersion"] = json!("v1");
        want["kind"] = json!("Event");
        want["eventTime"] = Value::Null;
        assert_eq!(to_storage(&core(), sent), want);
        let mut bare = json!({"metadata": {"name": "a"}});
        bare = to_storage(&core(), bare);
        assert_eq!(
            bare.to_string(),
            json!({
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": "a"},
                "involvedObject": {}, "source": {}, "firstTimestamp": null,
                "lastTimestamp": null, "eventTime": null,
                "reportingComponent": "", "reportingInstance": "",
            })
            .to_string()
        );
    }

    #[test]
    fn unset_values_convert_to_gos_zero_values() {
        let e = json!({
            "metadata": {"name": "a"},
            "eventTime": "0001-01-01T00:00:00Z",
            "reportingController": "", "note": "", "deprecatedCount": 0,
            "deprecatedLastTimestamp": "", "series": {"count": 0},
            "deprecatedFirstTimestamp": "not a time",
        });
        let stored = to_storage(&events_v1(), e);
        assert_eq!(
            stored,
            json!({
                "apiVersion": "v1", "kind": "Event", "metadata": {"name": "a"},
                "involvedObject": {}, "source": {},
                "firstTimestamp": "not a time", "lastTimestamp": null,
                "eventTime": null, "series": {"lastObservedTime": null},
                "reportingComponent": "", "reportingInstance": "",
            })
        );
        let served = from_storage(&events_v1(), &stored);
        assert_eq!(
            served["series"],
            json!({"count": 0, "lastObservedTime": null})
        );
        assert!(served.get("reportingController").is_none());
        assert!(served.get("deprecatedCount").is_none());
    }

    #[test]
    fn events_k8s_io_field_labels_are_kube_apiservers_conversion() {
        let core_labels = mco_apimachinery::selector::builtin_selectable_fields("", "Event");
        for (from, to) in EVENTS_V1_FIELD_LABELS {
            assert!(core_labels.contains(to), "{from} selects by {to}");
        }
        // Neither `source` nor `deprecatedSource` has a label there.
        assert!(
            EVENTS_V1_FIELD_LABELS
                .iter()
                .all(|(f, _)| *f != "source" && !f.starts_with("deprecated"))
        );
        assert_eq!(EVENTS_V1_FIELD_LABELS.len(), 12);
    }
}
