//! The `karpenter-rs` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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

#[derive(Subcommand)]
enum Command {
    /// Run the controller in a cluster.
    Run,
    /// Show offline what the controller would launch and disrupt for a set of manifests.
    Simulate,
    /// Print the CustomResourceDefinitions generated from the API types.
    Crds {
        /// Write one file per CRD into this directory instead of printing them.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<std::path::PathBuf>,
    },
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run | Command::Simulate => {
            eprintln!("karpenter-rs: this command is not yet implemented");
            ExitCode::from(2)
        }
        Command::Crds { output_dir } => report(crds(output_dir.as_deref())),
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
            eprintln!("karpenter-rs: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn crds(output_dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    use anyhow::Context;
    use karpenter_rs::apis::crds;
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
