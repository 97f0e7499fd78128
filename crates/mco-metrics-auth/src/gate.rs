//! Who may read a path: the bearer token of the `Authorization` header, authenticated by a
//! TokenReview, then `get` on the path authorized by a SubjectAccessReview for the reviewed
//! user. Both answers are cached as k8s.io/apiserver's delegating authenticator and authorizer
//! cache them for kube components, in bounded LRU caches keyed by a keyed hash (never the token
//! itself). Time is the caller's argument, so the caches are tested without waiting.
//!
//! Only a cache miss costs a review, but every new token is a miss: the reviews under way at
//! once are bounded, and a request that finds no room within a short wait is answered as the
//! API server answers past its in-flight limit (`429`, `Retry-After: 1`), instead of adding
//! to its load. Requests that miss on the same key at once share one review, as the delegating
//! authenticator's singleflight makes them: a burst of scrapes with one new token costs one
//! TokenReview, and takes one place, not one each.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hashlink::LruCache;
use k8s_openapi::api::authentication::v1::UserInfo;
use tokio::sync::{OnceCell, Semaphore};

/// Longest `Authorization` header read; a longer one is refused before any review.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The API server's verdict on a user's request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub allowed: bool,
    /// Why, in the authorizer's words (may be empty).
    pub reason: String,
}

/// A review call that failed (unreachable, timed out, refused): not an answer, never cached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// Asks the API server: TokenReview and SubjectAccessReview ([`crate::review::Kube`]).
pub trait Reviewer: Send + Sync + 'static {
    /// The token's user, or `None` when the API server does not authenticate it.
    fn authenticate(
        &self,
        token: &str,
    ) -> impl Future<Output = Result<Option<UserInfo>, ReviewError>> + Send;

    /// Whether `user` may `verb` the non-resource `path`.
    fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
    ) -> impl Future<Output = Result<Access, ReviewError>> + Send;
}

/// How long answers are kept, and how long a review may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// TokenReview answers, authenticated or not (the delegating authenticator's 2 minutes).
    pub authn_ttl: Duration,
    /// Allowed SubjectAccessReview answers (5 minutes)...
    pub allowed_ttl: Duration,
    /// ...and denied ones, kept shorter so a new RoleBinding takes effect soon (30 s).
    pub denied_ttl: Duration,
    /// Entries per cache; the least recently used goes first.
    pub entries: usize,
    /// Each review call; one that takes longer fails the request with 500.
    pub timeout: Duration,
    /// Review calls under way at once, TokenReviews and SubjectAccessReviews together.
    pub reviews: usize,
    /// How long a request that needs a review waits for one of those places before it is
    /// answered [`Outcome::Busy`].
    pub queue_wait: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            authn_ttl: Duration::from_secs(120),
            allowed_ttl: Duration::from_secs(300),
            denied_ttl: Duration::from_secs(30),
            entries: 1024,
            timeout: Duration::from_secs(10),
            reviews: 16,
            queue_wait: Duration::from_secs(1),
        }
    }
}

/// What a request gets, with controller-runtime's status and words
/// (`filters.WithAuthenticationAndAuthorization`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    /// No token, a malformed or over-long header, or a token the API server rejects.
    Unauthenticated,
    /// The TokenReview failed.
    AuthenticationFailed(ReviewError),
    /// The SubjectAccessReview said no.
    Denied {
        user: String,
        reason: String,
    },
    /// The SubjectAccessReview failed.
    AuthorizationFailed {
        user: String,
        error: ReviewError,
    },
    /// A review was needed, and [`Limits::reviews`] were under way for all of
    /// [`Limits::queue_wait`].
    Busy,
}

impl Outcome {
    pub fn status(&self) -> u16 {
        match self {
            Outcome::Allowed => 200,
            Outcome::Unauthenticated => 401,
            Outcome::Denied { .. } => 403,
            Outcome::AuthenticationFailed(_) | Outcome::AuthorizationFailed { .. } => 500,
            Outcome::Busy => 429,
        }
    }

