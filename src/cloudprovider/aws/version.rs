//! The cluster's Kubernetes minor version (`1.33`), which picks the alias AMIs (their SSM
//! parameters are published per version), found as upstream finds it: the `KUBERNETES_VERSION`
//! setting when set, else eks:DescribeCluster's `cluster.version` with `EKS_CONTROL_PLANE=true`,
//! else the API server's discovery version (`major.minor`, without the `+` some distributions
//! append to the minor). It is read once before the controllers start (no start without it) and
//! again every [`REFRESH_PERIOD`]; a failed read keeps the previous version. A version outside
//! upstream's supported range is logged as an error each time it is first seen, and used anyway.
//! [`origin`], [`parse`], [`from_discovery`] and [`unsupported`] are pure and unit-tested;
//! [`Source::read`] adds the one call.

use std::time::Duration;

use super::{AwsProvider, sdk_error};

/// The oldest Kubernetes minor version upstream v1.14.1 supports.
pub const MIN_SUPPORTED: (u64, u64) = (1, 26);
/// The newest Kubernetes minor version upstream v1.14.1 supports.
pub const MAX_SUPPORTED: (u64, u64) = (1, 36);
/// How often the version is read again (upstream's version controller requeues every 5
/// minutes), so an upgraded control plane reaches the next AMI resolution without a restart.
pub const REFRESH_PERIOD: Duration = Duration::from_secs(5 * 60);

/// Where the version is read from, in upstream's precedence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// `KUBERNETES_VERSION`, as given (already checked by [`parse`]).
    Setting(String),
    /// `EKS_CONTROL_PLANE=true`: eks:DescribeCluster's `cluster.version`.
    DescribeCluster,
    /// The API server's discovery version (`/version`).
    ApiServer,
}

/// Picks the origin: a non-empty `KUBERNETES_VERSION` wins, then `EKS_CONTROL_PLANE`, then the
/// API server. A setting that is not `major.minor` is refused with the fix.
pub fn origin(setting: &str, eks_control_plane: bool) -> Result<Origin, String> {
    let setting = setting.trim();
    if !setting.is_empty() {
        parse(setting).map_err(|e| format!("KUBERNETES_VERSION (--kubernetes-version) {e}"))?;
        return Ok(Origin::Setting(setting.to_string()));
    }
    Ok(if eks_control_plane {
        Origin::DescribeCluster
    } else {
        Origin::ApiServer
    })
}

/// `1.33` → `(1, 33)`; anything else is an error that says the expected form.
pub fn parse(version: &str) -> Result<(u64, u64), String> {
    let parsed = version
        .split_once('.')
        .and_then(|(major, minor)| Some((number(major)?, number(minor)?)));
    parsed.ok_or_else(|| {
        format!("{version:?} is not a Kubernetes minor version: give it as major.minor, e.g. 1.33")
    })
}

/// A decimal number of ASCII digits only (no sign, no spaces), as version parts are written.
fn number(part: &str) -> Option<u64> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// The `major.minor` of an API server's discovery answer; the `+` some distributions append to
/// the minor (`27+`) is dropped, as upstream drops it.
pub fn from_discovery(major: &str, minor: &str) -> Result<String, String> {
    let version = format!("{major}.{}", minor.trim_end_matches('+'));
    parse(&version)
        .map(|_| version)
        .map_err(|e| format!("the API server reports major {major:?} and minor {minor:?}: {e}"))
}

/// Why `version` is outside [`MIN_SUPPORTED`]..=[`MAX_SUPPORTED`], or `None` when it is inside
/// (or unreadable, which [`parse`] reports where the version is read).
pub fn unsupported(version: &str) -> Option<String> {
    let v = parse(version).ok()?;
    let (min, max) = (MIN_SUPPORTED, MAX_SUPPORTED);
    (v < min || v > max).then(|| {
        format!(
            "Kubernetes {version} is outside the versions upstream Karpenter v1.14.1 supports ({}.{} to {}.{}); alias AMIs and node bootstrap may not work",
            min.0, min.1, max.0, max.1
        )
    })
}

/// The version's source with the client it needs.
#[derive(Clone)]
pub enum Source {
    /// `KUBERNETES_VERSION`.
    Setting(String),
    /// eks:DescribeCluster on the named cluster.
    DescribeCluster {
        /// The EKS client.
        eks: aws_sdk_eks::Client,
        /// `CLUSTER_NAME`.
        cluster: String,
    },
    /// The API server's discovery version.
    ApiServer(kube::Client),
}

impl Source {
    /// The source for `origin` (see [`origin`]), with the client it calls.
    pub fn new(
        origin: Origin,
        eks: &aws_sdk_eks::Client,
        cluster: &str,
        api_server: &kube::Client,
    ) -> Self {
        match origin {
            Origin::Setting(v) => Source::Setting(v),
            Origin::DescribeCluster => Source::DescribeCluster {
                eks: eks.clone(),
                cluster: cluster.to_string(),
            },
            Origin::ApiServer => Source::ApiServer(api_server.clone()),
        }
    }

