"""moto_server for karpenter-rs's AWS provider tests (tests/aws_moto.rs), with the gaps that
matter to those tests closed. Usage: launcher.py PORT

moto implements the discovery APIs, launch templates, IAM, SQS and CreateFleet's happy path well
enough for the Rust SDK. What it lacks, and what this file adds:

* AMIs: moto's default image list is replaced (MOTO_AMIS_PATH) by amis.json, a few EKS-optimized
  and Bottlerocket images plus two tagged "team" images of different ages.
* Public SSM parameters: moto ships only the Amazon Linux ones and refuses PutParameter under
  /aws/, so the EKS and Bottlerocket alias parameters in public-parameters.json are loaded into
  its parameter store the way moto loads its own defaults.
* CreateFleet: moto launches from the first override and never reports errors. Here overrides
  are tried by Priority (lowest first, then request order), pools the test marked out of capacity
  are skipped with an InsufficientInstanceCapacity entry in Errors[] (as EC2 reports them), and
  every request is recorded so tests can inspect what was asked for.
* Capacity reservations (capacity_reservations.py): Create/DescribeCapacityReservations, and
  CreateFleet launches whose launch template targets a reservation land in it while it has room
  and fail the pool with ReservationCapacityExceeded once it is full; the capacity-block and
  reserved-capacity target capacity types launch like on-demand (ReservedCapacityOptions is
  recorded and checked against the reservation).
* Placement groups (placement_groups.py): Create/Describe/DeletePlacementGroup, and CreateFleet
  instances land in the group their launch template's Placement names (with a partition in a
  partition group); a template naming an unknown group fails the pool.
* Instance health (instance_status.py): DescribeInstanceStatus reports the status checks and
  scheduled events a test gave an instance, and filters on them.
* Pricing: moto has no Price List service; GetProducts is answered from the hand-written fixture
  tests/fixtures/aws/pricing-get-products.json (filtered by the tenancy filter, paged by
  NextToken).

* Failures: moto never fails a call it understands. A test can make the next N calls of an EC2
  query-protocol action (CreateTags, TerminateInstances, ...) fail with an error code of its
  choosing, answered in EC2's XML error shape, to exercise the provider's recovery paths.
* Call counts: query-protocol actions (EC2, IAM) and JSON-protocol targets (SSM's GetParameter)
  are counted, so a test can tell whether a code path called AWS at all (e.g. that a launch does
  not refresh the instance-type catalogue, or that a cached lookup was not made again).

Test-only control endpoints (never AWS APIs):
  POST /_karpenter/ice     {"pools": [["m5.large", "us-east-1a", "spot"], ...]}  replaces the set
  GET  /_karpenter/fleets  the CreateFleet requests seen so far (ReservedCapacityOptions with its
                           ReservationTypes as a list)
  POST /_karpenter/fail    {"action": "CreateTags", "count": 3, "code": "UnauthorizedOperation",
                            "status": 403}  the next `count` calls fail (count 0 clears)
  GET  /_karpenter/calls   {"CreateTags": 4, "GetParameter": 5, ...}  calls seen so far
  POST /_karpenter/capacity-reservations  see capacity_reservations.py
  POST /_karpenter/instance-status  see instance_status.py
"""

import io
import json
import os
import sys
import threading
import uuid
from collections import defaultdict
from urllib.parse import parse_qs

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ["MOTO_AMIS_PATH"] = os.path.join(HERE, "amis.json")

from moto import server  # noqa: E402  (must follow MOTO_AMIS_PATH)
from moto.core.utils import utcnow  # noqa: E402
from moto.ec2.models.fleets import Fleet, FleetsBackend  # noqa: E402
from moto.ec2.responses.fleets import Fleets  # noqa: E402
from moto.ssm.models import Parameter, ParameterDict  # noqa: E402

sys.path.insert(0, HERE)
import capacity_reservations  # noqa: E402  (registers the capacity reservation calls)
import placement_groups  # noqa: E402  (registers the placement group calls)
import instance_status  # noqa: E402  (registers DescribeInstanceStatus with health)

