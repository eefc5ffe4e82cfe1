#!/usr/bin/env bash
# Monolithic 4 replicas vs 1P:3D vs 2P:2D (4 H100s each) on a long-prompt
# workload and a chat workload, with SLO attainment and goodput per GPU.
# Usage: examples/pd/compare.sh [path/to/blis]
set -euo pipefail
blis=${1:-target/release/blis}
slo="default.ttft_ms=2000,default.itl_ms=25"
printf '%-12s %-10s %9s %9s %9s %9s %10s\n' workload shape ttft_p99 itl_p99 e2e_p99 slo_att goodput/gpu
for w in "long 6 4096 64" "chat 16 512 256"; do
  set -- $w; name=$1; rate=$2; prompt=$3; out=$4
  for shape in "mono --num-instances 4" "1P:3D --prefill-instances 1 --decode-instances 3" "2P:2D --prefill-instances 2 --decode-instances 2"; do
    label=${shape%% *}; flags=${shape#* }
    $blis run --model meta-llama/llama-3.1-8b-instruct $flags --rate "$rate" --num-requests 3000 \
      --prompt-tokens "$prompt" --output-tokens "$out" --slo-targets "$slo" --output /tmp/blis-pd.json --quiet > /dev/null
    python3 - "$name" "$label" <<'PY'
import json, sys
r = json.load(open("/tmp/blis-pd.json")); s = r["latency_ms"]; c = r["cluster"]
gpus = c["pd"]["gpus"] if "pd" in c else c["num_instances"]
print(f'{sys.argv[1]:<12} {sys.argv[2]:<10} {s["ttft"]["p99"]:9.1f} {s["itl"]["p99"]:9.2f} {s["e2e"]["p99"]:9.1f} '
      f'{c["goodput"]["slo_attainment"]*100:8.1f}% {c["goodput"]["requests_per_s"]/gpus:10.3f}')
PY
  done
done
