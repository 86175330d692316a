//! The `karpenter-rs` command line.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand, ValueEnum};
use karpenter_rs::apis::crds;
use karpenter_rs::apis::duration::parse_go_duration;
use karpenter_rs::catalog::{self, Catalog};
use karpenter_rs::explain;
use karpenter_rs::manifest::{self, legacy};
use karpenter_rs::operator::settings::{self, Settings};
use karpenter_rs::scheduling::scheduler::Options;
use karpenter_rs::simulate;
use karpenter_rs::snapshot::EngineOptions;

#[derive(Parser)]
#[command(
    name = "karpenter-rs",
    version,
    about = "A Kubernetes node lifecycle controller for Amazon EKS, API-compatible with Karpenter v1"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum PreferencePolicy {
    Respect,
    Ignore,
}

#[derive(Clone, Copy, ValueEnum)]
enum MinValuesPolicy {
    Strict,
    BestEffort,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controller in a cluster.
    Run(Box<Settings>),
    /// Show offline what the controller would launch for the pods in a set of manifests, or in
    /// a live cluster (read-only) with manifests applied on top.
    Simulate {
        #[command(flatten)]
        source: Source,
        /// Also evaluate disruption (drift, expiration, emptiness, consolidation) once after
        /// provisioning.
        #[arg(long)]
        disruption: bool,
        /// Repeat disruption rounds (with re-provisioning) until nothing changes.
        #[arg(long)]
        settle: bool,
        /// Simulated time between rounds for --settle (a Go duration, e.g. 15s, 5m, 1.5h).
        #[arg(long, default_value = "15s", value_parser = parse_go_duration)]
        step: std::time::Duration,
        /// Print the full disruption reasoning for one node instead of the report (the same as
        /// `explain node NODE`).
        #[arg(long, value_name = "NODE")]
        explain: Option<String>,
    },
    /// Answer "why?" for one object, from manifests or a live cluster (read-only): why a pod is
    /// pending, why a node is not disrupted.
    Explain {
        #[command(subcommand)]
        what: ExplainWhat,
    },
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
    /// Migrate v1alpha5/v1alpha1 and v1beta1 Karpenter manifests to v1 (YAML on stdout,
    /// warnings on stderr).
    Convert {
        /// Manifest files or directories (`-` for stdin); repeatable.
        #[arg(
            short = 'f',
            long = "filename",
            required = true,
            value_name = "FILE|DIR|-"
        )]
        files: Vec<PathBuf>,
        /// Instance profile for node classes that name none (v1alpha5's
        /// `aws.defaultInstanceProfile` setting).
        #[arg(long, value_name = "NAME")]
        default_instance_profile: Option<String>,
        /// IAM role for node classes that name neither a role nor an instance profile.
        #[arg(long, value_name = "NAME")]
        default_role: Option<String>,
    },
    /// Print the version.
    Version,
}

#[derive(Subcommand)]
enum ExplainWhat {
    /// Why a pod is pending: every existing node and NodePool it was tried against, the first
    /// constraint that failed there (requirements, taints, limits, topology, size), and the fix.
    Pod {
        /// The pod, as NAMESPACE/NAME (NAME alone means the default namespace).
        #[arg(value_name = "NAMESPACE/NAME")]
        name: String,
        #[command(flatten)]
        source: Source,
    },
    /// Why a node is or is not disrupted: what protects it (do-not-disrupt, PDB, budget,
    /// consolidateAfter, initialization, policy), drift and expiry, and what removing it saves.
    Node {
        /// The node (or NodeClaim) name.
        name: String,
        #[command(flatten)]
        source: Source,
    },
}

