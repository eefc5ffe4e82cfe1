#!/usr/bin/env bash
# Whole-process benchmarks of `blis run` (release build): wall time and peak
# memory for the sizes the issues name. Prompt 512, output 256 tokens,
# Llama-3.1-8B on one H100 at 30 req/s (Poisson), which keeps ~95 requests in
# the batch. Usage: scripts/bench.sh [sizes...]   (default: 1000 100000 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
sizes=("${@:-1000 100000 1000000}")
for n in ${sizes[@]}; do
  ./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --rate 30 --num-requests "$n" \
    --prompt-tokens 512 --output-tokens 256 --output /dev/null 2>&1 \
    | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/requests=$n: /"
  echo
done
# Workload generation: 1,000,000 requests from a 10-client spec (every arrival
# process and length shape), streamed as a trace v2 CSV to /dev/null. The
# generator alone (no CSV) is `cargo bench -p blis-workload`.
/usr/bin/time -f "workload generate, 1M requests, 10 clients: %e s wall, peak %M KiB" \
  ./target/release/blis workload generate --spec crates/workload/benches/ten-clients.yaml --output /dev/null