    /// The response body, as Go's `http.Error` writes it (a line of text). A review's error
    /// is logged, not answered.
    pub fn body(&self) -> String {
        match self {
            Outcome::Allowed => String::new(),
            Outcome::Unauthenticated => "Unauthorized\n".into(),
            Outcome::AuthenticationFailed(_) => "Authentication failed\n".into(),
            Outcome::Denied { user, reason } if reason.is_empty() => {
                format!("Authorization denied for user {user}\n")
            }
            Outcome::Denied { user, reason } => {
                format!("Authorization denied for user {user}: {reason}\n")
            }
            Outcome::AuthorizationFailed { user, .. } => {
                format!("Authorization for user {user} failed\n")
            }
            Outcome::Busy => "Too many requests, please try again later.\n".into(),
        }
    }
}

/// The token of `Authorization: Bearer <token>`, as kube's bearer-token authenticator reads
/// it (the scheme in any case, surrounding blanks ignored); `None` for anything else.
pub fn bearer_token(header: Option<&[u8]>) -> Option<&str> {
    let header = header?;
    if header.len() > MAX_HEADER_BYTES {
        return None;
    }
    let text = std::str::from_utf8(header).ok()?;
    let mut parts = text.split_ascii_whitespace();
    let scheme = parts.next()?;
    let token = parts.next()?;
    if !scheme.eq_ignore_ascii_case("bearer") || parts.next().is_some() {
        return None;
    }
    Some(token)
}

/// Why a review gave no answer.
#[derive(Clone)]
enum Unanswered {
    Failed(ReviewError),
    /// Not asked: no room among the reviews under way.
    Busy,
}

type Key = [u8; 32];

struct Entry<T> {
    value: T,
    expires: Instant,
}

/// A bounded cache whose entries expire at the time given when they were put.
struct Cache<T>(Mutex<LruCache<Key, Entry<T>>>);

impl<T: Clone> Cache<T> {
    fn new(entries: usize) -> Cache<T> {
        Cache(Mutex::new(LruCache::new(entries.max(1))))
    }

    fn get(&self, key: &Key, now: Instant) -> Option<T> {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match c.get(key) {
            Some(e) if now < e.expires => Some(e.value.clone()),
            Some(_) => {
                c.remove(key);
                None
            }
            None => None,
        }
    }

    fn put(&self, key: Key, value: T, expires: Instant) {
        let mut c = self.0.lock().unwrap_or_else(|e| e.into_inner());
        c.insert(key, Entry { value, expires });
    }
}

type Flight<T> = Arc<OnceCell<Result<T, Unanswered>>>;

/// The reviews under way, by cache key: one per key, whose answer every request that asked
/// meanwhile gets. An entry lives only while a request waits on it, so there are never more
/// than requests in progress.
struct Flights<T>(Mutex<HashMap<Key, Flight<T>>>);