/// Where `simulate` and `explain` read the cluster from and how the engine is set up.
#[derive(Args)]
struct Source {
    /// Manifest files or directories (`-` for stdin); repeatable. With a cluster, they are
    /// applied on top of what it holds.
    #[arg(
        short = 'f',
        long = "filename",
        required_unless_present_any = ["from_cluster", "kubeconfig", "context"],
        value_name = "FILE|DIR|-"
    )]
    files: Vec<PathBuf>,
    /// Read the cluster the kubeconfig points at (KUBECONFIG, ~/.kube/config or in-cluster, as
    /// kubectl does): NodePools, EC2NodeClasses, NodeClaims, Nodes, Pods, DaemonSets,
    /// PodDisruptionBudgets, volumes and CSINodes, listed read-only.
    #[arg(long)]
    from_cluster: bool,
    /// The kubeconfig file to read the cluster with (implies --from-cluster).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (implies --from-cluster).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    output: Output,
    /// Region whose catalog prices instance types (default: inferred, else us-east-1).
    #[arg(long)]
    region: Option<String>,
    /// An instance-type catalog file in the bundled format, instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// `Ignore` drops pod preferences up front (PREFERENCE_POLICY).
    #[arg(long, value_enum, env = "PREFERENCE_POLICY", default_value = "respect")]
    preference_policy: PreferencePolicy,
    /// `BestEffort` relaxes minValues instead of failing (MIN_VALUES_POLICY).
    #[arg(long, value_enum, env = "MIN_VALUES_POLICY", default_value = "strict")]
    min_values_policy: MinValuesPolicy,
    /// The current time (RFC 3339); default now.
    #[arg(long, value_parser = parse_now)]
    now: Option<chrono::DateTime<chrono::Utc>>,
    /// Feature gates, e.g. `SpotToSpotConsolidation=true` (FEATURE_GATES).
    #[arg(long, env = "FEATURE_GATES", default_value = "")]
    feature_gates: String,
    /// The most new nodes one consolidation may launch (CONSOLIDATION_REPLACEMENTS): 1, as
    /// upstream; above 1, also simulated sized by cost, possibly several cheaper nodes.
    #[arg(long, env = "CONSOLIDATION_REPLACEMENTS", default_value_t = 1)]
    consolidation_replacements: usize,
}

/// The engine options the CLI flags select.
fn engine_options(
    preference_policy: PreferencePolicy,
    min_values_policy: MinValuesPolicy,
    feature_gates: &str,
    consolidation_replacements: usize,
) -> anyhow::Result<EngineOptions> {
    if consolidation_replacements == 0 {
        anyhow::bail!(settings::NO_CONSOLIDATION_REPLACEMENTS);
    }
    let spot_to_spot = feature_gate(feature_gates, "SpotToSpotConsolidation")
        .map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    let static_capacity = feature_gate(feature_gates, "StaticCapacity")
        .map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    let node_overlay = feature_gate(feature_gates, "NodeOverlay")
        .map_err(|e| anyhow::anyhow!("--feature-gates: {e}"))?;
    Ok(EngineOptions {
        scheduler: Options {
            ignore_preferences: matches!(preference_policy, PreferencePolicy::Ignore),
            min_values_best_effort: matches!(min_values_policy, MinValuesPolicy::BestEffort),
            ..Options::default()
        },
        disruption: karpenter_rs::disruption::Options {
            spot_to_spot,
            replacements: consolidation_replacements,
        },
        static_capacity,
        node_overlay,
        // `simulate` and `explain` plan; repairing Nodes is `run`'s alone.
        node_repair: false,
    })
}

