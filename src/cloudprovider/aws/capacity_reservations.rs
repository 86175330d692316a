//! Capacity reservation selection: `spec.capacityReservationSelectorTerms` resolved with
//! DescribeCapacityReservations into the status' `capacityReservations` (active reservations
//! only; one call per term, terms are alternatives).

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{CapacityReservationState, CapacityReservationType};
use chrono::{DateTime, Utc};

use crate::apis::ec2nodeclass::{CapacityReservation, CapacityReservationSelectorTerm};
use crate::cloudprovider::CloudError;

use super::sdk_error;
use super::tags::{filter, selector_filters};

/// The active reservations the terms select, sorted by ID.
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    terms: &[CapacityReservationSelectorTerm],
) -> Result<Vec<CapacityReservation>, CloudError> {
    let mut found = BTreeMap::new();
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
            let page = page.map_err(|e| sdk_error("ec2:DescribeCapacityReservations", e))?;
            for r in page.capacity_reservations() {
                if r.state() != Some(&CapacityReservationState::Active) {
                    continue;
                }
                let (Some(id), Some(zone), Some(instance_type)) = (
                    r.capacity_reservation_id(),
                    r.availability_zone(),
                    r.instance_type(),
                ) else {
                    continue;
                };
                found.insert(
                    id.to_string(),
                    CapacityReservation {
                        availability_zone: zone.to_string(),
                        end_time: r
                            .end_date()
                            .and_then(|d| DateTime::<Utc>::from_timestamp(d.secs(), 0)),
                        id: id.to_string(),
                        instance_match_criteria: r
                            .instance_match_criteria()
                            .map(|c| c.as_str().to_string())
                            .unwrap_or_else(|| "open".into()),
                        instance_type: instance_type.to_string(),
                        owner_id: r.owner_id().unwrap_or_default().to_string(),
                        reservation_type:
                            Some(
                                if r.reservation_type()
                                    == Some(&CapacityReservationType::CapacityBlock)
                                {
                                    "capacity-block"
                                } else {
                                    "default"
                                }
                                .into(),
                            ),
                        interruptible: r.interruptible(),
                        state: Some("active".into()),
                    },
                );
            }
        }
    }
    Ok(found.into_values().collect())
}
