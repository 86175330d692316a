//! AMI selection: `spec.amiSelectorTerms` resolved to images, each with the instance
//! requirements it serves (architecture; for the EKS-optimized aliases also GPU or accelerator
//! variants).
//!
//! An alias (`al2023@latest`) names SSM parameters EKS and Bottlerocket publish, one per
//! architecture and variant; the other terms (ID, name and owner, tags, an SSM parameter of the
//! user's) go to DescribeImages. For every distinct requirement set the newest image that is not
//! deprecated wins (a deprecated one only when nothing else matches), so a new AMI release
//! replaces the old one in the status and the nodes on the old one drift.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ArchitectureValues, Filter};
use chrono::{DateTime, Utc};

use crate::apis::ec2nodeclass::{AMI, AMIFamily, AMIRequirement, AMISelectorTerm};
use crate::apis::labels;
use crate::apis::nodeclaim::Operator;
use crate::cloudprovider::CloudError;
use crate::scheduling::requirements::{Requirement, Requirements};

use super::lookup_cache::{DEFAULT_TTL, LookupCache, SSM_CUSTOM_TTL, SSM_TTL, SsmValue};
use super::sdk_error;
use super::tags::{filter, selector_filters};

/// An EKS-optimized image variant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Plain image: no NVIDIA GPU, no AWS accelerator.
    Standard,
    /// With NVIDIA drivers.
    Nvidia,
    /// With the AWS Neuron driver (Inferentia, Trainium).
    Neuron,
}

fn requirement(key: &str, operator: Operator, values: &[&str]) -> AMIRequirement {
    AMIRequirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| (*v).to_string()).collect(),
    }
}

/// The instance requirements an image of this architecture and variant serves.
pub fn variant_requirements(arch: &str, variant: Variant) -> Vec<AMIRequirement> {
    let mut out = vec![requirement(labels::ARCH, Operator::In, &[arch])];
    match variant {
        Variant::Standard => {
            out.push(requirement(
                labels::INSTANCE_GPU_MANUFACTURER,
                Operator::NotIn,
                &["nvidia"],
            ));
            out.push(requirement(
                labels::INSTANCE_ACCELERATOR_MANUFACTURER,
                Operator::NotIn,
                &["aws"],
            ));
        }
        Variant::Nvidia => {
            out.push(requirement(
                labels::INSTANCE_GPU_MANUFACTURER,
                Operator::In,
                &["nvidia"],
            ));
        }
        Variant::Neuron => {
            out.push(requirement(
                labels::INSTANCE_ACCELERATOR_MANUFACTURER,
                Operator::In,
                &["aws"],
            ));
        }
    }
    out
}

/// One SSM parameter an alias reads, with the requirements its image serves.
#[derive(Clone, Debug, PartialEq)]
pub struct AliasParameter {
    /// Parameter path.
    pub path: String,
    /// What the image serves.
    pub requirements: Vec<AMIRequirement>,
}