impl<T: Clone> Flights<T> {
    fn new() -> Flights<T> {
        Flights(Mutex::new(HashMap::new()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Flight<T>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `review`'s answer for `key`, or that of the review already under way for it. A request
    /// that goes away mid-review hands the review to another waiting on it (the cell starts it
    /// again for the next waiter), and the last one out removes the entry.
    async fn join<F>(&self, key: Key, review: impl FnOnce() -> F) -> Result<T, Unanswered>
    where
        F: Future<Output = Result<T, Unanswered>>,
    {
        let flight = Arc::clone(self.lock().entry(key).or_default());
        let seat = Seat {
            flights: self,
            key,
            flight: Some(flight),
        };
        let cell = seat.flight.as_ref().expect("held until dropped");
        cell.get_or_init(review).await.clone()
    }
}

/// One request's hold on a [`Flight`]; see [`Flights::join`].
struct Seat<'a, T> {
    flights: &'a Flights<T>,
    key: Key,
    flight: Option<Flight<T>>,
}

impl<T> Drop for Seat<'_, T> {
    fn drop(&mut self) {
        let mut map = self.flights.0.lock().unwrap_or_else(|e| e.into_inner());
        let Some(flight) = self.flight.take() else {
            return;
        };
        if let Some(current) = map.get(&self.key)
            && Arc::ptr_eq(current, &flight)
            // Answered (later requests read the cache), or no one else waits on it. Counted
            // under the lock, where every other seat takes and drops its share.
            && (flight.initialized() || Arc::strong_count(&flight) <= 2)
        {
            map.remove(&self.key);
        }
        drop(flight);
    }
}

/// SHA-256, from the TLS provider already in the binary.
fn sha256(parts: &[&[u8]]) -> Key {
    let rustls::SupportedCipherSuite::Tls13(suite) =
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256
    else {
        unreachable!("a TLS 1.3 suite")
    };
    let mut ctx = suite.common.hash_provider.start();
    for p in parts {
        // Length-prefixed, so that no two lists of parts hash the same bytes.
        ctx.update(&(p.len() as u64).to_be_bytes());
        ctx.update(p);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The authentication and authorization of one server's requests.
pub struct Gate<R> {
    reviewer: R,
    limits: Limits,
    /// Mixed into every token's hash, so a cache key reveals nothing outside this process.
    secret: [u8; 32],
    authn: Cache<Option<UserInfo>>,
    authz: Cache<Access>,
    /// One permit per review under way.
    reviews: Semaphore,
    authn_flights: Flights<Option<UserInfo>>,
    authz_flights: Flights<Access>,
}

impl<R: Reviewer> Gate<R> {
    pub fn new(reviewer: R, limits: Limits) -> Gate<R> {
        let mut secret = [0u8; 32];
        // ring's system randomness; without it the key is still a hash, only not secret.
        let _ = rustls::crypto::ring::default_provider()
            .secure_random
            .fill(&mut secret);
        Gate {
            reviewer,
            limits,
            secret,
            authn: Cache::new(limits.entries),
            authz: Cache::new(limits.entries),
            reviews: Semaphore::new(limits.reviews.max(1)),
            authn_flights: Flights::new(),
            authz_flights: Flights::new(),
        }
    }

    pub fn reviewer(&self) -> &R {
        &self.reviewer
    }

    /// Whether the request with this `Authorization` header may `verb` `path`, at `now`.
    pub async fn decide(
        &self,
        authorization: Option<&[u8]>,
        verb: &str,
        path: &str,
        now: Instant,
    ) -> Outcome {
        let Some(token) = bearer_token(authorization) else {
            return Outcome::Unauthenticated;
        };
        let user = match self.authenticate(token, now).await {
            Ok(Some(user)) => user,
            Ok(None) => return Outcome::Unauthenticated,
            Err(Unanswered::Failed(e)) => return Outcome::AuthenticationFailed(e),
            Err(Unanswered::Busy) => return Outcome::Busy,
        };
        let name = user.username.clone().unwrap_or_default();
        match self.authorize(&user, verb, path, now).await {
            Ok(a) if a.allowed => Outcome::Allowed,
            Ok(a) => Outcome::Denied {
                user: name,
                reason: a.reason,
            },
            Err(Unanswered::Failed(error)) => Outcome::AuthorizationFailed { user: name, error },
            Err(Unanswered::Busy) => Outcome::Busy,
        }
    }

    async fn authenticate(
        &self,
        token: &str,
        now: Instant,
    ) -> Result<Option<UserInfo>, Unanswered> {
        let key = sha256(&[&self.secret, token.as_bytes()]);
        if let Some(user) = self.authn.get(&key, now) {
            return Ok(user);
        }
        self.authn_flights
            .join(key, || async {
                let user = self.bounded(self.reviewer.authenticate(token)).await?;
                self.authn
                    .put(key, user.clone(), now + self.limits.authn_ttl);
                Ok(user)
            })
            .await
    }

    async fn authorize(
        &self,
        user: &UserInfo,
        verb: &str,
        path: &str,
        now: Instant,
    ) -> Result<Access, Unanswered> {
        let key = access_key(user, verb, path);
        if let Some(access) = self.authz.get(&key, now) {
            return Ok(access);
        }
        self.authz_flights
            .join(key, || async {
                let access = self
                    .bounded(self.reviewer.authorize(user, verb, path))
                    .await?;
                let ttl = if access.allowed {
                    self.limits.allowed_ttl
                } else {
                    self.limits.denied_ttl
                };
                self.authz.put(key, access.clone(), now + ttl);
                Ok(access)
            })
            .await
    }

    /// `call` once a place among the reviews under way is free, within its time.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, ReviewError>>,
    ) -> Result<T, Unanswered> {
        let Ok(Ok(_place)) =
            tokio::time::timeout(self.limits.queue_wait, self.reviews.acquire()).await
        else {
            return Err(Unanswered::Busy);
        };
        match tokio::time::timeout(self.limits.timeout, call).await {
            Ok(r) => r.map_err(Unanswered::Failed),
            Err(_) => Err(Unanswered::Failed(ReviewError(format!(
                "no answer within {:?}",
                self.limits.timeout
            )))),
        }
    }
}

/// Everything a SubjectAccessReview is asked about, hashed: its answer's cache key.
fn access_key(user: &UserInfo, verb: &str, path: &str) -> Key {
    let mut parts: Vec<&[u8]> = vec![
        verb.as_bytes(),
        path.as_bytes(),
        user.username.as_deref().unwrap_or_default().as_bytes(),
        user.uid.as_deref().unwrap_or_default().as_bytes(),
    ];
    let groups = user.groups.as_deref().unwrap_or_default();
    let count = groups.len().to_be_bytes();
    parts.push(&count);
    parts.extend(groups.iter().map(|g| g.as_bytes()));
    // A BTreeMap: one order for the same extra.
    let mut counts = vec![];
    for values in user.extra.iter().flatten().map(|(_, v)| v) {
        counts.push(values.len().to_be_bytes());
    }
    for ((k, values), n) in user.extra.iter().flatten().zip(&counts) {
        parts.push(k.as_bytes());
        parts.push(n);
        parts.extend(values.iter().map(|v| v.as_bytes()));
    }
    sha256(&parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Tokens to users, users allowed; counts the calls.
    #[derive(Default)]
    struct Fake {
        users: HashMap<String, String>,
        allowed: Vec<String>,
        fail_authn: bool,
        authn_calls: AtomicUsize,
        authz_calls: AtomicUsize,
        asked: Mutex<Vec<(UserInfo, String, String)>>,
    }

    impl Reviewer for Fake {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
            self.authn_calls.fetch_add(1, Ordering::SeqCst);
            if self.fail_authn {
                return Err(ReviewError("connection refused".into()));
            }
            Ok(self.users.get(token).map(|name| UserInfo {
                username: Some(name.clone()),
                uid: Some(format!("uid-{name}")),
                groups: Some(vec!["system:authenticated".into()]),
                extra: Some(BTreeMap::from([(
                    "authentication.kubernetes.io/node-name".to_string(),
                    vec!["n1".to_string()],
                )])),
            }))
        }

        async fn authorize(
            &self,
            user: &UserInfo,
            verb: &str,
            path: &str,
        ) -> Result<Access, ReviewError> {
            self.authz_calls.fetch_add(1, Ordering::SeqCst);
            self.asked
                .lock()
                .unwrap()
                .push((user.clone(), verb.into(), path.into()));
            let name = user.username.clone().unwrap_or_default();
            Ok(if self.allowed.contains(&name) {
                Access {
                    allowed: true,
                    reason: "RBAC: allowed by ClusterRoleBinding".into(),
                }
            } else {
                Access {
                    allowed: false,
                    reason: String::new(),
                }
            })
        }
    }

    fn gate() -> Gate<Fake> {
        Gate::new(
            Fake {
                users: HashMap::from([
                    (
                        "reader-token".into(),
                        "system:serviceaccount:mon:prometheus".into(),
                    ),
                    (
                        "nobody-token".into(),
                        "system:serviceaccount:mon:nobody".into(),
                    ),
                ]),
                allowed: vec!["system:serviceaccount:mon:prometheus".into()],
                ..Default::default()
            },
            Limits::default(),
        )
    }

    fn calls(g: &Gate<Fake>) -> (usize, usize) {
        (
            g.reviewer.authn_calls.load(Ordering::SeqCst),
            g.reviewer.authz_calls.load(Ordering::SeqCst),
        )
    }

    async fn decide(g: &Gate<Fake>, header: Option<&str>, now: Instant) -> Outcome {
        g.decide(header.map(str::as_bytes), "get", "/metrics", now)
            .await
    }

    #[test]
    fn bearer_tokens_are_read_as_kube_reads_them() {
        for (header, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("  BEARER   abc  ", Some("abc")),
            ("Bearer", None),
            ("Bearer ", None),
            ("Basic abc", None),
            ("abc", None),
            ("Bearer abc def", None),
            ("", None),
        ] {
            assert_eq!(bearer_token(Some(header.as_bytes())), want, "{header:?}");
        }
        assert_eq!(bearer_token(None), None);
        assert_eq!(bearer_token(Some(b"Bearer \xff\xfe")), None);
    }

    #[tokio::test]
    async fn no_header_or_a_malformed_one_is_unauthorized_without_a_review() {
        let g = gate();
        let now = Instant::now();
        for header in [
            None,
            Some("Basic cmVhZGVyOnB3"),
            Some("Bearer"),
            Some("reader-token"),
        ] {
            let o = decide(&g, header, now).await;
            assert_eq!(o, Outcome::Unauthenticated, "{header:?}");
            assert_eq!((o.status(), o.body().as_str()), (401, "Unauthorized\n"));
        }
        assert_eq!(calls(&g), (0, 0));
    }

    #[tokio::test]
    async fn an_over_long_header_is_unauthorized_without_a_review() {
        let g = gate();
        let long = format!("Bearer reader-token{}", " ".repeat(MAX_HEADER_BYTES));
        // Within the limit the same header (blanks trimmed) is the reader's.
        let fits = format!("Bearer reader-token{}", " ".repeat(MAX_HEADER_BYTES - 19));
        assert_eq!(fits.len(), MAX_HEADER_BYTES);
        let now = Instant::now();
        assert_eq!(decide(&g, Some(&long), now).await, Outcome::Unauthenticated);
        assert_eq!(calls(&g), (0, 0));
        assert_eq!(decide(&g, Some(&fits), now).await, Outcome::Allowed);
    }

    #[tokio::test]
    async fn a_token_the_api_server_rejects_is_unauthorized() {
        let g = gate();
        let o = decide(&g, Some("Bearer forged"), Instant::now()).await;
        assert_eq!(o, Outcome::Unauthenticated);
        assert_eq!(o.status(), 401);
        assert_eq!(calls(&g), (1, 0));
    }

    #[tokio::test]
    async fn a_failed_token_review_is_a_500_and_not_cached() {
        let mut g = gate();
        g.reviewer.fail_authn = true;
        let now = Instant::now();
        let o = decide(&g, Some("Bearer reader-token"), now).await;
        assert_eq!(
            (o.status(), o.body().as_str()),
            (500, "Authentication failed\n")
        );
        decide(&g, Some("Bearer reader-token"), now).await;
        assert_eq!(calls(&g), (2, 0));
    }

    #[tokio::test]
    async fn a_denied_user_gets_403_naming_the_user() {
        let g = gate();
        let o = decide(&g, Some("Bearer nobody-token"), Instant::now()).await;
        assert_eq!(o.status(), 403);
        assert_eq!(
            o.body(),
            "Authorization denied for user system:serviceaccount:mon:nobody\n"
        );
        let with_reason = Outcome::Denied {
            user: "u".into(),
            reason: "no RBAC policy matched".into(),
        };
        assert_eq!(
            with_reason.body(),
            "Authorization denied for user u: no RBAC policy matched\n"
        );
    }

    #[tokio::test]
    async fn an_allowed_user_is_asked_about_with_everything_the_review_said() {
        let g = gate();
        assert_eq!(
            decide(&g, Some("Bearer reader-token"), Instant::now()).await,
            Outcome::Allowed
        );
        let asked = g.reviewer.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        let (user, verb, path) = &asked[0];
        assert_eq!((verb.as_str(), path.as_str()), ("get", "/metrics"));
        assert_eq!(
            user.uid.as_deref(),
            Some("uid-system:serviceaccount:mon:prometheus")
        );
        assert_eq!(user.groups.as_ref().unwrap(), &["system:authenticated"]);
        assert!(
            user.extra
                .as_ref()
                .unwrap()
                .contains_key("authentication.kubernetes.io/node-name")
        );
    }

    #[tokio::test]
    async fn a_cached_answer_avoids_a_second_review() {
        let g = gate();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                decide(&g, Some("Bearer reader-token"), now).await,
                Outcome::Allowed
            );
        }
        assert_eq!(calls(&g), (1, 1));
        // The same user asking another path is another question.
        g.decide(Some(b"Bearer reader-token"), "get", "/other", now)
            .await;
        assert_eq!(calls(&g), (1, 2));
        // A token nobody knows is remembered as unknown for as long.
        decide(&g, Some("Bearer forged"), now).await;
        decide(&g, Some("Bearer forged"), now).await;
        assert_eq!(calls(&g), (2, 2));
        // Past the token's two minutes it is reviewed again.
        decide(
            &g,
            Some("Bearer reader-token"),
            now + Duration::from_secs(121),
        )
        .await;
        assert_eq!(calls(&g), (3, 2));
    }

