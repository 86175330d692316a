#!/usr/bin/env python3
"""Generate the bundled EC2 instance-type catalog (catalog/<region>.json).

`karpenter-rs simulate` needs instance types, zones, offerings and prices without an
AWS account, so this script joins public data into one deterministic file per region:

* moto's DescribeInstanceTypes data and its per-zone instance-type offerings
  (the moto version is pinned in hack/requirements-catalog.txt);
* shared/data/aws-on-demand-prices.json, aws-eni-limits.json and
  aws-network-bandwidth.json.

There is no public spot price data here, so spot prices are a documented,
deterministic estimate (see SPOT_MODEL). catalog/README.md describes every field.

Usage (from the repository root, inside a venv with the pinned requirements):
    python hack/gen-catalog.py --data ../shared/data --out catalog [REGION ...]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

REPO_ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = REPO_ROOT / "hack" / "requirements-catalog.txt"
DEFAULT_REGIONS = ("us-east-1", "us-west-2")

# Karpenter only launches these architectures; moto also lists i386, arm64_mac and x86_64_mac.
SUPPORTED_ARCHITECTURES = frozenset({"x86_64", "arm64"})

# Fraction of the on-demand price a spot offering is estimated to cost, by instance
# category (the letters before the generation digit). Rough long-run averages of public
# spot savings; only the table's stability matters for the simulator, not its precision.
# fmt: off
SPOT_DISCOUNT_BY_CATEGORY = {
    # general purpose
    "a": 0.38, "m": 0.38,
    # burstable
    "t": 0.30,
    # compute optimized
    "c": 0.35, "hpc": 0.35,
    # memory optimized
    "r": 0.30, "u": 0.30, "x": 0.30, "z": 0.30,
    # storage optimized
    "d": 0.33, "h": 0.33, "i": 0.33, "im": 0.33, "is": 0.33,
    # GPU / accelerated
    "dl": 0.45, "f": 0.45, "g": 0.45, "gr": 0.45, "inf": 0.45, "p": 0.45, "trn": 0.45, "vt": 0.45,
}
# fmt: on
DEFAULT_SPOT_DISCOUNT = 0.40
SPOT_VARIATION_MIN, SPOT_VARIATION_SPAN = 0.9, 0.2

SPOT_MODEL = (
    "ESTIMATE, not market data: spotPrice = round(onDemandPrice * discount(category) * "
    "(0.9 + 0.2 * u), 4), where category is the letters before the generation digit of the "
    "type name, discount comes from the fixed table in catalog/README.md (0.40 for categories "
    'not in it), and u = first 8 bytes of sha256("<type>/<zone>") as a big-endian integer '
    "divided by 2^64."
)


def fail(message: str) -> NoReturn:
    """Stop with a readable message instead of a traceback: every failure here is an input problem."""
    sys.exit(f"gen-catalog: error: {message}")


def read_json(path: Path) -> Any:
    """Load a JSON (or gzip-compressed JSON) input, failing clearly when it is missing."""
    if not path.is_file():
        fail(f"input file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def read_table(path: Path, key: str) -> dict[str, Any]:
    """The table under `key` in a shared data file, failing clearly if the file's layout changed."""
    data = read_json(path)
    table = data.get(key) if isinstance(data, dict) else None
    if not isinstance(table, dict):
        fail(f"{path} has no {key!r} object at its top level")
    return table


def pinned_moto_version() -> str:
    """The moto version pinned in the requirements file, so the output names the data it came from."""
    if not REQUIREMENTS.is_file():
        fail(f"requirements file not found: {REQUIREMENTS}")
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"\s*moto(?:\[[^\]]*\])?==([\w.]+)\s*", line)
        if match:
            return match.group(1)
    fail(f"no 'moto==VERSION' pin in {REQUIREMENTS}")


def moto_resources(pinned: str) -> Path:
    """Locate moto's EC2 resource folder via the import system (no site-packages path is assumed).

    find_spec does not execute moto's heavy __init__; only its data files are read. The
    installed version must equal the pin, or the catalog would silently come from other data.
    """
    spec = importlib.util.find_spec("moto")
    if spec is None or not spec.submodule_search_locations:
        fail("moto is not installed: pip install -r hack/requirements-catalog.txt")
    installed = importlib.metadata.version("moto")
    if installed != pinned:
        fail(f"moto {installed} is installed but {REQUIREMENTS.name} pins {pinned}")
    resources = Path(next(iter(spec.submodule_search_locations))) / "ec2" / "resources"
    if not resources.is_dir():
        fail(f"moto has no EC2 resource folder at {resources}")
    return resources


