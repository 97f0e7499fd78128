//! What kube-apiserver gives a core/v1 Node or Pod, or an apps/v1 Deployment, ReplicaSet or
//! DaemonSet, besides what the client sent: the `SetDefaults_*` functions run on decode (a
//! pod template's spec as a Pod's, less what upstream keeps to Pods), the zero values Go's
//! encoder writes for struct fields `omitempty` does not drop (so a Node always has
//! `spec: {}`, a ReplicaSet `status: {replicas: 0}`), and, for a new Pod, the
//! admission plugins a default kube-apiserver runs (ServiceAccount, Priority,
//! DefaultTolerationSeconds) and the pod strategy's QoS class.
//!
//! Pure: the caller picks the random suffix of the service-account volume.

use serde_json::{Map, Value, json};

/// A field Go always writes, with the zero value it writes when the client sent none.
/// `*` in a path steps into every item of an existing list; other steps create objects.
const ZEROS: &[(&str, &str, Zero)] = &[
    ("Node", "spec", Zero::Object),
    (
        "Node",
        "status/daemonEndpoints/kubeletEndpoint/Port",
        Zero::Int,
    ),
    ("Node", "status/conditions/*/lastHeartbeatTime", Zero::Null),
    ("Node", "status/conditions/*/lastTransitionTime", Zero::Null),
    ("Node", "status/nodeInfo/machineID", Zero::Str),
    ("Node", "status/nodeInfo/systemUUID", Zero::Str),
    ("Node", "status/nodeInfo/bootID", Zero::Str),
    ("Node", "status/nodeInfo/kernelVersion", Zero::Str),
    ("Node", "status/nodeInfo/osImage", Zero::Str),
    ("Node", "status/nodeInfo/containerRuntimeVersion", Zero::Str),
    ("Node", "status/nodeInfo/kubeletVersion", Zero::Str),
    ("Node", "status/nodeInfo/kubeProxyVersion", Zero::Str),
    ("Node", "status/nodeInfo/operatingSystem", Zero::Str),
    ("Node", "status/nodeInfo/architecture", Zero::Str),
    ("Pod", "spec", Zero::Object),
    ("Pod", "status", Zero::Object),
    ("Pod", "spec/containers/*/resources", Zero::Object),
    ("Pod", "spec/initContainers/*/resources", Zero::Object),
    ("Pod", "spec/ephemeralContainers/*/resources", Zero::Object),
    ("Pod", "status/conditions/*/lastProbeTime", Zero::Null),
    ("Pod", "status/conditions/*/lastTransitionTime", Zero::Null),
    ("Deployment", "status", Zero::Object),
    ("ReplicaSet", "status/replicas", Zero::Int),
    ("DaemonSet", "status/currentNumberScheduled", Zero::Int),
    ("DaemonSet", "status/numberMisscheduled", Zero::Int),
    ("DaemonSet", "status/desiredNumberScheduled", Zero::Int),
    ("DaemonSet", "status/numberReady", Zero::Int),
];

/// The apps/v1 kinds with a pod template, whose template gets what Go writes for a Pod's.
const TEMPLATED: &[&str] = &["Deployment", "ReplicaSet", "DaemonSet"];

/// What Go writes for a pod template's zero fields, below `spec/template`.
const TEMPLATE_ZEROS: &[(&str, Zero)] = &[
    ("metadata", Zero::Object),
    ("spec", Zero::Object),
    ("spec/containers/*/resources", Zero::Object),
    ("spec/initContainers/*/resources", Zero::Object),
    ("spec/ephemeralContainers/*/resources", Zero::Object),
];

#[derive(Debug, Clone, Copy)]
enum Zero {
    Object,
    Null,
    Int,
    Str,
}

impl Zero {
    fn value(self) -> Value {
        match self {
            Zero::Object => json!({}),
            Zero::Null => Value::Null,
            Zero::Int => json!(0),
            Zero::Str => json!(""),
        }
    }
}

/// The mount path the ServiceAccount admission plugin mounts the token volume at.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the token volume's name; a random suffix follows.
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";