    /// Reads the version now; the error names the call that failed.
    pub async fn read(&self) -> Result<String, String> {
        match self {
            Source::Setting(v) => Ok(v.clone()),
            Source::DescribeCluster { eks, cluster } => {
                let out = eks
                    .describe_cluster()
                    .name(cluster)
                    .send()
                    .await
                    .map_err(|e| {
                        format!(
                            "reading the Kubernetes version of cluster {cluster:?} (EKS_CONTROL_PLANE is true): {}",
                            sdk_error("eks:DescribeCluster", e)
                        )
                    })?;
                let version = out.cluster().and_then(|c| c.version()).unwrap_or_default();
                parse(version).map(|_| version.to_string()).map_err(|e| {
                    format!(
                        "eks:DescribeCluster on cluster {cluster:?} (EKS_CONTROL_PLANE is true) reports version {e}"
                    )
                })
            }
            Source::ApiServer(client) => {
                let info = client.apiserver_version().await.map_err(|e| {
                    format!("reading the Kubernetes version from the API server: {e}")
                })?;
                from_discovery(&info.major, &info.minor)
            }
        }
    }
}

/// What one [`refresh`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// The version is the one the provider had.
    Unchanged,
    /// The provider now resolves AMIs for `to`.
    Changed {
        /// The previous version.
        from: String,
        /// The new version.
        to: String,
        /// Why `to` is not supported, when it is not (see [`unsupported`]).
        unsupported: Option<String>,
    },
}

/// Reads the version from `source` and hands a changed one to `provider`, whose next
/// EC2NodeClass resolution (and so drift) uses it. A failed read changes nothing.
pub async fn refresh(provider: &AwsProvider, source: &Source) -> Result<Refreshed, String> {
    let version = source.read().await?;
    Ok(match provider.set_kubernetes_version(version.clone()) {
        None => Refreshed::Unchanged,
        Some(from) => Refreshed::Changed {
            from,
            unsupported: unsupported(&version),
            to: version,
        },
    })
}

/// [`refresh`] every [`REFRESH_PERIOD`], logging changes, unsupported versions (as errors, as
/// upstream) and failed reads. Never returns: it ends with the runtime.
pub async fn run_refresh(provider: std::sync::Arc<AwsProvider>, source: Source) {
    loop {
        tokio::time::sleep(REFRESH_PERIOD).await;
        match refresh(&provider, &source).await {
            Ok(Refreshed::Unchanged) => {}
            Ok(Refreshed::Changed {
                from,
                to,
                unsupported,
            }) => {
                tracing::info!(from = %from, version = %to, "the cluster's Kubernetes version changed; EC2NodeClasses resolve alias AMIs for it from now on");
                if let Some(why) = unsupported {
                    tracing::error!(version = %to, "{why}");
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the Kubernetes version failed; keeping the previous one");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_wins_then_describe_cluster_then_the_api_server() {
        assert_eq!(origin("1.31", true), Ok(Origin::Setting("1.31".into())));
        assert_eq!(origin(" 1.31 ", false), Ok(Origin::Setting("1.31".into())));
        assert_eq!(origin("", true), Ok(Origin::DescribeCluster));
        assert_eq!(origin("  ", true), Ok(Origin::DescribeCluster));
        assert_eq!(origin("", false), Ok(Origin::ApiServer));
    }

    #[test]
    fn a_setting_that_is_not_major_minor_is_refused_with_the_fix() {
        for bad in ["v1.31", "1", "1.31.2", "1.x", "1.-3", "one.two", "1.31+"] {
            let err = origin(bad, false).expect_err(bad);
            assert!(
                err.contains("KUBERNETES_VERSION (--kubernetes-version)")
                    && err.contains(&format!("{bad:?}"))
                    && err.contains("e.g. 1.33"),
                "{err}"
            );
        }
    }

    #[test]
    fn discovery_drops_the_plus_of_the_minor() {
        assert_eq!(from_discovery("1", "33"), Ok("1.33".to_string()));
        assert_eq!(from_discovery("1", "27+"), Ok("1.27".to_string()));
        let err = from_discovery("1", "").expect_err("no minor");
        assert!(err.contains("minor \"\""), "{err}");
        assert!(from_discovery("", "33").is_err());
        assert!(from_discovery("1", "33-eks").is_err());
    }

    #[test]
    fn versions_outside_1_26_to_1_36_are_unsupported() {
        for inside in ["1.26", "1.33", "1.36"] {
            assert_eq!(unsupported(inside), None, "{inside}");
        }
        for outside in ["1.25", "1.37", "2.0", "0.40"] {
            let why = unsupported(outside).expect(outside);
            assert!(
                why.contains(&format!("Kubernetes {outside} ")) && why.contains("1.26 to 1.36"),
                "{why}"
            );
        }
        // Compared as numbers, not text: 1.100 is newer than 1.36.
        assert!(unsupported("1.100").is_some());
        assert_eq!(parse("1.9"), Ok((1, 9)));
    }
}
