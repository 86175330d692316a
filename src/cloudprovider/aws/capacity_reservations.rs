//! Capacity reservations: `spec.capacityReservationSelectorTerms` resolved with
//! DescribeCapacityReservations into the status' `capacityReservations` (active, unexpired
//! reservations only; one call per term, terms are alternatives), and the instances each one can
//! still launch, which EC2 reports with it and which the provider keeps in [`Availability`] to
//! size the `reserved` offerings it hands the scheduler.
//!
//! The counts follow upstream's availability cache: set from EC2 at every resolution and every
//! minute in between ([`refresh_counts`]), one taken off for each launch into the reservation,
//! one given back for each termination of an instance in it, and zero once a launch into it
//! fails, so the next plan falls back to spot or on-demand until EC2 reports room again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use aws_sdk_ec2::error::ProvideErrorMetadata;
use aws_sdk_ec2::types::{CapacityReservationState, CapacityReservationType};
use chrono::{DateTime, Utc};

use crate::apis::ec2nodeclass::{CapacityReservation, CapacityReservationSelectorTerm};
use crate::cloudprovider::CloudError;
use crate::scheduling::instance_type::ReservedCapacity;

use super::sdk_error;
use super::tags::{filter, selector_filters};

/// `reservationType` of an On-Demand Capacity Reservation.
pub const TYPE_DEFAULT: &str = crate::scheduling::instance_type::RESERVATION_TYPE_DEFAULT;
/// `reservationType` of an EC2 Capacity Block (ML): launched with the `capacity-block` market
/// type, reclaimed by EC2 when the block ends.
pub const TYPE_CAPACITY_BLOCK: &str = "capacity-block";

/// How long before its end a capacity block is `expiring`: EC2 starts reclaiming its instances
/// 30 minutes before the end (and warns 10 minutes before that), so nothing more is launched into
/// it and its nodes are drained from here on, as upstream does.
pub const CAPACITY_BLOCK_EXPIRATION: chrono::Duration = chrono::Duration::minutes(40);

/// Whether a reservation's instances must go at `now`: a capacity block within
/// [`CAPACITY_BLOCK_EXPIRATION`] of its end (or one the status already marks `expiring`).
pub fn is_expiring(r: &CapacityReservation, now: DateTime<Utc>) -> bool {
    r.state.as_deref() == Some("expiring")
        || (r.reservation_type.as_deref() == Some(TYPE_CAPACITY_BLOCK)
            && r.end_time
                .is_some_and(|end| now >= end - CAPACITY_BLOCK_EXPIRATION))
}

/// What the terms select: the reservations for the status, sorted by ID, and the instances
/// each can still launch as EC2 reported them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Resolved {
    /// Status entries.
    pub reservations: Vec<CapacityReservation>,
    /// Reservation ID → `AvailableInstanceCount`.
    pub available: BTreeMap<String, i64>,
}

/// EC2's answer when a term names a reservation that does not exist (or is not shared with the
/// account): the term selects nothing, as upstream treats it.
const NOT_FOUND: &str = "InvalidCapacityReservationId.NotFound";

/// The active reservations the terms select that have not ended by `now`.
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    terms: &[CapacityReservationSelectorTerm],
    now: DateTime<Utc>,
) -> Result<Resolved, CloudError> {
    let mut found = BTreeMap::new();
    let mut available = BTreeMap::new();
    for term in terms {
        let mut call = ec2
            .describe_capacity_reservations()
            .filters(filter("state", ["active"]));
        if let Some(id) = &term.id {
            call = call.capacity_reservation_ids(id);
        }
        if let Some(owner) = &term.owner_id {
            call = call.filters(filter("owner-id", [owner.as_str()]));
        }
        if let Some(criteria) = &term.instance_match_criteria {
            call = call.filters(filter("instance-match-criteria", [criteria.as_str()]));
        }
        for f in selector_filters(term.tags.as_ref().unwrap_or(&BTreeMap::new())) {
            call = call.filters(f);
        }
        let mut pages = call.into_paginator().send();
        while let Some(page) = pages.next().await {
            let page = match page {
                Ok(page) => page,
                Err(e) if e.code() == Some(NOT_FOUND) => break,
                Err(e) => return Err(sdk_error("ec2:DescribeCapacityReservations", e)),
            };
            for r in page.capacity_reservations() {
                if let Some((status, count)) = status_of(r, now) {
                    available.insert(status.id.clone(), count);
                    found.insert(status.id.clone(), status);
                }
            }
        }
    }
    Ok(Resolved {
        reservations: found.into_values().collect(),
        available,
    })
}

