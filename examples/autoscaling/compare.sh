#!/usr/bin/env bash
# The worked example of docs/autoscaling.md: one simulated day of the
# diurnal-cycle workload at 20 req/s on average (10x from midnight to noon)
# served by Llama-3.1-70B (TP 4) on H100 nodes, with a fixed fleet sized for
# the peak, a threshold autoscaler and an HPA-style target-tracking one.
# Writes each run's JSON report and timeline plot to OUT (default
# autoscaling-out/) and prints the cost/SLO table. About 30 s per policy.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-autoscaling-out}"
blis="${BLIS:-$here/../../target/release/blis}"
mkdir -p "$out"
for policy in fixed threshold target-tracking; do
  initial=1
  [ "$policy" = fixed ] && initial=4
  "$blis" run --model meta-llama/llama-3.1-70b-instruct --tp 4 \
    --workload scenario:diurnal-cycle --rate 20 --num-instances "$initial" \
    --policy-config "$here/$policy.yaml" --quiet \
    --output "$out/$policy.json" --plot-timeline "$out/$policy.svg"
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
print(f"{'fleet':<16}{'GPU-hours':>10}{'cost $':>9}{'$/1M tok':>10}{'SLO met':>9}{'TTFT p99':>10}{'ups/downs':>11}{'oscill.':>9}")
for policy in ["fixed", "threshold", "target-tracking"]:
    r = json.load(open(f"{out}/{policy}.json"))
    a = r["cluster"]["autoscaling"]
    print(f"{policy:<16}{a['gpu_hours']:>10.1f}{a['cost']:>9.0f}{a['cost_per_million_output_tokens']:>10.2f}"
          f"{100 * r['cluster']['goodput']['slo_attainment']:>8.1f}%{r['latency_ms']['ttft']['p99']:>8.0f}ms"
          f"{str(a['scale_ups']) + '/' + str(a['scale_downs']):>11}{a['oscillations']:>9}")
PY
