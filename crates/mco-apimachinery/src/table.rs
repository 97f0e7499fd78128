//! `meta.k8s.io/v1` Table rendering, as kube-apiserver answers
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! kubectl 1.32 has no client-side printers: every pretty `get` (and `get -w`)
//! prints what the server puts in the Table, so the cells here follow
//! kube-apiserver's printers. The server always sends every column, wide ones
//! included (`priority` 1); kubectl hides those unless `-o wide`. Ages are
//! rendered by the server as `HumanDuration` strings from a `now` the caller
//! passes in, which keeps this module free of clocks.

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::jsonpath::{JsonPath, JsonPathError, print_value};
use crate::selector::LabelSelector;

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// `k8s.io/apimachinery/pkg/util/duration.HumanDuration`: about two or three
/// significant figures (`59s`, `5m30s`, `90m`, `3h2m`, `2d`, `2y`).
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    // Up to two seconds in the future is clock skew, i.e. "now".
    if seconds < -1 {
        return "<invalid>".into();
    } else if seconds < 0 {
        return "0s".into();
    } else if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    } else if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        }
    } else if hours < 24 * 365 * 2 {
        format!("{}d", hours / 24)
    } else if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        }
    } else {
        format!("{}y", hours / 24 / 365)
    }
}

/// The AGE text of a timestamp field: `<unknown>` when absent or empty,
/// `<invalid>` when unparsable (upstream's `translateTimestampSince` and
/// `ConvertToHumanReadableDateType`).
pub fn age(timestamp: Option<&str>, now: Timestamp) -> String {
    match timestamp {
        None | Some("") | Some("null") => "<unknown>".into(),
        Some(text) => match text.parse::<Timestamp>() {
            Ok(ts) => human_duration(now.duration_since(ts)),
            Err(_) => "<invalid>".into(),
        },
    }
}

/// Which object each row carries (`?includeObject=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    None,
    Object,
    /// A `PartialObjectMetadata`: kube-apiserver's default.
    #[default]
    Metadata,
}

impl IncludeObject {
    /// Parses the query parameter; absent means [`IncludeObject::Metadata`].
    pub fn from_query(value: Option<&str>) -> Option<Self> {
        match value {
            None | Some("") | Some("Metadata") => Some(IncludeObject::Metadata),
            Some("Object") => Some(IncludeObject::Object),
            Some("None") => Some(IncludeObject::None),
            Some(_) => None,
        }
    }
}

/// A `TableColumnDefinition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnDefinition {
    pub name: String,
    #[serde(rename = "type")]
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
}

impl ColumnDefinition {
    fn new(name: &str, type_: &str, format: &str, description: &str, priority: i32) -> Self {
        ColumnDefinition {
            name: name.into(),
            type_: type_.into(),
            format: format.into(),
            description: description.into(),
            priority,
        }
    }

    fn name_column() -> Self {
        Self::new("Name", "string", "name", NAME_DESCRIPTION, 0)
    }

    fn age_column() -> Self {
        Self::new("Age", "string", "", CREATION_TIMESTAMP_DESCRIPTION, 0)
    }
}

/// One entry of a CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    pub json_path: String,
}

impl PrinterColumn {
    /// The printer columns of `version` in a CustomResourceDefinition object. A
    /// version without columns gets the single `Age` column kube-apiserver
    /// serves by default.
    pub fn from_crd(crd: &Value, version: &str) -> Vec<PrinterColumn> {
        let spec = &crd["spec"];
        let per_version = spec["versions"].as_array().and_then(|vs| {
            vs.iter()
                .find(|v| v["name"].as_str() == Some(version))
                .and_then(|v| v["additionalPrinterColumns"].as_array())
        });
        // apiextensions/v1beta1 kept them at the top level.
        let raw = per_version.or_else(|| spec["additionalPrinterColumns"].as_array());
        let columns: Vec<PrinterColumn> = raw
            .map(|cols| cols.iter().filter_map(PrinterColumn::parse).collect())
            .unwrap_or_default();
        if columns.is_empty() {
            vec![PrinterColumn {
                name: "Age".into(),
                type_: "date".into(),
                format: String::new(),
                description: CREATION_TIMESTAMP_DESCRIPTION.into(),
                priority: 0,
                json_path: ".metadata.creationTimestamp".into(),
            }]
        } else {
            columns
        }
    }

    /// One column definition (`jsonPath`, or v1beta1's `JSONPath`).
    pub fn parse(v: &Value) -> Option<PrinterColumn> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let json_path = v
            .get("jsonPath")
            .or_else(|| v.get("JSONPath"))
            .and_then(Value::as_str)?
            .to_string();
        Some(PrinterColumn {
            name: s("name"),
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            priority: v.get("priority").and_then(Value::as_i64).unwrap_or(0) as i32,
            json_path,
        })
    }
}

