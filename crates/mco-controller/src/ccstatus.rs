//! ControllerConfig status, as upstream's template controller writes it: `observedGeneration`,
//! the `TemplateController*` conditions and `controllerCertificates` (see [`crate::certs`]);
//! and each pool's `certExpirys`, which upstream's node controller fills from them.
//!
//! A sync applies the template configs ([`crate::templates`]) and reads the bundles. Upstream
//! writes `Running=True` when a new generation arrives and `Completed` when its sync ends; here
//! the end state is written in one patch (`Running` is `False` after every sync, as upstream
//! leaves it). A spec the templates refuse, or a bundle that cannot be read, sets
//! `TemplateControllerFailing=True` with upstream's message and every error, each naming its
//! spec field; the certificates that could be read are still listed, the configs generated
//! before stay, and the render goes on with them.
//!
//! Only the fields named here are patched; others on the object are kept. A pool's
//! `certExpirys` is written only once the ControllerConfig carries a kube-apiserver serving CA,
//! so a pool adopted from upstream keeps upstream's until then.

use std::sync::Arc;

use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use mco_api::constants::cc_conditions;
use mco_api::pool::CertExpiry;
use mco_api::{
    ControllerConfig, ControllerConfigStatus, ControllerConfigStatusCondition, MachineConfigPool,
};
use serde_json::json;

use crate::Error;
use crate::certs::{self, KUBE_APISERVER_SERVING_CA};
use crate::ctx::Ctx;

/// The status the controller wants for `cc`: its owned fields computed, others carried over.
/// `template_error` is why the templates refused `cc`, if they did.
pub fn desired_status(
    cc: &ControllerConfig,
    version: &str,
    now: &str,
    template_error: Option<&str>,
) -> ControllerConfigStatus {
    let mut status = cc.status.clone().unwrap_or_default();
    let generation = cc.metadata.generation.unwrap_or_default();
    let parsed = certs::controller_certificates(&cc.spec);
    let conds = &mut status.conditions;
    if parsed.errors.is_empty() && template_error.is_none() {
        let message = format!(
            "sync completed towards ({generation}) generation using controller version {version}"
        );
        set(conds, cc_conditions::COMPLETED, "True", &message, now);
        set(conds, cc_conditions::RUNNING, "False", "", now);
        set(conds, cc_conditions::FAILING, "False", "", now);
    } else {
        let mut errors: Vec<String> = template_error
            .map(str::to_owned)
            .into_iter()
            .chain(parsed.errors.iter().map(ToString::to_string))
            .collect();
        // The templates refuse a malformed trust bundle in the words the bundle's error uses.
        let mut seen = std::collections::BTreeSet::new();
        errors.retain(|e| seen.insert(e.clone()));
        let message = format!(
            "failed to syncing towards ({generation}) generation using controller version {version}: {}",
            errors.join("; ")
        );
        set(conds, cc_conditions::FAILING, "True", &message, now);
        set(conds, cc_conditions::COMPLETED, "False", "", now);
        set(conds, cc_conditions::RUNNING, "False", "", now);
    }
    status.observed_generation = Some(generation);
    status.controller_certificates = parsed.certificates;
    status
}

/// Upstream's `SetControllerConfigStatusCondition`: the transition time moves only when the
/// status does.
fn set(
    conditions: &mut Vec<ControllerConfigStatusCondition>,
    type_: &str,
    status: &str,
    message: &str,
    now: &str,
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.last_transition_time = Some(now.to_owned());
            }
            c.status = status.to_owned();
            c.reason = String::new();
            c.message = message.to_owned();
        }
        None => conditions.push(ControllerConfigStatusCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            last_transition_time: Some(now.to_owned()),
            reason: String::new(),
            message: message.to_owned(),
        }),
    }
}