/// The SSM parameters an alias (`family@version`) reads on a cluster of Kubernetes minor version
/// `k8s` (e.g. `1.33`).
pub fn alias_parameters(alias: &str, k8s: &str) -> Result<Vec<AliasParameter>, String> {
    let (family, version) = alias
        .split_once('@')
        .ok_or_else(|| format!("alias {alias:?} is not of the form family@version"))?;
    let family = AMIFamily::from_alias(alias).ok_or_else(|| {
        format!("alias family {family:?} is not one of al2, al2023, bottlerocket, windows2019, windows2022, windows2025")
    })?;
    let latest = version == "latest";
    let p = |path: String, arch: &str, variant: Variant| AliasParameter {
        path,
        requirements: variant_requirements(arch, variant),
    };
    let eks = format!("/aws/service/eks/optimized-ami/{k8s}");
    Ok(match family {
        AMIFamily::AL2 => {
            let minor: Option<u32> = k8s.split('.').nth(1).and_then(|m| m.parse().ok());
            if k8s.starts_with("1.") && minor.is_some_and(|m| m >= 33) {
                return Err(format!(
                    "alias {alias}: EKS publishes no AL2 images for Kubernetes {k8s}; use al2023"
                ));
            }
            let leaf = |kind: &str| {
                if latest {
                    "recommended".to_string()
                } else {
                    format!("amazon-eks{kind}-node-{k8s}-{version}")
                }
            };
            vec![
                p(
                    format!("{eks}/amazon-linux-2/{}/image_id", leaf("")),
                    "amd64",
                    Variant::Standard,
                ),
                p(
                    format!("{eks}/amazon-linux-2-arm64/{}/image_id", leaf("-arm64")),
                    "arm64",
                    Variant::Standard,
                ),
                p(
                    format!("{eks}/amazon-linux-2-gpu/{}/image_id", leaf("-gpu")),
                    "amd64",
                    Variant::Nvidia,
                ),
                p(
                    format!("{eks}/amazon-linux-2-gpu/{}/image_id", leaf("-gpu")),
                    "amd64",
                    Variant::Neuron,
                ),
            ]
        }
        AMIFamily::AL2023 => {
            let mut out = Vec::new();
            for (ec2_arch, arch, variants) in [
                (
                    "x86_64",
                    "amd64",
                    &[
                        ("standard", Variant::Standard),
                        ("nvidia", Variant::Nvidia),
                        ("neuron", Variant::Neuron),
                    ][..],
                ),
                (
                    "arm64",
                    "arm64",
                    &[("standard", Variant::Standard), ("nvidia", Variant::Nvidia)][..],
                ),
            ] {
                for (name, variant) in variants {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks-node-al2023-{ec2_arch}-{name}-{k8s}-{version}")
                    };
                    out.push(p(
                        format!("{eks}/amazon-linux-2023/{ec2_arch}/{name}/{leaf}/image_id"),
                        arch,
                        *variant,
                    ));
                }
            }
            out
        }
        AMIFamily::Bottlerocket => {
            let v = version.trim_start_matches('v');
            let br = format!("/aws/service/bottlerocket/aws-k8s-{k8s}");
            vec![
                p(
                    format!("{br}/x86_64/{v}/image_id"),
                    "amd64",
                    Variant::Standard,
                ),
                p(
                    format!("{br}/x86_64/{v}/image_id"),
                    "amd64",
                    Variant::Neuron,
                ),
                p(
                    format!("{br}/arm64/{v}/image_id"),
                    "arm64",
                    Variant::Standard,
                ),
                p(
                    format!("{br}-nvidia/x86_64/{v}/image_id"),
                    "amd64",
                    Variant::Nvidia,
                ),
                p(
                    format!("{br}-nvidia/arm64/{v}/image_id"),
                    "arm64",
                    Variant::Nvidia,
                ),
            ]
        }
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => {
            if !latest {
                return Err(format!("alias {alias}: windows families only take @latest"));
            }
            let year = &alias["windows".len()..alias.find('@').unwrap_or(alias.len())];
            vec![AliasParameter {
                path: format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                requirements: vec![requirement(labels::ARCH, Operator::In, &["amd64"])],
            }]
        }
        AMIFamily::Custom => return Err(format!("alias {alias}: Custom has no alias")),
    })
}

/// An image found by a term, before the newest-wins rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// AMI ID.
    pub id: String,
    /// AMI name.
    pub name: Option<String>,
    /// ISO 8601 creation date (sorts chronologically as text).
    pub created: String,
    /// Whether its deprecation time has passed.
    pub deprecated: bool,
    /// What it serves.
    pub requirements: Vec<AMIRequirement>,
}

/// Keeps, per distinct requirement set, the newest image that is not deprecated (the newest
/// deprecated one when all are); newest first.
pub fn newest_per_requirements(candidates: Vec<Candidate>) -> Vec<AMI> {
    let mut best: BTreeMap<String, Candidate> = BTreeMap::new();
    for c in candidates {
        let key = serde_json::to_string(&c.requirements).unwrap_or_default();
        let better = match best.get(&key) {
            None => true,
            Some(b) => (!c.deprecated, &c.created, &c.id) > (!b.deprecated, &b.created, &b.id),
        };
        if better {
            best.insert(key, c);
        }
    }
    let mut out: Vec<Candidate> = best.into_values().collect();
    out.sort_by(|a, b| b.created.cmp(&a.created).then(a.id.cmp(&b.id)));
    out.into_iter()
        .map(|c| AMI {
            id: c.id,
            name: c.name,
            deprecated: c.deprecated.then_some(true),
            requirements: c.requirements,
        })
        .collect()
}

/// The first AMI (newest first) whose requirements an instance type's labels satisfy.
pub fn ami_for<'a>(amis: &'a [AMI], type_labels: &BTreeMap<String, String>) -> Option<&'a AMI> {
    amis.iter().find(|ami| {
        let reqs = Requirements::from_iter(ami.requirements.iter().map(|r| {
            Requirement::new(
                &r.key,
                r.operator,
                r.values.iter().map(String::as_str),
                None,
            )
        }));
        reqs.is_compatible_labels(type_labels)
    })
}