@dataclass(frozen=True)
class SharedData:
    """The three shared/data tables, keyed by instance type."""

    prices_by_region: dict[str, dict[str, float]]
    eni_limits: dict[str, dict[str, Any]]
    bandwidth_mbps: dict[str, int]

    @classmethod
    def load(cls, folder: Path) -> SharedData:
        """Read the shared data folder; each file wraps its table in one top-level key."""
        if not folder.is_dir():
            fail(f"data folder not found: {folder} (pass --data)")
        return cls(
            prices_by_region=read_table(folder / "aws-on-demand-prices.json", "regions"),
            eni_limits=read_table(folder / "aws-eni-limits.json", "limits"),
            bandwidth_mbps=read_table(folder / "aws-network-bandwidth.json", "bandwidth_mbps"),
        )


@dataclass(frozen=True)
class Inputs:
    """Everything read once and shared by all regions."""

    moto_version: str
    resources: Path
    moto_types: dict[str, Any]
    shared: SharedData


@dataclass
class Stats:
    """What happened to each type in one region, printed as the run summary."""

    offered: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    missing_price: list[str] = field(default_factory=list)
    eni_from_moto: list[str] = field(default_factory=list)
    no_bandwidth: list[str] = field(default_factory=list)
    manufacturer_guessed: list[str] = field(default_factory=list)
    default_discount_categories: set[str] = field(default_factory=set)


def kebab_lower(name: str) -> str:
    """Lower-case and hyphenate a device name, as Karpenter does for its GPU/accelerator label values."""
    return name.strip().lower().replace(" ", "-")


def category_of(instance_type: str) -> str:
    """The instance category: the leading letters of the family (m5 -> m, inf2 -> inf, u-6tb1 -> u)."""
    match = re.match(r"[a-z]+", instance_type)
    if match is None:
        fail(f"cannot read a category from instance type {instance_type!r}")
    return match.group(0)


def manufacturer_from_name(instance_type: str) -> str:
    """Guess the CPU vendor from the family name when moto gives none (g in the suffix -> Graviton)."""
    family = instance_type.split(".", 1)[0]
    suffix = family[len(category_of(family)) :].lstrip("0123456789-")
    if "g" in suffix or family.startswith("a1"):
        return "aws"
    if "a" in suffix:
        return "amd"
    return "intel"


def zones_with_ids(resources: Path, region: str) -> tuple[list[dict[str, str]], dict[str, set[str]]]:
    """Zone names with their zone IDs, plus the instance types offered in each zone.

    moto keeps offerings per zone name and per zone ID in two files with no link between
    them; the same physical zone offers the same set of types in both, so each name is
    paired with the single ID whose type set is identical. Anything else is an error.
    """
    offerings = resources / "instance_type_offerings"
    if not (offerings / "availability-zone" / f"{region}.json.gz").is_file():
        fail(f"moto {importlib.metadata.version('moto')} has no instance-type offerings for region {region}")
    by_name: dict[str, set[str]] = defaultdict(set)
    for row in read_json(offerings / "availability-zone" / f"{region}.json.gz"):
        by_name[row["Location"]].add(row["InstanceType"])
    by_id: dict[str, set[str]] = defaultdict(set)
    for row in read_json(offerings / "availability-zone-id" / f"{region}.json.gz"):
        by_id[row["Location"]].add(row["InstanceType"])

    zones = []
    for name in sorted(by_name):
        ids = [zone_id for zone_id, types in by_id.items() if types == by_name[name]]
        if len(ids) != 1:
            fail(f"{region}: cannot pair zone {name} with one zone ID (candidates: {sorted(ids)})")
        zones.append({"name": name, "zoneId": ids[0]})
    if len({zone["zoneId"] for zone in zones}) != len(by_id):
        fail(f"{region}: zone names and zone IDs in moto's offerings do not pair one-to-one")
    return zones, by_name


