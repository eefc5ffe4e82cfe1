//! Cluster behaviour tests, one module per behaviour, built into one binary.

mod allocation;
mod anomalies;
mod autoscaling;
mod harness;
mod invariants;
mod pd;
mod policies;
mod routing;
mod single_instance;
mod snapshots;