#[derive(Debug, Clone)]
enum Printer {
    Custom(Vec<(JsonPath, String)>),
    Node,
    Pod,
    Namespace,
    ConfigMap,
    Secret,
    ServiceAccount,
    Lease,
    PodDisruptionBudget,
    /// Core events, or `events.k8s.io` events when `true`.
    Event(bool),
    Deployment,
    ReplicaSet,
    DaemonSet,
    /// An `autoscaling/v1` Scale (a `/scale` subresource).
    Scale,
    Default,
}

/// Builds Tables for one resource type.
#[derive(Debug, Clone)]
pub struct TableConvertor {
    printer: Printer,
    columns: Vec<ColumnDefinition>,
}

impl TableConvertor {
    /// The convertor of a custom resource: `Name`, then its printer columns.
    pub fn for_crd(columns: &[PrinterColumn]) -> Result<Self, JsonPathError> {
        let mut defs = vec![ColumnDefinition::name_column()];
        let mut paths = Vec::with_capacity(columns.len());
        for col in columns {
            paths.push((JsonPath::parse(&col.json_path)?, col.type_.clone()));
            let description = if col.description.is_empty() {
                format!(
                    "Custom resource definition column (in JSONPath format): {}",
                    col.json_path
                )
            } else {
                col.description.clone()
            };
            defs.push(ColumnDefinition {
                name: col.name.clone(),
                type_: col.type_.clone(),
                format: col.format.clone(),
                description,
                priority: col.priority,
            });
        }
        Ok(TableConvertor {
            printer: Printer::Custom(paths),
            columns: defs,
        })
    }