def spot_price(on_demand: float, instance_type: str, zone: str, stats: Stats) -> float:
    """Deterministic spot estimate: category discount times a stable per-(type, zone) jitter in [0.9, 1.1)."""
    category = category_of(instance_type)
    discount = SPOT_DISCOUNT_BY_CATEGORY.get(category)
    if discount is None:
        stats.default_discount_categories.add(category)
        discount = DEFAULT_SPOT_DISCOUNT
    digest = hashlib.sha256(f"{instance_type}/{zone}".encode()).digest()
    variation = SPOT_VARIATION_MIN + SPOT_VARIATION_SPAN * int.from_bytes(digest[:8], "big") / 2**64
    return round(on_demand * discount * variation, 4)


def device(info: dict[str, Any], default_manufacturer: str = "") -> dict[str, Any]:
    """A GPU or accelerator entry with Karpenter-style lower-case names."""
    return {
        "name": kebab_lower(info["Name"]),
        "manufacturer": kebab_lower(info.get("Manufacturer", default_manufacturer)),
        "count": info["Count"],
    }


def accelerators(moto_type: dict[str, Any]) -> list[dict[str, Any]]:
    """Neuron devices (Inferentia, Trainium) and other inference accelerators, without duplicates.

    Inferentia types appear in both NeuronInfo and InferenceAcceleratorInfo; NeuronInfo
    has no manufacturer, which is always AWS for Neuron devices.
    """
    found = [device(info, "aws") for info in moto_type.get("NeuronInfo", {}).get("NeuronDevices", [])]
    names = {entry["name"] for entry in found}
    for info in moto_type.get("InferenceAcceleratorInfo", {}).get("Accelerators", []):
        if kebab_lower(info["Name"]) not in names:
            found.append(device(info))
    return sorted(found, key=lambda entry: entry["name"])


def gpus(moto_type: dict[str, Any]) -> list[dict[str, Any]]:
    """GPUs with their per-GPU memory, which Karpenter exposes as instance-gpu-memory."""
    found = [
        {**device(info), "memoryMiB": info.get("MemoryInfo", {}).get("SizeInMiB", 0)}
        for info in moto_type.get("GpuInfo", {}).get("Gpus", [])
    ]
    return sorted(found, key=lambda entry: entry["name"])


def local_nvme_gb(moto_type: dict[str, Any]) -> int:
    """Total instance-store size when it is NVMe (what Karpenter can use for ephemeral storage), else 0."""
    storage = moto_type.get("InstanceStorageInfo", {})
    if storage.get("NvmeSupport") in ("required", "supported"):
        return storage.get("TotalSizeInGB", 0)
    return 0


def network_limits(name: str, moto_type: dict[str, Any], shared: SharedData, stats: Stats) -> dict[str, Any]:
    """ENI limits from the shared table (it has branch ENIs for pod security groups), else moto's NetworkInfo."""
    limits = shared.eni_limits.get(name)
    if limits is not None:
        return {
            "maxEnis": limits["enis"],
            "ipv4PerEni": limits["ipv4_per_eni"],
            "branchEnis": limits["branch_enis"],
            "trunking": limits["trunking"],
        }
    stats.eni_from_moto.append(name)
    network = moto_type["NetworkInfo"]
    return {
        "maxEnis": network["MaximumNetworkInterfaces"],
        "ipv4PerEni": network["Ipv4AddressesPerInterface"],
        "branchEnis": 0,
        "trunking": False,
    }


def offerings(name: str, on_demand: float, usage_classes: list[str], zones: list[str], stats: Stats) -> list[dict]:
    """One offering per zone moto lists for the type, with a spot estimate only where spot is sold."""
    result = []
    for zone in zones:
        offering: dict[str, Any] = {"zone": zone}
        if "spot" in usage_classes:
            offering["spotPrice"] = spot_price(on_demand, name, zone, stats)
        result.append(offering)
    return result