    #[tokio::test]
    async fn a_denied_answer_expires_sooner_than_an_allowed_one() {
        let g = gate();
        let t0 = Instant::now();
        decide(&g, Some("Bearer reader-token"), t0).await;
        decide(&g, Some("Bearer nobody-token"), t0).await;
        assert_eq!(calls(&g), (2, 2));
        let t1 = t0 + Duration::from_secs(31);
        assert_eq!(
            decide(&g, Some("Bearer reader-token"), t1).await,
            Outcome::Allowed
        );
        assert_eq!(calls(&g), (2, 2), "the allowed answer is still kept");
        assert_eq!(
            decide(&g, Some("Bearer nobody-token"), t1).await.status(),
            403
        );
        assert_eq!(calls(&g), (2, 3), "the denied answer was asked again");
        // The token answers (2 minutes) outlive neither past their time.
        let t2 = t0 + Duration::from_secs(301);
        decide(&g, Some("Bearer reader-token"), t2).await;
        assert_eq!(calls(&g), (3, 4));
    }

    #[tokio::test]
    async fn the_caches_are_bounded() {
        let g = Gate::new(
            Fake {
                users: (0..4).map(|i| (format!("t{i}"), format!("u{i}"))).collect(),
                ..Default::default()
            },
            Limits {
                entries: 2,
                ..Limits::default()
            },
        );
        let now = Instant::now();
        for i in 0..4 {
            decide(&g, Some(&format!("Bearer t{i}")), now).await;
        }
        assert_eq!(g.authn.0.lock().unwrap().len(), 2);
        assert_eq!(g.authz.0.lock().unwrap().len(), 2);
        // t0 was evicted: asked again.
        decide(&g, Some("Bearer t0"), now).await;
        assert_eq!(calls(&g), (5, 5));
    }