/// The status entry of an active reservation that has not ended, with the instances it can
/// still launch; `None` for any other (or one without an ID, zone or instance type).
fn status_of(
    r: &aws_sdk_ec2::types::CapacityReservation,
    now: DateTime<Utc>,
) -> Option<(CapacityReservation, i64)> {
    if r.state() != Some(&CapacityReservationState::Active) {
        return None;
    }
    let end_time = r
        .end_date()
        .and_then(|d| DateTime::<Utc>::from_timestamp(d.secs(), 0));
    if end_time.is_some_and(|end| end <= now) {
        return None;
    }
    let (id, zone, instance_type) = (
        r.capacity_reservation_id()?,
        r.availability_zone()?,
        r.instance_type()?,
    );
    let reservation_type = if r.reservation_type() == Some(&CapacityReservationType::CapacityBlock)
    {
        TYPE_CAPACITY_BLOCK
    } else {
        TYPE_DEFAULT
    };
    let mut status = CapacityReservation {
        availability_zone: zone.to_string(),
        end_time,
        id: id.to_string(),
        instance_match_criteria: r
            .instance_match_criteria()
            .map(|c| c.as_str().to_string())
            .unwrap_or_else(|| "open".into()),
        instance_type: instance_type.to_string(),
        owner_id: r.owner_id().unwrap_or_default().to_string(),
        reservation_type: Some(reservation_type.into()),
        interruptible: r.interruptible(),
        state: Some("active".into()),
    };
    if is_expiring(&status, now) {
        status.state = Some("expiring".into());
    }
    Some((
        status,
        i64::from(r.available_instance_count().unwrap_or(0).max(0)),
    ))
}

/// Re-reads from EC2 how many instances each reservation the provider knows can still launch,
/// between two resolutions of the node classes (which happen every few minutes). Reservations
/// EC2 no longer has, or that are no longer active, are forgotten (none left). Returns how many
/// were refreshed.
pub async fn refresh_counts(
    ec2: &aws_sdk_ec2::Client,
    availability: &Availability,
) -> Result<usize, CloudError> {
    let ids = availability.ids();
    let mut found = BTreeMap::new();
    for chunk in ids.chunks(100) {
        match describe_counts(ec2, chunk).await? {
            Some(counts) => found.extend(counts),
            // One of them is gone, which fails the whole call: ask for each alone.
            None => {
                for id in chunk {
                    if let Some(counts) = describe_counts(ec2, std::slice::from_ref(id)).await? {
                        found.extend(counts);
                    }
                }
            }
        }
    }
    let refreshed = found.len();
    availability.replace(&ids, &found);
    Ok(refreshed)
}

/// The available counts of the active reservations among `ids`; `None` when EC2 does not know
/// one of them.
async fn describe_counts(
    ec2: &aws_sdk_ec2::Client,
    ids: &[String],
) -> Result<Option<BTreeMap<String, i64>>, CloudError> {
    let out = match ec2
        .describe_capacity_reservations()
        .set_capacity_reservation_ids(Some(ids.to_vec()))
        .send()
        .await
    {
        Ok(out) => out,
        Err(e) if e.code() == Some(NOT_FOUND) => return Ok(None),
        Err(e) => return Err(sdk_error("ec2:DescribeCapacityReservations", e)),
    };
    Ok(Some(
        out.capacity_reservations()
            .iter()
            .filter(|r| r.state() == Some(&CapacityReservationState::Active))
            .filter_map(|r| {
                Some((
                    r.capacity_reservation_id()?.to_string(),
                    i64::from(r.available_instance_count().unwrap_or(0).max(0)),
                ))
            })
            .collect(),
    ))
}