    /// The convertor of a built-in resource (`group` is `""` for core). Types
    /// without a dedicated printer get `Name` and `Age`.
    pub fn for_builtin(group: &str, resource: &str) -> Self {
        use ColumnDefinition as C;
        let name = C::name_column();
        let age = C::age_column();
        let (printer, columns) = match (group, resource) {
            ("", "nodes") => (
                Printer::Node,
                vec![
                    name,
                    C::new("Status", "string", "", "The status of the node", 0),
                    C::new("Roles", "string", "", "The roles of the node", 0),
                    age,
                    C::new(
                        "Version",
                        "string",
                        "",
                        "Kubelet Version reported by the node.",
                        0,
                    ),
                    C::new(
                        "Internal-IP",
                        "string",
                        "",
                        "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).",
                        1,
                    ),
                    C::new(
                        "External-IP",
                        "string",
                        "",
                        "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).",
                        1,
                    ),
                    C::new(
                        "OS-Image",
                        "string",
                        "",
                        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
                        1,
                    ),
                    C::new(
                        "Kernel-Version",
                        "string",
                        "",
                        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
                        1,
                    ),
                    C::new(
                        "Container-Runtime",
                        "string",
                        "",
                        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
                        1,
                    ),
                ],
            ),
            ("", "pods") => (
                Printer::Pod,
                vec![
                    name,
                    C::new(
                        "Ready",
                        "string",
                        "",
                        "The aggregate readiness state of this pod for accepting traffic.",
                        0,
                    ),
                    C::new(
                        "Status",
                        "string",
                        "",
                        "The aggregate status of the containers in this pod.",
                        0,
                    ),
                    C::new(
                        "Restarts",
                        "string",
                        "",
                        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                        0,
                    ),
                    age,
                    C::new(
                        "IP",
                        "string",
                        "",
                        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
                        1,
                    ),
                    C::new(
                        "Node",
                        "string",
                        "",
                        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
                        1,
                    ),
                    C::new(
                        "Nominated Node",
                        "string",
                        "",
                        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
                        1,
                    ),
                    C::new(
                        "Readiness Gates",
                        "string",
                        "",
                        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
                        1,
                    ),
                ],
            ),
            ("", "namespaces") => (
                Printer::Namespace,
                vec![
                    name,
                    C::new("Status", "string", "", "The status of the namespace", 0),
                    age,
                ],
            ),
            ("", "configmaps") => (
                Printer::ConfigMap,
                vec![
                    name,
                    C::new(
                        "Data",
                        "string",
                        "",
                        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
                        0,
                    ),
                    age,
                ],
            ),
            ("", "secrets") => (
                Printer::Secret,
                vec![
                    name,
                    C::new(
                        "Type",
                        "string",
                        "",
                        "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
                        0,
                    ),
                    C::new(
                        "Data",
                        "string",
                        "",
                        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
                        0,
                    ),
                    age,
                ],
            ),
            // kube-apiserver 1.37 prints no Secrets column.
            ("", "serviceaccounts") => (Printer::ServiceAccount, vec![name, age]),
            ("coordination.k8s.io", "leases") => (
                Printer::Lease,
                vec![
                    name,
                    C::new(
                        "Holder",
                        "string",
                        "",
                        "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
                        0,
                    ),
                    age,
                ],
            ),
            ("policy", "poddisruptionbudgets") => (
                Printer::PodDisruptionBudget,
                vec![
                    name,
                    C::new(
                        "Min Available",
                        "string",
                        "",
                        "The minimum number of pods that must be available.",
                        0,
                    ),
                    C::new(
                        "Max Unavailable",
                        "string",
                        "",
                        "The maximum number of pods that may be unavailable.",
                        0,
                    ),
                    C::new(
                        "Allowed Disruptions",
                        "integer",
                        "",
                        "Calculated number of pods that may be disrupted at this time.",
                        0,
                    ),
                    age,
                ],
            ),
            ("", "events") | ("events.k8s.io", "events") => (
                Printer::Event(group == "events.k8s.io"),
                vec![
                    C::new(
                        "Last Seen",
                        "string",
                        "",
                        "The time at which the most recent occurrence of this event was recorded.",
                        0,
                    ),
                    C::new(
                        "Type",
                        "string",
                        "",
                        "Type of this event (Normal, Warning), new types could be added in the future",
                        0,
                    ),
                    C::new(
                        "Reason",
                        "string",
                        "",
                        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                        0,
                    ),
                    C::new(
                        "Object",
                        "string",
                        "",
                        "The object that this event is about.",
                        0,
                    ),
                    C::new(
                        "Subobject",
                        "string",
                        "",
                        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
                        1,
                    ),
                    C::new(
                        "Source",
                        "string",
                        "",
                        "The component reporting this event. Should be a short machine understandable string.",
                        1,
                    ),
                    C::new(
                        "Message",
                        "string",
                        "",
                        "A human-readable description of the status of this operation.",
                        0,
                    ),
                    C::new(
                        "First Seen",
                        "string",
                        "",
                        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
                        1,
                    ),
                    C::new(
                        "Count",
                        "string",
                        "",
                        "The number of times this event has occurred.",
                        1,
                    ),
                    C::new("Name", "string", "name", NAME_DESCRIPTION, 1),
                ],
            ),
            ("apps", "deployments") => (
                Printer::Deployment,
                vec![
                    name,
                    C::new(
                        "Ready",
                        "string",
                        "",
                        "Number of the pod with ready state",
                        0,
                    ),
                    C::new(
                        "Up-to-date",
                        "string",
                        "",
                        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
                        0,
                    ),
                    C::new(
                        "Available",
                        "string",
                        "",
                        "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
                        0,
                    ),
                    age,
                    C::new(
                        "Containers",
                        "string",
                        "",
                        "Names of each container in the template.",
                        1,
                    ),
                    C::new(
                        "Images",
                        "string",
                        "",
                        "Images referenced by each container in the template.",
                        1,
                    ),
                    C::new(
                        "Selector",
                        "string",
                        "",
                        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment. It must match the pod template's labels.",
                        1,
                    ),
                ],
            ),
            ("apps", "replicasets") => (
                Printer::ReplicaSet,
                vec![
                    name,
                    C::new(
                        "Desired",
                        "integer",
                        "",
                        "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
                        0,
                    ),
                    C::new(
                        "Current",
                        "integer",
                        "",
                        "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
                        0,
                    ),
                    C::new(
                        "Ready",
                        "integer",
                        "",
                        "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition.",
                        0,
                    ),
                    age,
                    C::new(
                        "Containers",
                        "string",
                        "",
                        "Names of each container in the template.",
                        1,
                    ),
                    C::new(
                        "Images",
                        "string",
                        "",
                        "Images referenced by each container in the template.",
                        1,
                    ),
                    C::new(
                        "Selector",
                        "string",
                        "",
                        "Selector is a label query over pods that should match the replica count. Label keys and values that must match in order to be controlled by this replica set. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
                        1,
                    ),
                ],
            ),
            ("apps", "daemonsets") => (
                Printer::DaemonSet,
                vec![
                    name,
                    C::new(
                        "Desired",
                        "integer",
                        "",
                        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
                        0,
                    ),
                    C::new(
                        "Current",
                        "integer",
                        "",
                        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
                        0,
                    ),
                    C::new(
                        "Ready",
                        "integer",
                        "",
                        "numberReady is the number of nodes that should be running the daemon pod and have one or more of the daemon pod running with a Ready Condition.",
                        0,
                    ),
                    C::new(
                        "Up-to-date",
                        "integer",
                        "",
                        "The total number of nodes that are running updated daemon pod",
                        0,
                    ),
                    C::new(
                        "Available",
                        "integer",
                        "",
                        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
                        0,
                    ),
                    C::new(
                        "Node Selector",
                        "string",
                        "",
                        "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
                        0,
                    ),
                    age,
                    C::new(
                        "Containers",
                        "string",
                        "",
                        "Names of each container in the template.",
                        1,
                    ),
                    C::new(
                        "Images",
                        "string",
                        "",
                        "Images referenced by each container in the template.",
                        1,
                    ),
                    C::new(
                        "Selector",
                        "string",
                        "",
                        "A label query over pods that are managed by the daemon set. Must match in order to be controlled. It must match the pod template's labels. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
                        1,
                    ),
                ],
            ),
            _ => (Printer::Default, vec![name, age]),
        };
        TableConvertor { printer, columns }
    }

