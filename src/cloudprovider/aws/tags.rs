//! The tags that tie EC2 resources to this cluster, its NodePools, NodeClaims and EC2NodeClasses,
//! and the tag filters selector terms turn into.
//!
//! Garbage collection, launch idempotency and drift all find instances again by these tags, so
//! they are spelled exactly as upstream Karpenter writes them: an instance launched by either
//! controller is recognised by the other.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, Tag};

use crate::apis::labels;
use crate::pacing::TokenBucket;
use tokio::time::Instant;

/// `eks:eks-cluster-name=<cluster>`: EKS console and cost reports group instances by it.
pub const EKS_CLUSTER_NAME: &str = "eks:eks-cluster-name";
/// `karpenter.sh/nodeclaim=<name>`: the NodeClaim an instance was launched for.
pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";

/// `kubernetes.io/cluster/<cluster>`: the cloud controller's ownership tag, valued `owned`.
pub fn cluster_tag_key(cluster: &str) -> String {
    format!("kubernetes.io/cluster/{cluster}")
}

/// Who an instance belongs to: the cluster, its NodePool and EC2NodeClass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    /// Cluster name.
    pub cluster: &'a str,
    /// NodePool name.
    pub nodepool: &'a str,
    /// EC2NodeClass name.
    pub nodeclass: &'a str,
}

/// The tags an instance, its volumes and its launch request carry: the node class' `spec.tags`
/// first, then Karpenter's own, which users may not override (the CRD forbids those keys).
pub fn launch_tags(owner: &Owner<'_>, user: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut out = user.clone();
    out.insert(cluster_tag_key(owner.cluster), "owned".into());
    out.insert(EKS_CLUSTER_NAME.into(), owner.cluster.into());
    out.insert(labels::NODEPOOL.into(), owner.nodepool.into());
    out.insert(labels::EC2NODECLASS.into(), owner.nodeclass.into());
    out
}

/// `Name=<node name>`: what the EC2 console shows for an instance.
pub const NAME: &str = "Name";

/// The tags a registered NodeClaim's instance gets (its Node's name as `Name`, the NodeClaim, the
/// cluster), less those it already carries (`existing`): a `Name` the node class's `tags` set at
/// launch, or a tag another writer put there, is not overwritten.
pub fn registration_tags(
    node_name: &str,
    nodeclaim: &str,
    cluster: &str,
    existing: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    [
        (NAME, node_name),
        (NODECLAIM, nodeclaim),
        (EKS_CLUSTER_NAME, cluster),
    ]
    .into_iter()
    .filter(|(k, _)| !existing.contains_key(*k))
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Registered instances named per second, after a burst of [`REGISTRATION_TAGGING_BURST`]: each
/// costs a DescribeInstances and a CreateTags, so a thousand Nodes registering at once are named
/// over about three minutes instead of spending EC2's request budget, which launches and
/// terminations share, in one burst. (Our choice: upstream paces this only through its
/// controller's work queue.)
pub const REGISTRATION_TAGGING_QPS: u32 = 5;
/// Registered instances named at once before [`REGISTRATION_TAGGING_QPS`] applies.
pub const REGISTRATION_TAGGING_BURST: u32 = 20;
/// How long a turn nobody came back for is kept (its NodeClaim went away first).
const TURN_KEPT: Duration = Duration::from_secs(10 * 60);

/// The turns NodeClaims get to name their instances: a token bucket whose tokens are handed out
/// in arrival order, and the turn each NodeClaim that found it empty was given, so it is not
/// waited for in a reconcile (the NodeClaim is asked to come back) and not taken twice.
#[derive(Debug)]
pub struct RegistrationPacing {
    bucket: TokenBucket,
    turns: Mutex<HashMap<String, Instant>>,
}

impl RegistrationPacing {
    /// A full bucket at `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            bucket: TokenBucket::new(REGISTRATION_TAGGING_QPS, REGISTRATION_TAGGING_BURST, now),
            turns: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `nodeclaim` may name its instance at `now`: `None` when it may (its turn has
    /// come, or a token was free), else how long until its turn, which is kept for it.
    pub fn turn(&self, nodeclaim: &str, now: Instant) -> Option<Duration> {
        let mut turns = self.turns.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(due) = turns.get(nodeclaim).copied() {
            if due <= now {
                turns.remove(nodeclaim);
                return None;
            }
            return Some(due - now);
        }
        let wait = self.bucket.reserve(now);
        if wait.is_zero() {
            return None;
        }
        turns.retain(|_, due| now.saturating_duration_since(*due) < TURN_KEPT);
        turns.insert(nodeclaim.to_string(), now + wait);
        Some(wait)
    }
}

/// Tags as the EC2 API takes them.
pub fn to_ec2(tags: &BTreeMap<String, String>) -> Vec<Tag> {
    tags.iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

/// Tags as EC2 reports them, as a map.
pub fn from_ec2(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_string(),
                t.value().unwrap_or_default().to_string(),
            ))
        })
        .collect()
}

