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
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
        }
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

    /// Renews the lease until renewal fails for [`RENEW_DEADLINE`] or someone else holds it;
    /// returns then, and the caller must stop acting.
    pub async fn keep(&self) {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(RETRY_PERIOD).await;
            match self.try_acquire_or_renew().await {
                Ok(Verdict::Leading) => last_ok = tokio::time::Instant::now(),
                Ok(Verdict::Following(holder)) => {
                    tracing::error!(lease = %self.name, holder = %holder, "leadership lost");
                    return;
                }
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "lease renewal failed");
                    if last_ok.elapsed() > RENEW_DEADLINE {
                        tracing::error!(lease = %self.name, "could not renew lease within the deadline");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up on a clean shutdown so another replica can lead at once.
    pub async fn release(&self) {
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
}
