//! The scheduling core: the pure, synchronous algebra the provisioner and the disruption
//! simulator use to decide which pods fit on which NodePools, NodeClaims and nodes.
//!
//! Nothing in here performs I/O, reads a clock, spawns tasks or awaits: every function is a
//! deterministic computation over its arguments. That keeps the bin-packing loop (millions of
//! calls per batch) free of locks and syscalls, and makes every decision reproducible in tests.

pub mod instance_type;
pub mod overlay;
pub mod patterns;
pub mod pod;
pub mod pod_shapes;
pub mod requirements;
pub mod resource_shape;
pub mod resources;
pub mod scheduler;
pub mod static_capacity;
pub mod taints;
pub mod topology;
pub mod type_labels;
pub mod type_set;
pub mod unschedulable;