/// Defaults a decoded core/v1 object (Node, Pod) or apps/v1 one (Deployment, ReplicaSet,
/// DaemonSet) of `kind` in place, as on every create and update. The caller picks objects of
/// these two groups: a kind of another group with the same name is not these.
pub fn on_decode(kind: &str, obj: &mut Value) {
    if !obj.is_object() {
        return;
    }
    match kind {
        "Node" => node(obj),
        "Pod" => pod(obj),
        "Deployment" => deployment(obj),
        "ReplicaSet" => replica_set(obj),
        "DaemonSet" => daemon_set(obj),
        _ => return,
    }
    for (_, path, zero) in ZEROS.iter().filter(|(k, _, _)| *k == kind) {
        let steps: Vec<&str> = path.split('/').collect();
        fill(obj, &steps, *zero);
    }
    if TEMPLATED.contains(&kind) {
        for (path, zero) in TEMPLATE_ZEROS {
            let steps: Vec<&str> = ["spec", "template"]
                .into_iter()
                .chain(path.split('/'))
                .collect();
            fill(obj, &steps, *zero);
        }
    }
}

/// The object's `spec`, made an object when absent or null (Go's zero struct).
fn spec_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let o = obj.as_object_mut().expect("checked by on_decode");
    if !o.get("spec").is_some_and(Value::is_object) {
        o.insert("spec".into(), json!({}));
    }
    o["spec"].as_object_mut().expect("just made an object")
}

/// `SetDefaults_Deployment`: one replica, a RollingUpdate of 25% down and 25% surge, ten
/// old ReplicaSets kept, and ten minutes to progress; then the template.
fn deployment(obj: &mut Value) {
    let spec = spec_mut(obj);
    set_if_absent(spec, "replicas", json!(1));
    rolling_update(spec, "strategy", json!("25%"), json!("25%"));
    set_if_absent(spec, "revisionHistoryLimit", json!(10));
    set_if_absent(spec, "progressDeadlineSeconds", json!(600));
    template(spec);
}

/// A workload's update strategy at `key`: `RollingUpdate` when no type is set, and a rolling
/// update's bounds when that is the type (a Deployment's `strategy`, a DaemonSet's
/// `updateStrategy`).
fn rolling_update(
    spec: &mut Map<String, Value>,
    key: &str,
    max_unavailable: Value,
    max_surge: Value,
) {
    let strategy = object_at(spec, key);
    if strategy
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        strategy.insert("type".into(), json!("RollingUpdate"));
    }
    if strategy.get("type") == Some(&json!("RollingUpdate")) {
        let ru = object_at(strategy, "rollingUpdate");
        set_if_absent(ru, "maxUnavailable", max_unavailable);
        set_if_absent(ru, "maxSurge", max_surge);
    }
}

/// `SetDefaults_ReplicaSet`: one replica; then the template.
fn replica_set(obj: &mut Value) {
    let spec = spec_mut(obj);
    set_if_absent(spec, "replicas", json!(1));
    template(spec);
}

/// `SetDefaults_DaemonSet`: a RollingUpdate of one node at a time without surge, and ten old
/// revisions kept; then the template.
fn daemon_set(obj: &mut Value) {
    let spec = spec_mut(obj);
    rolling_update(spec, "updateStrategy", json!(1), json!(0));
    set_if_absent(spec, "revisionHistoryLimit", json!(10));
    template(spec);
}

/// The object at `key`, made one when absent or null (a Go struct or a pointer the defaults
/// allocate).
fn object_at<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    if !m.get(key).is_some_and(Value::is_object) {
        m.insert(key.into(), json!({}));
    }
    m[key].as_object_mut().expect("just made an object")
}

/// A pod template's spec is defaulted as a Pod's by `SetDefaults_PodSpec` and the container
/// and volume defaults, but not by `SetDefaults_Pod` (no requests from limits, no
/// `enableServiceLinks`, no host ports): upstream keeps those to Pods.
fn template(spec: &mut Map<String, Value>) {
    let t = object_at(spec, "template");
    pod_spec(object_at(t, "spec"));
}

fn fill(v: &mut Value, steps: &[&str], zero: Zero) {
    let Some((first, rest)) = steps.split_first() else {
        return;
    };
    if *first == "*" {
        if let Value::Array(items) = v {
            for item in items.iter_mut().filter(|i| i.is_object()) {
                fill(item, rest, zero);
            }
        }
        return;
    }
    let Value::Object(m) = v else { return };
    if rest.is_empty() {
        if m.get(*first).is_none_or(|c| c.is_null()) {
            m.insert((*first).to_string(), zero.value());
        }
        return;
    }
    // A struct sent as null decodes to its zero value; a list step needs an existing list.
    let list_next = rest.first() == Some(&"*");
    match m.get_mut(*first) {
        Some(child) if !child.is_null() => fill(child, rest, zero),
        _ if list_next => {}
        _ => {
            let mut child = json!({});
            fill(&mut child, rest, zero);
            m.insert((*first).to_string(), child);
        }
    }
}

