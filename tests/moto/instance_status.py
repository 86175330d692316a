"""EC2 instance health for moto_server, registered on moto's EC2 response class by importing this
module (launcher.py does). moto 5.2 answers DescribeInstanceStatus with every running instance
and no status checks or events, and cannot filter on them; tests need instances that EC2 reports
impaired or with a scheduled event.

What it adds:

* A test marks an instance's health through the control endpoint (launcher.py routes it here):
  POST /_karpenter/instance-status {"instance": "i-...", "instance_status": "impaired",
  "system_status": "ok", "impaired_since": "2026-01-01T00:00:00+00:00", "events": ["instance-retirement"]}
  (omitted fields: ok, no events; "impaired_since" defaults to now).
* DescribeInstanceStatus answers for the running instances (InstanceIds narrows them) with their
  instance and system status checks (a `reachability` detail, `failed` with ImpairedSince when
  impaired) and events, and honours the filters instance-status.status, system-status.status and
  event.code (other filters are not applied).
"""

import threading
from datetime import datetime, timedelta, timezone

from moto.core.responses import ActionResult
from moto.ec2.responses import EC2Response

LOCK = threading.Lock()
# instance id -> {"instance_status", "system_status", "impaired_since", "events"}
HEALTH = {}


def control(spec):
    """Records what a test says about an instance's health."""
    since = spec.get("impaired_since")
    with LOCK:
        HEALTH[spec["instance"]] = {
            "instance_status": spec.get("instance_status", "ok"),
            "system_status": spec.get("system_status", "ok"),
            "impaired_since": datetime.fromisoformat(since) if since else datetime.now(timezone.utc),
            "events": list(spec.get("events", [])),
        }
        return dict(HEALTH[spec["instance"]], impaired_since=HEALTH[spec["instance"]]["impaired_since"].isoformat())


def _summary(status, since):
    detail = {"Name": "reachability", "Status": "failed" if status == "impaired" else "passed"}
    if status == "impaired":
        detail["ImpairedSince"] = since
    return {"Status": status, "Details": [detail]}


def describe_instance_status(self):
    ids = self._get_param("InstanceIds", [])
    filters = self._filters_from_querystring()
    self.error_on_dryrun()
    out = []
    for instance in self.ec2_backend.all_running_instances():
        if ids and instance.id not in ids:
            continue
        with LOCK:
            health = dict(HEALTH.get(instance.id, {}))
        instance_status = health.get("instance_status", "ok")
        system_status = health.get("system_status", "ok")
        events = health.get("events", [])
        since = health.get("impaired_since")
        if "instance-status.status" in filters and instance_status not in filters["instance-status.status"]:
            continue
        if "system-status.status" in filters and system_status not in filters["system-status.status"]:
            continue
        if "event.code" in filters and not any(code in filters["event.code"] for code in events):
            continue
        out.append(
            {
                "InstanceId": instance.id,
                "AvailabilityZone": instance.placement.zone,
                "InstanceState": {"Code": 16, "Name": "running"},
                "InstanceStatus": _summary(instance_status, since),
                "SystemStatus": _summary(system_status, since),
                "Events": [
                    {
                        "Code": code,
                        "Description": f"The instance is scheduled for {code}",
                        "NotBefore": datetime.now(timezone.utc) + timedelta(days=7),
                    }
                    for code in events
                ],
            }
        )
    return ActionResult({"InstanceStatuses": out})


EC2Response.describe_instance_status = describe_instance_status