/// The reservations of a node class' status that launches may target, with the instances
/// `availability` says each can still launch. Left out: reservations no longer active, ended or
/// expiring ([`is_expiring`]) by `now`. Interruptible ones are offered as the others (same
/// near-zero price, capacity type `reserved`), told apart by their
/// `capacity-reservation-interruptible` label, as upstream does.
pub fn offered(
    reservations: &[CapacityReservation],
    availability: &Availability,
    now: DateTime<Utc>,
) -> Vec<ReservedCapacity> {
    reservations
        .iter()
        .filter(|r| r.state.as_deref().is_none_or(|s| s == "active"))
        .filter(|r| r.end_time.is_none_or(|end| end > now) && !is_expiring(r, now))
        .map(|r| ReservedCapacity::of_status(r, availability.count(&r.id)))
        .collect()
}

/// Instances each known reservation can still launch, by reservation ID. A reservation never
/// synced from EC2 has none.
#[derive(Debug, Default)]
pub struct Availability {
    counts: Mutex<HashMap<String, i64>>,
}

impl Availability {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, i64>> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes EC2's counts (from a resolution) as they are.
    pub fn sync(&self, counts: &BTreeMap<String, i64>) {
        let mut map = self.lock();
        for (id, n) in counts {
            map.insert(id.clone(), (*n).max(0));
        }
    }

    /// The reservations known.
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    /// Takes EC2's counts for the reservations `asked` about: those EC2 reported (`counts`) are
    /// set, the others forgotten.
    pub fn replace(&self, asked: &[String], counts: &BTreeMap<String, i64>) {
        let mut map = self.lock();
        for id in asked {
            match counts.get(id) {
                Some(n) => {
                    map.insert(id.clone(), (*n).max(0));
                }
                None => {
                    map.remove(id);
                }
            }
        }
    }

    /// Instances reservation `id` can still launch.
    pub fn count(&self, id: &str) -> i64 {
        self.lock().get(id).copied().unwrap_or(0)
    }

    /// One instance launched into reservation `id`.
    pub fn mark_launched(&self, id: &str) {
        if let Some(n) = self.lock().get_mut(id) {
            *n = n.saturating_sub(1).max(0);
        }
    }

    /// One instance of reservation `id` is terminating: its slot is free again. Counted when the
    /// termination is asked for, as upstream does; overestimating for a moment is better than
    /// leaving a paid slot unused.
    pub fn mark_terminated(&self, id: &str) {
        if let Some(n) = self.lock().get_mut(id) {
            *n = n.saturating_add(1);
        }
    }

