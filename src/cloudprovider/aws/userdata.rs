//! User data per AMI family: how a new instance learns which cluster to join, with which labels,
//! taints and kubelet settings.
//!
//! Each family boots differently — AL2 runs `/etc/eks/bootstrap.sh`, AL2023 reads nodeadm
//! `NodeConfig` documents from a MIME multi-part archive, Bottlerocket reads TOML settings,
//! Windows runs `Start-EKSBootstrap.ps1` — so each gets its own renderer. The user's
//! `spec.userData` is merged in the way the family allows (their MIME parts first, TOML tables
//! merged, PowerShell prepended); for `Custom` it is passed through untouched. Everything here is
//! pure, so every family's output is unit-tested byte for byte where it matters.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::apis::ec2nodeclass::{AMIFamily, KubeletConfiguration};
use crate::apis::nodeclaim::Taint;

/// EC2's limit on user data, after base64 encoding.
pub const MAX_USER_DATA_BYTES: usize = 16384;

/// The MIME boundary of archives we generate.
const BOUNDARY: &str = "//";

/// What a node needs to join the cluster.
#[derive(Clone, Debug)]
pub struct Bootstrap<'a> {
    /// EKS cluster name.
    pub cluster_name: &'a str,
    /// API server URL.
    pub cluster_endpoint: &'a str,
    /// Base64-encoded PEM CA bundle of the API server, when known.
    pub ca_bundle: Option<&'a str>,
    /// Service CIDR (nodeadm needs it to derive the cluster DNS address).
    pub service_cidr: Option<&'a str>,
    /// Labels the node registers with.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints the node registers with (including `karpenter.sh/unregistered`).
    pub taints: &'a [Taint],
    /// Kubelet settings from the node class.
    pub kubelet: &'a KubeletConfiguration,
    /// The pod limit Karpenter planned with.
    pub max_pods: Option<i64>,
    /// The node class' `spec.userData`.
    pub user_data: Option<&'a str>,
    /// `instanceStorePolicy: RAID0`: the bootstrap stripes the instance-store disks into one
    /// array and puts the kubelet's and containerd's directories on it.
    pub instance_store_raid0: bool,
}

/// Why user data could not be generated, told apart so the EC2NodeClass condition points at what
/// to fix: the node class' `spec.userData`, or a cluster fact the controller could not learn.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// `spec.userData` cannot be merged with what Karpenter generates.
    #[error("spec.userData: {0}")]
    Invalid(String),
    /// The merged user data is over EC2's size limit.
    #[error("spec.userData: {0}")]
    TooLarge(String),
    /// The AMI family's bootstrap needs a cluster fact the controller does not know.
    #[error("{0}")]
    ClusterUnknown(String),
}

/// Renders the user data (plain text, not yet base64) for an AMI family.
pub fn render(family: AMIFamily, b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    if b.cluster_endpoint.trim().is_empty() && family != AMIFamily::Custom {
        return Err(UserDataError::ClusterUnknown(
            "the cluster endpoint is unknown: set CLUSTER_ENDPOINT or allow eks:DescribeCluster"
                .into(),
        ));
    }
    if family == AMIFamily::AL2023 && b.service_cidr.is_none() {
        return Err(UserDataError::ClusterUnknown(
            "AL2023 nodes need the cluster's service CIDR (nodeadm's spec.cluster.cidr), which the controller reads with eks:DescribeCluster at start; allow that call and restart the controller".into(),
        ));
    }
    let out = match family {
        AMIFamily::AL2 => mime_archive(b.user_data, "text/x-shellscript", &al2_script(b))?,
        AMIFamily::AL2023 => mime_archive_al2023(
            b.user_data,
            &node_config(b).map_err(UserDataError::Invalid)?,
        )?,
        AMIFamily::Bottlerocket => bottlerocket(b)?,
        AMIFamily::Windows2019 | AMIFamily::Windows2022 | AMIFamily::Windows2025 => windows(b),
        AMIFamily::Custom => b.user_data.unwrap_or_default().to_string(),
    };
    let encoded = out.len().div_ceil(3) * 4;
    if encoded > MAX_USER_DATA_BYTES {
        return Err(UserDataError::TooLarge(format!(
            "the generated user data is {encoded} bytes base64-encoded, over EC2's limit of {MAX_USER_DATA_BYTES}"
        )));
    }
    Ok(out)
}

