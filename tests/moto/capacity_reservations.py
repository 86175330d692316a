"""EC2 capacity reservations for moto_server (moto 5.2 has none), registered on moto's EC2
response class by importing this module (launcher.py does).

What it adds:

* CreateCapacityReservation and DescribeCapacityReservations (IDs; filters state, owner-id,
  instance-match-criteria, instance-type, availability-zone, tag:<key>, tag-key; an unknown ID
  fails with InvalidCapacityReservationId.NotFound as EC2 answers). Reservations are kept per
  account and region; AvailableInstanceCount goes down as instances launch into one and up as
  they terminate.
* What CreateFleet needs (launcher.py calls `fleet_target` and `place`): a launch template whose
  CapacityReservationSpecification targets a reservation launches only into it, while it has
  room; a full one fails the pool with ReservationCapacityExceeded, and a capacity block must be
  asked for with the capacity-block market type (and target capacity type), an interruptible
  reservation with the interruptible-capacity-reservation market type, the reserved-capacity
  target capacity type and ReservedCapacityOptions.ReservationTypes naming
  interruptible-capacity-reservation, as EC2 requires. Instances launched into a reservation
  report its ID and the capacity-reservations-only preference (and, in a capacity block or an
  interruptible reservation, the capacity-block or interruptible-capacity-reservation lifecycle)
  from DescribeInstances.

Test-only control endpoint (launcher.py routes it, never an AWS API):
  POST /_karpenter/capacity-reservations  {"id": "cr-...", "available": 0,
        "reservationType": "capacity-block", "endDate": "2030-01-01T00:00:00Z",
        "interruptible": true}
  changes a reservation as EC2 would behind the controller's back (instances launched by
  someone else, a purchased capacity block, capacity another account lends as an interruptible
  reservation; only the given fields change).
"""

import threading
from datetime import datetime

from moto.core.responses import ActionResult
from moto.core.utils import utcnow
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instances import InstanceBackend
from moto.ec2.responses import EC2Response
from moto.ec2.utils import random_id

LOCK = threading.Lock()
# id -> reservation (a dict shaped like EC2's CapacityReservation, plus "_scope": (account, region))
RESERVATIONS = {}
# instance id -> reservation id, for instances launched into one
PLACED = {}

ONLY_RESERVATIONS = "capacity-reservations-only"
INTERRUPTIBLE = "interruptible-capacity-reservation"


def _scope(response):
    return (response.current_account, response.region)


def _describe_view(r):
    return {k: v for k, v in r.items() if not k.startswith("_")}


def _matches(r, filters):
    for name, values in filters.items():
        if name == "state":
            value = r["State"]
        elif name == "owner-id":
            value = r["OwnerId"]
        elif name == "instance-match-criteria":
            value = r["InstanceMatchCriteria"]
        elif name == "instance-type":
            value = r["InstanceType"]
        elif name == "availability-zone":
            value = r["AvailabilityZone"]
        elif name == "tag-key":
            if not any(t["Key"] in values for t in r["Tags"]):
                return False
            continue
        elif name.startswith("tag:"):
            key = name[len("tag:"):]
            value = next((t["Value"] for t in r["Tags"] if t["Key"] == key), None)
        else:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
        if value not in values:
            return False
    return True


def create_capacity_reservation(self):
    count = int(self._get_param("InstanceCount"))
    tags = self._parse_tag_specification().get("capacity-reservation", {})
    self.error_on_dryrun()
    now = utcnow()
    reservation = {
        "CapacityReservationId": random_id(prefix="cr"),
        "OwnerId": self.current_account,
        "InstanceType": self._get_param("InstanceType"),
        "InstancePlatform": self._get_param("InstancePlatform"),
        "AvailabilityZone": self._get_param("AvailabilityZone"),
        "Tenancy": self._get_param("Tenancy") or "default",
        "TotalInstanceCount": count,
        "AvailableInstanceCount": count,
        "EbsOptimized": bool(self._get_param("EbsOptimized")),
        "State": "active",
        "StartDate": now,
        "EndDateType": self._get_param("EndDateType") or "unlimited",
        "InstanceMatchCriteria": self._get_param("InstanceMatchCriteria") or "open",
        "CreateDate": now,
        "ReservationType": "default",
        "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
        "_scope": _scope(self),
    }
    if self._get_param("EndDate"):
        reservation["EndDate"] = self._get_param("EndDate")
    with LOCK:
        RESERVATIONS[reservation["CapacityReservationId"]] = reservation
        view = _describe_view(reservation)
    return ActionResult({"CapacityReservation": view})


def describe_capacity_reservations(self):
    ids = self._get_param("CapacityReservationIds", [])
    filters = self._filters_from_querystring()
    scope = _scope(self)
    with LOCK:
        mine = [r for r in RESERVATIONS.values() if r["_scope"] == scope]
        for wanted in ids:
            if not any(r["CapacityReservationId"] == wanted for r in mine):
                raise EC2ClientError(
                    "InvalidCapacityReservationId.NotFound",
                    f"The capacity reservation ID '{wanted}' does not exist",
                )
        found = [
            _describe_view(r)
            for r in mine
            if (not ids or r["CapacityReservationId"] in ids) and _matches(r, filters)
        ]
    return ActionResult({"CapacityReservations": found})