    /// A launch into reservation `id` failed: nothing is planned onto it until EC2 reports room
    /// again.
    pub fn mark_unavailable(&self, id: &str) {
        if let Some(n) = self.lock().get_mut(id) {
            *n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_ec2::primitives::DateTime as SdkTime;

    fn ec2_reservation(id: &str) -> aws_sdk_ec2::types::builders::CapacityReservationBuilder {
        aws_sdk_ec2::types::CapacityReservation::builder()
            .capacity_reservation_id(id)
            .availability_zone("us-east-1a")
            .instance_type("m5.large")
            .owner_id("123456789012")
            .state(CapacityReservationState::Active)
            .available_instance_count(2)
    }

    #[test]
    fn active_unexpired_reservations_become_status_entries_with_their_counts() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let (status, count) = status_of(&ec2_reservation("cr-1").build(), now).expect("entry");
        assert_eq!(count, 2);
        assert_eq!(status.reservation_type.as_deref(), Some(TYPE_DEFAULT));
        assert_eq!(status.instance_match_criteria, "open");
        let block = ec2_reservation("cr-2")
            .reservation_type(CapacityReservationType::CapacityBlock)
            .end_date(SdkTime::from_secs(1_800_003_600))
            .build();
        let (status, _) = status_of(&block, now).expect("block");
        assert_eq!(
            status.reservation_type.as_deref(),
            Some(TYPE_CAPACITY_BLOCK)
        );
        assert_eq!(status.end_time.map(|t| t.timestamp()), Some(1_800_003_600));
        assert_eq!(status.state.as_deref(), Some("active"), "an hour left");
        let ending = ec2_reservation("cr-5")
            .reservation_type(CapacityReservationType::CapacityBlock)
            .end_date(SdkTime::from_secs(1_800_002_400))
            .build();
        let (status, _) = status_of(&ending, now).expect("block");
        assert_eq!(status.state.as_deref(), Some("expiring"), "40 minutes left");
        let odcr = ec2_reservation("cr-6")
            .end_date(SdkTime::from_secs(1_800_000_060))
            .build();
        let (status, _) = status_of(&odcr, now).expect("odcr");
        assert_eq!(
            status.state.as_deref(),
            Some("active"),
            "only capacity blocks expire early"
        );
        let ended = ec2_reservation("cr-3")
            .end_date(SdkTime::from_secs(1_800_000_000))
            .build();
        assert!(status_of(&ended, now).is_none(), "ended at now");
        let cancelled = ec2_reservation("cr-4")
            .state(CapacityReservationState::Cancelled)
            .build();
        assert!(status_of(&cancelled, now).is_none());
    }

    #[test]
    fn counts_follow_launches_terminations_and_failures() {
        let a = Availability::default();
        a.sync(&BTreeMap::from([("cr-1".to_string(), 2)]));
        a.mark_launched("cr-1");
        assert_eq!(a.count("cr-1"), 1);
        a.mark_launched("cr-1");
        a.mark_launched("cr-1");
        assert_eq!(a.count("cr-1"), 0, "never below zero");
        a.mark_terminated("cr-1");
        assert_eq!(a.count("cr-1"), 1);
        a.mark_unavailable("cr-1");
        assert_eq!(a.count("cr-1"), 0);
        a.mark_launched("cr-unknown");
        assert_eq!(a.count("cr-unknown"), 0, "unknown reservations have none");
        a.sync(&BTreeMap::from([("cr-1".to_string(), 3)]));
        assert_eq!(a.count("cr-1"), 3, "EC2's count replaces the estimate");
        a.sync(&BTreeMap::from([("cr-2".to_string(), 1)]));
        assert_eq!(a.ids(), ["cr-1", "cr-2"]);
        a.replace(&a.ids(), &BTreeMap::from([("cr-2".to_string(), 5)]));
        assert_eq!(
            a.ids(),
            ["cr-2"],
            "a reservation EC2 no longer reports is forgotten"
        );
        assert_eq!(a.count("cr-2"), 5);
    }

    #[test]
    fn expiring_and_ended_reservations_are_not_offered_interruptible_ones_are() {
        let now = DateTime::from_timestamp(1_800_000_000, 0).expect("time");
        let entry = |id: &str| CapacityReservation {
            availability_zone: "us-east-1a".into(),
            end_time: None,
            id: id.into(),
            instance_match_criteria: "targeted".into(),
            instance_type: "m5.large".into(),
            owner_id: "123456789012".into(),
            reservation_type: None,
            interruptible: None,
            state: None,
        };
        let mut interruptible = entry("cr-2");
        interruptible.interruptible = Some(true);
        let mut expiring = entry("cr-3");
        expiring.state = Some("expiring".into());
        let mut ended = entry("cr-4");
        ended.end_time = Some(now);
        let mut ending_block = entry("cr-5");
        ending_block.reservation_type = Some(TYPE_CAPACITY_BLOCK.into());
        ending_block.end_time = Some(now + chrono::Duration::minutes(39));
        let a = Availability::default();
        a.sync(&BTreeMap::from([
            ("cr-1".to_string(), 4),
            ("cr-2".to_string(), 3),
        ]));
        let offered = offered(
            &[entry("cr-1"), interruptible, expiring, ended, ending_block],
            &a,
            now,
        );
        assert_eq!(offered.len(), 2, "{offered:?}");
        assert_eq!(offered[0].id, "cr-1");
        assert_eq!(offered[0].available, 4);
        assert_eq!(offered[0].reservation_type, TYPE_DEFAULT);
        assert!(!offered[0].interruptible);
        assert_eq!(offered[1].id, "cr-2");
        assert_eq!(offered[1].available, 3);
        assert_eq!(offered[1].reservation_type, TYPE_DEFAULT);
        assert!(offered[1].interruptible);
    }
}
