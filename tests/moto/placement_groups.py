"""EC2 placement groups for moto_server (moto 5.2 has none), registered on moto's EC2 response
class by importing this module (launcher.py does).

What it adds:

* CreatePlacementGroup, DescribePlacementGroups (GroupNames, GroupIds; filters state, strategy,
  group-name, group-id; an unknown name or ID fails with InvalidPlacementGroup.Unknown as EC2
  answers) and DeletePlacementGroup. Groups are kept per account and region and are `available`
  as soon as they are made.
* What CreateFleet needs (launcher.py calls `place`): an instance launched from a launch template
  whose Placement names a group (GroupId or GroupName) runs in it: DescribeInstances reports the
  group's name and ID, and in a partition group the partition (the template's PartitionNumber, or
  the next one round-robin, as EC2 spreads instances over partitions). A template naming a group
  that does not exist fails the pool, as EC2 does.
"""

import threading

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.responses import EC2Response
from moto.ec2.utils import random_id

LOCK = threading.Lock()
# id -> group (a dict shaped like EC2's PlacementGroup, plus "_scope": (account, region) and
# "_next": the partition the next instance gets)
GROUPS = {}


def _scope_of(account, region):
    return (account, region)


def _view(g):
    return {k: v for k, v in g.items() if not k.startswith("_")}


def _unknown(what):
    return EC2ClientError("InvalidPlacementGroup.Unknown", f"The Placement Group '{what}' is unknown.")


def _find(scope, group_id=None, name=None):
    for g in GROUPS.values():
        if g["_scope"] != scope:
            continue
        if (group_id and g["GroupId"] == group_id) or (name and g["GroupName"] == name):
            return g
    return None


def create_placement_group(self):
    scope = _scope_of(self.current_account, self.region)
    name = self._get_param("GroupName")
    strategy = self._get_param("Strategy") or "cluster"
    tags = self._parse_tag_specification().get("placement-group", {})
    self.error_on_dryrun()
    with LOCK:
        if _find(scope, name=name) is not None:
            raise EC2ClientError("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
        group = {
            "GroupName": name,
            "GroupId": random_id(prefix="pg"),
            "State": "available",
            "Strategy": strategy,
            "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
            "_scope": scope,
            "_next": 0,
        }
        if strategy == "partition":
            group["PartitionCount"] = int(self._get_param("PartitionCount") or 2)
        if strategy == "spread":
            group["SpreadLevel"] = self._get_param("SpreadLevel") or "rack"
        GROUPS[group["GroupId"]] = group
        view = _view(group)
    return ActionResult({"PlacementGroup": view})


def describe_placement_groups(self):
    scope = _scope_of(self.current_account, self.region)
    names = self._get_param("GroupNames", [])
    ids = self._get_param("GroupIds", [])
    filters = self._filters_from_querystring()
    with LOCK:
        for n in names:
            if _find(scope, name=n) is None:
                raise _unknown(n)
        for i in ids:
            if _find(scope, group_id=i) is None:
                raise _unknown(i)
        found = []
        for g in GROUPS.values():
            if g["_scope"] != scope:
                continue
            if names and g["GroupName"] not in names:
                continue
            if ids and g["GroupId"] not in ids:
                continue
            fields = {"state": g["State"], "strategy": g["Strategy"], "group-name": g["GroupName"], "group-id": g["GroupId"]}
            if any(key not in fields or fields[key] not in values for key, values in filters.items()):
                continue
            found.append(_view(g))
    return ActionResult({"PlacementGroups": found})


def delete_placement_group(self):
    scope = _scope_of(self.current_account, self.region)
    name = self._get_param("GroupName")
    self.error_on_dryrun()
    with LOCK:
        g = _find(scope, name=name)
        if g is None:
            raise _unknown(name)
        del GROUPS[g["GroupId"]]
    return ActionResult({})


EC2Response.create_placement_group = create_placement_group
EC2Response.describe_placement_groups = describe_placement_groups
EC2Response.delete_placement_group = delete_placement_group


# --- CreateFleet and instances ------------------------------------------------------------------
def template_placement(backend, launch_template_spec):
    """The Placement of a fleet launch spec's template (a dict, empty when it has none)."""
    template = backend.get_launch_template(launch_template_spec["LaunchTemplateId"])
    return template.get_version(launch_template_spec["Version"]).data.get("Placement") or {}


def missing_group(backend, launch_template_spec):
    """The EC2 error (code, message) that fails a pool whose template names an unknown group, or
    None."""
    placement = template_placement(backend, launch_template_spec)
    wanted = placement.get("GroupId") or placement.get("GroupName")
    if not wanted:
        return None
    with LOCK:
        g = _find(_scope_of(backend.account_id, backend.region_name), placement.get("GroupId"), placement.get("GroupName"))
    if g is None:
        return ("InvalidPlacementGroup.Unknown", f"The Placement Group '{wanted}' is unknown.")
    return None


def place(backend, instance, launch_template_spec):
    """Puts an instance launched from the spec's template into the template's placement group."""
    placement = template_placement(backend, launch_template_spec)
    if not (placement.get("GroupId") or placement.get("GroupName")):
        return
    with LOCK:
        g = _find(_scope_of(backend.account_id, backend.region_name), placement.get("GroupId"), placement.get("GroupName"))
        if g is None:
            return
        partition = None
        if g["Strategy"] == "partition":
            if placement.get("PartitionNumber"):
                partition = int(placement["PartitionNumber"])
            else:
                partition = g["_next"] % g["PartitionCount"] + 1
                g["_next"] += 1
    instance.placement.group_name = g["GroupName"]
    instance.placement.group_id = g["GroupId"]
    if partition is not None:
        instance.placement.partition_number = partition