/// The filters a selector term's `tags` become: `tag:<key>=<value>`, or `tag-key=<key>` when the
/// value is `*` (any value).
pub fn selector_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                filter("tag-key", [k.as_str()])
            } else {
                filter(&format!("tag:{k}"), [v.as_str()])
            }
        })
        .collect()
}

/// One EC2 filter.
pub fn filter<'a>(name: &str, values: impl IntoIterator<Item = &'a str>) -> Filter {
    Filter::builder()
        .name(name)
        .set_values(Some(values.into_iter().map(str::to_string).collect()))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thousand_registrations_are_named_at_the_pacing_rate_not_at_once() {
        let start = Instant::now();
        let pacing = RegistrationPacing::new(start);
        let turns: Vec<Option<Duration>> = (0..1000)
            .map(|i| pacing.turn(&format!("claim-{i}"), start))
            .collect();
        let immediate = turns.iter().filter(|t| t.is_none()).count();
        assert_eq!(immediate, REGISTRATION_TAGGING_BURST as usize);
        // The last is named once the 980 after the burst went at 5 per second: after 196 s.
        assert_eq!(turns[999], Some(Duration::from_secs(196)));
        assert!(turns.windows(2).all(|w| w[0] <= w[1]), "in arrival order");
        // Coming back early keeps the turn (no second token); on time, it is its turn.
        let later = start + Duration::from_secs(100);
        assert_eq!(
            pacing.turn("claim-999", later),
            Some(Duration::from_secs(96))
        );
        assert_eq!(
            pacing.turn("claim-999", start + Duration::from_secs(196)),
            None
        );
        // Served: a later call is a new turn, behind the queue.
        assert_eq!(
            pacing.turn("claim-999", start + Duration::from_secs(196)),
            Some(Duration::from_millis(200))
        );
    }

    #[test]
    fn karpenter_tags_win_over_user_tags() {
        let owner = Owner {
            cluster: "demo",
            nodepool: "default",
            nodeclass: "general",
        };
        let user = BTreeMap::from([
            ("team".to_string(), "a".to_string()),
            (labels::NODEPOOL.to_string(), "spoofed".to_string()),
        ]);
        let tags = launch_tags(&owner, &user);
        assert_eq!(tags["team"], "a");
        assert_eq!(tags[labels::NODEPOOL], "default");
        assert_eq!(tags["kubernetes.io/cluster/demo"], "owned");
        assert_eq!(tags[EKS_CLUSTER_NAME], "demo");
        assert_eq!(tags[labels::EC2NODECLASS], "general");
        assert_eq!(from_ec2(&to_ec2(&tags)), tags);
    }

    #[test]
    fn registration_tags_leave_the_ones_the_instance_has() {
        let all = registration_tags(
            "ip-10-0-0-1.ec2.internal",
            "default-x",
            "demo",
            &BTreeMap::new(),
        );
        assert_eq!(
            all,
            BTreeMap::from([
                (NAME.to_string(), "ip-10-0-0-1.ec2.internal".to_string()),
                (NODECLAIM.to_string(), "default-x".to_string()),
                (EKS_CLUSTER_NAME.to_string(), "demo".to_string()),
            ])
        );
        let existing = BTreeMap::from([
            (NAME.to_string(), "from-the-node-class".to_string()),
            (NODECLAIM.to_string(), "default-x".to_string()),
        ]);
        assert_eq!(
            registration_tags("ip-10-0-0-1.ec2.internal", "default-x", "demo", &existing),
            BTreeMap::from([(EKS_CLUSTER_NAME.to_string(), "demo".to_string())])
        );
    }

    #[test]
    fn wildcard_values_select_on_the_key_alone() {
        let filters = selector_filters(&BTreeMap::from([
            ("karpenter.sh/discovery".to_string(), "demo".to_string()),
            ("tier".to_string(), "*".to_string()),
        ]));
        let shown: Vec<(String, Vec<String>)> = filters
            .iter()
            .map(|f| {
                (
                    f.name().unwrap_or_default().to_string(),
                    f.values().to_vec(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "tag:karpenter.sh/discovery".to_string(),
                    vec!["demo".to_string()]
                ),
                ("tag-key".to_string(), vec!["tier".to_string()]),
            ]
        );
    }
}
