#!/usr/bin/env bash
# Output parity: runs a fixed battery of `blis` commands (the README's
# examples and more: single instance, every latency model, cluster policies,
# decision traces, multi-turn, traces, inference-perf, validate, workload
# tools) with one binary and writes every output into one folder, so two
# builds can be compared byte for byte:
#
#   scripts/parity.sh /tmp/old-blis /tmp/parity-old
#   scripts/parity.sh target/release/blis /tmp/parity-new
#   diff -r /tmp/parity-old /tmp/parity-new && echo identical
#
# Human tables are kept too, minus the wall-time line.
set -euo pipefail
cd "$(dirname "$0")/.."
BLIS=$(realpath "${1:-target/release/blis}")
DEST=${2:-/tmp/blis-parity}
# Outputs name their own paths (the report's config, the trace header): write
# them in one fixed place, then move them, so two runs compare equal.
OUT=/tmp/blis-parity.work
rm -rf "$OUT" "$DEST" && mkdir -p "$OUT"
M8=meta-llama/llama-3.1-8b-instruct
V=validation/vllm-h100

# name, then the arguments of `blis run`; --output/--requests-csv go to $OUT/name.*
run() {
  local name=$1; shift
  "$BLIS" run "$@" --output "$OUT/$name.json" --requests-csv "$OUT/$name.requests.csv" > "$OUT/$name.out" 2>&1 \
    || echo "exit $?" >> "$OUT/$name.out"
  sed -i '/^Simulated in /d' "$OUT/$name.out"
}

run default --model $M8
run knobs --model $M8 --hardware H100 --tp 1 --rate 10 --num-requests 2000 --prompt-tokens 512 --output-tokens 256 \
  --max-num-seqs 256 --max-num-batched-tokens 2048 --seed 7
run closed-loop --model $M8 --rate 50 --num-requests 1500 --max-concurrency 64
run lengths --model $M8 --rate 30 --num-requests 2000 --prompt-tokens 900 --prompt-tokens-stdev 300 --prompt-tokens-max 3000 \
  --output-tokens 200 --output-tokens-stdev 150 --prefix-tokens 256 --prefix-groups 8 --arrival constant
run async-nochunk --model $M8 --rate 20 --num-requests 1000 --async-scheduling --no-enable-chunked-prefill --no-enable-prefix-caching
run small-kv --model $M8 --rate 40 --num-requests 1500 --num-gpu-blocks 900 --max-num-seqs 64 --long-prefill-token-threshold 256
run roofline --model meta-llama/llama-3.1-70b-instruct --tp 4 --latency-model roofline --rate 8 --num-requests 500
run blackbox --model $M8 --latency-model blackbox --alpha-coeffs 1000,1,10 --beta-coeffs 5000,2,30 --rate 10 --num-requests 500
run unified5 --model mistralai/mixtral-8x7b-v0.1 --tp 2 --latency-model unified-5 --rate 10 --num-requests 500
run physnorm --model meta-llama/llama-2-7b-hf --latency-model physics-normalized --rate 12 --num-requests 800
run mla --model deepseek-ai/deepseek-v2-lite --hardware A100-80GB --rate 6 --num-requests 400
run moe-a3b --model qwen/qwen3-30b-a3b --hardware H200 --tp 2 --rate 15 --num-requests 600
run horizon-timeout --model $M8 --rate 60 --num-requests 3000 --horizon 20 --client-timeout 5
run spec-language --model $M8 --workload-spec examples/language.yaml
run spec-reasoning --model $M8 --workload-spec examples/reasoning.yaml
run spec-multimodal --model $M8 --workload-spec examples/multimodal.yaml
run spec-servegen --model $M8 --workload-spec examples/servegen-language.yaml --num-requests 800
run ip-synthetic --model $M8 --workload-spec examples/inference-perf-synthetic.yaml
run ip-shared-prefix --model $M8 --workload-spec examples/inference-perf-shared-prefix.yaml
run ip-profile --model meta-llama/Llama-2-7b-hf --workload-spec $V/20260217-231439-llama-2-7b-tp1-general/profile.yaml
for w in preset:chatbot preset:contentgen preset:summarization preset:multidoc scenario:bursty-traffic scenario:diurnal-cycle \
         scenario:unfair-tenants scenario:prefix-heavy scenario:mixed-slo; do
  run "builtin-${w/:/-}" --model $M8 --workload "$w" --num-requests 600
done
run mooncake --model $M8 --trace examples/mooncake-sample.jsonl
"$BLIS" workload generate --spec examples/language.yaml --num-requests 700 --output "$OUT/generated.csv" 2> "$OUT/generated.stderr"
run trace-v2 --model $M8 --trace "$OUT/generated.csv"
run cluster-weighted --model qwen/qwen2.5-7b-instruct --num-instances 8 --rate 400 --num-requests 8000 \
  --routing-policy weighted --routing-scorers prefix-affinity:4,queue-depth:3 \
  --admission-policy predictive-slo --scheduler priority-fcfs --priority-policy slo-class \
  --slo-class-mix realtime:0.2,interactive:0.5,batch:0.3
