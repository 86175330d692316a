//! karpenter-rs: a Kubernetes node lifecycle controller for Amazon EKS, API-compatible with
//! Karpenter v1.

pub mod apis;
pub mod catalog;
pub mod cluster;
pub mod disruption;
pub mod manifest;
pub mod metrics;
pub mod operator;
pub mod scheduling;
pub mod simulate;