/// Starts the controller with `settings`: logging, the metrics and health servers, the cloud
/// provider, then the controllers until SIGTERM.
fn run(settings: Settings) -> anyhow::Result<()> {
    use std::sync::Arc;

    use karpenter_rs::clock::{Clock, SystemClock};
    use karpenter_rs::cloudprovider::CloudProvider;
    use karpenter_rs::cloudprovider::aws;
    use karpenter_rs::cloudprovider::instrumented::Instrumented;
    use karpenter_rs::cloudprovider::simulated::SimulatedProvider;
    use karpenter_rs::controllers::provisioning::BatchWindow;
    use karpenter_rs::controllers::{self, RunConfig};
    use karpenter_rs::operator::http::{self, Readiness, Routes};
    use karpenter_rs::operator::{kube_client, logging, settings::CloudProviderKind};

    karpenter_rs::operator::allocator::tune();
    if let Err(invalid) = settings.validate() {
        anyhow::bail!("{invalid}");
    }
    logging::init(&settings)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let region = std::env::var("AWS_REGION")
            .or_else(|_| std::env::var("AWS_DEFAULT_REGION"))
            .unwrap_or_else(|_| catalog::DEFAULT_REGION.to_string());
        let kube_config = kube::Config::infer()
            .await
            .context("reading the Kubernetes client configuration (KUBECONFIG or in-cluster)")?;
        // KUBE_CLIENT_QPS / KUBE_CLIENT_BURST: one token bucket for every client.
        let limiter = kube_client::RateLimitLayer::new(
            settings.kube_client_qps,
            settings.kube_client_burst,
        );
        let client = kube_client::client(kube_config.clone(), &limiter)
            .context("connecting to the Kubernetes API")?;
        // Evictions get a client without kube-rs' own 429 retries: a PodDisruptionBudget's
        // refusal must reach the drain's backoff and terminationGracePeriod deadline at once.
        // Nodes trust the API server through the CA this client trusts, unless
        // CLUSTER_CA_BUNDLE says otherwise (upstream's order).
        let client_ca = kube_config
            .root_cert
            .as_deref()
            .and_then(aws::cluster::pem_bundle);
        let mut no_retry = kube_config;
        no_retry.default_retry = false;
        let eviction_client = kube_client::client(no_retry, &limiter)
            .context("connecting to the Kubernetes API")?;
        let (provider, simulated): (Arc<dyn CloudProvider>, _) = match settings.cloud_provider {
            CloudProviderKind::Simulated => {
                let catalog = Catalog::bundled(&region)?;
                let cloud = Arc::new(SimulatedProvider::new(catalog, clock.clone()));
                (Arc::new(Instrumented::new(cloud.clone())), Some(cloud))
            }
            CloudProviderKind::Aws => {
                let sdk = aws::config_loader(&region).load().await;
                let eks = aws_sdk_eks::Client::new(&sdk);
                // KUBERNETES_VERSION, else eks:DescribeCluster with EKS_CONTROL_PLANE, else the
                // API server: read now (no start without it) and every 5 minutes after.
                let version_source = aws::version::Source::new(
                    aws::version::origin(
                        &settings.kubernetes_version,
                        settings.eks_control_plane,
                    )
                    .map_err(|e| anyhow::anyhow!(e))?,
                    &eks,
                    &settings.cluster_name,
                    &client,
                );
                let kubernetes_version = version_source.read().await.map_err(|e| {
                    anyhow::anyhow!("{e} (the Kubernetes version picks the EKS AMIs)")
                })?;
                tracing::info!(version = %kubernetes_version, "Kubernetes version");
                if let Some(why) = aws::version::unsupported(&kubernetes_version) {
                    tracing::error!(version = %kubernetes_version, "{why}");
                }
                let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
                // Nodes need the endpoint, CA bundle and (AL2023) service CIDR in their user
                // data: what the settings leave out comes from eks:DescribeCluster, or the
                // controller does not start.
                let cluster = aws::cluster::discover(
                    &eks,
                    &settings.cluster_name,
                    Some(&settings.cluster_endpoint),
                    Some(&settings.cluster_ca_bundle),
                    client_ca.as_deref(),
                )
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
                if let Some(warning) = &cluster.warning {
                    tracing::warn!(cluster = %settings.cluster_name, "{warning}");
                }
                let aws_settings = aws::AwsSettings {
                    cluster_name: settings.cluster_name.clone(),
                    cluster_endpoint: cluster.info.endpoint,
                    cluster_ca_bundle: Some(cluster.info.ca_bundle),
                    kubernetes_version,
                    service_cidr: cluster.info.service_cidr,
                    isolated_vpc: settings.isolated_vpc,
                    reserved_enis: settings.reserved_enis,
                    vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
                    interruption_queue: non_empty(&settings.interruption_queue),
                    region: region.clone(),
                    reserved_capacity: settings.feature_gates.reserved_capacity,
                    disable_dry_run: settings.disable_dry_run,
                    resolution_period: settings.nodeclass_resolution_period(),
                };
                let cloud = Arc::new(
                    aws::AwsProvider::new(aws_settings, &sdk, clock.clone())
                        .map_err(|e| anyhow::anyhow!("starting the AWS provider: {e}"))?,
                );
                // Instance types must be known before anything is planned (upstream does not
                // start without them either); later refreshes run in the background.
                let report = cloud
                    .refresh()
                    .await
                    .map_err(|e| anyhow::anyhow!("loading EC2 instance types: {e}"))?;
                aws::log_refresh(&report);
                tokio::spawn(cloud.clone().run_refresh());
                tokio::spawn(aws::version::run_refresh(cloud.clone(), version_source));
                (Arc::new(Instrumented::new(cloud)), None)
            }
        };
        tracing::info!(cloud_provider = provider.name(), region = %region, "cloud provider selected");

        let readiness = Readiness::default();
        let (stop_servers, servers_stopped) = tokio::sync::watch::channel(false);
        for (port, routes) in [
            (settings.metrics_port, Routes::metrics()),
            (settings.health_probe_port, Routes::health(readiness.clone())),
        ] {
            let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
                .await
                .with_context(|| format!("listening on port {port}"))?;
            tracing::info!(address = %listener.local_addr()?, "serving");
            let mut stopped = servers_stopped.clone();
            tokio::spawn(http::serve(listener, routes, async move {
                let _ = stopped.wait_for(|s| *s).await;
            }));
        }

        let identity = controllers::leader::identity(
            std::env::var("POD_NAME").ok().as_deref(),
            std::env::var("HOSTNAME").ok().as_deref(),
            &controllers::leader::unique_suffix(),
        );
        if !settings.disable_leader_election {
            tracing::info!(identity = %identity, "leader election identity");
        }
        let namespace = if settings.leader_election_namespace.is_empty() {
            std::env::var("SYSTEM_NAMESPACE").unwrap_or_else(|_| "kube-system".into())
        } else {
            settings.leader_election_namespace.clone()
        };
        let config = RunConfig {
            region,
            leader_election: (!settings.disable_leader_election)
                .then(|| (namespace, settings.leader_election_name.clone())),
            identity,
            batch: BatchWindow {
                idle: settings.batch_idle_duration,
                max: settings.batch_max_duration,
            },
            options: EngineOptions {
                scheduler: Options {
                    ignore_preferences: matches!(
                        settings.preference_policy,
                        karpenter_rs::operator::settings::PreferencePolicy::Ignore
                    ),
                    min_values_best_effort: matches!(
                        settings.min_values_policy,
                        karpenter_rs::operator::settings::MinValuesPolicy::BestEffort
                    ),
                    ..Options::default()
                },
                disruption: karpenter_rs::disruption::Options {
                    spot_to_spot: settings.feature_gates.spot_to_spot_consolidation,
                    replacements: settings.consolidation_replacements,
                },
                static_capacity: settings.feature_gates.static_capacity,
                node_overlay: settings.feature_gates.node_overlay,
                node_repair: settings.feature_gates.node_repair,
            },
            eviction_client,
            observe_cluster_state: !settings.disable_cluster_state_observability,
        };
        let result =
            controllers::run(client, provider, simulated, clock, config, readiness)
                .await;
        let _ = stop_servers.send(true);
        result
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(settings) => match run(*settings) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("karpenter-rs: {}", describe_error(&e));
                ExitCode::FAILURE
            }
        },
        Command::Simulate {
            source,
            disruption,
            settle,
            step,
            explain,
        } => {
            let Source {
                files,
                from_cluster,
                kubeconfig,
                context,
                output,
                region,
                catalog,
                preference_policy,
                min_values_policy,
                now,
                feature_gates,
                consolidation_replacements,
            } = source;
            let options = match engine_options(
                preference_policy,
                min_values_policy,
                &feature_gates,
                consolidation_replacements,
            ) {
                Ok(o) => o,
                Err(e) => {
                    eprintln!("karpenter-rs: {e}");
                    return ExitCode::from(2);
                }
            };
            let mode = Mode {
                disruption: disruption || settle || explain.is_some(),
                settle: settle.then_some(step),
                now: now.unwrap_or_else(chrono::Utc::now),
                explain,
            };
            let cluster = (from_cluster || kubeconfig.is_some() || context.is_some()).then_some(
                LiveCluster {
                    kubeconfig,
                    context,
                },
            );
            report(run_simulate(
                &files,
                cluster.as_ref(),
                output,
                region,
                catalog.as_deref(),
                &options,
                &mode,
            ))
        }
        Command::Explain { what } => report(run_explain(what)),
        Command::Crds { output_dir } => report(print_crds(output_dir.as_deref())),
        Command::Convert {
            files,
            default_instance_profile,
            default_role,
        } => report(run_convert(
            &files,
            &legacy::Options {
                default_instance_profile,
                default_role,
            },
        )),
        Command::Version => {
            println!("karpenter-rs {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

/// Prints an error the way every subcommand does and turns it into an exit code.
fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("karpenter-rs: {}", describe_error(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, each once. Many errors already include their cause in their own
/// message (`#[error("{path}: {source}")]`, `#[error("kubernetes API: {0}")]`), which `{:#}`
/// would print a second time; a cause is appended only when the text so far does not hold it.
fn describe_error(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&cause);
        }
    }
    text
}

/// What `simulate` runs beyond provisioning.
struct Mode {
    disruption: bool,
    settle: Option<std::time::Duration>,
    now: chrono::DateTime<chrono::Utc>,
    explain: Option<String>,
}

fn parse_now(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-11-23T10:00:00Z: {e}"))
}

/// Reads one gate from a `Name=true,Other=false` list; unknown names are ignored, bad values
/// rejected.
fn feature_gate(gates: &str, name: &str) -> Result<bool, String> {
    for entry in gates.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (k, v) = entry
            .split_once('=')
            .ok_or_else(|| format!("{entry:?} is not Name=true|false"))?;
        if k == name {
            return v
                .parse::<bool>()
                .map_err(|_| format!("{k}={v}: the value must be true or false"));
        }
    }
    Ok(false)
}

