//! The cluster facts a node needs to join: the API server endpoint, its CA bundle and the
//! service CIDR (AL2023's nodeadm derives the cluster DNS address from it).
//!
//! Settings win (`CLUSTER_ENDPOINT`, `CLUSTER_CA_BUNDLE`); whatever they leave out is read with
//! eks:DescribeCluster at start, as upstream does. The service CIDR has no setting, so
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
    described: Result<Described, CloudError>,
) -> Result<Settled, String> {
    let endpoint_setting = non_empty(endpoint);
    let ca_setting = non_empty(ca_bundle);
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

/// Reads the settings' endpoint and CA bundle and asks DescribeCluster for the rest.
pub async fn discover(
    eks: &aws_sdk_eks::Client,
    name: &str,
    endpoint: Option<&str>,
    ca_bundle: Option<&str>,
) -> Result<Settled, String> {
    settle(name, endpoint, ca_bundle, describe(eks, name).await)
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
        let s =
            settle("demo", Some("https://proxy.example"), None, Ok(reported())).expect("settled");
        assert_eq!(s.info.endpoint, "https://proxy.example");
        assert_eq!(s.info.ca_bundle, "Q0E=");
        assert_eq!(s.info.service_cidr.as_deref(), Some("10.100.0.0/16"));
        assert_eq!(s.warning, None);
        let blank = settle("demo", Some(" "), Some(""), Ok(reported())).expect("settled");
        assert_eq!(
            blank.info.endpoint,
            "https://ABC.gr7.us-east-1.eks.amazonaws.com"
        );
    }

    #[test]
    fn a_failed_describe_is_fatal_only_when_the_settings_do_not_cover_it() {
        let denied = || Err(CloudError::Invalid("AccessDeniedException: no".into()));
        let err = settle("demo", None, Some("Q0E="), denied()).expect_err("no endpoint");
        assert!(!err.contains('\n'), "one line: {err}");
        assert!(
            err.contains("CLUSTER_ENDPOINT")
                && err.contains("eks:DescribeCluster")
                && err.contains("AccessDeniedException"),
            "{err}"
        );
        let err = settle("demo", Some("https://x"), None, denied()).expect_err("no CA");
        assert!(err.contains("CLUSTER_CA_BUNDLE"), "{err}");
        let s = settle("demo", Some("https://x"), Some("Q0E="), denied()).expect("settings do");
        assert_eq!(s.info.service_cidr, None);
        assert!(
            s.warning.as_deref().is_some_and(|w| w.contains("AL2023")),
            "{s:?}"
        );
        let err = settle("demo", None, None, Ok(Described::default())).expect_err("nothing");
        assert!(err.contains("reported no API server endpoint"), "{err}");
    }
}
