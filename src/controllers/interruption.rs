//! The interruption consumer: the cloud provider's interruption notices (on AWS: EC2 spot
//! interruption warnings, rebalance recommendations, scheduled changes and instance state changes
//! from the SQS queue named by `INTERRUPTION_QUEUE`, fed by EventBridge rules) are each turned into
//! an action on the NodeClaim of the affected instance — deletion, which drains the node while the
//! provisioner replaces it — and the provider records what they say about capacity (an
//! interrupted spot offering becomes unavailable) so the replacement goes elsewhere.
//!
//! EC2's own health reports are acted on the same way ([`run_instance_health`]): every minute the
//! provider's failed status checks and scheduled events become notices, counted once per instance
//! and category in `karpenter_interruption_instance_status_unhealthy_total`.
//!
//! A notice is acknowledged only once everything it asked for is done: when marking the pool or
//! deleting a NodeClaim fails, it stays, and the source delivers it again (SQS: after its
//! visibility timeout, 20 s), so a passing API server outage does not lose an interruption.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, ResourceExt};

use crate::apis::{NodeClaim, labels};
use crate::cloudprovider::interruption::{
    InterruptionAction, InterruptionEvent, InterruptionMessage,
};
use crate::cloudprovider::{CloudProvider, provider_id_instance};
use crate::metrics::METRICS;
use crate::runtime::Context;
use crate::runtime::events::EventRecorder;
use crate::runtime::panics::guarded_pass;

/// Polls the provider's interruption source until the task is dropped (SQS long polling makes
/// this cheap); returns at once when the provider has none.
pub async fn run(ctx: Arc<Context>) {
    loop {
        let messages = match ctx.provider.interruptions().await {
            None => return,
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                tracing::warn!(controller = "interruption", error = %e, "could not read the interruption queue");
                tokio::time::sleep(Duration::from_secs(10)).await;
                continue;
            }
        };
        let claims = ctx.state.nodeclaims.state();
        let pass = async {
            for message in messages {
                if let Err(e) = handle(
                    &ctx.client,
                    &ctx.recorder,
                    &*ctx.provider,
                    &claims,
                    &message,
                    ctx.clock.now(),
                )
                .await
                {
                    tracing::warn!(controller = "interruption", error = %e, "interruption not handled; the message stays on the queue and comes back");
                }
            }
        };
        guarded_pass("interruption", &ctx, pass).await;
    }
}

/// The NodeClaims whose instances an event names.
pub fn affected<'a>(event: &InterruptionEvent, claims: &'a [Arc<NodeClaim>]) -> Vec<&'a NodeClaim> {
    claims
        .iter()
        .filter(|claim| {
            claim
                .status
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .and_then(provider_id_instance)
                .is_some_and(|id| event.instance_ids.iter().any(|i| i == id))
        })
        .map(|claim| &**claim)
        .collect()
}

/// Acts on one notice against `claims` (the NodeClaims known now) and acknowledges it when
/// everything succeeded. An error leaves the notice for redelivery. A handled notice's time on
/// the queue (from the event's time to `now`) goes into
/// `karpenter_interruption_message_queue_duration_seconds`, as upstream measures it.
pub async fn handle(
    client: &Client,
    recorder: &EventRecorder,
    cloud: &dyn CloudProvider,
    claims: &[Arc<NodeClaim>],
    message: &InterruptionMessage,
    now: DateTime<Utc>,
) -> Result<(), String> {
    if let Some(event) = &message.event {
        METRICS
            .interruption_received_messages_total
            .with_label_values(&[event.kind.as_str()])
            .inc();
        act(client, recorder, cloud, claims, event, now).await?;
        if let Some(sent) = event.time {
            METRICS
                .interruption_message_queue_duration_seconds
                .observe(seconds_between(sent, now));
        }
    }
    cloud
        .acknowledge_interruption(message)
        .await
        .map_err(|e| format!("could not delete the handled message: {e}"))?;
    METRICS.interruption_deleted_messages_total.inc();
    Ok(())
}