/// Where `simulate` reads a live cluster from, as kubectl's flags name it.
struct LiveCluster {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
}

/// The live cluster's objects, read through a short-lived runtime (the rest of `simulate` is
/// synchronous), with progress on stderr.
fn read_live(live: &LiveCluster) -> anyhow::Result<Vec<manifest::Document>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let options = kube::config::KubeConfigOptions {
            context: live.context.clone(),
            ..Default::default()
        };
        let config = match (&live.kubeconfig, &live.context) {
            (Some(path), _) => {
                let file = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options).await?
            }
            (None, Some(_)) => kube::Config::from_kubeconfig(&options).await?,
            (None, None) => kube::Config::infer().await.context(
                "finding a kubeconfig (KUBECONFIG, ~/.kube/config or in-cluster); pass --kubeconfig",
            )?,
        };
        eprintln!("karpenter-rs: reading the cluster at {}", config.cluster_url);
        let client = kube::Client::try_from(config).context("connecting to the Kubernetes API")?;
        let docs = manifest::live::read_cluster(&client, |kind, count| match count {
            Some(n) => eprintln!("karpenter-rs:   {n} {}", kind.plural),
            None => eprintln!(
                "karpenter-rs:   {} not served by this cluster; skipped",
                kind.plural
            ),
        })
        .await?;
        Ok(docs)
    })
}

