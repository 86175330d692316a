//! The Kubernetes API types users write: `karpenter.sh/v1` NodePool and NodeClaim and
//! `karpenter.k8s.aws/v1` EC2NodeClass, with the CRDs generated from them, their validation, and
//! the converter from earlier API versions.

pub mod conditions;
pub mod crds;
pub mod duration;
pub mod ec2nodeclass;
pub mod hash;
pub mod labels;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod repair;
mod schema;
pub mod validation;

pub use ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec, EC2NodeClassStatus};
pub use nodeclaim::{NodeClaim, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{NodePool, NodePoolSpec, NodePoolStatus};
pub use validation::{Problem, ValidationErrors};