fn set_if_absent(m: &mut Map<String, Value>, key: &str, value: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.to_string(), value);
    }
}

/// `SetDefaults_NodeStatus`: allocatable copies capacity when absent.
fn node(obj: &mut Value) {
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut)
        && status.get("allocatable").is_none_or(Value::is_null)
        && let Some(cap) = status.get("capacity").filter(|c| c.is_object()).cloned()
    {
        status.insert("allocatable".into(), cap);
    }
}

fn pod(obj: &mut Value) {
    let spec = spec_mut(obj);
    // SetDefaults_Pod.
    if spec
        .get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|s| s < 0)
    {
        spec.insert("terminationGracePeriodSeconds".into(), json!(1));
    }
    for list in ["containers", "initContainers"] {
        for c in items_mut(spec, list) {
            requests_from_limits(c);
        }
    }
    set_if_absent(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&json!(true)) {
        for list in ["containers", "initContainers"] {
            for c in items_mut(spec, list) {
                for p in items_mut(c, "ports") {
                    if p.get("hostPort").is_none_or(Value::is_null)
                        && let Some(cp) = p.get("containerPort").cloned()
                    {
                        p.insert("hostPort".into(), cp);
                    }
                }
            }
        }
    }
    pod_spec(spec);
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        pod_status(status);
    }
}

/// `SetDefaults_PodSpec`, then the containers' and volumes' defaults: what a Pod and a pod
/// template share.
fn pod_spec(spec: &mut Map<String, Value>) {
    let sa = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .or_else(|| spec.get("serviceAccount").and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    if sa.is_empty() {
        spec.remove("serviceAccountName");
        spec.remove("serviceAccount");
    } else {
        spec.insert("serviceAccountName".into(), json!(sa));
        spec.insert("serviceAccount".into(), json!(sa));
    }
    set_if_absent(spec, "dnsPolicy", json!("ClusterFirst"));
    set_if_absent(spec, "restartPolicy", json!("Always"));
    set_if_absent(spec, "securityContext", json!({}));
    set_if_absent(spec, "terminationGracePeriodSeconds", json!(30));
    set_if_absent(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in items_mut(spec, list) {
            container(c);
        }
    }
    for v in items_mut(spec, "volumes") {
        volume(v);
    }
}

/// `SetDefaults_PodStatus`: the singular IP and the list agree.
fn pod_status(status: &mut Map<String, Value>) {
    let ip = status
        .get("podIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let first = status
        .get("podIPs")
        .and_then(|l| l.get(0))
        .and_then(|i| i.get("ip"))
        .and_then(Value::as_str)
        .map(str::to_string);
    match (ip, first) {
        (Some(ip), first) if first.as_deref() != Some(&ip) => {
            status.insert("podIPs".into(), json!([{"ip": ip}]));
        }
        (None, Some(first)) => {
            status.insert("podIP".into(), json!(first));
        }
        _ => {}
    }
}

fn items_mut<'a>(
    m: &'a mut Map<String, Value>,
    key: &str,
) -> impl Iterator<Item = &'a mut Map<String, Value>> {
    m.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// Requests default to limits, on a Pod only.
fn requests_from_limits(c: &mut Map<String, Value>) {
    let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    if !res.get("requests").is_some_and(Value::is_object) {
        res.insert("requests".into(), json!({}));
    }
    let req = res["requests"]
        .as_object_mut()
        .expect("just made an object");
    for (k, v) in limits {
        req.entry(k).or_insert(v);
    }
}

/// The image's tag as upstream's `ParseImageName` finds it: `latest` when there is neither a
/// tag nor a digest.
fn image_tag(image: &str) -> &str {
    let (name, digest) = match image.split_once('@') {
        Some((n, _)) => (n, true),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.split_once(':') {
        Some((_, tag)) => tag,
        None if digest => "",
        None => "latest",
    }
}

/// `SetDefaults_Container`, with its ports and probes.
fn container(c: &mut Map<String, Value>) {
    let policy = match image_tag(c.get("image").and_then(Value::as_str).unwrap_or("")) {
        "latest" => "Always",
        _ => "IfNotPresent",
    };
    if c.get("imagePullPolicy")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        c.insert("imagePullPolicy".into(), json!(policy));
    }
    set_if_absent(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_if_absent(c, "terminationMessagePolicy", json!("File"));
    for p in items_mut(c, "ports") {
        set_if_absent(p, "protocol", json!("TCP"));
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            for (k, d) in [
                ("timeoutSeconds", 1),
                ("periodSeconds", 10),
                ("successThreshold", 1),
                ("failureThreshold", 3),
            ] {
                if p.get(k).and_then(Value::as_i64).unwrap_or(0) == 0 {
                    p.insert(k.into(), json!(d));
                }
            }
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                set_if_absent(h, "path", json!("/"));
                set_if_absent(h, "scheme", json!("HTTP"));
            }
        }
    }
    for e in items_mut(c, "env") {
        if let Some(f) = e
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            set_if_absent(f, "apiVersion", json!("v1"));
        }
    }
}