fn run_simulate(
    files: &[PathBuf],
    live: Option<&LiveCluster>,
    output: Output,
    region: Option<String>,
    catalog_file: Option<&Path>,
    options: &EngineOptions,
    mode: &Mode,
) -> anyhow::Result<()> {
    let (cluster, catalog) = load(files, live, region, catalog_file, mode.now)?;
    if let Some(node) = &mode.explain {
        return explain_node(&cluster, &catalog, options, mode.now, node, output);
    }
    let result = if mode.disruption {
        simulate::simulate_with_disruption(&cluster, &catalog, options, mode.now, mode.settle)
    } else {
        simulate::simulate(&cluster, &catalog, options)
    };
    // The input is no longer needed; free it before rendering (a large cluster's pods would
    // otherwise stay resident next to the report).
    drop(cluster);
    match output {
        Output::Table => print!("{}", result.to_table()),
        Output::Json => {
            // Streamed: a report of thousands of NodeClaims is tens of MB of JSON.
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            serde_json::to_writer_pretty(&mut out, &result)
                .context("rendering the report as JSON")?;
            writeln!(out)?;
            out.flush()?;
        }
    }
    Ok(())
}

/// The cluster (files, on top of a live cluster when one is given) and the catalog to price it
/// with, as `simulate` and `explain` read them.
fn load(
    files: &[PathBuf],
    live: Option<&LiveCluster>,
    region: Option<String>,
    catalog_file: Option<&Path>,
    now: chrono::DateTime<chrono::Utc>,
) -> anyhow::Result<(karpenter_rs::snapshot::Snapshot, Catalog)> {
    let cluster = {
        // The parsed documents are done with once typed; free them before scheduling.
        let mut docs = manifest::read_paths(files)?;
        if let Some(live) = live {
            docs = manifest::live::overlay(read_live(live)?, docs);
        }
        manifest::load(&docs, now)?
    };
    for i in &cluster.ignored {
        eprintln!(
            "karpenter-rs: ignoring {} from {}: {}",
            i.object, i.source, i.reason
        );
    }
    let catalog = match catalog_file {
        Some(path) => Catalog::from_file(path)?,
        None => {
            let region = region
                .or_else(|| cluster.region_hint())
                .unwrap_or_else(|| catalog::DEFAULT_REGION.to_string());
            Catalog::bundled(&region)?
        }
    };
    Ok((cluster, catalog))
}