    #[test]
    fn cache_keys_hold_no_token_and_tell_users_apart() {
        let g = gate();
        let key = sha256(&[&g.secret, b"reader-token"]);
        assert_ne!(key, sha256(&[b"reader-token"]), "keyed by a secret");
        assert!(!key.windows(6).any(|w| w == b"reader"));
        let u = |groups: &[&str]| UserInfo {
            username: Some("a".into()),
            groups: Some(groups.iter().map(|g| g.to_string()).collect()),
            ..Default::default()
        };
        assert_ne!(
            access_key(&u(&["g1", "g2"]), "get", "/metrics"),
            access_key(&u(&["g1g2"]), "get", "/metrics")
        );
        assert_ne!(
            access_key(&u(&[]), "get", "/metrics"),
            access_key(&u(&[]), "head", "/metrics")
        );
        assert_eq!(
            access_key(&u(&["g"]), "get", "/metrics"),
            access_key(&u(&["g"]), "get", "/metrics")
        );
    }

    /// Answers `known` at once; holds every other token's review until `release` closes.
    struct Held {
        in_flight: AtomicUsize,
        calls: AtomicUsize,
        release: tokio::sync::Semaphore,
    }

    impl Default for Held {
        fn default() -> Held {
            Held {
                in_flight: AtomicUsize::new(0),
                calls: AtomicUsize::new(0),
                release: tokio::sync::Semaphore::new(0),
            }
        }
    }