/// The volume sources that carry a `defaultMode` (0644).
const MODED_SOURCES: &[&str] = &["secret", "configMap", "downwardAPI", "projected"];
/// Every volume source: a volume with none gets an `emptyDir`.
const SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

fn volume(v: &mut Map<String, Value>) {
    if !SOURCES
        .iter()
        .any(|s| v.get(*s).is_some_and(|x| !x.is_null()))
    {
        v.insert("emptyDir".into(), json!({}));
    }
    for s in MODED_SOURCES {
        if let Some(src) = v.get_mut(*s).and_then(Value::as_object_mut) {
            set_if_absent(src, "defaultMode", json!(420));
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        set_if_absent(h, "type", json!(""));
    }
    if let Some(d) = v.get_mut("downwardAPI").and_then(Value::as_object_mut) {
        field_refs(d);
    }
    if let Some(p) = v.get_mut("projected").and_then(Value::as_object_mut) {
        for s in items_mut(p, "sources") {
            if let Some(t) = s
                .get_mut("serviceAccountToken")
                .and_then(Value::as_object_mut)
            {
                set_if_absent(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = s.get_mut("downwardAPI").and_then(Value::as_object_mut) {
                field_refs(d);
            }
        }
    }
    if let Some(i) = v.get_mut("image").and_then(Value::as_object_mut)
        && i.get("pullPolicy").is_none_or(Value::is_null)
    {
        let policy = match image_tag(i.get("reference").and_then(Value::as_str).unwrap_or("")) {
            "latest" => "Always",
            _ => "IfNotPresent",
        };
        i.insert("pullPolicy".into(), json!(policy));
    }
}

fn field_refs(d: &mut Map<String, Value>) {
    for item in items_mut(d, "items") {
        if let Some(f) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
            set_if_absent(f, "apiVersion", json!("v1"));
        }
    }
}

/// The tolerations the DefaultTolerationSeconds plugin adds, for 300 s each.
const DEFAULT_TOLERATIONS: &[&str] = &[
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// What a default kube-apiserver's admission plugins and the pod strategy's `PrepareForCreate`
/// add to a new, already defaulted Pod. `suffix` is the service-account volume's random part.
pub fn on_pod_create(obj: &mut Value, suffix: &str) {
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    service_account(spec, suffix);
    priority(spec);
    default_tolerations(spec);
    let qos = qos_class(spec);
    if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
        status.insert("qosClass".into(), json!(qos));
    }
}

/// The ServiceAccount plugin: the `default` account, and its token, the cluster CA and the
/// namespace projected at [`TOKEN_MOUNT_PATH`] in every container that mounts nothing there.
fn service_account(spec: &mut Map<String, Value>, suffix: &str) {
    if spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        spec.insert("serviceAccountName".into(), json!("default"));
        spec.insert("serviceAccount".into(), json!("default"));
    }
    if spec.get("automountServiceAccountToken") == Some(&json!(false)) {
        return;
    }
    let existing = items_mut(spec, "volumes")
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
        .find(|n| n.starts_with(TOKEN_VOLUME_PREFIX));
    let name = existing
        .clone()
        .unwrap_or_else(|| format!("{TOKEN_VOLUME_PREFIX}{suffix}"));
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        for c in items_mut(spec, list) {
            let has = items_mut(c, "volumeMounts")
                .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH));
            if has {
                continue;
            }
            if !c.get("volumeMounts").is_some_and(Value::is_array) {
                c.insert("volumeMounts".into(), json!([]));
            }
            c["volumeMounts"]
                .as_array_mut()
                .expect("just made a list")
                .push(json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}));
            mounted = true;
        }
    }
    if mounted && existing.is_none() {
        if !spec.get("volumes").is_some_and(Value::is_array) {
            spec.insert("volumes".into(), json!([]));
        }
        spec["volumes"]
            .as_array_mut()
            .expect("just made a list")
            .push(json!({
                "name": name,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                    ]
                }
            }));
    }
}