run cluster-bundle --model qwen/qwen2.5-7b-instruct --num-instances 8 --rate 400 --num-requests 8000 \
  --policy-config examples/policies.yaml --slo-class-mix realtime:0.2,interactive:0.5,batch:0.3
run cluster-trace --model $M8 --num-instances 4 --rate 60 --num-requests 2000 --routing-policy least-loaded \
  --trace-output "$OUT/cluster-trace.decisions.jsonl" --counterfactual-k 3 --fitness-weights throughput:0.5,ttft_p99:0.3,goodput:0.2
run cluster-stale --model $M8 --num-instances 6 --rate 90 --num-requests 3000 --routing-policy weighted \
  --routing-scorers kv-utilization:2,load-balance:1,precise-prefix:3 --snapshot-refresh kv-utilization=periodic:100ms,queue-depth=on-demand \
  --admission-latency 200 --routing-latency 500 --prefix-tokens 512 --prefix-groups 4 --tenant-mix alice:1,bob:3
run cluster-shaping --model $M8 --num-instances 3 --rate 80 --num-requests 2000 --admission-policy token-bucket \
  --routing-policy prefix-affinity --slo-targets default.ttft_ms=500 --scheduler sjf
run cluster-sessions --model $M8 --num-instances 4 --workload-spec examples/reasoning.yaml --routing-policy weighted \
  --routing-scorers prefix-affinity:3,active-requests:1 --snapshot-refresh batch-size=periodic:50ms
# KV tiers: GPU evictions reloaded from host memory, preemptions with a
# CPU tier, LMCache's write-through disk tier, sessions, KV events, and a
# cluster whose precise-prefix scorer sees the tiers.
run tier-native --model $M8 --rate 30 --num-requests 3000 --prefix-tokens 256 --prefix-groups 64 --num-gpu-blocks 2000 \
  --kv-offloading-size 8
run tier-preempt --model $M8 --rate 40 --num-requests 2000 --num-gpu-blocks 900 --max-num-seqs 64 --output-tokens 400 \
  --prefix-tokens 128 --prefix-groups 16 --kv-cpu-blocks 1500
run tier-lmcache --model $M8 --rate 30 --num-requests 2000 --prefix-tokens 512 --prefix-groups 32 --num-gpu-blocks 1500 \
  --kv-offloading-backend lmcache --kv-offloading-size 2 --kv-tiers disk:8 --kv-transfer-bandwidth 20
run tier-sessions --model $M8 --workload-spec examples/reasoning.yaml --num-gpu-blocks 3000 --kv-cpu-blocks 4000
run tier-events --model $M8 --rate 30 --num-requests 1000 --prefix-tokens 256 --prefix-groups 8 --num-gpu-blocks 1200 \
  --kv-cpu-blocks 800 --kv-events-output "$OUT/tier-events.kv.jsonl"
run tier-cluster --model $M8 --num-instances 4 --rate 120 --num-requests 4000 --prefix-tokens 512 --prefix-groups 48 \
  --num-gpu-blocks 2500 --kv-offloading-size 4 --routing-policy weighted --routing-scorers precise-prefix:3,queue-depth:2
# Prefill/decode disaggregation: flags, per-pool GPUs and TP, the prefix
# decider, and the policy file's pools section.
run pd-flags --model $M8 --prefill-instances 2 --decode-instances 4 --rate 30 --num-requests 2000 --prompt-tokens 2048 --output-tokens 128 \
  --slo-targets default.ttft_ms=2000,default.itl_ms=25
run pd-pools-base-tp --model meta-llama/llama-3.1-70b-instruct --prefill-instances 1 --decode-instances 2 --prefill-tp 4 --decode-tp 2 --rate 4 --num-requests 100
run pd-pools --model meta-llama/llama-3.1-70b-instruct --tp 4 --prefill-instances 1 --decode-instances 2 --prefill-tp 4 --decode-tp 2 \
  --decode-hardware H200 --rate 4 --num-requests 600 --prompt-tokens 3000 --output-tokens 200 --pd-transfer-bandwidth 25
run pd-threshold --model $M8 --prefill-instances 1 --decode-instances 3 --pd-decider prefix-threshold --pd-prefix-threshold 256 \
  --prefix-tokens 1024 --prefix-groups 8 --rate 20 --num-requests 1500 --pd-prefill-cache drop \
  --trace-output "$OUT/pd-threshold.decisions.jsonl"
cat > "$OUT/pd.yaml" <<EOF
pools:
  prefill: {instances: 2, tp: 2, max_num_batched_tokens: 4096, routing_scorers: {queue-depth: 1}}
  decode: {instances: 3, max_num_seqs: 128}
  decider: always
  transfer_bandwidth_gb_s: 40
EOF
run pd-file --model $M8 --policy-config "$OUT/pd.yaml" --rate 25 --num-requests 1500 --prompt-tokens 1500 --output-tokens 150
# Autoscaling: flags, the example policy files on node pools, scale to zero, traces.
run auto-flags --model $M8 --max-num-seqs 64 --rate 60 --num-requests 6000 --autoscale-policy target-tracking --min-instances 1 \
  --max-instances 6 --autoscale-interval 5s --loading-delay 20s --gpu-hour-cost 3 --trace-output "$OUT/auto-flags.decisions.jsonl"
