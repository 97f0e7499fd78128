//! The node guard: what the `mco-mcn-guards` and `mco-node-guards` ValidatingAdmissionPolicies
//! (`mco-manifests`) enforce on a real cluster, enforced here for every identity bound to a
//! node. RBAC cannot say "only your own node"; without this a daemon's token could retarget
//! another node's `desiredConfig`.
//!
//! Pure: the REST layer hands in the write (old and new object) and gets a message back.

use serde_json::Value;

/// MachineConfigNodes, which the MCN guard covers.
pub const MCN_GROUP: &str = "machineconfiguration.openshift.io";
pub const MCN_PLURAL: &str = "machineconfignodes";

/// The policies whose rules this module enforces, named as on a real cluster so a refusal
/// reads the same there and here.
pub const MCN_GUARDS: &str = "mco-mcn-guards";
pub const NODE_GUARDS: &str = "mco-node-guards";

/// One write as the guard sees it.
#[derive(Debug, Clone, Copy)]
pub struct Write<'a> {
    pub group: &'a str,
    pub plural: &'a str,
    /// A write to the `status` subresource.
    pub status: bool,
    pub name: &'a str,
    /// The stored object; `None` on create.
    pub old: Option<&'a Value>,
    /// The object as it would be stored; `None` on delete.
    pub new: Option<&'a Value>,
}

/// Whether `node`'s identity may make `w`: `None` if so, else kube-apiserver's 403 message
/// for a request a ValidatingAdmissionPolicy denied, naming the object and the node.
pub fn node_guard(node: &str, w: &Write) -> Option<String> {
    let (policy, qualified, reason) = match (w.group, w.plural) {
        (MCN_GROUP, MCN_PLURAL) => (
            MCN_GUARDS,
            format!("{MCN_PLURAL}.{MCN_GROUP}"),
            mcn(node, w)?,
        ),
        ("", "nodes") => (NODE_GUARDS, "nodes".to_string(), node_object(node, w)?),
        _ => return None,
    };
    Some(format!(
        "{qualified} \"{}\" is forbidden: ValidatingAdmissionPolicy '{policy}' with binding '{policy}-binding' denied request: {reason}",
        w.name
    ))
}

/// The object's own claim to a node: a MachineConfigNode names it in `spec.nodeRef.name`
/// (`spec.node.name` in upstream's newer shape), not only in its name.
fn node_refs(v: &Value) -> impl Iterator<Item = (&'static str, &str)> {
    [("nodeRef", "spec.nodeRef.name"), ("node", "spec.node.name")]
        .into_iter()
        .filter_map(move |(field, path)| {
            let n = v.get("spec")?.get(field)?.get("name")?.as_str()?;
            Some((path, n))
        })
}

fn mcn(node: &str, w: &Write) -> Option<String> {
    let owner = format!(
        "updates to MCN {} can only be done from the MCN's owner node",
        w.name
    );
    for v in [w.old, w.new].into_iter().flatten() {
        if let Some((path, other)) = node_refs(v).find(|(_, n)| *n != node) {
            return Some(format!(
                "{owner}: its {path} is {other}, the request is from node {node}"
            ));
        }
    }
    (w.name != node).then_some(owner)
}

fn labels(v: &Value) -> Option<&Value> {
    v.get("metadata")?.get("labels")
}

