//! karpenter-rs: a Kubernetes node lifecycle controller for Amazon EKS, API-compatible with
//! Karpenter v1.

pub mod apis;
pub mod catalog;
pub mod clock;
pub mod cloudprovider;
pub mod controllers;
pub mod disruption;
pub mod explain;
pub mod manifest;
pub mod metrics;
pub mod operator;
pub mod pacing;
pub mod runtime;
pub mod scheduling;
pub mod simulate;
pub mod snapshot;
pub mod state;