/// `'text'` for a POSIX shell or PowerShell: both take single-quoted strings literally, with
/// `'` written as `'\''` (sh) — labels and taints cannot contain quotes, so this only guards.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn taint_flag(t: &Taint) -> String {
    match &t.value {
        Some(v) => format!("{}={v}:{:?}", t.key, t.effect),
        None => format!("{}:{:?}", t.key, t.effect),
    }
}

fn map_flag(map: &BTreeMap<String, String>, sep: &str) -> String {
    map.iter()
        .map(|(k, v)| format!("{k}{sep}{v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Kubelet command-line flags for the bootstrap scripts that take them (AL2, Windows).
fn kubelet_flags(b: &Bootstrap<'_>) -> Vec<String> {
    let k = b.kubelet;
    let mut flags = Vec::new();
    if !b.labels.is_empty() {
        flags.push(format!("--node-labels=\"{}\"", map_flag(b.labels, "=")));
    }
    if !b.taints.is_empty() {
        let taints: Vec<String> = b.taints.iter().map(taint_flag).collect();
        flags.push(format!("--register-with-taints=\"{}\"", taints.join(",")));
    }
    if let Some(max) = b.max_pods {
        flags.push(format!("--max-pods={max}"));
    }
    if let Some(ppc) = k.pods_per_core {
        flags.push(format!("--pods-per-core={ppc}"));
    }
    for (flag, map, sep) in [
        ("--system-reserved", &k.system_reserved, "="),
        ("--kube-reserved", &k.kube_reserved, "="),
        ("--eviction-hard", &k.eviction_hard, "<"),
        ("--eviction-soft", &k.eviction_soft, "<"),
        (
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ),
    ] {
        if let Some(map) = map.as_ref().filter(|m| !m.is_empty()) {
            flags.push(format!("{flag}=\"{}\"", map_flag(map, sep)));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        flags.push(format!("--eviction-max-pod-grace-period={v}"));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        flags.push(format!("--image-gc-high-threshold={v}"));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        flags.push(format!("--image-gc-low-threshold={v}"));
    }
    if let Some(v) = k.cpu_cfs_quota {
        flags.push(format!("--cpu-cfs-quota={v}"));
    }
    flags
}

fn cluster_dns<'a>(b: &Bootstrap<'a>) -> Option<&'a str> {
    b.kubelet
        .cluster_dns
        .as_ref()
        .and_then(|d| d.first())
        .map(String::as_str)
}

/// The AL2 bootstrap script.
fn al2_script(b: &Bootstrap<'_>) -> String {
    let mut s = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    let _ = write!(
        s,
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        quote(b.cluster_name),
        quote(b.cluster_endpoint)
    );
    if let Some(ca) = b.ca_bundle {
        let _ = write!(s, " --b64-cluster-ca {}", quote(ca));
    }
    if let Some(dns) = cluster_dns(b) {
        // bootstrap.sh sets up an IPv6 node only when told; the DNS address says which family
        // the cluster is, as upstream judges it.
        if dns.parse::<std::net::Ipv6Addr>().is_ok() {
            s.push_str(" \\\n--ip-family ipv6");
        }
        let _ = write!(s, " \\\n--dns-cluster-ip {}", quote(dns));
    }
    s.push_str(" \\\n--use-max-pods false");
    let flags = kubelet_flags(b);
    if !flags.is_empty() {
        let _ = write!(s, " \\\n--kubelet-extra-args {}", quote(&flags.join(" ")));
    }
    if b.instance_store_raid0 {
        s.push_str(" \\\n--local-disks raid0");
    }
    s.push('\n');
    s
}

/// The nodeadm `NodeConfig` Karpenter contributes on AL2023.
fn node_config(b: &Bootstrap<'_>) -> Result<String, String> {
    let k = b.kubelet;
    let mut config = serde_json::Map::new();
    let mut put = |key: &str, value: Value| {
        config.insert(key.to_string(), value);
    };
    if let Some(max) = b.max_pods {
        put("maxPods", json!(max));
    }
    if let Some(dns) = &k.cluster_dns {
        put("clusterDNS", json!(dns));
    }
    if !b.taints.is_empty() {
        let taints: Vec<Value> = b
            .taints
            .iter()
            .map(|t| {
                let mut v = json!({"key": t.key, "effect": format!("{:?}", t.effect)});
                if let Some(value) = &t.value {
                    v["value"] = json!(value);
                }
                v
            })
            .collect();
        put("registerWithTaints", Value::Array(taints));
    }
    for (key, value) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        if let Some(map) = value {
            put(key, json!(map));
        }
    }
    if let Some(v) = k.pods_per_core {
        put("podsPerCore", json!(v));
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        put("evictionMaxPodGracePeriod", json!(v));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        put("imageGCHighThresholdPercent", json!(v));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        put("imageGCLowThresholdPercent", json!(v));
    }
    if let Some(v) = k.cpu_cfs_quota {
        put("cpuCFSQuota", json!(v));
    }
    let mut cluster = json!({"name": b.cluster_name, "apiServerEndpoint": b.cluster_endpoint});
    if let Some(ca) = b.ca_bundle {
        cluster["certificateAuthority"] = json!(ca);
    }
    if let Some(cidr) = b.service_cidr {
        cluster["cidr"] = json!(cidr);
    }
    let mut kubelet = json!({"config": Value::Object(config)});
    if !b.labels.is_empty() {
        kubelet["flags"] = json!([format!("--node-labels={}", map_flag(b.labels, "="))]);
    }
    let mut spec = json!({"cluster": cluster, "kubelet": kubelet});
    if b.instance_store_raid0 {
        spec["instance"] = json!({"localStorage": {"strategy": "RAID0"}});
    }
    let doc = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": spec,
    });
    serde_yaml_ng::to_string(&doc).map_err(|e| e.to_string())
}