def catalog_entry(name: str, moto_type: dict[str, Any], on_demand: float, shared: SharedData, stats: Stats) -> dict:
    """One instance type in the catalog schema (camelCase keys, see catalog/README.md), offerings aside."""
    processor = moto_type["ProcessorInfo"]
    network = moto_type["NetworkInfo"]
    ebs = moto_type.get("EbsInfo", {})
    usage_classes = sorted(moto_type["SupportedUsageClasses"])

    manufacturer = processor.get("Manufacturer")
    if manufacturer is None:
        stats.manufacturer_guessed.append(name)
        manufacturer = manufacturer_from_name(name)

    bandwidth = shared.bandwidth_mbps.get(name)
    if bandwidth is None:
        stats.no_bandwidth.append(name)

    entry = {
        "name": name,
        "vcpu": moto_type["VCpuInfo"]["DefaultVCpus"],
        "defaultCores": moto_type["VCpuInfo"]["DefaultCores"],
        "memoryMiB": moto_type["MemoryInfo"]["SizeInMiB"],
        "architectures": sorted(SUPPORTED_ARCHITECTURES.intersection(processor["SupportedArchitectures"])),
        "cpuManufacturer": manufacturer.lower(),
        "hypervisor": moto_type.get("Hypervisor", ""),
        "bareMetal": moto_type["BareMetal"],
        "burstable": moto_type["BurstablePerformanceSupported"],
        "currentGeneration": moto_type["CurrentGeneration"],
        "usageClasses": usage_classes,
        "virtualizationTypes": sorted(moto_type["SupportedVirtualizationTypes"]),
        "gpus": gpus(moto_type),
        "accelerators": accelerators(moto_type),
        "localNvmeGB": local_nvme_gb(moto_type),
        "ebsOptimizedByDefault": ebs.get("EbsOptimizedSupport") == "default",
        "ebsBandwidthMbps": ebs.get("EbsOptimizedInfo", {}).get("BaselineBandwidthInMbps", 0),
        "networkBandwidthMbps": bandwidth or 0,
        **network_limits(name, moto_type, shared, stats),
        "efaSupported": network["EfaSupported"],
        "maxEfaInterfaces": network.get("EfaInfo", {}).get("MaximumEfaInterfaces", 0),
        "encryptionInTransitSupported": network["EncryptionInTransitSupported"],
        "onDemandPrice": on_demand,
    }
    if "SustainedClockSpeedInGhz" in processor:
        entry["sustainedClockSpeedGHz"] = processor["SustainedClockSpeedInGhz"]
    return entry


def build_region(region: str, price_region: str, inputs: Inputs) -> tuple[dict[str, Any], Stats]:
    """Join every input for one region, dropping what Karpenter could not launch or price."""
    stats = Stats()
    zones, types_by_zone = zones_with_ids(inputs.resources, region)
    zones_by_type: dict[str, list[str]] = defaultdict(list)
    for zone in zones:
        for name in types_by_zone[zone["name"]]:
            zones_by_type[name].append(zone["name"])

    prices = inputs.shared.prices_by_region[price_region]
    entries = []
    for name in sorted(zones_by_type):
        stats.offered += 1
        moto_type = inputs.moto_types.get(name)
        if moto_type is None:
            stats.dropped["no moto type data"] += 1
        elif not SUPPORTED_ARCHITECTURES.intersection(moto_type["ProcessorInfo"]["SupportedArchitectures"]):
            stats.dropped["architecture not x86_64/arm64"] += 1
        elif "hvm" not in moto_type["SupportedVirtualizationTypes"]:
            stats.dropped["no hvm virtualization"] += 1
        elif name not in prices:
            stats.dropped["no on-demand price"] += 1
            stats.missing_price.append(name)
        else:
            entry = catalog_entry(name, moto_type, prices[name], inputs.shared, stats)
            entry["offerings"] = offerings(name, prices[name], entry["usageClasses"], zones_by_type[name], stats)
            entries.append(entry)

    catalog = {
        "region": region,
        "generatedFrom": (
            f"moto {inputs.moto_version} instance types + offerings; shared/data prices, ENI limits, bandwidth"
        ),
        "onDemandPriceRegion": price_region,
        "spotModel": SPOT_MODEL,
        "zones": zones,
        "instanceTypes": entries,
    }
    return catalog, stats


def render(catalog: dict[str, Any]) -> str:
    """Compact JSON with one instance type per line, so a catalog change reads as a small git diff.

    Keys inside every object are sorted; the top level keeps a fixed order with the long
    instanceTypes list last.
    """

    def dump(value: Any) -> str:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    header = {key: value for key, value in catalog.items() if key != "instanceTypes"}
    lines = ["{"]
    lines += [f"{dump(key)}:{dump(value)}," for key, value in header.items()]
    lines.append('"instanceTypes":[')
    types = catalog["instanceTypes"]
    lines += [dump(entry) + ("," if index < len(types) - 1 else "") for index, entry in enumerate(types)]
    lines += ["]", "}"]
    text = "\n".join(lines) + "\n"
    if json.loads(text) != catalog:
        fail("rendered catalog does not round-trip (bug in render)")
    return text


