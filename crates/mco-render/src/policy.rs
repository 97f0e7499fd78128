//! The node disruption policy of the `MachineConfiguration` named `cluster`: the administrator's
//! `spec.nodeDisruptionPolicy` checked field by field, merged over upstream's defaults, and the
//! merged result converted to and from `status.nodeDisruptionPolicyStatus.clusterPolicies`.
//!
//! Validation repeats the rules upstream's CRD enforces at admission (mco's own CRD is looser,
//! so that a bad policy is reported in a condition rather than lost in a rejected write). The
//! messages are upstream's, prefixed with the field path as the API server prints them.

use mco_api::operator::{
    MAX_POLICY_ACTIONS, MAX_SERVICE_NAME_LEN, MAX_SPEC_POLICIES, MAX_STATUS_POLICIES,
    NodeDisruptionPolicyClusterStatus, NodeDisruptionPolicyConfig, PolicyAction, PolicyFile,
    PolicyService, PolicySshKey, PolicyUnit,
};
use thiserror::Error;

use crate::actions::{DisruptionPolicies, FilePolicy, PostConfigAction, UnitPolicy};

/// Why a user policy was refused: the field and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    /// e.g. `spec.nodeDisruptionPolicy.files[0].actions[0].restart`.
    pub field: String,
    pub message: String,
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        message: message.into(),
    }
}

const SPEC: &str = "spec.nodeDisruptionPolicy";
const USER_TYPES: &[&str] = &[
    "Reboot",
    "Drain",
    "Reload",
    "Restart",
    "DaemonReload",
    "None",
];
const UNIT_SUFFIXES: &[&str] = &[
    "service",
    "socket",
    "device",
    "mount",
    "automount",
    "swap",
    "target",
    "path",
    "timer",
    "snapshot",
    "slice",
    "scope",
];

/// Upstream's service-name rules: `${NAME}${SERVICETYPE}`, at most 255 characters.
fn check_service_name(field: &str, name: &str) -> Result<(), PolicyError> {
    if name.len() > MAX_SERVICE_NAME_LEN {
        return Err(invalid(
            field,
            format!("Too long: may not be more than {MAX_SERVICE_NAME_LEN} bytes"),
        ));
    }
    let Some((stem, suffix)) = name.rsplit_once('.') else {
        return Err(invalid(
            field,
            "Invalid ${SERVICETYPE} in service name. Expected format is ${NAME}${SERVICETYPE}",
        ));
    };
    if !UNIT_SUFFIXES.contains(&suffix) {
        return Err(invalid(
            field,
            "Invalid ${SERVICETYPE} in service name. Expected format is ${NAME}${SERVICETYPE}",
        ));
    }
    let name_ok = !stem.is_empty()
        && stem
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '_' | '-' | '\\'));
    if !name_ok {
        return Err(invalid(
            field,
            "Invalid ${NAME} in service name. Expected format is ${NAME}${SERVICETYPE}, where {NAME} must be atleast 1 character long and can only consist of alphabets, digits, \":\", \"-\", \"_\", \".\", and \"\\\"",
        ));
    }
    Ok(())
}

fn service(
    field: &str,
    kind: &str,
    s: &Option<PolicyService>,
) -> Result<Option<String>, PolicyError> {
    match s {
        None => Ok(None),
        Some(s) => {
            check_service_name(&format!("{field}.{kind}.serviceName"), &s.service_name)?;
            Ok(Some(s.service_name.clone()))
        }
    }
}