/// One part of a MIME multi-part archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MimePart {
    /// The part's `Content-Type`.
    pub content_type: String,
    /// The part's body.
    pub body: String,
}

/// Splits a MIME multi-part archive into its parts; `None` when the text is not MIME at all.
pub fn parse_mime(text: &str) -> Option<Result<Vec<MimePart>, UserDataError>> {
    let text = text.replace("\r\n", "\n");
    let (headers, body) = text.split_once("\n\n").unwrap_or((text.as_str(), ""));
    let header = |name: &str| {
        headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    header("MIME-Version")?;
    Some(parse_mime_body(header("Content-Type"), body))
}

fn parse_mime_body(
    content_type: Option<String>,
    body: &str,
) -> Result<Vec<MimePart>, UserDataError> {
    let content_type = content_type.ok_or_else(|| {
        UserDataError::Invalid("MIME user data has no Content-Type header".into())
    })?;
    if !content_type.to_ascii_lowercase().starts_with("multipart/") {
        return Err(UserDataError::Invalid(format!(
            "MIME user data must be multipart, not {content_type}"
        )));
    }
    let boundary = content_type
        .split(';')
        .find_map(|p| {
            let (k, v) = p.split_once('=')?;
            (k.trim().eq_ignore_ascii_case("boundary"))
                .then(|| v.trim().trim_matches('"').to_string())
        })
        .filter(|b| !b.is_empty())
        .ok_or_else(|| {
            UserDataError::Invalid("MIME user data has no boundary in its Content-Type".into())
        })?;
    let delimiter = format!("--{boundary}");
    let closing = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    let mut closed = false;
    for line in body.lines() {
        if line.trim_end() == closing {
            if let Some(lines) = current.take() {
                parts.push(mime_part(&lines)?);
            }
            closed = true;
            break;
        }
        if line.trim_end() == delimiter {
            if let Some(lines) = current.take() {
                parts.push(mime_part(&lines)?);
            }
            current = Some(Vec::new());
            continue;
        }
        if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    if !closed {
        return Err(UserDataError::Invalid(format!(
            "MIME user data is not closed by {closing}"
        )));
    }
    if parts.is_empty() {
        return Err(UserDataError::Invalid("MIME user data has no parts".into()));
    }
    Ok(parts)
}

fn mime_part(lines: &[&str]) -> Result<MimePart, UserDataError> {
    let blank = lines
        .iter()
        .position(|l| l.trim().is_empty())
        .ok_or_else(|| {
            UserDataError::Invalid(
                "a MIME part has no blank line between its headers and body".into(),
            )
        })?;
    let content_type = lines[..blank]
        .iter()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("Content-Type")
                .then(|| v.trim().to_string())
        })
        .ok_or_else(|| UserDataError::Invalid("a MIME part has no Content-Type".into()))?;
    let mut body = lines[blank + 1..].join("\n");
    if !body.ends_with('\n') {
        body.push('\n');
    }
    Ok(MimePart { content_type, body })
}

fn write_mime(parts: &[MimePart]) -> String {
    let mut s =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for p in parts {
        let _ = write!(
            s,
            "--{BOUNDARY}\nContent-Type: {}\n\n{}",
            p.content_type, p.body
        );
        if !p.body.ends_with('\n') {
            s.push('\n');
        }
    }
    let _ = writeln!(s, "--{BOUNDARY}--");
    s
}

