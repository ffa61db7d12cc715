#!/usr/bin/env bash
# loss-ramp.sh: raise random loss on a link step by step and measure
# MetaRoCE goodput at each step; prints one "loss goodput" line per step,
# ready for a plot. The link's impairment is cleared at the end.
#
#   sudo mrlab up b2b
#   sudo scripts/loss-ramp.sh                                  # every link of h0 (b2b: p0-h0-h1)
#   sudo TRANSPORT=rocev2 scripts/loss-ramp.sh                 # RoCEv2's collapse, whichever plane its QP uses
#   sudo mrlab down b2b; sudo mrlab up
#   sudo LINK=p0-leaf0-spine0 LOSSES="0% 0.1% 1% 5% 10%" scripts/loss-ramp.sh
#
# Knobs (environment): LAB, LINK (default: every host link of FROM, one per
# plane, so a connection is lossy whichever plane it uses; naming one link
# leaves the others clean, and a single-path transport on another plane
# then sees no loss at all), FROM, TO, OP, TRANSPORT, LOSSES (netem
# percentages), DURATION (per step), ALLOW_LAG (1: keep figures the lab
# measured while it could not keep real time, marked "lagging"), MRLAB.
set -euo pipefail

LAB=${LAB:-}
LINK=${LINK:-}
FROM=${FROM:-h0}
TO=${TO:-h1}
OP=${OP:-write}
LOSSES=${LOSSES:-0% 0.1% 0.5% 1% 2% 5% 10%}
DURATION=${DURATION:-2s}
MRLAB=${MRLAB:-mrlab}
TRANSPORT=${TRANSPORT:-}
ALLOW_LAG=${ALLOW_LAG:-}

lab=()
[[ -n $LAB ]] && lab=(--lab "$LAB")
tr=()
[[ -n $TRANSPORT ]] && tr=(--transport "$TRANSPORT")
lag=()
[[ -n $ALLOW_LAG ]] && lag=(--allow-lag)

# FROM's host links, one per plane: leaf/spine labs name them FROM-p<N>,
# back-to-back labs p<N>-FROM-TO (or p<N>-TO-FROM). A name the lab does not
# have is refused by `fault link ... up`, which changes nothing.
if [[ -z $LINK ]]; then
	planes=$("$MRLAB" status "${lab[@]}" --json | sed -n 's/^ *"planes": *\([0-9]*\).*/\1/p' | head -n1)
	for ((p = 0; p < ${planes:-1}; p++)); do
		for name in "$FROM-p$p" "p$p-$FROM-$TO" "p$p-$TO-$FROM"; do
			if "$MRLAB" fault link "${lab[@]}" "$name" up >/dev/null 2>&1; then
				LINK="$LINK $name"
				break
			fi
		done
	done
	if [[ -z $LINK ]]; then
		echo "loss-ramp: found no host link of $FROM; name them in LINK" >&2
		exit 1
	fi
	echo "# lossy links:$LINK" >&2
fi
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
	out=$("$MRLAB" perf "${lab[@]}" "${tr[@]}" "${lag[@]}" --json --from "$FROM" --to "$TO" --op "$OP" --duration "$DURATION") || {
		echo "loss-ramp: perf failed at loss $loss" >&2
		echo "$out" >&2
		exit 1
	}
	gbps=$(printf '%s\n' "$out" | sed -n 's/.*"goodput_gbps": *"\{0,1\}\([0-9.]*\).*/\1/p' | head -n1)
	mark=
	printf '%s\n' "$out" | grep -q '"lagging": *true' && mark=" lagging"
	printf '%-8s %s%s\n' "$loss" "${gbps:-?}" "$mark"
done
