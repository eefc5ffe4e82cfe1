//! Integration tests of the engine, one module per behaviour, built into one
//! binary to keep link time low.

mod harness;
mod invariants;
mod offload;
mod scenarios;