EC2Response.create_capacity_reservation = create_capacity_reservation
EC2Response.describe_capacity_reservations = describe_capacity_reservations


# --- CreateFleet and instances ------------------------------------------------------------------
def fleet_target(backend, launch_template_spec):
    """The reservation a fleet launch spec's template targets and the template's market type:
    (reservation id or None, market type or None)."""
    template = backend.get_launch_template(launch_template_spec["LaunchTemplateId"])
    data = template.get_version(launch_template_spec["Version"]).data
    spec = data.get("CapacityReservationSpecification") or {}
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    if spec.get("CapacityReservationPreference") != ONLY_RESERVATIONS:
        return None, market
    return (spec.get("CapacityReservationTarget") or {}).get("CapacityReservationId"), market


def _launch_shape(r):
    """(market type, target capacity type, ReservedCapacityOptions.ReservationTypes) EC2 wants
    for launches into reservation `r`."""
    if r["ReservationType"] == "capacity-block":
        return "capacity-block", "capacity-block", None
    if r.get("Interruptible"):
        return INTERRUPTIBLE, "reserved-capacity", [INTERRUPTIBLE]
    return None, "on-demand", None


def room(backend, reservation_id, market, fleet_capacity_type, reservation_types, instance_type, zone, wanted):
    """How many of `wanted` instances reservation `reservation_id` takes now, or the EC2 error
    (code, message) that fails the pool. `reservation_types` is the fleet's
    ReservedCapacityOptions.ReservationTypes (None when it sent none)."""
    with LOCK:
        r = RESERVATIONS.get(reservation_id)
        if r is None or r["_scope"] != (backend.account_id, backend.region_name):
            return 0, ("InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{reservation_id}' does not exist")
        want_market, want_capacity, want_types = _launch_shape(r)
        if (market, fleet_capacity_type, reservation_types) != (want_market, want_capacity, want_types):
            kind = "an interruptible" if r.get("Interruptible") else f"a {r['ReservationType']}"
            return 0, ("InvalidParameterValue", f"capacity reservation {reservation_id} is {kind} reservation: launch it with market type {want_market}, target capacity type {want_capacity} and reservation types {want_types} (asked: {market}, {fleet_capacity_type}, {reservation_types})")
        if r["State"] != "active" or r["InstanceType"] != instance_type or r["AvailabilityZone"] != zone:
            return 0, ("InvalidParameterValue", f"capacity reservation {reservation_id} ({r['State']}, {r['InstanceType']} in {r['AvailabilityZone']}) cannot run {instance_type} in {zone}")
        take = min(wanted, r["AvailableInstanceCount"])
        if take <= 0:
            return 0, ("ReservationCapacityExceeded", f"The requested capacity reservation {reservation_id} does not have enough available capacity")
        r["AvailableInstanceCount"] -= take
        return take, None


def place(instance, reservation_id):
    """Marks a launched instance as running in the reservation (its slot was taken by `room`)."""
    with LOCK:
        r = RESERVATIONS.get(reservation_id)
        PLACED[instance.id] = reservation_id
        market = _launch_shape(r)[0] if r is not None else None
    instance.capacity_reservation_id = reservation_id
    instance.capacity_reservation_specification = {
        "CapacityReservationPreference": ONLY_RESERVATIONS,
        "CapacityReservationTarget": {"CapacityReservationId": reservation_id},
    }
    if market is not None:
        instance.instance_lifecycle = market


_original_terminate = InstanceBackend.terminate_instances


def _terminate_instances(self, instance_ids):
    done = _original_terminate(self, instance_ids)
    with LOCK:
        for instance, previous in done:
            reservation_id = PLACED.pop(instance.id, None)
            r = RESERVATIONS.get(reservation_id)
            if r is not None:
                r["AvailableInstanceCount"] = min(r["TotalInstanceCount"], r["AvailableInstanceCount"] + 1)
    return done


InstanceBackend.terminate_instances = _terminate_instances


# --- control endpoint ---------------------------------------------------------------------------
def control(spec):
    """Applies POST /_karpenter/capacity-reservations; the reservation as described, or None
    when it does not exist."""
    with LOCK:
        r = RESERVATIONS.get(spec.get("id"))
        if r is None:
            return None
        if "available" in spec:
            r["AvailableInstanceCount"] = int(spec["available"])
        if "reservationType" in spec:
            r["ReservationType"] = spec["reservationType"]
        if "endDate" in spec:
            r["EndDate"] = datetime.fromisoformat(spec["endDate"].replace("Z", "+00:00"))
            r["EndDateType"] = "limited"
        if "state" in spec:
            r["State"] = spec["state"]
        if "interruptible" in spec:
            r["Interruptible"] = bool(spec["interruptible"])
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in _describe_view(r).items()}
