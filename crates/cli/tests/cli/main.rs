//! End-to-end tests of the `blis` binary, one module per subcommand, built
//! into one binary to keep link time low.

mod experiment_dir;
mod fit;
mod validate;
