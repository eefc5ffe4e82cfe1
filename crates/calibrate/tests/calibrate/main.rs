//! Integration tests of blis-calibrate on the experiments shipped in
//! `validation/vllm-h100`, built into one binary.

mod drawn;
mod vendored;