    impl Reviewer for Held {
        async fn authenticate(&self, token: &str) -> Result<Option<UserInfo>, ReviewError> {
            if token == "known" {
                return Ok(Some(UserInfo {
                    username: Some("reader".into()),
                    ..Default::default()
                }));
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            self.calls.fetch_add(1, Ordering::SeqCst);
            // Closed: every held review goes on.
            let _ = self.release.acquire().await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(None)
        }

        async fn authorize(&self, _: &UserInfo, _: &str, _: &str) -> Result<Access, ReviewError> {
            Ok(Access {
                allowed: true,
                reason: String::new(),
            })
        }
    }

    #[tokio::test]
    async fn reviews_under_way_are_bounded_and_a_request_past_them_is_told_to_retry() {
        let limits = Limits {
            reviews: 16,
            queue_wait: Duration::from_millis(50),
            ..Limits::default()
        };
        assert_eq!(Limits::default().reviews, limits.reviews);
        let g = std::sync::Arc::new(Gate::new(Held::default(), limits));
        let now = Instant::now();
        let known = async || {
            g.decide(Some(b"Bearer known"), "get", "/metrics", now)
                .await
        };
        assert_eq!(known().await, Outcome::Allowed);

        // At the limit: sixteen unknown tokens, all under review at once.
        let held: Vec<_> = (0..16)
            .map(|i| {
                let g = g.clone();
                tokio::spawn(async move {
                    let header = format!("Bearer unknown-{i}");
                    g.decide(Some(header.as_bytes()), "get", "/metrics", now)
                        .await
                })
            })
            .collect();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while g.reviewer.in_flight.load(Ordering::SeqCst) < 16 {
            assert!(std::time::Instant::now() < deadline, "16 reviews under way");
            tokio::task::yield_now().await;
        }

        // Past it: a seventeenth waits its 50 ms, then is told to come back, unasked.
        let o = tokio::time::timeout(
            Duration::from_secs(10),
            g.decide(Some(b"Bearer unknown-16"), "get", "/metrics", now),
        )
        .await
        .expect("answered without waiting for a review");
        assert_eq!(o, Outcome::Busy);
        assert_eq!(
            (o.status(), o.body().as_str()),
            (429, "Too many requests, please try again later.\n")
        );
        assert_eq!(g.reviewer.in_flight.load(Ordering::SeqCst), 16);
        // A cached answer needs no review.
        assert_eq!(known().await, Outcome::Allowed);

        g.reviewer.release.close();
        for h in held {
            assert_eq!(h.await.unwrap(), Outcome::Unauthenticated);
        }
        // Not remembered as busy: asked now that there is room.
        let o = g
            .decide(Some(b"Bearer unknown-16"), "get", "/metrics", now)
            .await;
        assert_eq!(o, Outcome::Unauthenticated);
    }