fn node_object(node: &str, w: &Write) -> Option<String> {
    if w.name != node {
        return Some(format!(
            "updates to node {} can only be done from the node itself (the request is from node {node})",
            w.name
        ));
    }
    let (Some(old), Some(new)) = (w.old, w.new) else {
        return None;
    };
    if w.status {
        return None;
    }
    if old.get("spec") != new.get("spec") {
        return Some(format!(
            "the machine config daemon may change only annotations of its node, not its spec (node {node})"
        ));
    }
    if labels(old) != labels(new) {
        return Some(format!(
            "the machine config daemon may change only annotations of its node, not its labels (node {node})"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node_write<'a>(name: &'a str, old: &'a Value, new: &'a Value) -> Write<'a> {
        Write {
            group: "",
            plural: "nodes",
            status: false,
            name,
            old: Some(old),
            new: Some(new),
        }
    }

    #[test]
    fn a_node_changes_only_annotations_of_its_own_node() {
        let old = json!({"metadata": {"name": "worker-0", "labels": {"a": "1"}}, "spec": {}});
        let annotated = json!({"metadata": {"name": "worker-0", "labels": {"a": "1"},
            "annotations": {"machineconfiguration.openshift.io/state": "Done"}}, "spec": {}});
        assert_eq!(
            node_guard("worker-0", &node_write("worker-0", &old, &annotated)),
            None
        );

        let other = node_guard("worker-0", &node_write("worker-1", &old, &annotated)).unwrap();
        assert_eq!(
            other,
            "nodes \"worker-1\" is forbidden: ValidatingAdmissionPolicy 'mco-node-guards' with binding 'mco-node-guards-binding' denied request: updates to node worker-1 can only be done from the node itself (the request is from node worker-0)"
        );
        let cordoned = json!({"metadata": {"name": "worker-0", "labels": {"a": "1"}},
            "spec": {"unschedulable": true}});
        let msg = node_guard("worker-0", &node_write("worker-0", &old, &cordoned)).unwrap();
        assert!(msg.ends_with("not its spec (node worker-0)"), "{msg}");
        let relabelled =
            json!({"metadata": {"name": "worker-0", "labels": {"a": "2"}}, "spec": {}});
        let msg = node_guard("worker-0", &node_write("worker-0", &old, &relabelled)).unwrap();
        assert!(msg.ends_with("not its labels (node worker-0)"), "{msg}");
        let unlabelled = json!({"metadata": {"name": "worker-0"}, "spec": {}});
        assert!(node_guard("worker-0", &node_write("worker-0", &old, &unlabelled)).is_some());

        // Its own status, and deleting or creating only its own Node.
        let status = Write {
            status: true,
            ..node_write("worker-0", &old, &cordoned)
        };
        assert_eq!(node_guard("worker-0", &status), None);
        let delete = Write {
            new: None,
            ..node_write("worker-1", &old, &old)
        };
        assert!(node_guard("worker-0", &delete).is_some());
        let create = Write {
            old: None,
            ..node_write("worker-0", &old, &cordoned)
        };
        assert_eq!(node_guard("worker-0", &create), None);
    }

    fn mcn_write<'a>(name: &'a str, old: Option<&'a Value>, new: Option<&'a Value>) -> Write<'a> {
        Write {
            group: MCN_GROUP,
            plural: MCN_PLURAL,
            status: false,
            name,
            old,
            new,
        }
    }

    #[test]
    fn a_machine_config_node_is_checked_by_its_node_reference_and_its_name() {
        let mine =
            json!({"metadata": {"name": "worker-0"}, "spec": {"nodeRef": {"name": "worker-0"}}});
        assert_eq!(
            node_guard("worker-0", &mcn_write("worker-0", None, Some(&mine))),
            None
        );
        assert_eq!(
            node_guard("worker-0", &mcn_write("worker-0", Some(&mine), Some(&mine))),
            None
        );
        // A generated name for another node's object.
        let theirs = json!({"metadata": {"name": "worker-1-x7k2p"}, "spec": {"nodeRef": {"name": "worker-1"}}});
        let msg = node_guard(
            "worker-0",
            &mcn_write("worker-1-x7k2p", None, Some(&theirs)),
        )
        .unwrap();
        assert_eq!(
            msg,
            "machineconfignodes.machineconfiguration.openshift.io \"worker-1-x7k2p\" is forbidden: ValidatingAdmissionPolicy 'mco-mcn-guards' with binding 'mco-mcn-guards-binding' denied request: updates to MCN worker-1-x7k2p can only be done from the MCN's owner node: its spec.nodeRef.name is worker-1, the request is from node worker-0"
        );
        // Its own name, another node's reference, in either shape.
        let retargeted =
            json!({"metadata": {"name": "worker-0"}, "spec": {"node": {"name": "worker-1"}}});
        let msg = node_guard(
            "worker-0",
            &mcn_write("worker-0", Some(&mine), Some(&retargeted)),
        )
        .unwrap();
        assert!(msg.contains("its spec.node.name is worker-1"), "{msg}");
        // Without a reference, the name decides, as upstream's policy does.
        let bare = json!({"metadata": {"name": "worker-1"}});
        let msg = node_guard("worker-0", &mcn_write("worker-1", None, Some(&bare))).unwrap();
        assert!(
            msg.ends_with("updates to MCN worker-1 can only be done from the MCN's owner node"),
            "{msg}"
        );
        assert!(node_guard("worker-0", &mcn_write("worker-1", Some(&bare), None)).is_some());
    }

    #[test]
    fn other_resources_are_not_guarded() {
        let cm = json!({"metadata": {"name": "x"}});
        let w = Write {
            group: "",
            plural: "configmaps",
            status: false,
            name: "x",
            old: None,
            new: Some(&cm),
        };
        assert_eq!(node_guard("worker-0", &w), None);
    }
}