PRICING_FIXTURE = os.path.join(HERE, "..", "fixtures", "aws", "pricing-get-products.json")
PUBLIC_PREFIXES = ("/aws/service/eks/", "/aws/service/bottlerocket/", "/aws/service/ami-windows-latest/")

LOCK = threading.Lock()
ICE_POOLS = set()
FLEET_REQUESTS = []
FAILURES = {}  # action -> {"count": n, "code": str, "status": int}
CALLS = defaultdict(int)

with open(os.path.join(HERE, "public-parameters.json"), encoding="utf-8") as f:
    PUBLIC_PARAMETERS = json.load(f)


# --- SSM: public alias parameters -----------------------------------------------------------
_original_check = ParameterDict._check_loading_status


def _check_loading_status(self, key):
    _original_check(self, key)
    if str(key or "").startswith(PUBLIC_PREFIXES) and not getattr(self, "karpenter_loaded", False):
        self.karpenter_loaded = True
        for name, value in PUBLIC_PARAMETERS.items():
            defaultdict.__getitem__(self, name).append(
                Parameter(
                    account_id=self.account_id,
                    name=name,
                    value=value,
                    parameter_type="String",
                    description=None,
                    allowed_pattern=None,
                    keyid=None,
                    last_modified_date=utcnow(),
                    version=1,
                    data_type="aws:ec2:image",
                )
            )


ParameterDict._check_loading_status = _check_loading_status


# --- CreateFleet: priority order, injected capacity errors ------------------------------------
def _zone_of(backend, subnet_id):
    if not subnet_id:
        return None
    return backend.get_subnet(subnet_id).availability_zone