    /// Polls `what` until it holds, for at most 10 s.
    async fn until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(std::time::Instant::now() < deadline, "{what}");
            tokio::task::yield_now().await;
        }
    }

    fn waiting(g: &Gate<Held>) -> usize {
        g.authn_flights
            .lock()
            .values()
            .map(|f| Arc::strong_count(f) - 1)
            .sum()
    }

    #[tokio::test]
    async fn requests_with_the_same_new_token_share_one_review_and_one_place() {
        let limits = Limits {
            reviews: 1,
            queue_wait: Duration::from_millis(50),
            ..Limits::default()
        };
        let g = Arc::new(Gate::new(Held::default(), limits));
        let now = Instant::now();
        // More than the places: unshared, all but one would be Busy.
        let same: Vec<_> = (0..40)
            .map(|_| {
                let g = g.clone();
                tokio::spawn(
                    async move { g.decide(Some(b"Bearer new"), "get", "/metrics", now).await },
                )
            })
            .collect();
        until("40 requests waiting on one review", || waiting(&g) == 40).await;
        assert_eq!(g.authn_flights.lock().len(), 1);
        assert_eq!(g.reviewer.calls.load(Ordering::SeqCst), 1);
        assert_eq!(g.reviewer.in_flight.load(Ordering::SeqCst), 1);

        g.reviewer.release.close();
        for h in same {
            assert_eq!(h.await.unwrap(), Outcome::Unauthenticated);
        }
        assert_eq!(g.reviewer.calls.load(Ordering::SeqCst), 1);
        assert!(g.authn_flights.lock().is_empty(), "nothing left under way");
    }

    #[tokio::test]
    async fn a_request_that_goes_away_hands_its_review_on_and_leaves_nothing_behind() {
        let g = Arc::new(Gate::new(Held::default(), Limits::default()));
        let now = Instant::now();
        let ask = |g: &Arc<Gate<Held>>| {
            let g = g.clone();
            tokio::spawn(async move { g.decide(Some(b"Bearer new"), "get", "/metrics", now).await })
        };

        // Alone: gone mid-review, its entry goes with it.
        let first = ask(&g);
        until("the first review under way", || {
            g.reviewer.in_flight.load(Ordering::SeqCst) == 1
        })
        .await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        until("the abandoned review's entry removed", || {
            g.authn_flights.lock().is_empty()
        })
        .await;

        // With company: the one who started it goes, the other gets an answer.
        let starter = ask(&g);
        until("a review under way", || waiting(&g) == 1).await;
        let other = ask(&g);
        until("two waiting on it", || waiting(&g) == 2).await;
        starter.abort();
        until("the review started again for the one left", || {
            g.reviewer.calls.load(Ordering::SeqCst) == 3
        })
        .await;
        g.reviewer.release.close();
        assert_eq!(other.await.unwrap(), Outcome::Unauthenticated);
        assert!(g.authn_flights.lock().is_empty());
    }
}
