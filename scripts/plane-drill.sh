#!/usr/bin/env bash
# plane-drill.sh: the plane-failure drill. While a MetaRoCE run goes on,
# take a whole plane down, hold it down, bring it back, and check that the
# run finished without an application error (traffic moves to the other
# planes, no operator action). Prints the lab's status before and after.
#
#   sudo mrlab up
#   sudo scripts/plane-drill.sh                  # plane 0, h0 -> h4
#   sudo PLANE=1 HOLD=2 scripts/plane-drill.sh
#
# Knobs (environment): LAB, PLANE, FROM, TO, OP, TRANSPORT, DURATION (of the perf run),
# BEFORE (seconds of healthy traffic before the failure), HOLD (seconds the
# plane stays down), ALLOW_LAG (1: accept a run measured while the lab
# could not keep real time), MRLAB.
set -euo pipefail

LAB=${LAB:-}
PLANE=${PLANE:-0}
FROM=${FROM:-h0}
TO=${TO:-h4}
OP=${OP:-write}
DURATION=${DURATION:-6s}
BEFORE=${BEFORE:-1}
HOLD=${HOLD:-2}
MRLAB=${MRLAB:-mrlab}
TRANSPORT=${TRANSPORT:-}
ALLOW_LAG=${ALLOW_LAG:-}

lab=()
[[ -n $LAB ]] && lab=(--lab "$LAB")
tr=()
[[ -n $TRANSPORT ]] && tr=(--transport "$TRANSPORT")
[[ -n $ALLOW_LAG ]] && tr+=(--allow-lag)
trap '"$MRLAB" fault plane "${lab[@]}" "$PLANE" up >/dev/null 2>&1 || true' EXIT

echo "plane-drill: status before the drill"
"$MRLAB" status "${lab[@]}"

"$MRLAB" perf "${lab[@]}" "${tr[@]}" --from "$FROM" --to "$TO" --op "$OP" --duration "$DURATION" &
perf=$!

sleep "$BEFORE"
echo "plane-drill: plane $PLANE down"
"$MRLAB" fault plane "${lab[@]}" "$PLANE" down
sleep "$HOLD"
echo "plane-drill: plane $PLANE up"
"$MRLAB" fault plane "${lab[@]}" "$PLANE" up

status=0
wait "$perf" || status=$?
echo "plane-drill: status after the drill"
"$MRLAB" status "${lab[@]}"
if ((status == 0)); then
	echo "plane-drill: passed: $OP $FROM -> $TO survived plane $PLANE failing for ${HOLD}s"
else
	echo "plane-drill: FAILED: the run ended with exit $status" >&2
fi
exit "$status"