/// One action; `allowed` lists the types accepted (users may not write `Special`).
fn action(
    field: &str,
    a: &PolicyAction,
    allowed: &[&str],
) -> Result<PostConfigAction, PolicyError> {
    if !allowed.contains(&a.type_.as_str()) {
        let supported: Vec<String> = allowed.iter().map(|t| format!("{t:?}")).collect();
        return Err(invalid(
            format!("{field}.type"),
            format!(
                "Unsupported value: {:?}: supported values: {}",
                a.type_,
                supported.join(", ")
            ),
        ));
    }
    let reload = service(field, "reload", &a.reload)?;
    let restart = service(field, "restart", &a.restart)?;
    if (a.type_ == "Reload") != reload.is_some() {
        return Err(invalid(
            format!("{field}.reload"),
            "reload is required when type is Reload, and forbidden otherwise",
        ));
    }
    if (a.type_ == "Restart") != restart.is_some() {
        return Err(invalid(
            format!("{field}.restart"),
            "restart is required when type is Restart, and forbidden otherwise",
        ));
    }
    Ok(match a.type_.as_str() {
        "Reboot" => PostConfigAction::Reboot,
        "Drain" => PostConfigAction::Drain,
        "DaemonReload" => PostConfigAction::DaemonReload,
        "None" => PostConfigAction::None,
        "Special" => PostConfigAction::Special,
        "Reload" => PostConfigAction::Reload(reload.unwrap_or_default()),
        _ => PostConfigAction::Restart(restart.unwrap_or_default()),
    })
}

/// A policy's action list: at most ten, `Reboot` and `None` only alone.
fn actions(
    field: &str,
    list: &[PolicyAction],
    allowed: &[&str],
) -> Result<Vec<PostConfigAction>, PolicyError> {
    let field = format!("{field}.actions");
    if list.len() > MAX_POLICY_ACTIONS {
        return Err(invalid(
            &field,
            format!(
                "Too many: {}: must have at most {MAX_POLICY_ACTIONS} items",
                list.len()
            ),
        ));
    }
    let out = list
        .iter()
        .enumerate()
        .map(|(i, a)| action(&format!("{field}[{i}]"), a, allowed))
        .collect::<Result<Vec<_>, _>>()?;
    if out.len() > 1 {
        if out.contains(&PostConfigAction::Reboot) {
            return Err(invalid(
                &field,
                "Reboot action can only be specified standalone, as it will override any other actions",
            ));
        }
        if out.contains(&PostConfigAction::None) {
            return Err(invalid(
                &field,
                "None action can only be specified standalone, as it will override any other actions",
            ));
        }
    }
    Ok(out)
}

/// The administrator's policies alone (no defaults), checked: the first invalid field is the
/// error.
pub fn validate_user_policies(
    config: &NodeDisruptionPolicyConfig,
) -> Result<DisruptionPolicies, PolicyError> {
    for (name, len) in [("files", config.files.len()), ("units", config.units.len())] {
        if len > MAX_SPEC_POLICIES {
            return Err(invalid(
                format!("{SPEC}.{name}"),
                format!("Too many: {len}: must have at most {MAX_SPEC_POLICIES} items"),
            ));
        }
    }
    let mut files: Vec<FilePolicy> = Vec::with_capacity(config.files.len());
    for (i, f) in config.files.iter().enumerate() {
        let field = format!("{SPEC}.files[{i}]");
        if !f.path.starts_with('/') {
            return Err(invalid(
                format!("{field}.path"),
                format!("Invalid value: {:?}: path must be absolute", f.path),
            ));
        }
        if files.iter().any(|p| p.path == f.path) {
            return Err(invalid(
                &field,
                format!("Duplicate value: {{\"path\":{:?}}}", f.path),
            ));
        }
        files.push(FilePolicy {
            path: f.path.clone(),
            actions: actions(&field, &f.actions, USER_TYPES)?,
        });
    }
    let mut units: Vec<UnitPolicy> = Vec::with_capacity(config.units.len());
    for (i, u) in config.units.iter().enumerate() {
        let field = format!("{SPEC}.units[{i}]");
        check_service_name(&format!("{field}.name"), &u.name)?;
        if units.iter().any(|p| p.name == u.name) {
            return Err(invalid(
                &field,
                format!("Duplicate value: {{\"name\":{:?}}}", u.name),
            ));
        }
        units.push(UnitPolicy {
            name: u.name.clone(),
            actions: actions(&field, &u.actions, USER_TYPES)?,
        });
    }
    let ssh = match &config.sshkey {
        Some(s) => actions(&format!("{SPEC}.sshkey"), &s.actions, USER_TYPES)?,
        None => Vec::new(),
    };
    Ok(DisruptionPolicies {
        files,
        units,
        ssh_key: ssh,
    })
}