/// The user's parts (a MIME archive as given, anything else as one part of `plain_type`), then
/// Karpenter's part of type `plain_type`.
fn mime_archive(user: Option<&str>, plain_type: &str, ours: &str) -> Result<String, UserDataError> {
    let mut parts = match user.filter(|u| !u.trim().is_empty()) {
        None => Vec::new(),
        Some(u) => match parse_mime(u) {
            Some(parsed) => parsed?,
            None => vec![MimePart {
                content_type: plain_type.into(),
                body: u.to_string(),
            }],
        },
    };
    parts.push(MimePart {
        content_type: plain_type.into(),
        body: ours.to_string(),
    });
    Ok(write_mime(&parts))
}

/// AL2023: user parts first (MIME as given; a bare NodeConfig or shell script as one part),
/// Karpenter's NodeConfig last so nodeadm applies it over the user's.
fn mime_archive_al2023(user: Option<&str>, ours: &str) -> Result<String, UserDataError> {
    const NODE_CONFIG: &str = "application/node.eks.aws";
    let mut parts = match user.filter(|u| !u.trim().is_empty()) {
        None => Vec::new(),
        Some(u) => match parse_mime(u) {
            Some(parsed) => parsed?,
            None if u.trim_start().starts_with("#!") => vec![MimePart {
                content_type: "text/x-shellscript".into(),
                body: u.to_string(),
            }],
            None => {
                let doc: Value = serde_yaml_ng::from_str(u).map_err(|e| {
                    UserDataError::Invalid(format!(
                        "AL2023 user data must be a MIME multi-part archive, a shell script or a NodeConfig; it is none of these ({e})"
                    ))
                })?;
                if doc.get("kind").and_then(Value::as_str) != Some("NodeConfig") {
                    return Err(UserDataError::Invalid(
                        "AL2023 user data must be a MIME multi-part archive, a shell script or a NodeConfig (kind: NodeConfig)".into(),
                    ));
                }
                vec![MimePart {
                    content_type: NODE_CONFIG.into(),
                    body: u.to_string(),
                }]
            }
        },
    };
    parts.push(MimePart {
        content_type: NODE_CONFIG.into(),
        body: ours.to_string(),
    });
    Ok(write_mime(&parts))
}

/// Bottlerocket: the user's TOML with Karpenter's cluster, kubelet, label and taint settings
/// merged into `settings.kubernetes` (Karpenter's values win; labels and taints are merged).
fn bottlerocket(b: &Bootstrap<'_>) -> Result<String, UserDataError> {
    let mut doc: toml::Table = match b.user_data {
        Some(u) if !u.trim().is_empty() => u.parse().map_err(|e| {
            UserDataError::Invalid(format!("Bottlerocket user data is not valid TOML: {e}"))
        })?,
        _ => toml::Table::new(),
    };
    let settings = table_at(&mut doc, "settings")?;
    let k8s = table_at(settings, "kubernetes")?;
    let s = |v: &str| toml::Value::String(v.to_string());
    k8s.insert("cluster-name".into(), s(b.cluster_name));
    k8s.insert("api-server".into(), s(b.cluster_endpoint));
    if let Some(ca) = b.ca_bundle {
        k8s.insert("cluster-certificate".into(), s(ca));
    }
    if let Some(dns) = &b.kubelet.cluster_dns {
        k8s.insert(
            "cluster-dns-ip".into(),
            toml::Value::Array(dns.iter().map(|d| s(d)).collect()),
        );
    }
    if let Some(max) = b.max_pods {
        k8s.insert("max-pods".into(), toml::Value::Integer(max));
    }
    let labels = table_at(k8s, "node-labels")?;
    for (key, value) in b.labels {
        labels.insert(key.clone(), s(value));
    }
    let taints = table_at(k8s, "node-taints")?;
    for t in b.taints {
        let entry = format!("{}:{:?}", t.value.as_deref().unwrap_or_default(), t.effect);
        match taints.get_mut(&t.key) {
            Some(toml::Value::Array(values)) => {
                if !values.iter().any(|v| v.as_str() == Some(entry.as_str())) {
                    values.push(s(&entry));
                }
            }
            _ => {
                taints.insert(t.key.clone(), toml::Value::Array(vec![s(&entry)]));
            }
        }
    }
    let k = b.kubelet;
    for (key, map) in [
        ("system-reserved", &k.system_reserved),
        ("kube-reserved", &k.kube_reserved),
        ("eviction-hard", &k.eviction_hard),
        ("eviction-soft", &k.eviction_soft),
        ("eviction-soft-grace-period", &k.eviction_soft_grace_period),
    ] {
        if let Some(map) = map {
            let table = table_at(k8s, key)?;
            for (name, value) in map {
                table.insert(name.clone(), s(value));
            }
        }
    }
    for (key, value) in [
        (
            "eviction-max-pod-grace-period",
            k.eviction_max_pod_grace_period,
        ),
        (
            "image-gc-high-threshold-percent",
            k.image_gc_high_threshold_percent,
        ),
        (
            "image-gc-low-threshold-percent",
            k.image_gc_low_threshold_percent,
        ),
    ] {
        if let Some(v) = value {
            k8s.insert(key.into(), toml::Value::Integer(i64::from(v)));
        }
    }
    if let Some(v) = k.cpu_cfs_quota {
        k8s.insert("cpu-cfs-quota-enforced".into(), toml::Value::Boolean(v));
    }
    if b.instance_store_raid0 {
        let commands = table_at(settings, "bootstrap-commands")?;
        commands.insert(
            "000-mount-instance-storage".into(),
            toml::Value::Table(bottlerocket_raid0_command()),
        );
    }
    toml::to_string(&doc).map_err(|e| UserDataError::Invalid(e.to_string()))
}