def _get_launch_spec_counts(self, weight_to_add):
    requested = getattr(self, "karpenter_capacity_type", None)
    capacity = requested or self.target_capacity_specification.get("DefaultTargetCapacityType") or "on-demand"
    ordered = sorted(
        enumerate(self.launch_specs),
        key=lambda p: (float((p[1].overrides or {}).get("Priority", p[0])), p[0]),
    )
    weight_map = defaultdict(int)
    errors = []
    added = 0
    self.karpenter_reserved = getattr(self, "karpenter_reserved", {})

    def fail(spec, code, message):
        errors.append(
            {
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": spec.launch_template_spec,
                    "Overrides": spec.overrides or {},
                },
                "Lifecycle": "spot" if capacity == "spot" else "on-demand",
                "ErrorCode": code,
                "ErrorMessage": message,
            }
        )

    for _, spec in ordered:
        if added >= weight_to_add:
            break
        zone = _zone_of(self.ec2_backend, spec.subnet_id)
        with LOCK:
            exhausted = (spec.instance_type, zone, capacity) in ICE_POOLS
        if exhausted:
            fail(spec, "InsufficientInstanceCapacity", f"We currently do not have sufficient {spec.instance_type} capacity in the Availability Zone you requested ({zone}).")
            continue
        count = int((weight_to_add - added) // spec.weighted_capacity)
        unknown_group = placement_groups.missing_group(self.ec2_backend, spec.launch_template_spec)
        if unknown_group:
            fail(spec, *unknown_group)
            continue
        reservation, market = capacity_reservations.fleet_target(self.ec2_backend, spec.launch_template_spec)
        if reservation is not None:
            reservation_types = getattr(self, "karpenter_reservation_types", None)
            count, error = capacity_reservations.room(self.ec2_backend, reservation, market, capacity, reservation_types, spec.instance_type, zone, count)
            if error:
                fail(spec, *error)
                continue
            self.karpenter_reserved[spec] = reservation
        weight_map[spec] += count
        added += count * spec.weighted_capacity
    self.karpenter_errors = getattr(self, "karpenter_errors", []) + errors
    return weight_map, added


Fleet.get_launch_spec_counts = _get_launch_spec_counts
_original_backend_create_fleet = FleetsBackend.create_fleet


def _backend_create_fleet(self, on_demand_options, spot_options, target_capacity_specification, *args, **kwargs):
    # moto launches only `spot` and `on-demand` target capacity; a capacity block or reserved
    # capacity launches like on-demand, and the Fleet remembers what was asked for (set before
    # moto's Fleet launches).
    spec = dict(target_capacity_specification)
    requested = spec.get("DefaultTargetCapacityType")
    if requested in ("capacity-block", "reserved-capacity"):
        spec["DefaultTargetCapacityType"] = "on-demand"
    _REQUESTED.value = requested
    try:
        fleet = _original_backend_create_fleet(self, on_demand_options, spot_options, spec, *args, **kwargs)
    finally:
        _REQUESTED.value = None
    for request in fleet.spot_requests:
        if getattr(request, "launch_spec", None) is not None:
            placement_groups.place(self, request.instance, request.launch_spec.launch_template_spec)
    for item in fleet.on_demand_instances:
        placement_groups.place(self, item["instance"], item["launch_spec"].launch_template_spec)
        reservation = getattr(fleet, "karpenter_reserved", {}).get(item.get("launch_spec"))
        if reservation is not None:
            capacity_reservations.place(item["instance"], reservation)
    return fleet


_REQUESTED = threading.local()
# ReservedCapacityOptions.ReservationTypes of the CreateFleet being served (moto drops it).
_RESERVATION_TYPES = threading.local()
_original_fleet_init = Fleet.__init__


def _fleet_init(self, *args, **kwargs):
    self.karpenter_capacity_type = getattr(_REQUESTED, "value", None)
    self.karpenter_reservation_types = getattr(_RESERVATION_TYPES, "value", None)
    _original_fleet_init(self, *args, **kwargs)


Fleet.__init__ = _fleet_init
FleetsBackend.create_fleet = _backend_create_fleet
_original_create_fleet = Fleets.create_fleet


def _reservation_types(options):
    """ReservedCapacityOptions' reservation types as a list (the query protocol names the member
    ReservationType.N), or None when the request sent none."""
    if not options:
        return None
    types = options.get("ReservationTypes", options.get("ReservationType"))
    if types is None:
        return None
    if isinstance(types, dict):
        types = [v for _, v in sorted(types.items(), key=lambda kv: int(kv[0]))]
    return list(types) if isinstance(types, list) else [types]


def _create_fleet(self):
    reservation_types = _reservation_types(self._get_param("ReservedCapacityOptions", {}))
    with LOCK:
        FLEET_REQUESTS.append(
            {
                "Type": self._get_param("Type"),
                "TargetCapacitySpecification": self._get_param("TargetCapacitySpecification", {}),
                "SpotOptions": self._get_param("SpotOptions", {}),
                "OnDemandOptions": self._get_param("OnDemandOptions", {}),
                "ReservedCapacityOptions": {} if reservation_types is None else {"ReservationTypes": reservation_types},
                "LaunchTemplateConfigs": self._get_param("LaunchTemplateConfigs", []),
            }
        )
    _RESERVATION_TYPES.value = reservation_types
    try:
        result = _original_create_fleet(self)
    finally:
        _RESERVATION_TYPES.value = None
    fleet = self.ec2_backend.get_fleet(result.result["FleetId"])
    errors = getattr(fleet, "karpenter_errors", [])
    if errors:
        result.result["Errors"] = errors
    return result


Fleets.create_fleet = _create_fleet


# --- HTTP: pricing fixture and control endpoints ----------------------------------------------
def _json(start_response, status, body, content_type="application/json"):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(data)))])
    return [data]