/// Upstream's `MergeClusterPolicies`: the defaults with the administrator's policies on top, or
/// the error naming the first invalid field.
pub fn merge(
    config: Option<&NodeDisruptionPolicyConfig>,
) -> Result<DisruptionPolicies, PolicyError> {
    let Some(config) = config else {
        return Ok(DisruptionPolicies::default());
    };
    let user = validate_user_policies(config)?;
    Ok(DisruptionPolicies::default().with_user_policies(user.files, user.units, user.ssh_key))
}

fn wire(a: &PostConfigAction) -> PolicyAction {
    let svc = |s: &str| {
        Some(PolicyService {
            service_name: s.to_owned(),
        })
    };
    let (type_, reload, restart) = match a {
        PostConfigAction::None => ("None", None, None),
        PostConfigAction::Drain => ("Drain", None, None),
        PostConfigAction::DaemonReload => ("DaemonReload", None, None),
        PostConfigAction::Special => ("Special", None, None),
        PostConfigAction::Reboot => ("Reboot", None, None),
        PostConfigAction::Reload(s) => ("Reload", svc(s), None),
        PostConfigAction::Restart(s) => ("Restart", None, svc(s)),
    };
    PolicyAction {
        type_: type_.to_owned(),
        reload,
        restart,
    }
}

/// The merged policies as `status.nodeDisruptionPolicyStatus.clusterPolicies`.
pub fn to_status(p: &DisruptionPolicies) -> NodeDisruptionPolicyClusterStatus {
    NodeDisruptionPolicyClusterStatus {
        files: p
            .files
            .iter()
            .map(|f| PolicyFile {
                path: f.path.clone(),
                actions: f.actions.iter().map(wire).collect(),
            })
            .collect(),
        units: p
            .units
            .iter()
            .map(|u| PolicyUnit {
                name: u.name.clone(),
                actions: u.actions.iter().map(wire).collect(),
            })
            .collect(),
        sshkey: Some(PolicySshKey {
            actions: p.ssh_key.iter().map(wire).collect(),
        }),
    }
}

/// The merged policies the daemon acts on, read back from the status. `Special` is allowed
/// here (the controller writes it for registries.conf).
pub fn from_status(
    s: &NodeDisruptionPolicyClusterStatus,
) -> Result<DisruptionPolicies, PolicyError> {
    const STATUS: &str = "status.nodeDisruptionPolicyStatus.clusterPolicies";
    const ALL: &[&str] = &[
        "Reboot",
        "Drain",
        "Reload",
        "Restart",
        "DaemonReload",
        "None",
        "Special",
    ];
    for (name, len) in [("files", s.files.len()), ("units", s.units.len())] {
        if len > MAX_STATUS_POLICIES {
            return Err(invalid(
                format!("{STATUS}.{name}"),
                format!("Too many: {len}: must have at most {MAX_STATUS_POLICIES} items"),
            ));
        }
    }
    let files = s
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            Ok(FilePolicy {
                path: f.path.clone(),
                actions: actions(&format!("{STATUS}.files[{i}]"), &f.actions, ALL)?,
            })
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let units = s
        .units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            Ok(UnitPolicy {
                name: u.name.clone(),
                actions: actions(&format!("{STATUS}.units[{i}]"), &u.actions, ALL)?,
            })
        })
        .collect::<Result<Vec<_>, PolicyError>>()?;
    let ssh_key = match &s.sshkey {
        Some(k) if !k.actions.is_empty() => actions(&format!("{STATUS}.sshkey"), &k.actions, ALL)?,
        _ => DisruptionPolicies::default().ssh_key,
    };
    Ok(DisruptionPolicies {
        files,
        units,
        ssh_key,
    })
}