/// A pool's `certExpirys`: the kube-apiserver serving CA's certificates, as upstream lists
/// them; `None` (leave the field alone) when the ControllerConfig holds none.
pub fn cert_expirys(status: &ControllerConfigStatus) -> Option<Vec<CertExpiry>> {
    let expirys: Vec<CertExpiry> = status
        .controller_certificates
        .iter()
        .filter(|c| c.bundle_file == KUBE_APISERVER_SERVING_CA)
        .map(|c| CertExpiry {
            bundle: c.bundle_file.clone(),
            subject: c.subject.clone(),
            expiry: c.not_after.clone(),
        })
        .collect();
    (!expirys.is_empty()).then_some(expirys)
}

fn owned_differ(have: Option<&ControllerConfigStatus>, want: &ControllerConfigStatus) -> bool {
    let Some(have) = have else { return true };
    have.observed_generation != want.observed_generation
        || have.conditions != want.conditions
        || have.controller_certificates != want.controller_certificates
}

/// Reconciles the ControllerConfig's status, then every pool's `certExpirys`.
pub async fn reconcile(cc: Arc<ControllerConfig>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = cc.name_any();
    if name != mco_api::constants::names::CONTROLLER_CONFIG {
        return Ok(Action::await_change());
    }
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let template_error = if ctx.config.templates {
        crate::templates::apply(&cc, &ctx).await?
    } else {
        None
    };
    let want = desired_status(
        &cc,
        &ctx.config.controller_version,
        &now,
        template_error.as_deref(),
    );
    if owned_differ(cc.status.as_ref(), &want) {
        if let Some(f) = want
            .condition(cc_conditions::FAILING)
            .filter(|c| c.status == "True")
        {
            tracing::warn!(controllerconfig = %name, message = %f.message, "ControllerConfig refused");
        }
        let patch = json!({"status": {
            "observedGeneration": want.observed_generation,
            "conditions": want.conditions,
            "controllerCertificates": want.controller_certificates,
        }});
        Api::<ControllerConfig>::all(ctx.client.clone())
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    if let Some(expirys) = cert_expirys(&want) {
        let api: Api<MachineConfigPool> = Api::all(ctx.client.clone());
        for pool in ctx.pools.state() {
            let pool_name = pool.name_any();
            let held = ctx.known_pool(&pool_name).unwrap_or(pool);
            if held.status.as_ref().map(|s| &s.cert_expirys) == Some(&expirys) {
                continue;
            }
            let patch = json!({"status": {"certExpirys": expirys}});
            match api
                .patch_status(&pool_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(p) => ctx.wrote_pool(&p),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use mco_api::ControllerConfigSpec;
    use pretty_assertions::assert_eq;

    fn pem(cn: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.not_after = rcgen::date_time_ymd(2030, 6, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    fn cc(generation: i64, kube_ca: Option<String>) -> ControllerConfig {
        let mut cc = ControllerConfig::new(
            "machine-config-controller",
            ControllerConfigSpec {
                kube_api_server_serving_ca_data: kube_ca,
                ..Default::default()
            },
        );
        cc.metadata.generation = Some(generation);
        cc
    }

    fn cond<'a>(s: &'a ControllerConfigStatus, t: &str) -> (&'a str, &'a str) {
        let c = s.condition(t).unwrap();
        (c.status.as_str(), c.message.as_str())
    }

    #[test]
    fn a_good_spec_completes_with_upstreams_conditions_and_lists_its_certificates() {
        let s = desired_status(&cc(3, Some(pem("kube-ca"))), "v1", "T1", None);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(
            cond(&s, cc_conditions::COMPLETED),
            (
                "True",
                "sync completed towards (3) generation using controller version v1"
            )
        );
        assert_eq!(cond(&s, cc_conditions::RUNNING), ("False", ""));
        assert_eq!(cond(&s, cc_conditions::FAILING), ("False", ""));
        assert_eq!(s.controller_certificates.len(), 1);
        assert_eq!(
            cert_expirys(&s),
            Some(vec![CertExpiry {
                bundle: "KubeAPIServerServingCAData".into(),
                subject: "CN=kube-ca".into(),
                expiry: Some("2030-06-01T00:00:00Z".into()),
            }])
        );
    }

    #[test]
    fn a_malformed_bundle_fails_naming_the_field_and_recovers() {
        let bad = cc(4, Some("bm90IFBFTQ==".into()));
        let mut obj = cc(3, Some(pem("kube-ca")));
        obj.status = Some(desired_status(&obj, "v1", "T1", None));
        let mut failing = bad.clone();
        failing.status = obj.status.clone();
        let s = desired_status(&failing, "v1", "T2", None);
        let (status, message) = cond(&s, cc_conditions::FAILING);
        assert_eq!(status, "True");
        assert!(
            message.starts_with("failed to syncing towards (4) generation using controller version v1: spec.kubeAPIServerServingCAData:"),
            "{message}"
        );
        assert_eq!(cond(&s, cc_conditions::COMPLETED), ("False", ""));
        assert_eq!(s.observed_generation, Some(4));
        // A bundle without PEM blocks lists nothing, so the pools' expirys are left alone.
        assert_eq!(cert_expirys(&s), None);

        // Fixed: Completed again, and only the conditions whose status moved got a new time.
        let mut fixed = cc(5, Some(pem("kube-ca")));
        fixed.status = Some(s);
        let s = desired_status(&fixed, "v1", "T3", None);
        assert_eq!(cond(&s, cc_conditions::FAILING), ("False", ""));
        let time = |t: &str| s.condition(t).unwrap().last_transition_time.clone();
        assert_eq!(time(cc_conditions::FAILING).as_deref(), Some("T3"));
        assert_eq!(time(cc_conditions::RUNNING).as_deref(), Some("T1"));
    }

    #[test]
    fn a_refused_template_input_fails_before_the_bundle_errors() {
        let s = desired_status(
            &cc(2, Some("bm90IFBFTQ==".into())),
            "v1",
            "T1",
            Some("spec.clusterDNSIP: \"x\" is not an IP address"),
        );
        let (status, message) = cond(&s, cc_conditions::FAILING);
        assert_eq!(status, "True");
        assert!(
            message.starts_with("failed to syncing towards (2) generation using controller version v1: spec.clusterDNSIP: \"x\" is not an IP address; spec.kubeAPIServerServingCAData:"),
            "{message}"
        );
        let s = desired_status(&cc(2, None), "v1", "T1", Some("spec.ipFamilies: bad"));
        assert_eq!(
            cond(&s, cc_conditions::FAILING),
            (
                "True",
                "failed to syncing towards (2) generation using controller version v1: spec.ipFamilies: bad"
            )
        );
        assert_eq!(cond(&s, cc_conditions::COMPLETED), ("False", ""));
    }

    #[test]
    fn an_error_the_templates_and_the_bundles_both_report_is_said_once() {
        let mut obj = cc(2, None);
        obj.spec.additional_trust_bundle = Some("bm90IFBFTQ==".into());
        let said = "spec.additionalTrustBundle: no PEM certificate in the bundle";
        let s = desired_status(&obj, "v1", "T1", Some(said));
        assert_eq!(
            cond(&s, cc_conditions::FAILING),
            (
                "True",
                format!(
                    "failed to syncing towards (2) generation using controller version v1: {said}"
                )
                .as_str()
            )
        );
    }

    #[test]
    fn status_fields_mco_does_not_own_are_carried_over() {
        let mut obj = cc(1, None);
        let mut status = ControllerConfigStatus::default();
        status.other.insert("upstreamOnly".into(), json!(1));
        obj.status = Some(status);
        let s = desired_status(&obj, "v1", "T1", None);
        assert_eq!(s.other.get("upstreamOnly"), Some(&json!(1)));
        assert!(!owned_differ(Some(&s), &s));
    }
}
