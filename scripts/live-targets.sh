#!/usr/bin/env bash
# live-targets.sh: issue 26's live targets on this machine, in one command
# (about 6 minutes with the defaults). Run it on a quiet box as root from
# the repository's top directory:
#
#   sudo scripts/live-targets.sh
#   sudo RUNS=3 PARTS="perf" scripts/live-targets.sh      # a quick look
#   sudo OLD=/tmp/mrlab-old OLDTEST=/tmp/live-old.test scripts/live-targets.sh   # also the old build
#
# Parts (PARTS, default all of "perf stress kernel rate"):
#   perf    RUNS (10) runs of `mrlab perf -D DUR` (5 s) on b2b (h0 -> h1)
#           and on the default lab (h0 -> h4, across the spines), each in
#           a lab of its own; one line per run with the load average; a
#           summary "N of RUNS not LAGGING" per lab (target: all).
#   stress  the same beside `stress-ng --cpu 1` (load ~2 on 2 cores).
#   kernel  BenchmarkKernelPath: UDP at 80% of the cap (loss < 1%), TCP
#           across the spines (>= 0.9 of the cap), ping (<= 3x a veth
#           pair's + the lab's own wire), b2b at 10 Gbit/s (>= 0.6x veth);
#           and BenchmarkPingStages (where a ping's time goes, stage by
#           stage; a build without it runs KernelPath alone);
#           alternating with OLDTEST's, RUNS/3 rounds.
#   rate    BenchmarkLabPacketRate (the runtime's own packet rate, and
#           its CPU time and context switches per packet where the
#           build reports them), alternating with the same build's
#           reader and writer goroutines (-live.reader-only
#           -live.writer-only) and with OLDTEST's (a test binary of
#           another build: go test -c -o /tmp/live-old.test ./labs/live
#           in its tree; a949a63 is the issue's "today").
# Knobs: RUNS, DUR, MRLAB (default: go build ./cmd/mrlab into a temp dir),
# OLD (another mrlab: its perf runs alternate with this one's), SCHED
# (mrlab up --sched; default the lab's own), PARTS.
set -uo pipefail

RUNS=${RUNS:-10}
DUR=${DUR:-5}
PARTS=${PARTS:-perf stress kernel rate}
SCHED=${SCHED:-}
OLD=${OLD:-}
OLDTEST=${OLDTEST:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "${MRLAB:-}" ]; then
	go build -o "$tmp/mrlab" ./cmd/mrlab || exit 1
	MRLAB=$tmp/mrlab
fi
load() { cut -d' ' -f1-3 /proc/loadavg; }

# perfruns BIN TAG LAB FROM TO: RUNS perf runs in a lab of its own.
perfruns() {
	local bin=$1 tag=$2 lab=$3 from=$4 to=$5 name=live26t$((RANDOM % 1000)) ok=0 i out first
	local up=("$bin" up --name "$name")
	[ -n "$SCHED" ] && up+=(--sched "$SCHED")
	[ "$lab" != default ] && up+=("$lab")
	"${up[@]}" >/dev/null || { echo "$tag $lab: up failed"; return; }
	"$bin" status --lab "$name" | grep -E 'loop (priority|spin)' | sed "s/^/  $tag $lab /"
	for i in $(seq "$RUNS"); do
		out=$("$bin" perf --lab "$name" --from "$from" --to "$to" -D "$DUR" 2>&1)
		first=$(head -1 <<<"$out")
		case $first in LAGGING*) ;; *) ok=$((ok + 1)) ;; esac
		printf '  %s %s run %d load %s: %s | %s\n' "$tag" "$lab" "$i" "$(load)" \
			"$(grep -oE '^(LAGGING: the lab fell up to [^ ]+|LOOP STARVED|real time kept)' <<<"$out")" \
			"$(grep -oE "worst lateness [^;]*|CLIENT STARVED: this program's threads waited [^ ]+" <<<"$out" | tr '\n' ' ')"
	done
	"$bin" down "$name" >/dev/null
	echo "$tag $lab: $ok of $RUNS runs not LAGGING (-D $DUR)"
}

perfpart() {
	for lab in b2b default; do
		local to=h1
		[ $lab = default ] && to=h4
		perfruns "$MRLAB" new "$lab" h0 "$to"
		[ -n "$OLD" ] && perfruns "$OLD" old "$lab" h0 "$to"
	done
}

for part in $PARTS; do
	echo "== $part (load $(load))"
	case $part in
	perf) perfpart ;;
	stress)
		stress-ng --cpu 1 --timeout 3600 --quiet &
		spid=$!
		sleep 5
		perfpart
		kill "$spid"
		wait "$spid" 2>/dev/null
		;;
	kernel)
		# This build, then OLDTEST's (if set), RUNS/3 rounds (at least
		# one), so the two see the same load.
		go test -c -o "$tmp/live.test" ./labs/live || exit 1
		for i in $(seq $(((RUNS + 2) / 3))); do
			for t in "$tmp/live.test" $OLDTEST; do
				echo "  $t round $i load $(load)"
				(cd labs/live && $t -test.run '^$' -test.bench 'KernelPath|PingStages' -test.benchtime 1x -kernel.reps 3 2>&1) | grep -E '^Benchmark|udp (lab|veth):|medians in' | sed 's/^/    /'
			done
		done
		;;
	rate)
		go test -c -o "$tmp/live.test" ./labs/live || exit 1
		for i in 1 2 3; do
			# This build, the same with the reader and writer goroutines
			# of before (the loop's own I/O off), and OLDTEST's.
			for t in "$tmp/live.test" "$tmp/live.test -live.reader-only -live.writer-only" $OLDTEST; do
				echo "  $t load $(load)"
				# shellcheck disable=SC2086 # $t is a binary and its flags
				$t -test.run '^$' -test.bench LabPacketRate -test.benchtime 1000000x 2>&1 | grep '^Benchmark' | sed 's/^/    /'
			done
		done
		;;
	*) echo "unknown part $part" ;;
	esac
done