/// What DescribeImages says about one image (deprecation as of the call).
#[derive(Clone, Debug, PartialEq)]
pub struct Described {
    name: Option<String>,
    created: String,
    deprecated: bool,
    arch: Option<&'static str>,
}

/// The cache key of a DescribeImages query: its owners and its filters, each as a set (upstream
/// keys on both, so queries that differ only by owner never share an entry).
pub fn query_key(filters: &[Filter], owners: &[String]) -> String {
    let mut owners: Vec<&str> = owners.iter().map(String::as_str).collect();
    owners.sort_unstable();
    owners.dedup();
    let mut parts: Vec<String> = filters
        .iter()
        .map(|f| {
            let mut values: Vec<&str> = f.values().iter().map(String::as_str).collect();
            values.sort_unstable();
            values.dedup();
            format!("{:?}={values:?}", f.name().unwrap_or_default())
        })
        .collect();
    parts.sort_unstable();
    format!("owners={owners:?} filters={parts:?}")
}

/// [`describe_images`] through the cache: one call per distinct query per [`DEFAULT_TTL`].
async fn cached_images(
    ec2: &aws_sdk_ec2::Client,
    cache: &LookupCache,
    filters: Vec<Filter>,
    owners: Vec<String>,
    now: DateTime<Utc>,
) -> Result<Vec<(String, Described)>, CloudError> {
    let key = query_key(&filters, &owners);
    if let Some(found) = cache.images.get(&key) {
        return Ok(found);
    }
    let found: Vec<(String, Described)> = describe_images(ec2, filters, owners, now)
        .await?
        .into_iter()
        .collect();
    cache.images.insert(key, found.clone(), DEFAULT_TTL);
    Ok(found)
}

async fn describe_images(
    ec2: &aws_sdk_ec2::Client,
    filters: Vec<Filter>,
    owners: Vec<String>,
    now: DateTime<Utc>,
) -> Result<BTreeMap<String, Described>, CloudError> {
    let mut out = BTreeMap::new();
    let mut pages = ec2
        .describe_images()
        .set_filters(Some(filters))
        .set_owners((!owners.is_empty()).then_some(owners))
        .include_deprecated(true)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| sdk_error("ec2:DescribeImages", e))?;
        for image in page.images() {
            let Some(id) = image.image_id() else { continue };
            let deprecated = image
                .deprecation_time()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t <= now);
            let arch = match image.architecture() {
                Some(ArchitectureValues::X8664) => Some("amd64"),
                Some(ArchitectureValues::Arm64) => Some("arm64"),
                _ => None,
            };
            out.insert(
                id.to_string(),
                Described {
                    name: image.name().map(str::to_string),
                    created: image.creation_date().unwrap_or_default().to_string(),
                    deprecated,
                    arch,
                },
            );
        }
    }
    Ok(out)
}

/// The value of an SSM parameter; `None` when it does not exist.
pub async fn ssm_parameter(
    ssm: &aws_sdk_ssm::Client,
    name: &str,
) -> Result<Option<String>, CloudError> {
    match ssm.get_parameter().name(name).send().await {
        Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_string)),
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_parameter_not_found()) =>
        {
            Ok(None)
        }
        Err(e) => Err(sdk_error("ssm:GetParameter", e)),
    }
}

/// [`ssm_parameter`] through the cache: an alias' parameter for [`SSM_TTL`] (`mutable` for
/// `@latest`, which the deprecation check may drop early), a user's for [`SSM_CUSTOM_TTL`]. A
/// missing parameter is not remembered.
async fn cached_parameter(
    ssm: &aws_sdk_ssm::Client,
    cache: &LookupCache,
    name: &str,
    kind: Parameter,
) -> Result<Option<String>, CloudError> {
    if let Some(found) = cache.ssm.get(&name.to_string()) {
        return Ok(Some(found.value));
    }
    let Some(value) = ssm_parameter(ssm, name).await? else {
        return Ok(None);
    };
    let (ttl, mutable) = match kind {
        Parameter::Alias { latest } => (SSM_TTL, latest),
        Parameter::Custom => (SSM_CUSTOM_TTL, false),
    };
    cache.ssm.insert(
        name.to_string(),
        SsmValue {
            value: value.clone(),
            mutable,
        },
        ttl,
    );
    Ok(Some(value))
}

