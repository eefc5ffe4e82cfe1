#!/usr/bin/env bash
# Whole-process benchmarks of `blis run` (release build): wall time and peak
# memory for the sizes the issues name. Prompt 512, output 256 tokens,
# Llama-3.1-8B on one H100 at 25 req/s (Poisson), which keeps ~110 requests in
# the batch. Usage: scripts/bench.sh [sizes...]   (default: 1000 100000 1000000)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
sizes=("${@:-1000 100000 1000000}")
for n in ${sizes[@]}; do
  ./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --rate 25 --num-requests "$n" \
    --prompt-tokens 512 --output-tokens 256 --output /dev/null 2>&1 \
    | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/requests=$n: /"
  echo
done
# The same 100 000 requests with a 64 GiB CPU KV tier (vLLM's native
# offloading: every full block stored, reloads instead of recomputation).
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --rate 25 --num-requests 100000 \
  --prompt-tokens 512 --output-tokens 256 --kv-offloading-size 64 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/requests=100000, 64 GiB CPU tier: /"
echo
# The same with LMCache's tiers: 64 GiB of host memory and 512 GiB of disk
# (prompt chunks stored write-through to both, reads from disk via host memory).
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --rate 25 --num-requests 100000 \
  --prompt-tokens 512 --output-tokens 256 --kv-offloading-size 64 --kv-tiers disk:512 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/requests=100000, LMCache 64 GiB CPU + 512 GiB disk: /"
echo
# A sliding-window model under vLLM's hybrid KV cache manager (gpt-oss-20b:
# a full-attention and a 128-token sliding-window group, each taking blocks).
./target/release/blis run --model openai/gpt-oss-20b --model-config crates/physics/tests/fixtures/gpt-oss-20b.json \
  --rate 25 --num-requests 100000 --prompt-tokens 512 --output-tokens 256 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/requests=100000, gpt-oss-20b, hybrid KV groups: /"
echo
# Closed loop: 100 000 requests through 100 connections (a rate far above
# what the server sustains, so every request waits for a slot).
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --rate 1000 --max-concurrency 100 --num-requests 100000 \
  --prompt-tokens 512 --output-tokens 256 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/closed loop, 100000 requests at concurrency 100: /"
echo
# Cluster: 100 000 requests over 16 instances (30 req/s each) with weighted
# routing (prefix-affinity:4, queue-depth:3); prompts are a 256-token system
# prompt from 64 groups + 256 private tokens.
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --num-instances 16 --rate 480 --num-requests 100000 \
  --prompt-tokens 256 --prefix-tokens 256 --prefix-groups 64 --output-tokens 256 \
  --routing-policy weighted --routing-scorers prefix-affinity:4,queue-depth:3 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/cluster 16 instances x 100000 requests, weighted: /"
echo
# Prefill/decode disaggregation: 100 000 requests on 4 prefill + 12 decode
# instances (every prompt prefilled on the prefill pool, its KV pulled by a
# decode instance).
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --prefill-instances 4 --decode-instances 12 --rate 200 --num-requests 100000 \
  --prompt-tokens 512 --output-tokens 256 --output /dev/null 2>&1 \
  | grep -E "mean batch|Simulated in" | tr '\n' ' ' | sed "s/^/P\/D 4 prefill + 12 decode x 100000 requests: /"
echo
# Workload generation: 1,000,000 requests from a 10-client spec (every arrival
# process and length shape), streamed as a trace v2 CSV to /dev/null. The
# generator alone (no CSV) is `cargo bench -p blis-workload`.
/usr/bin/time -f "workload generate, 1M requests, 10 clients: %e s wall, peak %M KiB" \
  ./target/release/blis workload generate --spec crates/workload/benches/ten-clients.yaml --output /dev/null
# Autoscaling: one simulated day of scenario:diurnal-cycle at 20 req/s on
# average (1.73 M requests, 10x from midnight to noon), target tracking
# between 1 and 16 replicas of 256 seats (with an H100's default 1 024 one
# replica carries the whole day and nothing scales).
./target/release/blis run --model meta-llama/llama-3.1-8b-instruct --workload scenario:diurnal-cycle --rate 20 --max-num-seqs 256 \
  --autoscale-policy target-tracking --min-instances 1 --max-instances 16 --output /dev/null 2>&1 \
  | grep -E "mean batch|replicas min|Simulated in" | tr '\n' ' ' | sed "s/^/autoscaled diurnal day, 1.73M requests: /"
echo
# Sweep: 1 000 points (10 rates x 10 batch caps x 10 seeds) of a
# 10 000-request single-instance scenario on every core.
printf 'axes:\n  rate: [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]\n  max-num-seqs: [16, 32, 48, 64, 96, 128, 160, 192, 224, 256]\n  seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n' > /tmp/blis-bench-grid.yaml
rm -f /tmp/blis-bench-sweep.csv
/usr/bin/time -f "sweep, 1000 points x 10000 requests: %e s, %M KiB peak" ./target/release/blis sweep --model meta-llama/llama-3.1-8b-instruct \
  --num-requests 10000 --grid /tmp/blis-bench-grid.yaml --output /tmp/blis-bench-sweep.csv --quiet
# Plan: 540 candidate deployments (examples/plan/plan.yaml), 4 000 requests each.
/usr/bin/time -f "plan, 540 candidates: %e s, %M KiB peak" ./target/release/blis plan --model meta-llama/llama-3.1-8b-instruct \
  --rate 40 --num-requests 4000 --prompt-tokens 2048 --output-tokens 256 --plan examples/plan/plan.yaml > /dev/null