def preview(names: list[str], limit: int = 8) -> str:
    """A short, readable sample of a possibly long list of type names."""
    shown = ", ".join(names[:limit])
    return shown + (f", ... (+{len(names) - limit})" if len(names) > limit else "")


def print_summary(region: str, catalog: dict[str, Any], stats: Stats, out_file: Path) -> None:
    """Report counts per reason so data gaps are visible on every run."""
    types = catalog["instanceTypes"]
    offering_count = sum(len(entry["offerings"]) for entry in types)
    spot_count = sum(1 for entry in types for offering in entry["offerings"] if "spotPrice" in offering)
    print(f"{region}: wrote {out_file}")
    if catalog["onDemandPriceRegion"] != region:
        print(f"  WARNING: no {region} prices in the data; on-demand prices are {catalog['onDemandPriceRegion']}'s")
    print(f"  types offered by moto in region: {stats.offered}; kept: {len(types)}")
    for reason, count in sorted(stats.dropped.items()):
        print(f"  dropped ({reason}): {count}")
    if stats.missing_price:
        print(f"    without price: {preview(stats.missing_price)}")
    print(f"  zones: {len(catalog['zones'])}; offerings: {offering_count} ({spot_count} with a spot estimate)")
    print(
        f"  ENI limits from moto (not in aws-eni-limits.json): {len(stats.eni_from_moto)}"
        + (f" [{preview(stats.eni_from_moto)}]" if stats.eni_from_moto else "")
    )
    print(
        f"  no network bandwidth (set to 0): {len(stats.no_bandwidth)}"
        + (f" [{preview(stats.no_bandwidth)}]" if stats.no_bandwidth else "")
    )
    if stats.manufacturer_guessed:
        print(f"  CPU manufacturer derived from name: {preview(stats.manufacturer_guessed)}")
    if stats.default_discount_categories:
        print(f"  categories using the default spot discount: {sorted(stats.default_discount_categories)}")


def price_region_for(region: str, shared: SharedData, fallback: str) -> str:
    """The region whose on-demand price table prices `region`: its own, else the declared fallback."""
    if region in shared.prices_by_region:
        return region
    if fallback not in shared.prices_by_region:
        fail(f"aws-on-demand-prices.json has no prices for {region} (and no usable --fallback-price-region)")
    return fallback


def parse_args() -> argparse.Namespace:
    """Command-line options; paths default to the repository layout (shared/ beside the repo)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "regions",
        nargs="*",
        default=list(DEFAULT_REGIONS),
        help=f"regions to generate (default: {' '.join(DEFAULT_REGIONS)})",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=REPO_ROOT / ".." / "shared" / "data",
        help="folder holding the aws-*.json inputs (default: ../shared/data from the repo root)",
    )
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "catalog", help="output folder (default: catalog/ in the repo root)"
    )
    parser.add_argument(
        "--fallback-price-region",
        default="us-east-1",
        help="region whose on-demand prices stand in for a region the price file lacks "
        "(recorded as onDemandPriceRegion); pass '' to make a missing region an error",
    )
    return parser.parse_args()


def main() -> None:
    """Generate one catalog file per requested region."""
    args = parse_args()
    moto_version = pinned_moto_version()
    resources = moto_resources(moto_version)
    inputs = Inputs(
        moto_version=moto_version,
        resources=resources,
        moto_types=read_json(resources / "instance_types.json.gz"),
        shared=SharedData.load(args.data),
    )
    # Resolve every region's prices first, so a bad region fails before any file is written.
    price_regions = {
        region: price_region_for(region, inputs.shared, args.fallback_price_region) for region in args.regions
    }
    args.out.mkdir(parents=True, exist_ok=True)

    for region, price_region in price_regions.items():
        catalog, stats = build_region(region, price_region, inputs)
        out_file = args.out / f"{region}.json"
        out_file.write_text(render(catalog), encoding="utf-8")
        print_summary(region, catalog, stats, out_file)


if __name__ == "__main__":
    main()