/// Seconds from `from` to `to`, never negative (the event's clock may run ahead of ours).
fn seconds_between(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

async fn act(
    client: &Client,
    recorder: &EventRecorder,
    cloud: &dyn CloudProvider,
    claims: &[Arc<NodeClaim>],
    event: &InterruptionEvent,
    now: DateTime<Utc>,
) -> Result<(), String> {
    let kind = event.kind.as_str();
    // Marked before the deletions so the replacements avoid the offering; a failure to mark must
    // not hold up the drain (a spot notice gives two minutes), so it is reported with the rest
    // and the message is redelivered.
    let mut failed = Vec::new();
    if let Err(e) = cloud.record_interruption(event).await {
        failed.push(format!(
            "could not mark the interrupted offering unavailable: {e}"
        ));
    }
    let api: Api<NodeClaim> = Api::all(client.clone());
    for claim in affected(event, claims) {
        let name = claim.name_any();
        let note = format!("{kind} for instances {}", event.instance_ids.join(", "));
        let e = Event {
            type_: EventType::Warning,
            reason: "Interruption".into(),
            note: Some(note.clone()),
            action: kind.into(),
            secondary: None,
        };
        if let Err(err) = recorder
            .publish(&e, &kube::Resource::object_ref(claim, &()))
            .await
        {
            tracing::debug!(controller = "interruption", error = %err, "could not record event");
        }
        if event.action == InterruptionAction::ForcefulTermination
            && !claim
                .annotations()
                .contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP)
        {
            let deadline = now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let patch = serde_json::json!({"metadata": {"annotations": {
                labels::NODECLAIM_TERMINATION_TIMESTAMP: deadline,
            }}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(err) => {
                    failed.push(format!("setting the termination deadline of {name}: {err}"));
                    continue;
                }
            }
        }
        if event.action == InterruptionAction::NoAction
            || claim.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        tracing::info!(controller = "interruption", nodeclaim = %name, message = %note, "deleting nodeclaim");
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(err) => failed.push(format!("deleting NodeClaim {name}: {err}")),
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// How often the provider's instance health is read (upstream polls DescribeInstanceStatus every
/// minute).
pub const HEALTH_PERIOD: Duration = Duration::from_secs(60);

/// Acts on the instances the provider reports unhealthy, every [`HEALTH_PERIOD`] until the task
/// is dropped; returns at once when the provider reports no instance health.
pub async fn run_instance_health(ctx: Arc<Context>) {
    ctx.state.wait_synced().await;
    let mut seen = HashSet::new();
    loop {
        let events = match ctx.provider.instance_health().await {
            None => return,
            Some(Ok(events)) => events,
            Some(Err(e)) => {
                tracing::warn!(controller = "interruption.instancestatus", error = %e, "could not read instance health");
                tokio::time::sleep(HEALTH_PERIOD).await;
                continue;
            }
        };
        let claims = ctx.state.nodeclaims.state();
        let pass = health_pass(
            &ctx.client,
            &ctx.recorder,
            &*ctx.provider,
            &claims,
            &events,
            &mut seen,
            ctx.clock.now(),
        );
        guarded_pass("interruption.instancestatus", &ctx, pass).await;
        tokio::time::sleep(HEALTH_PERIOD).await;
    }
}

/// One pass over the unhealthy instances the provider reported: each that backs a NodeClaim is
/// acted on, and counted by [`newly_unhealthy`]. Public so tests can run one.
pub async fn health_pass(
    client: &Client,
    recorder: &EventRecorder,
    cloud: &dyn CloudProvider,
    claims: &[Arc<NodeClaim>],
    events: &[InterruptionEvent],
    seen: &mut HashSet<(String, &'static str)>,
    now: DateTime<Utc>,
) {
    for (id, category) in newly_unhealthy(events, claims, seen) {
        METRICS
            .interruption_instance_status_unhealthy_total
            .with_label_values(&[category])
            .inc();
        tracing::info!(controller = "interruption.instancestatus", instance = %id, category, "detected unhealthy instance owned by cluster");
    }
    for event in events {
        if affected(event, claims).is_empty() {
            continue;
        }
        if let Err(e) = act(client, recorder, cloud, claims, event, now).await {
            tracing::warn!(controller = "interruption.instancestatus", error = %e, "unhealthy instance not handled; tried again next pass");
        }
    }
}

/// The (instance, category) pairs of `events` that back a NodeClaim and were not reported the
/// pass before (`seen`, which becomes this pass' pairs): counted once per occurrence, and again
/// after the instance was reported healthy in between, as upstream.
pub fn newly_unhealthy(
    events: &[InterruptionEvent],
    claims: &[Arc<NodeClaim>],
    seen: &mut HashSet<(String, &'static str)>,
) -> Vec<(String, &'static str)> {
    let mut reported = HashSet::new();
    let mut new = Vec::new();
    for event in events {
        if affected(event, claims).is_empty() {
            continue;
        }
        for id in &event.instance_ids {
            let key = (id.clone(), event.kind.as_str());
            if !seen.contains(&key) && !reported.contains(&key) {
                new.push(key.clone());
            }
            reported.insert(key);
        }
    }
    *seen = reported;
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cloudprovider::interruption::InterruptionKind;

    fn claim(name: &str, provider_id: Option<&str>) -> Arc<NodeClaim> {
        let mut c: NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        }))
        .expect("nodeclaim");
        if let Some(id) = provider_id {
            c.status = Some(
                serde_json::from_value(serde_json::json!({"providerID": id})).expect("status"),
            );
        }
        Arc::new(c)
    }

    #[test]
    fn only_the_claims_of_the_named_instances_are_affected() {
        let claims = [
            claim("a", Some("aws:///us-east-1a/i-1")),
            claim("b", Some("aws:///us-east-1b/i-2")),
            claim("c", None),
        ];
        let event = InterruptionEvent {
            kind: InterruptionKind::ScheduledChange,
            instance_ids: vec!["i-2".into(), "i-9".into()],
            action: InterruptionAction::DeleteNodeClaim,
            time: None,
        };
        let names: Vec<String> = affected(&event, &claims)
            .iter()
            .map(|c| c.name_any())
            .collect();
        assert_eq!(names, ["b"]);
    }

    #[test]
    fn an_unhealthy_instance_counts_once_per_occurrence_and_category() {
        let claims = vec![claim("a", Some("aws:///us-east-1a/i-a"))];
        let event = |kind, id: &str| InterruptionEvent {
            kind,
            instance_ids: vec![id.to_string()],
            action: InterruptionAction::ForcefulTermination,
            time: None,
        };
        let unhealthy = [
            event(InterruptionKind::InstanceStatus, "i-a"),
            event(InterruptionKind::SystemStatus, "i-a"),
            event(InterruptionKind::InstanceStatus, "i-not-ours"),
        ];
        let mut seen = HashSet::new();
        let first = newly_unhealthy(&unhealthy, &claims, &mut seen);
        assert_eq!(
            first,
            [
                ("i-a".to_string(), "instance_status"),
                ("i-a".to_string(), "system_status")
            ]
        );
        assert!(
            newly_unhealthy(&unhealthy, &claims, &mut seen).is_empty(),
            "still unhealthy: not counted again"
        );
        assert!(newly_unhealthy(&[], &claims, &mut seen).is_empty());
        assert_eq!(
            newly_unhealthy(&unhealthy[..1], &claims, &mut seen),
            [("i-a".to_string(), "instance_status")],
            "unhealthy again after a healthy pass: a new occurrence"
        );
    }
}