/// Whose SSM parameter a term reads.
#[derive(Clone, Copy)]
enum Parameter {
    /// One an alias names; `latest` when it follows new releases.
    Alias { latest: bool },
    /// A user's `ssmParameter`.
    Custom,
}

/// The images of `ids` that are deprecated now (one uncached DescribeImages), for the check of
/// the `@latest` parameters.
pub async fn deprecated_images(
    ec2: &aws_sdk_ec2::Client,
    ids: &[&str],
    now: DateTime<Utc>,
) -> Result<Vec<String>, CloudError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let found = describe_images(
        ec2,
        vec![filter("image-id", ids.iter().copied())],
        Vec::new(),
        now,
    )
    .await?;
    Ok(found
        .into_iter()
        .filter(|(_, d)| d.deprecated)
        .map(|(id, _)| id)
        .collect())
}

/// Resolves a node class' AMI selector terms on a cluster of Kubernetes minor version `k8s`,
/// through the provider's caches (SSM parameters, DescribeImages queries).
pub async fn resolve(
    ec2: &aws_sdk_ec2::Client,
    ssm: &aws_sdk_ssm::Client,
    cache: &LookupCache,
    terms: &[AMISelectorTerm],
    k8s: &str,
    now: DateTime<Utc>,
) -> Result<Vec<AMI>, CloudError> {
    let mut candidates = Vec::new();
    let mut tried = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let field = format!("spec.amiSelectorTerms[{i}]");
        if let Some(alias) = &term.alias {
            let params = alias_parameters(alias, k8s)
                .map_err(|e| CloudError::Invalid(format!("{field}.alias: {e}")))?;
            let latest = alias.ends_with("@latest");
            let mut ids: Vec<(String, Vec<AMIRequirement>)> = Vec::new();
            for p in &params {
                if let Some(id) =
                    cached_parameter(ssm, cache, &p.path, Parameter::Alias { latest }).await?
                {
                    ids.push((id, p.requirements.clone()));
                }
            }
            tried.push(format!(
                "{field}.alias {alias} (SSM parameters {})",
                params
                    .iter()
                    .map(|p| p.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            if ids.is_empty() {
                continue;
            }
            let mut unique: Vec<&str> = ids.iter().map(|(id, _)| id.as_str()).collect();
            unique.sort_unstable();
            unique.dedup();
            let images: BTreeMap<String, Described> = cached_images(
                ec2,
                cache,
                vec![filter("image-id", unique)],
                Vec::new(),
                now,
            )
            .await?
            .into_iter()
            .collect();
            for (id, requirements) in ids {
                if let Some(d) = images.get(&id) {
                    candidates.push(Candidate {
                        id,
                        name: d.name.clone(),
                        created: d.created.clone(),
                        deprecated: d.deprecated,
                        requirements,
                    });
                }
            }
            continue;
        }
        let mut filters = Vec::new();
        let mut owners = Vec::new();
        if let Some(param) = &term.ssm_parameter {
            match cached_parameter(ssm, cache, param, Parameter::Custom).await? {
                Some(id) => filters.push(filter("image-id", [id.as_str()])),
                None => {
                    tried.push(format!("{field}.ssmParameter {param} (no such parameter)"));
                    continue;
                }
            }
        }
        if let Some(id) = &term.id {
            filters.push(filter("image-id", [id.as_str()]));
        }
        if let Some(name) = &term.name {
            filters.push(filter("name", [name.as_str()]));
            if term.owner.is_none() {
                owners = vec!["self".to_string(), "amazon".to_string()];
            }
        }
        if let Some(owner) = &term.owner {
            owners.push(owner.clone());
        }
        if let Some(tags) = &term.tags {
            filters.extend(selector_filters(tags));
        }
        tried.push(format!("{field} ({})", describe_term(term)));
        for (id, d) in cached_images(ec2, cache, filters, owners, now).await? {
            let Some(arch) = d.arch else { continue };
            candidates.push(Candidate {
                id,
                name: d.name,
                created: d.created,
                deprecated: d.deprecated,
                requirements: vec![requirement(labels::ARCH, Operator::In, &[arch])],
            });
        }
    }
    let amis = newest_per_requirements(candidates);
    if amis.is_empty() {
        return Err(CloudError::NodeClassNotReady(format!(
            "spec.amiSelectorTerms matched no AMI: {}",
            tried.join("; ")
        )));
    }
    Ok(amis)
}

fn describe_term(term: &AMISelectorTerm) -> String {
    let mut parts = Vec::new();
    if let Some(id) = &term.id {
        parts.push(format!("id {id}"));
    }
    if let Some(name) = &term.name {
        parts.push(format!("name {name}"));
    }
    if let Some(owner) = &term.owner {
        parts.push(format!("owner {owner}"));
    }
    if let Some(tags) = &term.tags {
        parts.push(format!("tags {tags:?}"));
    }
    if let Some(p) = &term.ssm_parameter {
        parts.push(format!("ssmParameter {p}"));
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn al2023_latest_reads_recommended_per_arch_and_variant() {
        let params = alias_parameters("al2023@latest", "1.33").expect("params");
        let paths: Vec<&str> = params.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/neuron/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/recommended/image_id",
            ]
        );
        let pinned = alias_parameters("al2023@v20250101", "1.32").expect("params");
        assert_eq!(
            pinned[0].path,
            "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.32-v20250101/image_id"
        );
    }

    #[test]
    fn other_families_read_their_own_parameters() {
        let br = alias_parameters("bottlerocket@v1.30.0", "1.31").expect("params");
        assert_eq!(
            br[0].path,
            "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.30.0/image_id"
        );
        assert_eq!(
            br[3].path,
            "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.30.0/image_id"
        );
        let al2 = alias_parameters("al2@latest", "1.30").expect("params");
        assert_eq!(
            al2[1].path,
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id"
        );
        assert!(
            alias_parameters("al2@latest", "1.33")
                .unwrap_err()
                .contains("al2023")
        );
        let win = alias_parameters("windows2022@latest", "1.31").expect("params");
        assert_eq!(
            win[0].path,
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"
        );
        assert!(alias_parameters("windows2022@v1", "1.31").is_err());
        assert!(alias_parameters("ubuntu@latest", "1.31").is_err());
    }

    fn candidate(id: &str, created: &str, deprecated: bool, arch: &str) -> Candidate {
        Candidate {
            id: id.into(),
            name: None,
            created: created.into(),
            deprecated,
            requirements: vec![requirement(labels::ARCH, Operator::In, &[arch])],
        }
    }

    #[test]
    fn the_newest_live_image_wins_per_requirement_set() {
        let amis = newest_per_requirements(vec![
            candidate("ami-old", "2024-01-01T00:00:00.000Z", false, "amd64"),
            candidate("ami-new", "2025-01-01T00:00:00.000Z", false, "amd64"),
            candidate(
                "ami-newest-deprecated",
                "2025-06-01T00:00:00.000Z",
                true,
                "amd64",
            ),
            candidate(
                "ami-arm-deprecated",
                "2024-01-01T00:00:00.000Z",
                true,
                "arm64",
            ),
        ]);
        let ids: Vec<(&str, Option<bool>)> =
            amis.iter().map(|a| (a.id.as_str(), a.deprecated)).collect();
        assert_eq!(ids, [("ami-new", None), ("ami-arm-deprecated", Some(true))]);
    }

    #[test]
    fn instance_types_get_the_image_of_their_arch_and_variant() {
        let ami = |id: &str, arch, variant| AMI {
            id: id.into(),
            name: None,
            deprecated: None,
            requirements: variant_requirements(arch, variant),
        };
        let amis = [
            ami("ami-gpu", "amd64", Variant::Nvidia),
            ami("ami-std", "amd64", Variant::Standard),
            ami("ami-arm", "arm64", Variant::Standard),
        ];
        let labels_of = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let m5 = labels_of(&[(labels::ARCH, "amd64")]);
        let g4 = labels_of(&[
            (labels::ARCH, "amd64"),
            (labels::INSTANCE_GPU_MANUFACTURER, "nvidia"),
        ]);
        let c7g = labels_of(&[(labels::ARCH, "arm64")]);
        let inf2 = labels_of(&[
            (labels::ARCH, "amd64"),
            (labels::INSTANCE_ACCELERATOR_MANUFACTURER, "aws"),
        ]);
        assert_eq!(ami_for(&amis, &m5).map(|a| a.id.as_str()), Some("ami-std"));
        assert_eq!(ami_for(&amis, &g4).map(|a| a.id.as_str()), Some("ami-gpu"));
        assert_eq!(ami_for(&amis, &c7g).map(|a| a.id.as_str()), Some("ami-arm"));
        assert_eq!(ami_for(&amis, &inf2), None);
    }
}
