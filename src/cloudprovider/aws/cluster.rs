//! The cluster facts a node needs to join: the API server endpoint, its CA bundle and the
//! service CIDR (AL2023's nodeadm derives the cluster DNS address from it).
//!
//! Settings win (`CLUSTER_ENDPOINT`, `CLUSTER_CA_BUNDLE`). Without `CLUSTER_CA_BUNDLE` the CA is
//! the one the controller itself trusts for the API server (the in-cluster service-account CA or
//! the kubeconfig's), as upstream takes it from its client configuration; the endpoint, and the
//! CA when the client configuration has none, are read with eks:DescribeCluster at start. The
//! service CIDR has no setting, so
//! DescribeCluster is always asked; when it cannot be and the settings name the endpoint and CA,
//! the controller starts without the CIDR and AL2023 node classes report why they cannot launch.
//! [`settle`] is pure, so every combination is unit-tested; [`discover`] adds the one call.

use crate::cloudprovider::CloudError;

use super::sdk_error;

/// What DescribeCluster reports that node bootstrap uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Described {
    /// `cluster.endpoint`.
    pub endpoint: Option<String>,
    /// `cluster.certificateAuthority.data` (base64 PEM).
    pub ca_bundle: Option<String>,
    /// `cluster.kubernetesNetworkConfig.serviceIpv4Cidr`, else `serviceIpv6Cidr`.
    pub service_cidr: Option<String>,
}

/// The connection facts user data carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterInfo {
    /// API server URL.
    pub endpoint: String,
    /// Base64 PEM CA bundle of the API server.
    pub ca_bundle: String,
    /// Service CIDR, when known.
    pub service_cidr: Option<String>,
}

/// The outcome of [`settle`]: the facts, and a warning to log when the service CIDR is unknown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// The facts.
    pub info: ClusterInfo,
    /// Why the service CIDR is missing, when it is.
    pub warning: Option<String>,
}

/// The kube-dns address of an IPv6 cluster: EKS gives kube-dns the tenth address of an IPv6
/// service CIDR (`fd30:1c53:5f8a::/108` → `fd30:1c53:5f8a::a`); `None` for IPv4 and malformed
/// CIDRs. Upstream reads the address from the kube-dns Service; on EKS the two agree.
pub fn ipv6_kube_dns(service_cidr: &str) -> Option<String> {
    let (network, bits) = service_cidr.trim().split_once('/')?;
    let network: std::net::Ipv6Addr = network.parse().ok()?;
    let bits: u32 = bits.parse().ok().filter(|b| *b <= 124)?;
    let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
    let base = u128::from(network) & mask;
    Some(std::net::Ipv6Addr::from(base.checked_add(10)?).to_string())
}

