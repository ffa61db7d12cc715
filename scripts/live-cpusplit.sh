#!/usr/bin/env bash
# live-cpusplit.sh: where a live lab's machine spends its CPU while iperf3
# sends UDP through the lab: the lab process (and its busiest thread, the
# loop) against everything else (the hosts' kernels, iperf3, other work).
# labs/live/README.md "Partitions" uses it to decide how many partitions a
# live lab asks for by default. As root, from the repository's top:
#
#   go build -o /tmp/mrlab ./cmd/mrlab
#   sudo scripts/live-cpusplit.sh /tmp/mrlab default h4 800M 5
#   sudo scripts/live-cpusplit.sh /tmp/mrlab b2b h1 800M 5
#
# Arguments: MRLAB [LAB [DST [RATE [SECONDS]]]]; the lab runs under a name
# of its own (livepartNNN) and is taken down at exit.
set -u
tmp=$(mktemp -d)
M=$1; NAME=livepart$((RANDOM%1000)); LAB=${2:-default}; DST=${3:-h4}; RATE=${4:-800M}; DUR=${5:-5}
trap 'rm -rf "$tmp"' EXIT
up=("$M" up --name "$NAME"); [ "$LAB" != default ] && up+=("$LAB")
"${up[@]}" >/dev/null || { echo up failed; exit 1; }
trap '"$M" down "$NAME" >/dev/null; rm -rf "$tmp"' EXIT
pid=$("$M" status --lab "$NAME" --json | python3 -c 'import sys,json;print(json.load(sys.stdin)["pid"])')
addr=$("$M" status --lab "$NAME" --json | python3 -c "import sys,json;print([h['addr'] for h in json.load(sys.stdin)['hosts'] if h['name']=='$DST'][0])")
"$M" exec --lab "$NAME" "$DST" -- iperf3 -s -1 -D >/dev/null
sleep 0.5
tick=$(getconf CLK_TCK)
cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }
threads() { for f in /proc/$pid/task/*/stat; do awk '{print $1, $14+$15}' "$f"; done; }
proc() { awk '{print $14+$15}' /proc/$pid/stat; }
w0=$(date +%s.%N); read b0 i0 < <(cpu); p0=$(proc); threads >"$tmp/t0"; l0=$(cut -d' ' -f1-3 /proc/loadavg)
out=$("$M" exec --lab "$NAME" h0 -- iperf3 -u -b "$RATE" -t "$DUR" -l 1400 -c "$addr" 2>&1)
w1=$(date +%s.%N); read b1 i1 < <(cpu); p1=$(proc); threads >"$tmp/t1"; l1=$(cut -d' ' -f1-3 /proc/loadavg)
busy=$(( b1-b0 )); idle=$(( i1-i0 )); lab=$(( p1-p0 ))
W=$(awk "BEGIN{print $w1-$w0}"); DUR=$W
loop=$(join "$tmp/t0" "$tmp/t1" | awk '{d=$3-$2; if(d>m)m=d} END{print m+0}')
echo "lab $LAB h0->$DST udp $RATE ${DUR}s wall: machine busy $(awk "BEGIN{printf \"%.2f\", $busy/$tick/$DUR}") cores, idle $(awk "BEGIN{printf \"%.2f\", $idle/$tick/$DUR}"); lab process $(awk "BEGIN{printf \"%.2f\", $lab/$tick/$DUR}") cores (busiest thread $(awk "BEGIN{printf \"%.2f\", $loop/$tick/$DUR}")); rest (kernel, iperf3, other work) $(awk "BEGIN{printf \"%.2f\", ($busy-$lab)/$tick/$DUR}"); load $l0 -> $l1"
grep -E "receiver" <<<"$out" | tail -1
"$M" status --lab "$NAME" | grep -E "events late|max lag|loop priority|partitions"