/// The bootstrap command that makes one array of the instance-store disks (`ephemeral-storage
/// init` stripes them as RAID0) and binds the kubelet's, containerd's and pod logs' directories
/// to it, before the kubelet starts, on every boot.
fn bottlerocket_raid0_command() -> toml::Table {
    let command = |args: &[&str]| {
        toml::Value::Array(
            args.iter()
                .map(|a| toml::Value::String((*a).to_string()))
                .collect(),
        )
    };
    let mut t = toml::Table::new();
    t.insert(
        "commands".into(),
        toml::Value::Array(vec![
            command(&["apiclient", "ephemeral-storage", "init"]),
            command(&[
                "apiclient",
                "ephemeral-storage",
                "bind",
                "--dirs",
                "/var/lib/containerd",
                "/var/lib/kubelet",
                "/var/log/pods",
            ]),
        ]),
    );
    t.insert("essential".into(), toml::Value::Boolean(true));
    t.insert("mode".into(), toml::Value::String("always".into()));
    t
}

/// The table under `key`, created when missing; an error when the user put something else there.
fn table_at<'t>(
    table: &'t mut toml::Table,
    key: &str,
) -> Result<&'t mut toml::Table, UserDataError> {
    match table
        .entry(key)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
    {
        toml::Value::Table(t) => Ok(t),
        _ => Err(UserDataError::Invalid(format!(
            "Bottlerocket user data sets {key} to a value, but it must be a table"
        ))),
    }
}

