//! What RBAC cannot say: a daemon may write only its own node's objects.
//!
//! Both policies key on the node-name claim the API server puts into a pod-bound ServiceAccount
//! token (`request.userInfo.extra["authentication.kubernetes.io/node-name"]`), as upstream's
//! `mcn-guards` does. They match only requests made as the daemon's ServiceAccount, so the
//! controller and administrators keep whatever their RBAC allows. A caller impersonating the
//! ServiceAccount has no such claim and is refused.

use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
    ValidatingAdmissionPolicySpec, Validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::{DAEMON, NODE_NAME_CLAIM, Options};

/// Limits MachineConfigNode writes by the daemon to its own node's object.
pub const MCN_GUARDS: &str = "mco-mcn-guards";
/// Limits Node writes by the daemon to its own Node's annotations.
pub const NODE_GUARDS: &str = "mco-node-guards";

/// Upstream's message when a request carries no node-name claim.
pub fn missing_claim_message() -> String {
    format!("this user must have a \"{NODE_NAME_CLAIM}\" claim")
}

fn has_claim() -> String {
    format!("has(request.userInfo.extra) && ('{NODE_NAME_CLAIM}' in request.userInfo.extra)")
}

fn is_own_node() -> String {
    format!("object.metadata.name == request.userInfo.extra[\"{NODE_NAME_CLAIM}\"][0]")
}

/// The MCN's node reference, where its schema has one (`node` in upstream's, `nodeRef` in the
/// first documented shape; mco's CRD has both), names the caller's node too: a daemon may not
/// point its own object at another node.
fn node_field_is_own(field: &str) -> Validation {
    let claim = format!("request.userInfo.extra[\"{NODE_NAME_CLAIM}\"][0]");
    Validation {
        expression: format!(
            "!has(object.spec) || !has(object.spec.{field}) || object.spec.{field}.name == {claim}"
        ),
        message_expression: Some(format!(
            "'updates to MCN ' + string(object.metadata.name) + ' can only be done from the MCN\\'s owner node: its spec.{field}.name is ' + string(object.spec.{field}.name) + ', the request is from node ' + string({claim})"
        )),
        ..Default::default()
    }
}

fn only_daemon(opts: &Options) -> MatchCondition {
    MatchCondition {
        name: "check-only-mco-daemon-requests".to_string(),
        expression: format!(
            "request.userInfo.username == '{}'",
            opts.service_account_user(DAEMON)
        ),
    }
}

fn validation(expression: String, message: &str) -> Validation {
    Validation {
        expression,
        message: Some(message.to_string()),
        ..Default::default()
    }
}

fn constraints(group: &str, resources: &[&str], operations: &[&str]) -> MatchResources {
    MatchResources {
        match_policy: Some("Equivalent".to_string()),
        namespace_selector: Some(LabelSelector::default()),
        object_selector: Some(LabelSelector::default()),
        resource_rules: Some(vec![NamedRuleWithOperations {
            api_groups: Some(vec![group.to_string()]),
            // Every served version: mco writes MachineConfigNodes as v1alpha1, upstream as v1.
            api_versions: Some(vec!["*".to_string()]),
            operations: Some(operations.iter().map(|o| o.to_string()).collect()),
            resources: Some(resources.iter().map(|r| r.to_string()).collect()),
            scope: Some("*".to_string()),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

fn policy(
    name: &str,
    match_constraints: MatchResources,
    validations: Vec<Validation>,
    opts: &Options,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let meta = |name: String| ObjectMeta {
        name: Some(name),
        labels: Some(crate::rbac::labels("daemon")),
        ..Default::default()
    };
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(name.to_string()),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".to_string()),
            match_constraints: Some(match_constraints),
            match_conditions: Some(vec![only_daemon(opts)]),
            validations: Some(validations),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(format!("{name}-binding")),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.to_string()),
            validation_actions: Some(vec!["Deny".to_string()]),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// Upstream's `mcn-guards`, for mco's daemon ServiceAccount.
pub fn mcn_guards(opts: &Options) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    policy(
        MCN_GUARDS,
        constraints(
            mco_api::GROUP,
            &["machineconfignodes", "machineconfignodes/status"],
            &["CREATE", "UPDATE"],
        ),
        vec![
            validation(has_claim(), &missing_claim_message()),
            Validation {
                expression: is_own_node(),
                message_expression: Some(
                    "'updates to MCN ' + string(object.metadata.name) + ' can only be done from the MCN\\'s owner node'"
                        .to_string(),
                ),
                ..Default::default()
            },
            node_field_is_own("node"),
            node_field_is_own("nodeRef"),
        ],
        opts,
    )
}

/// The daemon's Node writes: its own Node, and nothing but annotations (no labels, no spec:
/// taints and cordoning are the controller's).
pub fn node_guards(
    opts: &Options,
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    policy(
        NODE_GUARDS,
        // The daemon cannot create Nodes (RBAC), and CREATE has no old object to compare.
        constraints("", &["nodes"], &["UPDATE"]),
        vec![
            validation(has_claim(), &missing_claim_message()),
            Validation {
                expression: is_own_node(),
                message_expression: Some(
                    "'updates to node ' + string(object.metadata.name) + ' can only be done from the node itself'"
                        .to_string(),
                ),
                ..Default::default()
            },
            validation(
                "has(object.spec) == has(oldObject.spec) && (!has(object.spec) || object.spec == oldObject.spec)"
                    .to_string(),
                "the machine config daemon may change only annotations of its node, not its spec",
            ),
            validation(
                "has(object.metadata.labels) == has(oldObject.metadata.labels) && (!has(object.metadata.labels) || object.metadata.labels == oldObject.metadata.labels)"
                    .to_string(),
                "the machine config daemon may change only annotations of its node, not its labels",
            ),
        ],
        opts,
    )
}

pub fn policies(
    opts: &Options,
) -> Vec<(ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding)> {
    vec![mcn_guards(opts), node_guards(opts)]
}