run auto-threshold --model meta-llama/llama-3.1-70b-instruct --tp 4 --workload scenario:bursty-traffic --rate 8 --num-requests 3000 \
  --policy-config examples/autoscaling/threshold.yaml
run auto-queue --model $M8 --max-num-seqs 32 --rate 40 --num-requests 3000 --autoscale-policy queue-depth --min-instances 0 \
  --max-instances 4 --autoscale-interval 2s --drain-policy redirect --warmup-duration 5s --arrival constant
cat > "$OUT/mixed.yaml" <<EOF
autoscale: {type: slo, params: {ttft_ms: 800}, interval: 10s, min_replicas: 1, max_replicas: 6, drain: immediate}
node_pools:
  - {name: a100, hardware: A100-80GB, max_nodes: 3, cost_per_gpu_hour: 2.2, loading_delay: 30s}
  - {name: h100, hardware: H100, gpus_per_node: 2, max_nodes: 2, cost_per_gpu_hour: 4.0, provisioning_delay: "lognormal:1m,0.3"}
EOF
run auto-mixed --model $M8 --max-num-seqs 64 --rate 50 --num-requests 6000 --policy-config "$OUT/mixed.yaml"
cat > "$OUT/run.yaml" <<EOF
model: $M8
max_num_seqs: 64
tensor-parallel-size: 2
num-requests: 1e3
rate: 15
EOF
run config-file --config "$OUT/run.yaml" --seed 3
for bad in "--model nope" "--model $M8 --rate -1" "--model $M8 --block-size 7" "--model $M8 --tp 3"; do
  # shellcheck disable=SC2086
  "$BLIS" run $bad >/dev/null 2>> "$OUT/bad-input.stderr" || echo "exit $?" >> "$OUT/bad-input.stderr"
done

"$BLIS" validate $V --csv "$OUT/validate.csv" --report "$OUT/validate.md" --requests-csv "$OUT/validate.requests.csv" -q \
  > "$OUT/validate.stdout" 2> "$OUT/validate.stderr" || echo "exit $?" >> "$OUT/validate.stderr"
sed -i 's/ simulated in [0-9.]* s / simulated in (wall) s /' "$OUT/validate.stdout"
"$BLIS" validate $V/20260217-231439-llama-2-7b-tp1-general --latency-model unified-5 > "$OUT/validate-one.stdout" 2>&1 || true
sed -i 's/ simulated in [0-9.]* s / simulated in (wall) s /' "$OUT/validate-one.stdout"
"$BLIS" workload stats --spec examples/reasoning.yaml > "$OUT/stats.txt" 2>&1 || true
mv reasoning-stats.svg "$OUT/" 2>/dev/null || true
"$BLIS" workload generate --spec preset:chatbot --num-requests 500 --seed 9 --output "$OUT/generated-preset.csv" 2> "$OUT/generated-preset.stderr" || true
# Sweeps and plans (CSV and JSON outputs; the progress line is left out).
printf 'axes:\n  rate: [5, 20]\n  max-num-seqs: [32, 128]\nzip:\n  - num-instances: [1, 2]\n    routing-policy: [round-robin, least-loaded]\n' > "$OUT/grid.yaml"
"$BLIS" sweep --model $M8 --num-requests 600 --grid "$OUT/grid.yaml" --output "$OUT/sweep.csv" --quiet > "$OUT/sweep.stdout" 2> "$OUT/sweep.stderr" \
  || echo "exit $?" >> "$OUT/sweep.stderr"
"$BLIS" sweep --model $M8 --num-requests 600 --rate 20 --prompt-tokens 2048 --output-tokens 64 --grid examples/pd/ratio.yaml \
  --output "$OUT/sweep-pd.csv" --quiet > "$OUT/sweep-pd.stdout" 2> "$OUT/sweep-pd.stderr" || echo "exit $?" >> "$OUT/sweep-pd.stderr"
cat > "$OUT/plan.yaml" <<EOF
slo: {ttft_p99_ms: 1500, itl_p99_ms: 60}
gpus: [{hardware: H100, gpu_hour_cost: 4.0}, {hardware: L40S, gpu_hour_cost: 1.1}]
tp: [1, 2]
replicas: [1, 2, 4]
knobs: {max-num-seqs: [64, 256]}
EOF
"$BLIS" plan --model $M8 --rate 20 --num-requests 800 --prompt-tokens 2048 --output-tokens 128 --plan "$OUT/plan.yaml" \
  --output "$OUT/plan.csv" > "$OUT/plan.stdout" 2> "$OUT/plan.stderr" || echo "exit $?" >> "$OUT/plan.stderr"
"$BLIS" models > "$OUT/models.txt"
mkdir -p "$(dirname "$DEST")" && mv "$OUT" "$DEST"
echo "parity outputs in $DEST"