/// Windows: the user's PowerShell (without its `<powershell>` tags), then the EKS bootstrap.
fn windows(b: &Bootstrap<'_>) -> String {
    let mut s = String::from("<powershell>\n");
    if let Some(u) = b.user_data.filter(|u| !u.trim().is_empty()) {
        let inner = u
            .trim()
            .trim_start_matches("<powershell>")
            .trim_end_matches("</powershell>")
            .trim();
        s.push_str(inner);
        s.push('\n');
    }
    s.push_str(
        "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
    );
    let _ = write!(
        s,
        "& $EKSBootstrapScriptFile -EKSClusterName {} -APIServerEndpoint {}",
        quote(b.cluster_name),
        quote(b.cluster_endpoint)
    );
    if let Some(ca) = b.ca_bundle {
        let _ = write!(s, " -Base64ClusterCA {}", quote(ca));
    }
    let flags = kubelet_flags(b);
    if !flags.is_empty() {
        let _ = write!(s, " -KubeletExtraArgs {}", quote(&flags.join(" ")));
    }
    if let Some(dns) = cluster_dns(b) {
        let _ = write!(s, " -DNSClusterIP {}", quote(dns));
    }
    s.push_str("\n</powershell>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apis::nodeclaim::TaintEffect;

    fn taints() -> Vec<Taint> {
        vec![
            Taint {
                key: "karpenter.sh/unregistered".into(),
                value: None,
                effect: TaintEffect::NoExecute,
                time_added: None,
            },
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: TaintEffect::NoSchedule,
                time_added: None,
            },
        ]
    }

    fn with<'a>(
        labels: &'a BTreeMap<String, String>,
        taints: &'a [Taint],
        kubelet: &'a KubeletConfiguration,
        user: Option<&'a str>,
    ) -> Bootstrap<'a> {
        Bootstrap {
            cluster_name: "demo",
            cluster_endpoint: "https://demo.eks.example",
            ca_bundle: Some("Q0EK"),
            service_cidr: Some("10.100.0.0/16"),
            labels,
            taints,
            kubelet,
            max_pods: Some(29),
            user_data: user,
            instance_store_raid0: false,
        }
    }

    fn labels() -> BTreeMap<String, String> {
        BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            ("team".to_string(), "a".to_string()),
        ])
    }

    #[test]
    fn an_ipv6_cluster_dns_address_makes_al2_bootstrap_ipv6() {
        let (l, t) = (labels(), taints());
        let ipv6 = KubeletConfiguration {
            cluster_dns: Some(vec!["fd30:1c53:5f8a::a".into()]),
            ..Default::default()
        };
        let mut b = with(&l, &t, &ipv6, None);
        b.service_cidr = Some("fd30:1c53:5f8a::/108");
        let al2 = render(AMIFamily::AL2, &b).expect("render");
        let script = &parse_mime(&al2).expect("mime").expect("parts")[0].body;
        assert!(
            script.contains(" \\\n--ip-family ipv6 \\\n--dns-cluster-ip 'fd30:1c53:5f8a::a'"),
            "{script}"
        );
        let al2023 = render(AMIFamily::AL2023, &b).expect("render");
        let config = &parse_mime(&al2023).expect("mime").expect("parts")[0].body;
        let config: Value = serde_yaml_ng::from_str(config).expect("yaml");
        assert_eq!(config["spec"]["cluster"]["cidr"], "fd30:1c53:5f8a::/108");
        assert_eq!(
            config["spec"]["kubelet"]["config"]["clusterDNS"],
            json!(["fd30:1c53:5f8a::a"])
        );

        let ipv4 = KubeletConfiguration {
            cluster_dns: Some(vec!["10.100.0.10".into()]),
            ..Default::default()
        };
        let al2 = render(AMIFamily::AL2, &with(&l, &t, &ipv4, None)).expect("render");
        assert!(!al2.contains("--ip-family"), "{al2}");
    }

    #[test]
    fn raid0_makes_each_family_stripe_the_instance_store() {
        let (l, t) = (labels(), taints());
        let kubelet = KubeletConfiguration::default();
        let mut b = with(
            &l,
            &t,
            &kubelet,
            Some("[settings.host-containers.admin]\nenabled = true\n"),
        );
        b.instance_store_raid0 = true;
        let bottlerocket = render(AMIFamily::Bottlerocket, &b).expect("render");
        let doc: toml::Table = bottlerocket.parse().expect("toml");
        let command = &doc["settings"]["bootstrap-commands"]["000-mount-instance-storage"];
        assert_eq!(
            command["commands"],
            toml::Value::Array(vec![
                toml::Value::try_from(["apiclient", "ephemeral-storage", "init"]).expect("array"),
                toml::Value::try_from([
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods"
                ])
                .expect("array"),
            ])
        );
        assert_eq!(command["essential"], toml::Value::Boolean(true));
        assert_eq!(command["mode"], toml::Value::String("always".into()));
        assert_eq!(
            doc["settings"]["host-containers"]["admin"]["enabled"],
            toml::Value::Boolean(true),
            "the user's settings stay"
        );

        b.user_data = None;
        let al2 = render(AMIFamily::AL2, &b).expect("render");
        let script = &parse_mime(&al2).expect("mime").expect("parts")[0].body;
        assert!(
            script.trim_end().ends_with("\\\n--local-disks raid0"),
            "{script}"
        );

        let al2023 = render(AMIFamily::AL2023, &b).expect("render");
        let config = &parse_mime(&al2023).expect("mime").expect("parts")[0].body;
        let config: Value = serde_yaml_ng::from_str(config).expect("yaml");
        assert_eq!(
            config["spec"]["instance"]["localStorage"]["strategy"],
            "RAID0"
        );

        b.instance_store_raid0 = false;
        for family in [AMIFamily::AL2, AMIFamily::AL2023, AMIFamily::Bottlerocket] {
            let out = render(family, &b).expect("render");
            assert!(
                !out.contains("raid0")
                    && !out.contains("RAID0")
                    && !out.contains("ephemeral-storage"),
                "{family:?} without the policy: {out}"
            );
        }
    }

    #[test]
    fn al2_runs_bootstrap_after_the_users_script() {
        let (l, t) = (labels(), taints());
        let kubelet = KubeletConfiguration {
            cluster_dns: Some(vec!["10.0.0.10".into()]),
            system_reserved: Some(BTreeMap::from([("cpu".into(), "100m".into())])),
            eviction_hard: Some(BTreeMap::from([("memory.available".into(), "5%".into())])),
            ..Default::default()
        };
        let out = render(
            AMIFamily::AL2,
            &with(&l, &t, &kubelet, Some("#!/bin/bash\necho hi\n")),
        )
        .expect("render");
        let parts = parse_mime(&out).expect("mime").expect("parts");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].body, "#!/bin/bash\necho hi\n");
        let script = &parts[1].body;
        assert!(script.contains("/etc/eks/bootstrap.sh 'demo' --apiserver-endpoint 'https://demo.eks.example' --b64-cluster-ca 'Q0EK'"), "{script}");
        assert!(script.contains("--dns-cluster-ip '10.0.0.10'"), "{script}");
        assert!(
            script.contains("--node-labels=\"karpenter.sh/nodepool=default,team=a\""),
            "{script}"
        );
        assert!(script.contains("--register-with-taints=\"karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule\""), "{script}");
        assert!(script.contains("--max-pods=29"), "{script}");
        assert!(
            script.contains("--system-reserved=\"cpu=100m\""),
            "{script}"
        );
        assert!(
            script.contains("--eviction-hard=\"memory.available<5%\""),
            "{script}"
        );
    }

    #[test]
    fn al2023_appends_a_node_config_to_the_users_parts() {
        let (l, t) = (labels(), taints());
        let kubelet = KubeletConfiguration {
            kube_reserved: Some(BTreeMap::from([("memory".into(), "1Gi".into())])),
            ..Default::default()
        };
        let user = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho user\n--BOUNDARY--\n";
        let out = render(AMIFamily::AL2023, &with(&l, &t, &kubelet, Some(user))).expect("render");
        let parts = parse_mime(&out).expect("mime").expect("parts");
        assert_eq!(parts.len(), 2);
        assert!(parts[0].body.contains("echo user"));
        assert_eq!(parts[1].content_type, "application/node.eks.aws");
        let config: Value = serde_yaml_ng::from_str(&parts[1].body).expect("yaml");
        assert_eq!(config["kind"], "NodeConfig");
        assert_eq!(config["spec"]["cluster"]["name"], "demo");
        assert_eq!(
            config["spec"]["cluster"]["apiServerEndpoint"],
            "https://demo.eks.example"
        );
        assert_eq!(config["spec"]["cluster"]["certificateAuthority"], "Q0EK");
        assert_eq!(config["spec"]["cluster"]["cidr"], "10.100.0.0/16");
        assert_eq!(config["spec"]["kubelet"]["config"]["maxPods"], 29);
        assert_eq!(
            config["spec"]["kubelet"]["config"]["kubeReserved"]["memory"],
            "1Gi"
        );
        assert_eq!(
            config["spec"]["kubelet"]["config"]["registerWithTaints"][0],
            json!({"key": "karpenter.sh/unregistered", "effect": "NoExecute"})
        );
        assert_eq!(
            config["spec"]["kubelet"]["flags"][0],
            "--node-labels=karpenter.sh/nodepool=default,team=a"
        );
    }

    #[test]
    fn al2023_takes_a_bare_node_config_and_rejects_anything_else() {
        let (l, t, k) = (labels(), taints(), KubeletConfiguration::default());
        let user = "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n";
        let out = render(AMIFamily::AL2023, &with(&l, &t, &k, Some(user))).expect("render");
        let parts = parse_mime(&out).expect("mime").expect("parts");
        assert_eq!(parts[0].content_type, "application/node.eks.aws");
        assert!(parts[0].body.contains("shutdownGracePeriod"));
        let err = render(AMIFamily::AL2023, &with(&l, &t, &k, Some("just: [text"))).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.userData: AL2023 user data must be"),
            "{err}"
        );
        let broken = "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\n--x\n";
        let err = render(AMIFamily::AL2023, &with(&l, &t, &k, Some(broken))).unwrap_err();
        assert!(err.to_string().contains("boundary"), "{err}");
        let unclosed = "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: text/x-shellscript\n\necho\n";
        let err = render(AMIFamily::AL2023, &with(&l, &t, &k, Some(unclosed))).unwrap_err();
        assert!(err.to_string().contains("not closed"), "{err}");
    }

    #[test]
    fn al2023_without_the_service_cidr_says_what_the_controller_lacks() {
        let (l, t, k) = (labels(), taints(), KubeletConfiguration::default());
        let mut b = with(&l, &t, &k, None);
        b.service_cidr = None;
        let err = render(AMIFamily::AL2023, &b).unwrap_err();
        assert!(matches!(err, UserDataError::ClusterUnknown(_)), "{err:?}");
        assert!(err.to_string().contains("eks:DescribeCluster"), "{err}");
        assert!(render(AMIFamily::Bottlerocket, &b).is_ok());
        b.cluster_endpoint = "";
        let err = render(AMIFamily::AL2, &b).unwrap_err();
        assert!(err.to_string().contains("CLUSTER_ENDPOINT"), "{err}");
    }

    #[test]
    fn bottlerocket_merges_settings_into_the_users_toml() {
        let (l, t) = (labels(), taints());
        let kubelet = KubeletConfiguration {
            image_gc_high_threshold_percent: Some(85),
            ..Default::default()
        };
        let user = "[settings.kubernetes]\ncluster-name = \"wrong\"\n[settings.kubernetes.node-labels]\nown = \"label\"\n[settings.host-containers.admin]\nenabled = true\n";
        let out =
            render(AMIFamily::Bottlerocket, &with(&l, &t, &kubelet, Some(user))).expect("render");
        let doc: toml::Table = out.parse().expect("toml");
        let k8s = &doc["settings"]["kubernetes"];
        assert_eq!(k8s["cluster-name"].as_str(), Some("demo"));
        assert_eq!(k8s["api-server"].as_str(), Some("https://demo.eks.example"));
        assert_eq!(k8s["cluster-certificate"].as_str(), Some("Q0EK"));
        assert_eq!(k8s["max-pods"].as_integer(), Some(29));
        assert_eq!(k8s["node-labels"]["own"].as_str(), Some("label"));
        assert_eq!(k8s["node-labels"]["team"].as_str(), Some("a"));
        assert_eq!(
            k8s["node-taints"]["karpenter.sh/unregistered"][0].as_str(),
            Some(":NoExecute")
        );
        assert_eq!(
            k8s["node-taints"]["dedicated"][0].as_str(),
            Some("gpu:NoSchedule")
        );
        assert_eq!(
            k8s["image-gc-high-threshold-percent"].as_integer(),
            Some(85)
        );
        assert_eq!(
            doc["settings"]["host-containers"]["admin"]["enabled"].as_bool(),
            Some(true)
        );
        let err = render(
            AMIFamily::Bottlerocket,
            &with(&l, &t, &kubelet, Some("[settings")),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.userData: Bottlerocket user data is not valid TOML"),
            "{err}"
        );
    }

    #[test]
    fn windows_runs_the_eks_bootstrap_script_after_the_users_powershell() {
        let (l, t, k) = (labels(), taints(), KubeletConfiguration::default());
        let out = render(
            AMIFamily::Windows2022,
            &with(
                &l,
                &t,
                &k,
                Some("<powershell>\nWrite-Host hi\n</powershell>"),
            ),
        )
        .expect("render");
        assert!(
            out.starts_with("<powershell>\nWrite-Host hi\n[string]$EKSBootstrapScriptFile"),
            "{out}"
        );
        assert!(out.contains("-EKSClusterName 'demo' -APIServerEndpoint 'https://demo.eks.example' -Base64ClusterCA 'Q0EK'"), "{out}");
        assert!(out.contains("--register-with-taints=\"karpenter.sh/unregistered:NoExecute,dedicated=gpu:NoSchedule\""), "{out}");
        assert!(out.trim_end().ends_with("</powershell>"));
        assert_eq!(out.matches("<powershell>").count(), 1);
    }

    #[test]
    fn custom_passes_user_data_through_and_size_is_limited() {
        let (l, t, k) = (labels(), taints(), KubeletConfiguration::default());
        let out = render(
            AMIFamily::Custom,
            &with(&l, &t, &k, Some("anything at all")),
        )
        .expect("render");
        assert_eq!(out, "anything at all");
        let huge = "x".repeat(13_000);
        let err = render(AMIFamily::Custom, &with(&l, &t, &k, Some(&huge))).unwrap_err();
        assert!(err.to_string().contains("16384"), "{err}");
    }
}
