#!/usr/bin/env bash
# loss-ramp.sh: raise random loss on a link step by step and measure
# MetaRoCE goodput at each step; prints one "loss goodput" line per step,
# ready for a plot. The link's impairment is cleared at the end.
#
#   sudo mrlab up b2b
#   sudo LINK=h0-h1-p0 scripts/loss-ramp.sh
#   sudo LINK=p0-leaf0-spine0 LOSSES="0% 0.1% 1% 5% 10%" scripts/loss-ramp.sh
#
# Knobs (environment): LAB, LINK (default: h0's plane-0 host link), FROM,
# TO, OP, TRANSPORT, LOSSES (netem percentages), DURATION (per step), MRLAB.
# To ramp every plane at once, list several links in LINK.
set -euo pipefail

LAB=${LAB:-}
LINK=${LINK:-h0-p0}
FROM=${FROM:-h0}
TO=${TO:-h1}
OP=${OP:-write}
LOSSES=${LOSSES:-0% 0.1% 0.5% 1% 2% 5% 10%}
DURATION=${DURATION:-2s}
MRLAB=${MRLAB:-mrlab}
TRANSPORT=${TRANSPORT:-}

lab=()
[[ -n $LAB ]] && lab=(--lab "$LAB")
tr=()
[[ -n $TRANSPORT ]] && tr=(--transport "$TRANSPORT")
clear() {
	for l in $LINK; do
		"$MRLAB" fault link "${lab[@]}" "$l" impair none >/dev/null 2>&1 || true
	done
}
trap clear EXIT

printf '%-8s %s\n' loss goodput_gbps
for loss in $LOSSES; do
	for l in $LINK; do
		"$MRLAB" fault link "${lab[@]}" "$l" impair loss random "$loss" >/dev/null
	done
	out=$("$MRLAB" perf "${lab[@]}" "${tr[@]}" --json --from "$FROM" --to "$TO" --op "$OP" --duration "$DURATION") || {
		echo "loss-ramp: perf failed at loss $loss" >&2
		echo "$out" >&2
		exit 1
	}
	gbps=$(printf '%s\n' "$out" | sed -n 's/.*"goodput_gbps": *"\{0,1\}\([0-9.]*\).*/\1/p' | head -n1)
	printf '%-8s %s\n' "$loss" "${gbps:-?}"
done