/// The Priority plugin with only the built-in classes: no class is priority 0.
fn priority(spec: &mut Map<String, Value>) {
    let value = match spec.get("priorityClassName").and_then(Value::as_str) {
        None | Some("") => 0,
        Some("system-node-critical") => 2_000_001_000,
        Some("system-cluster-critical") => 2_000_000_000,
        // A class of the cluster's own: not known here, the pod keeps what it sent.
        Some(_) => return,
    };
    set_if_absent(spec, "priority", json!(value));
    set_if_absent(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
}

/// DefaultTolerationSeconds: tolerate a not-ready or unreachable node for 300 s unless the pod
/// already tolerates it.
fn default_tolerations(spec: &mut Map<String, Value>) {
    let tolerates = |t: &Map<String, Value>, key: &str| {
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        let tkey = t.get("key").and_then(Value::as_str).unwrap_or("");
        let exists = t.get("operator").and_then(Value::as_str) == Some("Exists");
        (effect.is_empty() || effect == "NoExecute") && (tkey == key || (tkey.is_empty() && exists))
    };
    let missing: Vec<&str> = DEFAULT_TOLERATIONS
        .iter()
        .copied()
        .filter(|key| !items_mut(spec, "tolerations").any(|t| tolerates(t, key)))
        .collect();
    if missing.is_empty() {
        return;
    }
    if !spec.get("tolerations").is_some_and(Value::is_array) {
        spec.insert("tolerations".into(), json!([]));
    }
    let list = spec["tolerations"]
        .as_array_mut()
        .expect("just made a list");
    for key in missing {
        list.push(
            json!({"key": key, "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": 300}),
        );
    }
}

/// The pod's QoS class from its containers' cpu and memory requests and limits.
fn qos_class(spec: &mut Map<String, Value>) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    for list in ["initContainers", "containers"] {
        for c in items_mut(spec, list) {
            let res = c.get("resources");
            let get = |kind: &str, r: &str| {
                res.and_then(|x| x.get(kind))
                    .and_then(|x| x.get(r))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            for r in ["cpu", "memory"] {
                let (req, lim) = (get("requests", r), get("limits", r));
                any |= req.is_some() || lim.is_some();
                guaranteed &= lim.is_some() && req.as_ref().is_none_or(|q| Some(q) == lim.as_ref());
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_gets_the_fields_go_always_writes() {
        let mut n = json!({"metadata": {"name": "a"},
            "status": {"capacity": {"cpu": "4"},
                       "conditions": [{"type": "Ready", "status": "True"}],
                       "nodeInfo": {"kubeletVersion": "v1"}}});
        on_decode("Node", &mut n);
        assert_eq!(n["spec"], json!({}));
        assert_eq!(
            n.pointer("/status/daemonEndpoints/kubeletEndpoint/Port"),
            Some(&json!(0))
        );
        assert_eq!(n.pointer("/status/allocatable"), Some(&json!({"cpu": "4"})));
        assert_eq!(
            n.pointer("/status/nodeInfo/kubeletVersion"),
            Some(&json!("v1"))
        );
        assert_eq!(n.pointer("/status/nodeInfo/bootID"), Some(&json!("")));
        assert_eq!(
            n.pointer("/status/conditions/0/lastHeartbeatTime"),
            Some(&Value::Null)
        );
        // Defaulting twice changes nothing: an update of a defaulted object is a no-op.
        let once = n.clone();
        on_decode("Node", &mut n);
        assert_eq!(n, once);
    }

    #[test]
    fn a_pod_is_defaulted_as_set_defaults_does() {
        let mut p = json!({"metadata": {"name": "p"}, "spec": {
            "terminationGracePeriodSeconds": -5,
            "containers": [
                {"name": "a", "image": "r.example:5000/web", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"cpu": "1"}},
                 "readinessProbe": {"httpGet": {"port": 80}}},
                {"name": "b", "image": "web:2", "imagePullPolicy": "Never"},
                {"name": "c", "image": "web@sha256:00"}],
            "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}}]}});
        on_decode("Pod", &mut p);
        let s = &p["spec"];
        assert_eq!(s["terminationGracePeriodSeconds"], json!(1));
        assert_eq!(s["dnsPolicy"], json!("ClusterFirst"));
        assert_eq!(s["restartPolicy"], json!("Always"));
        assert_eq!(s["schedulerName"], json!("default-scheduler"));
        assert_eq!(s["securityContext"], json!({}));
        assert_eq!(s["enableServiceLinks"], json!(true));
        let c = &s["containers"];
        assert_eq!(c[0]["imagePullPolicy"], json!("Always"));
        assert_eq!(c[1]["imagePullPolicy"], json!("Never"));
        assert_eq!(c[2]["imagePullPolicy"], json!("IfNotPresent"));
        assert_eq!(c[0]["ports"][0]["protocol"], json!("TCP"));
        assert_eq!(c[0]["resources"]["requests"], json!({"cpu": "1"}));
        assert_eq!(c[1]["resources"], json!({}));
        assert_eq!(
            c[0]["terminationMessagePath"],
            json!("/dev/termination-log")
        );
        assert_eq!(c[0]["terminationMessagePolicy"], json!("File"));
        assert_eq!(c[0]["readinessProbe"]["periodSeconds"], json!(10));
        assert_eq!(c[0]["readinessProbe"]["httpGet"]["scheme"], json!("HTTP"));
        assert_eq!(s["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(s["volumes"][1]["secret"]["defaultMode"], json!(420));
        assert_eq!(p["status"], json!({}));
        assert_eq!(s.get("serviceAccountName"), None);
        let once = p.clone();
        on_decode("Pod", &mut p);
        assert_eq!(p, once);
    }

    #[test]
    fn a_new_pod_gets_what_the_admission_plugins_add() {
        let mut p = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]},
                           "status": {"phase": "Pending"}});
        on_decode("Pod", &mut p);
        on_pod_create(&mut p, "abcde");
        let s = &p["spec"];
        assert_eq!(s["serviceAccountName"], json!("default"));
        assert_eq!(s["serviceAccount"], json!("default"));
        assert_eq!(s["priority"], json!(0));
        assert_eq!(s["preemptionPolicy"], json!("PreemptLowerPriority"));
        assert_eq!(
            s["containers"][0]["volumeMounts"],
            json!([{"name": "kube-api-access-abcde", "readOnly": true,
                    "mountPath": TOKEN_MOUNT_PATH}])
        );
        assert_eq!(s["volumes"][0]["name"], json!("kube-api-access-abcde"));
        assert_eq!(
            s["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            json!(3607)
        );
        let keys: Vec<_> = s["tolerations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["key"].clone(), t["tolerationSeconds"].clone()))
            .collect();
        assert_eq!(
            keys,
            vec![
                (json!("node.kubernetes.io/not-ready"), json!(300)),
                (json!("node.kubernetes.io/unreachable"), json!(300))
            ]
        );
        assert_eq!(p["status"]["qosClass"], json!("BestEffort"));
    }

    #[test]
    fn admission_keeps_what_the_pod_already_says() {
        let mut p = json!({"spec": {
            "serviceAccountName": "sa", "automountServiceAccountToken": false,
            "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "a", "image": "x:1",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        on_decode("Pod", &mut p);
        on_pod_create(&mut p, "abcde");
        let s = &p["spec"];
        assert_eq!(s["serviceAccount"], json!("sa"));
        assert_eq!(s.get("volumes"), None);
        assert_eq!(s["containers"][0].get("volumeMounts"), None);
        assert_eq!(s["priority"], json!(2_000_001_000));
        assert_eq!(s["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(p["status"]["qosClass"], json!("Guaranteed"));
    }

    #[test]
    fn a_deployment_gets_set_defaults_deployment_and_a_defaulted_template() {
        let mut d = json!({"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": {
                "terminationGracePeriodSeconds": -5,
                "containers": [{"name": "a", "image": "web:1",
                    "resources": {"limits": {"cpu": "1"}}, "ports": [{"containerPort": 80}]}]}}}});
        on_decode("Deployment", &mut d);
        let s = &d["spec"];
        assert_eq!(s["replicas"], json!(1));
        assert_eq!(
            s["strategy"],
            json!({"type": "RollingUpdate",
                   "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        assert_eq!(s["revisionHistoryLimit"], json!(10));
        assert_eq!(s["progressDeadlineSeconds"], json!(600));
        assert_eq!(d["status"], json!({}));
        let t = &s["template"]["spec"];
        assert_eq!(t["dnsPolicy"], json!("ClusterFirst"));
        assert_eq!(t["restartPolicy"], json!("Always"));
        assert_eq!(t["schedulerName"], json!("default-scheduler"));
        assert_eq!(t["securityContext"], json!({}));
        let c = &t["containers"][0];
        assert_eq!(c["imagePullPolicy"], json!("IfNotPresent"));
        assert_eq!(c["terminationMessagePolicy"], json!("File"));
        assert_eq!(c["ports"][0]["protocol"], json!("TCP"));
        // SetDefaults_Pod is a Pod's only: no requests from limits, no service links, and a
        // negative grace period is the template's to keep (validation refuses it).
        assert_eq!(c["resources"], json!({"limits": {"cpu": "1"}}));
        assert_eq!(t.get("enableServiceLinks"), None);
        assert_eq!(t["terminationGracePeriodSeconds"], json!(-5));
        let once = d.clone();
        on_decode("Deployment", &mut d);
        assert_eq!(d, once);
    }

    #[test]
    fn a_deployment_keeps_what_it_says_and_recreate_has_no_rolling_update() {
        let mut d = json!({"spec": {"replicas": 0, "revisionHistoryLimit": 2,
            "progressDeadlineSeconds": 30, "strategy": {"type": "Recreate"},
            "template": {"spec": {"containers": [{"name": "a", "image": "web"}]}}}});
        on_decode("Deployment", &mut d);
        let s = &d["spec"];
        assert_eq!(s["replicas"], json!(0));
        assert_eq!(s["revisionHistoryLimit"], json!(2));
        assert_eq!(s["progressDeadlineSeconds"], json!(30));
        assert_eq!(s["strategy"], json!({"type": "Recreate"}));
        assert_eq!(s["template"]["metadata"], json!({}));
        assert_eq!(
            s["template"]["spec"]["containers"][0]["resources"],
            json!({})
        );
        // A rolling update given in part keeps its part.
        let mut d = json!({"spec": {"strategy": {"rollingUpdate": {"maxSurge": 0}}}});
        on_decode("Deployment", &mut d);
        assert_eq!(
            d["spec"]["strategy"]["rollingUpdate"],
            json!({"maxSurge": 0, "maxUnavailable": "25%"})
        );
    }

    #[test]
    fn a_daemonset_and_a_replicaset_get_their_defaults() {
        let mut ds = json!({"spec": {"template": {"spec": {
            "containers": [{"name": "a", "image": "agent"}]}}}});
        on_decode("DaemonSet", &mut ds);
        assert_eq!(
            ds["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(ds["spec"]["revisionHistoryLimit"], json!(10));
        assert_eq!(
            ds["status"],
            json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                   "desiredNumberScheduled": 0, "numberReady": 0})
        );
        assert_eq!(
            ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            json!("Always")
        );
        let mut ds = json!({"spec": {"updateStrategy": {"type": "OnDelete"}}});
        on_decode("DaemonSet", &mut ds);
        assert_eq!(ds["spec"]["updateStrategy"], json!({"type": "OnDelete"}));

        let mut rs = json!({"spec": {"template": {"spec": {"containers": []}}},
                            "status": {"readyReplicas": 2}});
        on_decode("ReplicaSet", &mut rs);
        assert_eq!(rs["spec"]["replicas"], json!(1));
        assert_eq!(rs["status"], json!({"readyReplicas": 2, "replicas": 0}));
        assert_eq!(rs["spec"].get("revisionHistoryLimit"), None);
        let once = rs.clone();
        on_decode("ReplicaSet", &mut rs);
        assert_eq!(rs, once);
    }

    #[test]
    fn image_tags_are_found_as_upstream_parses_them() {
        assert_eq!(image_tag("web"), "latest");
        assert_eq!(image_tag("r.example:5000/web"), "latest");
        assert_eq!(image_tag("r.example:5000/web:1"), "1");
        assert_eq!(image_tag("web@sha256:00"), "");
        assert_eq!(image_tag("web:latest"), "latest");
    }
}
