//! Leader election on a `coordination.k8s.io/v1` Lease, with controller-runtime's timings (15 s
//! lease, renewed every 2 s, given up when not renewed for 10 s) so two replicas behave like
//! upstream's: one acts, the other takes over within the lease duration when the first dies.
//! Writes are conditional on the Lease's resourceVersion, so two candidates can never both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long a lease is valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// A leader that could not renew for this long steps down.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// How often candidates try to acquire and leaders renew.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

/// This replica's name in the Lease: the pod's name (`POD_NAME`, else `HOSTNAME`, else
/// `karpenter-rs`) joined by `_` to a suffix unique to this process, as upstream's
/// `<hostname>_<uuid>`. The suffix matters: two replicas must never share an identity (each would
/// take the other's lease as its own and both would lead), and a name alone is not enough — in the
/// distroless image the binary is PID 1 in every pod, and a restarted container keeps its pod's name.
pub fn identity(pod_name: Option<&str>, hostname: Option<&str>, unique: &str) -> String {
    let base = [pod_name, hostname]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or("karpenter-rs");
    format!("{base}_{unique}")
}

/// 128 bits no other process draws, written like a UUID. The randomness comes from the standard
/// library's per-process randomly seeded hasher keys (no extra dependency), mixed with the time
/// and the process ID.
pub fn unique_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut words = [0u64; 2];
    for (i, word) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_usize(i);
        *word = h.finish();
    }
    let bits = (u128::from(words[0]) << 64) | u128::from(words[1]);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// One candidate for leadership.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
}

/// What a look at the Lease decided.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// We hold the lease (newly or still).
    Leading,
    /// Someone else holds a valid lease.
    Following(String),
}

/// Whether `identity` may take (or keep) a lease held by `holder` last renewed at `renewed`
/// with `duration` seconds of validity, at `now`.
pub fn may_take(
    identity: &str,
    holder: Option<&str>,
    renewed: Option<Timestamp>,
    duration: i32,
    now: Timestamp,
) -> bool {
    match (holder, renewed) {
        (None | Some(""), _) => true,
        (Some(h), _) if h == identity => true,
        (Some(_), None) => true,
        (Some(_), Some(t)) => now > t + SignedDuration::from_secs(i64::from(duration)),
    }
}

impl LeaderElector {
    /// A candidate named `identity` for the Lease `namespace/name`.
    /// A candidate that does not lead yet (`leader_election_master_status` 0 until it does).
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        let election = Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
        };
        election.report(false);
        election
    }

    /// Tries once to acquire or renew the lease.
    pub async fn try_acquire_or_renew(&self) -> Result<Verdict, kube::Error> {
        let now = Timestamp::now();
        let duration = LEASE_DURATION.as_secs() as i32;
        let current = match self.api.get_opt(&self.name).await? {
            Some(l) => l,
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(duration),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                return match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(Verdict::Leading),
                    Err(kube::Error::Api(e)) if e.code == 409 => {
                        Ok(Verdict::Following(String::new()))
                    }
                    Err(e) => Err(e),
                };
            }
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone();
        if !may_take(
            &self.identity,
            holder.as_deref(),
            spec.renew_time.as_ref().map(|t| t.0),
            spec.lease_duration_seconds.unwrap_or(duration),
            now,
        ) {
            return Ok(Verdict::Following(holder.unwrap_or_default()));
        }
        let ours = holder.as_deref() == Some(self.identity.as_str());
        let mut lease = current.clone();
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(duration),
            acquire_time: if ours {
                spec.acquire_time.clone()
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(spec.lease_transitions.unwrap_or(0) + if ours { 0 } else { 1 }),
            ..Default::default()
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(Verdict::Leading),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                Ok(Verdict::Following(holder.unwrap_or_default()))
            }
            Err(e) => Err(e),
        }
    }

    /// Waits until this candidate leads.
    pub async fn acquire(&self) {
        let mut logged = false;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(Verdict::Leading) => {
                    tracing::info!(lease = %self.name, identity = %self.identity, "successfully acquired lease");
                    self.report(true);
                    return;
                }
                Ok(Verdict::Following(holder)) => {
                    if !logged {
                        tracing::info!(lease = %self.name, holder = %holder, "waiting to acquire lease");
                        logged = true;
                    }
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "could not read or write lease")
                }
            }
            tokio::time::sleep(RETRY_PERIOD).await;
        }
    }

    /// Renews the lease from the moment it is acquired until renewal fails for
    /// [`RENEW_DEADLINE`] (a hung request counts as failing) or someone else holds it; returns
    /// then, and the caller must stop acting. The deadline is shorter than the lease, so this
    /// replica stops before another one can take over.
    pub async fn keep(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(RETRY_PERIOD).await;
            let left = RENEW_DEADLINE.saturating_sub(last_ok.elapsed());
            match tokio::time::timeout(left, self.try_acquire_or_renew()).await {
                Ok(Ok(Verdict::Leading)) => last_ok = tokio::time::Instant::now(),
                Ok(Ok(Verdict::Following(holder))) => {
                    tracing::error!(lease = %self.name, holder = %holder, "leadership lost");
                    self.report(false);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(lease = %self.name, error = %e, "lease renewal failed")
                }
                Err(_) => tracing::warn!(lease = %self.name, "lease renewal timed out"),
            }
            if last_ok.elapsed() > RENEW_DEADLINE {
                tracing::error!(lease = %self.name, "could not renew lease within the deadline");
                self.report(false);
                return;
            }
        }
    }

    /// `leader_election_master_status` for this lease, as client-go's leader election sets it.
    fn report(&self, leading: bool) {
        crate::metrics::METRICS
            .leader_election_master_status
            .with_label_values(&[self.name.as_str()])
            .set(if leading { 1.0 } else { 0.0 });
    }

    /// Gives the lease up on a clean shutdown so another replica can lead at once.
    pub async fn release(&self) {
        self.report(false);
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
            let _ = self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_taken_only_when_free_ours_or_expired() {
        let t = Timestamp::from_second(1_000_000).expect("time");
        let later = |s| t + SignedDuration::from_secs(s);
        assert!(may_take("a", None, None, 15, t));
        assert!(may_take("a", Some(""), Some(t), 15, t));
        assert!(may_take("a", Some("a"), Some(t), 15, later(1)));
        assert!(!may_take("a", Some("b"), Some(t), 15, later(15)));
        assert!(may_take("a", Some("b"), Some(t), 15, later(16)));
    }

    #[test]
    fn identities_name_the_pod_and_never_repeat() {
        assert_eq!(
            identity(Some("karpenter-7d9f-abc"), Some("host"), "u"),
            "karpenter-7d9f-abc_u"
        );
        assert_eq!(identity(None, Some("host"), "u"), "host_u");
        assert_eq!(identity(Some(" "), Some("host"), "u"), "host_u");
        assert_eq!(identity(None, None, "u"), "karpenter-rs_u");
        // Two replicas with the same pod name (or both PID 1) still differ.
        let (a, b) = (unique_suffix(), unique_suffix());
        assert_ne!(a, b);
        assert_ne!(identity(Some("p"), None, &a), identity(Some("p"), None, &b));
        assert_eq!(a.len(), 36);
        assert_eq!(a.matches('-').count(), 4);
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }
}
