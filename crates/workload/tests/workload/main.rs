//! Workloads driven through the engine: multi-turn sessions released by
//! completions, and the prefix cache hits that context growth produces.
//! One test binary, one module per behaviour.

mod mutated_specs;
mod open;
mod sessions;