def _pricing(environ, start_response):
    length = int(environ.get("CONTENT_LENGTH") or 0)
    request = json.loads(environ["wsgi.input"].read(length) or b"{}")
    if environ.get("HTTP_X_AMZ_TARGET") != "AWSPriceListService.GetProducts":
        return _json(start_response, "400 Bad Request", {"__type": "InvalidParameterException", "message": "only GetProducts is served"}, "application/x-amz-json-1.1")
    tenancy = next((f["Value"] for f in request.get("Filters", []) if f.get("Field") == "tenancy"), None)
    with open(PRICING_FIXTURE, encoding="utf-8") as f:
        pages = json.load(f)["pages"]
    token = request.get("NextToken")
    index = 0 if not token else int(token.rsplit("-", 1)[-1]) - 1
    page = dict(pages[index])
    if tenancy:
        page["PriceList"] = [p for p in page["PriceList"] if json.loads(p)["product"]["attributes"].get("tenancy") == tenancy]
    return _json(start_response, "200 OK", page, "application/x-amz-json-1.1")


def _control(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if path == "/_karpenter/ice" and environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        pools = json.loads(environ["wsgi.input"].read(length) or b"{}").get("pools", [])
        with LOCK:
            ICE_POOLS.clear()
            ICE_POOLS.update(tuple(p) for p in pools)
        return _json(start_response, "200 OK", {"pools": pools})
    if path == "/_karpenter/fleets":
        with LOCK:
            return _json(start_response, "200 OK", FLEET_REQUESTS)
    if path == "/_karpenter/fail" and environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        spec = json.loads(environ["wsgi.input"].read(length) or b"{}")
        with LOCK:
            if int(spec.get("count", 0)) > 0:
                FAILURES[spec["action"]] = {
                    "count": int(spec["count"]),
                    "code": spec.get("code", "InternalError"),
                    "status": int(spec.get("status", 500)),
                }
            else:
                FAILURES.pop(spec.get("action"), None)
        return _json(start_response, "200 OK", spec)
    if path == "/_karpenter/calls":
        with LOCK:
            return _json(start_response, "200 OK", dict(CALLS))
    if path == "/_karpenter/capacity-reservations" and environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        changed = capacity_reservations.control(json.loads(environ["wsgi.input"].read(length) or b"{}"))
        if changed is None:
            return _json(start_response, "404 Not Found", {"error": "no such capacity reservation"})
        return _json(start_response, "200 OK", changed)
    if path == "/_karpenter/instance-status" and environ.get("REQUEST_METHOD") == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        return _json(start_response, "200 OK", instance_status.control(json.loads(environ["wsgi.input"].read(length) or b"{}")))
    return _json(start_response, "404 Not Found", {"error": path})


def _query_action(environ):
    """The Action of an EC2-style query-protocol request (form-encoded POST); the body is put
    back for moto to read."""
    if environ.get("REQUEST_METHOD") != "POST" or "x-www-form-urlencoded" not in environ.get("CONTENT_TYPE", ""):
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    return (parse_qs(body.decode("utf-8", "replace")).get("Action") or [None])[0]


def _injected_failure(action, start_response):
    with LOCK:
        CALLS[action] += 1
        failure = FAILURES.get(action)
        if not failure:
            return None
        failure["count"] -= 1
        if failure["count"] <= 0:
            FAILURES.pop(action)
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Response><Errors><Error><Code>{failure['code']}</Code>"
        f"<Message>{action} failed (injected by the karpenter-rs test launcher)</Message></Error></Errors>"
        f"<RequestID>{uuid.uuid4()}</RequestID></Response>"
    ).encode()
    start_response(f"{failure['status']} Injected", [("Content-Type", "text/xml"), ("Content-Length", str(len(body)))])
    return [body]


class App(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "").startswith("/_karpenter/"):
            return _control(environ, start_response)
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("AWSPriceListService."):
            return _pricing(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            with LOCK:
                CALLS[target.rsplit(".", 1)[-1]] += 1
        action = _query_action(environ)
        if action:
            failed = _injected_failure(action, start_response)
            if failed is not None:
                return failed
        return super().__call__(environ, start_response)


server.DomainDispatcherApplication = App

if __name__ == "__main__":
    server.main(["-H", "127.0.0.1", "-p", sys.argv[1]])