    /// The convertor of the `autoscaling/v1` Scale a `/scale` subresource serves: `Name`,
    /// `Desired` (`spec.replicas`), `Available` (`status.replicas`) and `Age`, described as
    /// kube-apiserver describes a workload's, or (`custom`) as apiextensions-apiserver
    /// describes a custom resource's.
    pub fn for_scale(custom: bool) -> Self {
        use ColumnDefinition as C;
        let columns = if custom {
            vec![
                C::name_column(),
                C::new("Desired", "integer", "", "Number of desired replicas", 0),
                C::new("Available", "integer", "", "Number of actual replicas", 0),
                C::new("Age", "date", "", CREATION_TIMESTAMP_DESCRIPTION, 0),
            ]
        } else {
            vec![
                C::new("Name", "string", "", NAME_DESCRIPTION, 0),
                C::new(
                    "Desired",
                    "integer",
                    "",
                    "replicas is the desired number of instances for the scaled object.",
                    0,
                ),
                C::new(
                    "Available",
                    "integer",
                    "",
                    "replicas is the actual number of observed instances of the scaled object.",
                    0,
                ),
                C::age_column(),
            ]
        };
        TableConvertor {
            printer: Printer::Scale,
            columns,
        }
    }

    /// The `columnDefinitions` of every Table this convertor builds.
    pub fn column_definitions(&self) -> &[ColumnDefinition] {
        &self.columns
    }

