//! The [`Reviewer`] of a real API server: a TokenReview and a SubjectAccessReview per question,
//! as the ServiceAccount bound to `system:auth-delegator` may create them.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::gate::{Access, ReviewError, Reviewer};

/// Reviews through `client`.
#[derive(Clone)]
pub struct Kube {
    client: kube::Client,
}

impl Kube {
    pub fn new(client: kube::Client) -> Kube {
        Kube { client }
    }
}

/// The user a TokenReview's status names, or `None` when it did not authenticate the token.
pub fn reviewed_user(review: &TokenReview) -> Option<UserInfo> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    Some(status.user.clone().unwrap_or_default())
}

/// The question for `user` doing `verb` on the non-resource `path`.
pub fn access_review(user: &UserInfo, verb: &str, path: &str) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_string()),
                verb: Some(verb.to_string()),
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Its answer: allowed only when the authorizer said so and did not also deny.
pub fn access(review: &SubjectAccessReview) -> Access {
    let status = review.status.as_ref();
    Access {
        allowed: status.is_some_and(|s| s.allowed && s.denied != Some(true)),
        reason: status
            .and_then(|s| s.reason.clone().or_else(|| s.evaluation_error.clone()))
            .unwrap_or_default(),
    }
}

impl Reviewer for Kube {
    async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
        Ok(reviewed_user(&answer))
    }

    async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> Result<Access, ReviewError> {
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &access_review(user, verb, path))
            .await
            .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
        Ok(access(&answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::TokenReviewStatus;
    use k8s_openapi::api::authorization::v1::SubjectAccessReviewStatus;
    use std::collections::BTreeMap;

    #[test]
    fn only_an_authenticated_review_names_a_user() {
        let review = |authenticated| TokenReview {
            status: Some(TokenReviewStatus {
                authenticated,
                user: Some(UserInfo {
                    username: Some("u".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            reviewed_user(&review(Some(true)))
                .unwrap()
                .username
                .as_deref(),
            Some("u")
        );
        assert_eq!(reviewed_user(&review(Some(false))), None);
        assert_eq!(reviewed_user(&review(None)), None);
        assert_eq!(reviewed_user(&TokenReview::default()), None);
    }

    #[test]
    fn the_access_review_asks_about_the_whole_user_and_the_path() {
        let user = UserInfo {
            username: Some("system:serviceaccount:mon:prometheus".into()),
            uid: Some("0b1c".into()),
            groups: Some(vec!["system:serviceaccounts".into()]),
            extra: Some(BTreeMap::from([("k".to_string(), vec!["v".to_string()])])),
        };
        let r = serde_json_value(&access_review(&user, "get", "/metrics"));
        assert_eq!(
            r,
            r#"{"apiVersion":"authorization.k8s.io/v1","kind":"SubjectAccessReview","metadata":{},"spec":{"extra":{"k":["v"]},"groups":["system:serviceaccounts"],"nonResourceAttributes":{"path":"/metrics","verb":"get"},"uid":"0b1c","user":"system:serviceaccount:mon:prometheus"}}"#
        );
    }

    fn serde_json_value(r: &SubjectAccessReview) -> String {
        serde_json::to_string(r).unwrap()
    }

    #[test]
    fn a_denial_wins_and_its_reason_is_kept() {
        let review = |allowed, denied, reason: Option<&str>| SubjectAccessReview {
            status: Some(SubjectAccessReviewStatus {
                allowed,
                denied,
                reason: reason.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(access(&review(true, None, None)).allowed);
        assert!(!access(&review(true, Some(true), None)).allowed);
        let no = access(&review(false, None, Some("no RBAC policy matched")));
        assert_eq!(
            (no.allowed, no.reason.as_str()),
            (false, "no RBAC policy matched")
        );
        assert!(!access(&SubjectAccessReview::default()).allowed);
    }
}