/// `explain node` and `simulate --explain`: the disruption engine's reasoning for one node, once
/// the pending pods are provisioned.
fn explain_node(
    cluster: &karpenter_rs::snapshot::Snapshot,
    catalog: &Catalog,
    options: &EngineOptions,
    now: chrono::DateTime<chrono::Utc>,
    node: &str,
    output: Output,
) -> anyhow::Result<()> {
    let explanation = simulate::explain(cluster, catalog, options, now, node).ok_or_else(|| {
        anyhow::anyhow!(
            "no node named {node:?} in the input or among the NodeClaims simulate would launch; `kubectl get nodes` lists the names"
        )
    })?;
    match output {
        Output::Table => print!("{explanation}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
    }
    Ok(())
}

fn run_explain(what: ExplainWhat) -> anyhow::Result<()> {
    let (ExplainWhat::Pod { source, .. } | ExplainWhat::Node { source, .. }) = &what;
    let options = engine_options(
        source.preference_policy,
        source.min_values_policy,
        &source.feature_gates,
        source.consolidation_replacements,
    )?;
    let now = source.now.unwrap_or_else(chrono::Utc::now);
    let live = (source.from_cluster || source.kubeconfig.is_some() || source.context.is_some())
        .then(|| LiveCluster {
            kubeconfig: source.kubeconfig.clone(),
            context: source.context.clone(),
        });
    let (cluster, catalog) = load(
        &source.files,
        live.as_ref(),
        source.region.clone(),
        source.catalog.as_deref(),
        now,
    )?;
    match &what {
        ExplainWhat::Node { name, source } => {
            explain_node(&cluster, &catalog, &options, now, name, source.output)
        }
        ExplainWhat::Pod { name, source } => {
            let explanation =
                explain::pod(&cluster, &catalog, &options, name).map_err(anyhow::Error::msg)?;
            match source.output {
                Output::Table => print!("{explanation}"),
                Output::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
            }
            Ok(())
        }
    }
}

fn run_convert(files: &[PathBuf], options: &legacy::Options) -> anyhow::Result<()> {
    let docs = manifest::read_paths(files)?;
    let conversion = legacy::convert_with(&docs, options)?;
    for w in &conversion.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", manifest::to_yaml_stream(&conversion.objects)?);
    Ok(())
}

fn print_crds(output_dir: Option<&Path>) -> anyhow::Result<()> {
    match output_dir {
        None => print!("{}", crds::render_all()?),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (file, crd) in crds::all() {
                let path = dir.join(file);
                std::fs::write(&path, crds::to_yaml(&crd)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