fn non_empty(value: Option<&str>) -> Option<String> {
    value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// Asks EKS about cluster `name`.
pub async fn describe(eks: &aws_sdk_eks::Client, name: &str) -> Result<Described, CloudError> {
    let out = eks
        .describe_cluster()
        .name(name)
        .send()
        .await
        .map_err(|e| sdk_error("eks:DescribeCluster", e))?;
    Ok(out.cluster().map(described).unwrap_or_default())
}

/// The facts out of a DescribeCluster answer.
pub fn described(cluster: &aws_sdk_eks::types::Cluster) -> Described {
    let network = cluster.kubernetes_network_config();
    Described {
        // EKS reports the endpoint without a trailing slash; some tools add one.
        endpoint: non_empty(cluster.endpoint()).map(|e| e.trim_end_matches('/').to_string()),
        ca_bundle: non_empty(cluster.certificate_authority().and_then(|c| c.data())),
        service_cidr: non_empty(network.and_then(|n| n.service_ipv4_cidr()))
            .or_else(|| non_empty(network.and_then(|n| n.service_ipv6_cidr()))),
    }
}

/// Combines the settings with what DescribeCluster said about cluster `name` (or why it could
/// not be asked). Fails, in one line that names the settings and the permission, when the
/// endpoint or the CA bundle is known from neither.
pub fn settle(
    name: &str,
    endpoint: Option<&str>,
    ca_bundle: Option<&str>,
    client_ca: Option<&str>,
    described: Result<Described, CloudError>,
) -> Result<Settled, String> {
    let endpoint_setting = non_empty(endpoint);
    let ca_setting = non_empty(ca_bundle).or_else(|| non_empty(client_ca));
    let (described, failure) = match described {
        Ok(d) => (d, None),
        Err(e) => (Described::default(), Some(e.to_string())),
    };
    let why = |what: &str, setting: &str, flag: &str| {
        let cause = match &failure {
            Some(e) => format!("eks:DescribeCluster failed ({e})"),
            None => format!("eks:DescribeCluster reported no {what} for cluster {name:?}"),
        };
        format!(
            "the cluster's {what} is unknown: {setting} ({flag}) is not set and {cause}; set {setting}, or let the controller's role call eks:DescribeCluster on cluster {name:?} (check CLUSTER_NAME)"
        )
    };
    let endpoint = endpoint_setting.or(described.endpoint).ok_or_else(|| {
        why(
            "API server endpoint",
            "CLUSTER_ENDPOINT",
            "--cluster-endpoint",
        )
    })?;
    let ca_bundle = ca_setting
        .or(described.ca_bundle)
        .ok_or_else(|| why("CA bundle", "CLUSTER_CA_BUNDLE", "--cluster-ca-bundle"))?;
    let warning = match (&described.service_cidr, &failure) {
        (Some(_), _) => None,
        (None, Some(e)) => Some(format!(
            "the cluster's service CIDR is unknown because eks:DescribeCluster failed ({e}); AL2023 nodes cannot be bootstrapped until the controller's role may call it"
        )),
        (None, None) => Some(format!(
            "eks:DescribeCluster reported no service CIDR for cluster {name:?}; AL2023 nodes cannot be bootstrapped"
        )),
    };
    Ok(Settled {
        info: ClusterInfo {
            endpoint,
            ca_bundle,
            service_cidr: described.service_cidr,
        },
        warning,
    })
}

/// Reads the settings' endpoint and CA bundle, falls back to the client configuration's CA
/// (`client_ca`, see [`pem_bundle`]) and asks DescribeCluster for the rest.
pub async fn discover(
    eks: &aws_sdk_eks::Client,
    name: &str,
    endpoint: Option<&str>,
    ca_bundle: Option<&str>,
    client_ca: Option<&str>,
) -> Result<Settled, String> {
    settle(
        name,
        endpoint,
        ca_bundle,
        client_ca,
        describe(eks, name).await,
    )
}

/// The CA certificates a Kubernetes client trusts (DER, as `kube::Config::root_cert` holds
/// them) as user data expects a CA bundle: base64 of the PEM text. `None` without certificates.
pub fn pem_bundle(certs: &[Vec<u8>]) -> Option<String> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    if certs.is_empty() {
        return None;
    }
    let mut pem = String::new();
    for der in certs {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let body = STANDARD.encode(der);
        for line in body.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    Some(STANDARD.encode(pem))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported() -> Described {
        Described {
            endpoint: Some("https://ABC.gr7.us-east-1.eks.amazonaws.com".into()),
            ca_bundle: Some("Q0E=".into()),
            service_cidr: Some("10.100.0.0/16".into()),
        }
    }

    #[test]
    fn ipv6_service_cidrs_give_the_kube_dns_address() {
        assert_eq!(
            ipv6_kube_dns("fd30:1c53:5f8a::/108").as_deref(),
            Some("fd30:1c53:5f8a::a")
        );
        assert_eq!(
            ipv6_kube_dns("fd00:ab::1234/112").as_deref(),
            Some("fd00:ab::a"),
            "host bits are cleared"
        );
        assert_eq!(ipv6_kube_dns("10.100.0.0/16"), None);
        assert_eq!(ipv6_kube_dns("fd00::/129"), None);
        assert_eq!(ipv6_kube_dns("fd00::"), None);
    }

    #[test]
    fn ipv6_clusters_report_their_service_cidr_in_the_ipv6_field() {
        use aws_sdk_eks::types::{Certificate, Cluster, KubernetesNetworkConfigResponse};
        let cluster = Cluster::builder()
            .endpoint("https://ABC.gr7.us-east-1.eks.amazonaws.com/")
            .certificate_authority(Certificate::builder().data("Q0E=").build())
            .kubernetes_network_config(
                KubernetesNetworkConfigResponse::builder()
                    .service_ipv6_cidr("fd30:1c53:5f8a::/108")
                    .build(),
            )
            .build();
        let d = described(&cluster);
        assert_eq!(
            d.endpoint.as_deref(),
            Some("https://ABC.gr7.us-east-1.eks.amazonaws.com")
        );
        assert_eq!(d.service_cidr.as_deref(), Some("fd30:1c53:5f8a::/108"));
    }

    #[test]
    fn settings_win_and_describe_cluster_fills_the_rest() {
        let s = settle(
            "demo",
            Some("https://proxy.example"),
            None,
            None,
            Ok(reported()),
        )
        .expect("settled");
        assert_eq!(s.info.endpoint, "https://proxy.example");
        assert_eq!(s.info.ca_bundle, "Q0E=");
        assert_eq!(s.info.service_cidr.as_deref(), Some("10.100.0.0/16"));
        assert_eq!(s.warning, None);
        let blank = settle("demo", Some(" "), Some(""), None, Ok(reported())).expect("settled");
        assert_eq!(
            blank.info.endpoint,
            "https://ABC.gr7.us-east-1.eks.amazonaws.com"
        );
    }

    #[test]
    fn without_the_setting_the_clients_own_ca_is_used_before_describe_clusters() {
        use base64::Engine;
        let client_ca = pem_bundle(&[vec![1, 2, 3]]).expect("one certificate");
        let pem = base64::engine::general_purpose::STANDARD
            .decode(&client_ca)
            .expect("base64");
        assert_eq!(
            String::from_utf8(pem).expect("text"),
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n"
        );
        assert_eq!(pem_bundle(&[]), None);
        let s = settle("demo", None, None, Some(&client_ca), Ok(reported())).expect("settled");
        assert_eq!(
            s.info.ca_bundle, client_ca,
            "the client's CA wins over EKS's"
        );
        assert_eq!(
            s.info.endpoint, "https://ABC.gr7.us-east-1.eks.amazonaws.com",
            "the endpoint still comes from DescribeCluster"
        );
        let s =
            settle("demo", None, Some("Q0E="), Some(&client_ca), Ok(reported())).expect("settled");
        assert_eq!(s.info.ca_bundle, "Q0E=", "the setting wins");
        // CLUSTER_ENDPOINT and the client's CA are enough when DescribeCluster fails.
        let denied = Err(CloudError::Invalid("ResourceNotFoundException: no".into()));
        let s = settle("demo", Some("https://x"), None, Some(&client_ca), denied).expect("starts");
        assert_eq!(s.info.ca_bundle, client_ca);
    }

    #[test]
    fn a_failed_describe_is_fatal_only_when_the_settings_do_not_cover_it() {
        let denied = || Err(CloudError::Invalid("AccessDeniedException: no".into()));
        let err = settle("demo", None, Some("Q0E="), None, denied()).expect_err("no endpoint");
        assert!(!err.contains('\n'), "one line: {err}");
        assert!(
            err.contains("CLUSTER_ENDPOINT")
                && err.contains("eks:DescribeCluster")
                && err.contains("AccessDeniedException"),
            "{err}"
        );
        let err = settle("demo", Some("https://x"), None, None, denied()).expect_err("no CA");
        assert!(err.contains("CLUSTER_CA_BUNDLE"), "{err}");
        let s =
            settle("demo", Some("https://x"), Some("Q0E="), None, denied()).expect("settings do");
        assert_eq!(s.info.service_cidr, None);
        assert!(
            s.warning.as_deref().is_some_and(|w| w.contains("AL2023")),
            "{s:?}"
        );
        let err = settle("demo", None, None, None, Ok(Described::default())).expect_err("nothing");
        assert!(err.contains("reported no API server endpoint"), "{err}");
    }
}