    /// The cells of one object's row, one per column definition.
    pub fn cells(&self, obj: &Value, now: Timestamp) -> Vec<Value> {
        let name = Value::String(str_at(obj, "/metadata/name").to_string());
        let created = age(
            obj.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str),
            now,
        );
        match &self.printer {
            Printer::Custom(paths) => {
                let mut cells = vec![name];
                cells.extend(paths.iter().map(|(p, t)| custom_cell(p, t, obj, now)));
                cells
            }
            Printer::Node => node_cells(obj, name, created),
            Printer::Pod => pod_row(obj, now).0,
            Printer::Namespace => vec![name, json!(str_at(obj, "/status/phase")), json!(created)],
            Printer::ConfigMap => {
                let n = obj_len(obj, "/data") + obj_len(obj, "/binaryData");
                vec![name, json!(n), json!(created)]
            }
            Printer::Secret => {
                vec![
                    name,
                    json!(str_at(obj, "/type")),
                    json!(obj_len(obj, "/data")),
                    json!(created),
                ]
            }
            Printer::ServiceAccount => vec![name, json!(created)],
            Printer::Scale => {
                let int = |p: &str| obj.pointer(p).and_then(Value::as_i64).unwrap_or(0);
                vec![
                    name,
                    json!(int("/spec/replicas")),
                    json!(int("/status/replicas")),
                    json!(created),
                ]
            }
            Printer::Lease => vec![
                name,
                json!(str_at(obj, "/spec/holderIdentity")),
                json!(created),
            ],
            Printer::PodDisruptionBudget => {
                let int_or_string = |p: &str| match obj.pointer(p) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => "N/A".to_string(),
                };
                vec![
                    name,
                    json!(int_or_string("/spec/minAvailable")),
                    json!(int_or_string("/spec/maxUnavailable")),
                    json!(
                        obj.pointer("/status/disruptionsAllowed")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    ),
                    json!(created),
                ]
            }
            Printer::Event(new_api) => event_cells(obj, *new_api, now),
            Printer::Deployment => {
                let (containers, images) = container_cells(obj);
                vec![
                    name,
                    json!(format!(
                        "{}/{}",
                        int_at(obj, "/status/readyReplicas"),
                        obj.pointer("/spec/replicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    )),
                    json!(int_at(obj, "/status/updatedReplicas")),
                    json!(int_at(obj, "/status/availableReplicas")),
                    json!(created),
                    json!(containers),
                    json!(images),
                    json!(selector_text(obj)),
                ]
            }
            Printer::ReplicaSet => {
                let (containers, images) = container_cells(obj);
                vec![
                    name,
                    json!(
                        obj.pointer("/spec/replicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    ),
                    json!(int_at(obj, "/status/replicas")),
                    json!(int_at(obj, "/status/readyReplicas")),
                    json!(created),
                    json!(containers),
                    json!(images),
                    json!(selector_text(obj)),
                ]
            }
            Printer::DaemonSet => {
                let (containers, images) = container_cells(obj);
                vec![
                    name,
                    json!(int_at(obj, "/status/desiredNumberScheduled")),
                    json!(int_at(obj, "/status/currentNumberScheduled")),
                    json!(int_at(obj, "/status/numberReady")),
                    json!(int_at(obj, "/status/updatedNumberScheduled")),
                    json!(int_at(obj, "/status/numberAvailable")),
                    json!(format_labels(
                        obj.pointer("/spec/template/spec/nodeSelector")
                    )),
                    json!(created),
                    json!(containers),
                    json!(images),
                    json!(selector_text(obj)),
                ]
            }
            Printer::Default => vec![name, json!(created)],
        }
    }

    /// One `TableRow`: cells, row conditions where upstream sets them, and the
    /// object as `include` asks.
    pub fn row(&self, obj: &Value, now: Timestamp, include: IncludeObject) -> Value {
        let (cells, conditions) = match self.printer {
            Printer::Pod => pod_row(obj, now),
            _ => (self.cells(obj, now), None),
        };
        let mut row = Map::new();
        row.insert("cells".into(), Value::Array(cells));
        if let Some(c) = conditions {
            row.insert("conditions".into(), c);
        }
        match include {
            // TableRow's object is a RawExtension, which Go's encoder writes as null when empty.
            IncludeObject::None => {
                row.insert("object".into(), Value::Null);
            }
            IncludeObject::Object => {
                row.insert("object".into(), obj.clone());
            }
            IncludeObject::Metadata => {
                row.insert("object".into(), partial_object_metadata(obj));
            }
        }
        Value::Object(row)
    }

    /// The Table for a list (`{"metadata": {...}, "items": [...]}`), passing
    /// `resourceVersion`, `continue` and `remainingItemCount` through.
    pub fn list_table(&self, list: &Value, now: Timestamp, include: IncludeObject) -> Value {
        let rows: Vec<Value> = list["items"]
            .as_array()
            .map(|items| items.iter().map(|o| self.row(o, now, include)).collect())
            .unwrap_or_default();
        let mut meta = Map::new();
        for key in ["resourceVersion", "continue", "remainingItemCount"] {
            match list["metadata"].get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s.is_empty() && key == "continue" => {}
                Some(v) => {
                    meta.insert(key.into(), v.clone());
                }
            }
        }
        self.table(meta, rows, true)
    }

    /// The Table for a single object (`GET .../name`).
    pub fn object_table(&self, obj: &Value, now: Timestamp, include: IncludeObject) -> Value {
        self.single(obj, now, include, true)
    }

    /// The Table carried by one watch event. kubectl keeps the columns of its
    /// initial list, so `with_headers` may be false after the first event
    /// (upstream then sends `columnDefinitions: null`).
    pub fn watch_event_table(
        &self,
        obj: &Value,
        now: Timestamp,
        include: IncludeObject,
        with_headers: bool,
    ) -> Value {
        self.single(obj, now, include, with_headers)
    }

    fn single(&self, obj: &Value, now: Timestamp, include: IncludeObject, headers: bool) -> Value {
        let mut meta = Map::new();
        if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
            meta.insert("resourceVersion".into(), rv.clone());
        }
        self.table(meta, vec![self.row(obj, now, include)], headers)
    }

    fn table(&self, metadata: Map<String, Value>, rows: Vec<Value>, headers: bool) -> Value {
        let columns = if headers {
            serde_json::to_value(&self.columns).unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        json!({
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
            "columnDefinitions": columns,
            "rows": rows,
        })
    }
}

/// The `PartialObjectMetadata` kube-apiserver puts in rows by default.
pub fn partial_object_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

fn str_at<'a>(obj: &'a Value, pointer: &str) -> &'a str {
    obj.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

/// `layoutContainerCells`: the template's container names and images.
fn container_cells(obj: &Value) -> (String, String) {
    let containers = obj
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let field = |k: &str| {
        containers
            .iter()
            .map(|c| c[k].as_str().unwrap_or("").to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// `metav1.FormatLabelSelector` of `spec.selector`.
fn selector_text(obj: &Value) -> String {
    match LabelSelector::from_k8s_field(obj.pointer("/spec/selector")) {
        Ok(Some(sel)) if !sel.is_empty() => sel.to_string(),
        Ok(_) => "<none>".into(),
        Err(_) => "<error>".into(),
    }
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
fn format_labels(labels: Option<&Value>) -> String {
    let Some(map) = labels.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return "<none>".into();
    };
    let mut pairs: Vec<String> = map
        .iter()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// kube-apiserver's `printEvent`. `events.k8s.io` events carry the same data
/// under other names (`regarding`, `note`, `deprecated*`).
fn event_cells(ev: &Value, new_api: bool, now: Timestamp) -> Vec<Value> {
    let key = |core: &'static str, new: &'static str| if new_api { new } else { core };
    let text = |p: String| str_at(ev, &p).to_string();
    let involved = key("involvedObject", "regarding");
    let first_raw = text(format!(
        "/{}",
        key("firstTimestamp", "deprecatedFirstTimestamp")
    ));
    let last_raw = text(format!(
        "/{}",
        key("lastTimestamp", "deprecatedLastTimestamp")
    ));
    let first = if first_raw.is_empty() {
        age(ev.get("eventTime").and_then(Value::as_str), now)
    } else {
        age(Some(&first_raw), now)
    };
    let mut last = if last_raw.is_empty() {
        first.clone()
    } else {
        age(Some(&last_raw), now)
    };
    let mut count = ev
        .get(key("count", "deprecatedCount"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    match ev.get("series").filter(|s| s.is_object()) {
        Some(series) => {
            last = age(series["lastObservedTime"].as_str(), now);
            count = series["count"].as_i64().unwrap_or(0);
        }
        None if count == 0 => count = 1,
        None => {}
    }
    let kind = text(format!("/{involved}/kind")).to_lowercase();
    let obj_name = text(format!("/{involved}/name"));
    let target = if obj_name.is_empty() {
        kind
    } else {
        format!("{kind}/{obj_name}")
    };
    let source_key = key("source", "deprecatedSource");
    let component = Some(text(format!("/{source_key}/component")))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| text("/reportingController".into()));
    let instance = Some(text(format!("/{source_key}/host")))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| text("/reportingInstance".into()));
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text("/type".into())),
        json!(text("/reason".into())),
        json!(target),
        json!(text(format!("/{involved}/fieldPath"))),
        json!(source),
        json!(text(format!("/{}", key("message", "note"))).trim()),
        json!(first),
        json!(count),
        json!(text("/metadata/name".into())),
    ]
}

fn obj_len(obj: &Value, pointer: &str) -> usize {
    obj.pointer(pointer)
        .and_then(Value::as_object)
        .map_or(0, Map::len)
}

/// A custom-resource cell: the first match only, typed by the column type,
/// `null` when missing or mistyped (apiextensions' `cellForJSONValue`).
fn custom_cell(path: &JsonPath, type_: &str, obj: &Value, now: Timestamp) -> Value {
    let Some(value) = path.find_first(obj) else {
        return Value::Null;
    };
    if value.is_null() {
        return Value::Null;
    }
    match type_ {
        "string" => Value::String(print_value(value)),
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            _ => Value::Null,
        },
        "number" => match value {
            Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Value::from(i),
                // Go encodes an integral float64 without a fraction.
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => Value::from(f as i64),
                (None, Some(f)) => Value::from(f),
                _ => Value::Null,
            },
            _ => Value::Null,
        },
        "boolean" => match value {
            Value::Bool(b) => Value::Bool(*b),
            _ => Value::Null,
        },
        "date" => match value {
            Value::String(s) => Value::String(age(Some(s), now)),
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

fn node_cells(node: &Value, name: Value, created: String) -> Vec<Value> {
    let mut status: Vec<String> = Vec::new();
    if let Some(ready) = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
    {
        status.push(
            if ready["status"] == "True" {
                "Ready"
            } else {
                "NotReady"
            }
            .into(),
        );
    }
    if status.is_empty() {
        status.push("Unknown".into());
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }

    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            let role = if let Some(r) = k.strip_prefix("node-role.kubernetes.io/") {
                r.to_string()
            } else if k == "kubernetes.io/role" {
                v.as_str().unwrap_or("").to_string()
            } else {
                continue;
            };
            if !role.is_empty() && !roles.contains(&role) {
                roles.push(role);
            }
        }
    }
    roles.sort();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };

    let address = |kind: &str| {
        node.pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == kind))
            .and_then(|x| x["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let info = |key: &str| {
        let v = str_at(node, &format!("/status/nodeInfo/{key}"));
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        name,
        json!(status.join(",")),
        json!(roles),
        json!(created),
        json!(str_at(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(kernel_cell(node, info("kernelVersion"))),
        json!(info("containerRuntimeVersion")),
    ]
}

/// The KERNEL-VERSION cell: kube-apiserver 1.37 adds the architecture when the node reports one.
fn kernel_cell(node: &Value, kernel: String) -> String {
    match str_at(node, "/status/nodeInfo/architecture") {
        "" => kernel,
        arch => format!("{kernel} ({arch})"),
    }
}

fn terminated_at(status: &Value) -> Option<Timestamp> {
    status
        .pointer("/lastState/terminated/finishedAt")
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Timestamp>().ok())
}

fn later(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    }
}

fn has_condition(pod: &Value, type_: &str) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// kube-apiserver's `printPod`: cells and the row's `Completed` condition.
fn pod_row(pod: &Value, now: Timestamp) -> (Vec<Value>, Option<Value>) {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let empty = Vec::new();
    let arr = |v: &Value| v.as_array().unwrap_or(&empty).clone();
    let containers = arr(&spec["containers"]);
    let init_specs = arr(&spec["initContainers"]);
    let init_statuses = arr(&status["initContainerStatuses"]);
    let statuses = arr(&status["containerStatuses"]);

    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut total = containers.len();
    let mut ready = 0usize;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;

    let phase = status["phase"].as_str().unwrap_or("");
    let mut reason = phase.to_string();
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    if status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    }) {
        reason = "SchedulingGated".into();
    }

    let conditions = match phase {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    };

    let restartable = |name: &str| {
        init_specs
            .iter()
            .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
    };
    total += init_specs
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();

    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        let count = c["restartCount"].as_i64().unwrap_or(0);
        restarts += count;
        last_restart = later(last_restart, terminated_at(c));
        let is_restartable = restartable(c["name"].as_str().unwrap_or(""));
        if is_restartable {
            restartable_restarts += count;
            last_restartable_restart = later(last_restartable_restart, terminated_at(c));
        }
        let terminated = c.pointer("/state/terminated");
        let waiting_reason = c
            .pointer("/state/waiting/reason")
            .and_then(Value::as_str)
            .unwrap_or("");
        if terminated.is_some_and(|t| t["exitCode"].as_i64() == Some(0)) {
            continue;
        }
        if is_restartable && c["started"].as_bool() == Some(true) {
            if c["ready"].as_bool() == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            let r = t["reason"].as_str().unwrap_or("");
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if let Some(sig) = t["signal"].as_i64().filter(|s| *s != 0) {
                format!("Init:Signal:{sig}")
            } else {
                format!("Init:ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0))
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing || has_condition(pod, "Initialized") {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for c in statuses.iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            last_restart = later(last_restart, terminated_at(c));
            let waiting = c
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .unwrap_or("");
            let terminated = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if let Some(t) = terminated {
                let r = t["reason"].as_str().unwrap_or("");
                reason = if !r.is_empty() {
                    r.to_string()
                } else if let Some(sig) = t["signal"].as_i64().filter(|s| *s != 0) {
                    format!("Signal:{sig}")
                } else {
                    format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0))
                };
            } else if c["ready"].as_bool() == Some(true) && c.pointer("/state/running").is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if has_condition(pod, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .into();
        }
    }

    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if deleting && status["reason"] == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_text = match last_restart {
        Some(ts) if restarts != 0 => {
            format!(
                "{restarts} ({} ago)",
                human_duration(now.duration_since(ts))
            )
        }
        _ => restarts.to_string(),
    };

    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let pod_ip = status["podIPs"]
        .as_array()
        .and_then(|ips| ips.first())
        .and_then(|ip| ip["ip"].as_str())
        .unwrap_or("");
    let gates = arr(&spec["readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let conds = arr(&status["conditions"]);
        let true_count = gates
            .iter()
            .filter(|g| {
                conds
                    .iter()
                    .find(|c| c["type"] == g["conditionType"])
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };

    let cells = vec![
        json!(str_at(pod, "/metadata/name")),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_text),
        json!(age(
            pod.pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str),
            now
        )),
        json!(or_none(pod_ip)),
        json!(or_none(str_at(pod, "/spec/nodeName"))),
        json!(or_none(str_at(pod, "/status/nominatedNodeName"))),
        json!(readiness_gates),
    ];
    (cells, conditions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_prints_desired_and_available_replicas() {
        let now: Timestamp = "2026-01-01T00:05:00Z".parse().unwrap();
        let scale = json!({"kind": "Scale", "metadata": {"name": "web",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {}, "status": {"replicas": 2}});
        for custom in [false, true] {
            let t = TableConvertor::for_scale(custom);
            let names: Vec<&str> = t
                .column_definitions()
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            assert_eq!(names, ["Name", "Desired", "Available", "Age"]);
            // Go's zero for the replicas the Scale leaves out.
            assert_eq!(
                t.cells(&scale, now),
                vec![json!("web"), json!(0), json!(2), json!("5m")]
            );
        }
        let builtin = TableConvertor::for_scale(false);
        let custom = TableConvertor::for_scale(true);
        assert_eq!(builtin.column_definitions()[0].format, "");
        assert_eq!(custom.column_definitions()[0].format, "name");
        assert_eq!(custom.column_definitions()[3].type_, "date");
    }

    #[test]
    fn human_duration_matches_upstream() {
        let cases: [(i64, &str); 22] = [
            (-3, "<invalid>"),
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (300, "5m"),
            (330, "5m30s"),
            (599, "9m59s"),
            (600, "10m"),
            (90 * 60, "90m"),
            (179 * 60 + 59, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 2 * 60, "3h2m"),
            (7 * 3600 + 59 * 60, "7h59m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (48 * 3600, "2d"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (8 * 86400, "8d"),
            (3 * 365 * 86400 + 10 * 86400, "3y10d"),
        ];
        for (secs, want) in cases {
            assert_eq!(
                human_duration(SignedDuration::from_secs(secs)),
                want,
                "{secs}s"
            );
        }
        assert_eq!(
            human_duration(SignedDuration::from_secs(2 * 365 * 86400)),
            "2y"
        );
        assert_eq!(
            human_duration(SignedDuration::from_secs(9 * 365 * 86400)),
            "9y"
        );
        assert_eq!(
            human_duration(SignedDuration::from_secs(729 * 86400)),
            "729d"
        );
    }

    #[test]
    fn age_handles_missing_and_bad_timestamps() {
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(age(None, now), "<unknown>");
        assert_eq!(age(Some(""), now), "<unknown>");
        assert_eq!(age(Some("yesterday"), now), "<invalid>");
        assert_eq!(age(Some("2026-11-30T09:55:00Z"), now), "5m");
        assert_eq!(age(Some("2026-11-30T11:55:00+02:00"), now), "5m");
    }

    #[test]
    fn include_object_query() {
        assert_eq!(
            IncludeObject::from_query(None),
            Some(IncludeObject::Metadata)
        );
        assert_eq!(
            IncludeObject::from_query(Some("Object")),
            Some(IncludeObject::Object)
        );
        assert_eq!(
            IncludeObject::from_query(Some("None")),
            Some(IncludeObject::None)
        );
        assert_eq!(IncludeObject::from_query(Some("Everything")), None);
    }

    #[test]
    fn node_kernel_version_names_the_architecture() {
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let t = TableConvertor::for_builtin("", "nodes");
        let kernel = |info: Value| {
            let node = json!({"metadata": {"name": "n"}, "status": {"nodeInfo": info}});
            t.cells(&node, now)[8].clone()
        };
        assert_eq!(
            kernel(json!({"kernelVersion": "6.11.0", "architecture": "arm64"})),
            json!("6.11.0 (arm64)")
        );
        assert_eq!(kernel(json!({"kernelVersion": "6.11.0"})), json!("6.11.0"));
        assert_eq!(
            kernel(json!({"architecture": "amd64"})),
            json!("<unknown> (amd64)")
        );
    }

    #[test]
    fn column_descriptions_are_the_full_field_docs() {
        let node = TableConvertor::for_builtin("", "nodes");
        let ip = &node.column_definitions()[5];
        assert_eq!(ip.name, "Internal-IP");
        assert!(
            ip.description
                .ends_with("consumers of the downward API (status.hostIP).")
        );
        let pods = TableConvertor::for_builtin("", "pods");
        assert!(pods.column_definitions()[6].description.ends_with(
            "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename"
        ));
    }

    #[test]
    fn service_accounts_have_name_and_age_only() {
        let now: Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        let t = TableConvertor::for_builtin("", "serviceaccounts");
        let names: Vec<&str> = t
            .column_definitions()
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["Name", "Age"]);
        let sa = json!({"metadata": {"name": "default", "creationTimestamp": "2026-11-30T09:00:00Z"}, "secrets": [{"name": "s"}]});
        assert_eq!(t.cells(&sa, now), vec![json!("default"), json!("60m")]);
    }
}
