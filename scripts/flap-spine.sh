#!/usr/bin/env bash
# flap-spine.sh: flap one spine link of a running live lab every 200 ms while
# a MetaRoCE write_bw run goes on, then report whether the run finished
# cleanly. Copy it and change the knobs.
#
#   sudo mrlab up                     # the default leaf/spine lab
#   sudo scripts/flap-spine.sh        # h0 -> h4 (different leaves) across p0-leaf0-spine0
#   sudo LINK=p1-leaf1-spine1 PERIOD=0.05 scripts/flap-spine.sh
#
# Every knob is an environment variable:
#   LAB       running lab (default: the only one running)
#   LINK      link to flap (see `mrlab status --all-links`)
#   FROM, TO  perf client and server hosts
#   OP        write, send or read
#   DURATION  length of the perf run (a Go duration: 5s, 1500ms)
#   PERIOD    seconds the link stays down, then up, per flap
#   TRANSPORT metaroce or rocev2 (default: the lab's)
#   ALLOW_LAG 1: accept a run measured while the lab could not keep real time
#   MRLAB     the mrlab binary
#
# It reports the flap period it achieved (each fault is a command, so a
# short PERIOD is stretched by their run time), next to the one asked.
set -euo pipefail

LAB=${LAB:-}
LINK=${LINK:-p0-leaf0-spine0}
FROM=${FROM:-h0}
TO=${TO:-h4}
OP=${OP:-write}
DURATION=${DURATION:-5s}
PERIOD=${PERIOD:-0.2}
MRLAB=${MRLAB:-mrlab}
TRANSPORT=${TRANSPORT:-}
ALLOW_LAG=${ALLOW_LAG:-}

lab=()
[[ -n $LAB ]] && lab=(--lab "$LAB")
tr=()
[[ -n $TRANSPORT ]] && tr=(--transport "$TRANSPORT")
[[ -n $ALLOW_LAG ]] && tr+=(--allow-lag)

flapper=
cleanup() {
	[[ -n $flapper ]] && kill "$flapper" 2>/dev/null && wait "$flapper" 2>/dev/null
	# Never leave the link down.
	"$MRLAB" fault link "${lab[@]}" "$LINK" up >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Fail early, with mrlab's message, on a wrong link name.
"$MRLAB" fault link "${lab[@]}" "$LINK" up >/dev/null

"$MRLAB" perf "${lab[@]}" "${tr[@]}" --from "$FROM" --to "$TO" --op "$OP" --duration "$DURATION" &
perf=$!

(
	flaps=0
	start=$(date +%s.%N)
	while kill -0 "$perf" 2>/dev/null; do
		"$MRLAB" fault link "${lab[@]}" "$LINK" down >/dev/null
		sleep "$PERIOD"
		"$MRLAB" fault link "${lab[@]}" "$LINK" up >/dev/null
		sleep "$PERIOD"
		flaps=$((flaps + 1))
	done
	end=$(date +%s.%N)
	# Achieved: the wall time of the flapping over twice the flaps (down
	# and up each took that long on average).
	awk -v n="$flaps" -v s="$start" -v e="$end" -v p="$PERIOD" -v l="$LINK" 'BEGIN {
		if (n == 0) { printf "flap-spine: %s never flapped (the run ended first)\n", l; exit }
		printf "flap-spine: flapped %s %d times: down and up every %.3fs on average (asked %ss)\n", l, n, (e - s) / (2 * n), p
	}' >&2
) &
flapper=$!

status=0
wait "$perf" || status=$?
wait "$flapper" 2>/dev/null || true
flapper=
if ((status == 0)); then
	echo "flap-spine: $OP $FROM -> $TO finished without error while $LINK flapped every ${PERIOD}s"
else
	echo "flap-spine: $OP $FROM -> $TO FAILED (exit $status) while $LINK flapped" >&2
fi
exit "$status"
