#!/usr/bin/env bash
# scripts/calibrate/cpu.sh -- measure the real kernel's per-packet transmit cost
# through one qdisc (root lock vs. mq/XPS vs. lockless pfifo_fast vs. noqueue),
# the same over a veth+bridge path, and ping RTT over an idle veth path, so
# that qdisc-lab's simulator CPU model (cores, root lock, busylock, XPS) can be
# calibrated.
#
# Run as root:   scripts/calibrate/cpu.sh > cpu-$(date +%F).jsonl
#
# stdout: one JSON object per line: a "header" line, then one "udp" line per
#         repetition of each transmit case, one "ping" line per ping run, and
#         "note" lines for things that could not be measured.
# stderr: progress.
#
# Environment knobs (defaults in brackets):
#   DURATION [5]  seconds per UDP repetition      REPS [3]  repetitions
#   PING_COUNT [200]  PING_INTERVAL [0.01]        PING_REPS [3]
#   PAYLOAD [58]  UDP payload; 58 B -> 100-byte Ethernet frame (14+20+8+58)
#   DO_VETH [1]   also run the UDP test over the A-W(bridge)-B veth path
#   QUIET_MAX_WAIT [3600]  max seconds to wait for cargo/rustc to go away
#
# Before every measurement the script waits (polling every 30 s) while any
# cargo/rustc/cc1 process is running, because those distort the numbers; the
# 1-minute load average and that process count are recorded on every line.
#
# The transmit device is `dummy` when the kernel has it; otherwise `ifb`
# (CONFIG_IFB), whose xmit of a packet that was not redirected by tc also just
# counts and frees the skb (it counts it as rx_packets/rx_dropped, not
# tx_packets, so that is the counter used then).
#
# Everything it creates (namespaces qcal<PID>-*, their devices, helper
# processes, the temp dir with the compiled helpers) is removed on exit,
# including on SIGINT/SIGTERM.
set -uo pipefail

DURATION=${DURATION:-5}
REPS=${REPS:-3}
PING_COUNT=${PING_COUNT:-200}
PING_INTERVAL=${PING_INTERVAL:-0.01}
PING_REPS=${PING_REPS:-3}
PAYLOAD=${PAYLOAD:-58}
DO_VETH=${DO_VETH:-1}
QUIET_MAX_WAIT=${QUIET_MAX_WAIT:-3600}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TAG="qcal$$"
TMP=""
NSLIST=()
PIDS=()

log() { echo "[cpu.sh $(date +%T)] $*" >&2; }
die() { log "FATAL: $*"; exit 1; }

cleanup() {
	local p ns
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
	PIDS=()
	for ns in "${NSLIST[@]}"; do ip netns del "$ns" 2>/dev/null; done
	NSLIST=()
	[ -n "$TMP" ] && rm -rf "$TMP"
	TMP=""
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

[ "$(id -u)" = 0 ] || die "must run as root"
for t in ip tc taskset cc awk pgrep; do command -v "$t" >/dev/null || die "missing $t"; done

TMP=$(mktemp -d /tmp/qcal.XXXXXX) || die "mktemp"
cc -O2 -Wall -o "$TMP/udpflood" "$HERE/udpflood.c" || die "compiling udpflood.c"
cc -O2 -Wall -o "$TMP/pingrtt" "$HERE/pingrtt.c" || die "compiling pingrtt.c"
UF="$TMP/udpflood"
PR="$TMP/pingrtt"

# ------------------------------------------------------------------ helpers

jstr() { printf '%s' "$*" | tr -d '"\\' | tr '\n\t' '  '; }

heavy_count() { pgrep -x 'cargo|rustc|clippy-driver|rustdoc|cc1|cc1plus' 2>/dev/null | wc -l; }

WAITED=0
wait_quiet() {
	WAITED=0
	while [ "$(heavy_count)" -gt 0 ]; do
		if [ "$WAITED" -ge "$QUIET_MAX_WAIT" ]; then
			log "still busy after ${WAITED}s; measuring anyway (line is flagged)"
			return
		fi
		log "cargo/rustc running ($(heavy_count) procs), load $(cut -d' ' -f1-3 /proc/loadavg); waiting 30 s"
		sleep 30 &   # in the background so that SIGINT/SIGTERM are handled at once
		local sp=$!
		PIDS+=("$sp")
		wait "$sp"
		PIDS=("${PIDS[@]:0:${#PIDS[@]}-1}")
		WAITED=$((WAITED + 30))
	done
}

mkns() { # mkns SUFFIX -> creates namespace $TAG-SUFFIX, lo up, IPv6 off
	local ns="$TAG-$1"
	ip netns add "$ns" || die "ip netns add $ns"
	NSLIST+=("$ns")
	ip -n "$ns" link set lo up
	ip netns exec "$ns" sh -c 'for f in /proc/sys/net/ipv6/conf/default/disable_ipv6 /proc/sys/net/ipv6/conf/all/disable_ipv6; do [ -w $f ] && echo 1 > $f; done' 2>/dev/null
}

delns() {
	local ns="$TAG-$1" keep=() n
	ip netns del "$ns" 2>/dev/null
	for n in "${NSLIST[@]}"; do [ "$n" != "$ns" ] && keep+=("$n"); done
	NSLIST=("${keep[@]}")
}

# tc -s qdisc show -> JSON array [{"q":"pfifo 1: root","bytes":..,"pkts":..,...}]
qdisc_json() {
	tc -n "$1" -s qdisc show dev "$2" 2>/dev/null | awk '
	function emit() { if (name != "") { printf "%s{\"q\":\"%s\",\"bytes\":%s,\"pkts\":%s,\"dropped\":%s,\"overlimits\":%s,\"requeues\":%s}", (n++ ? "," : ""), name, sb, sp, dr, ov, rq } }
	BEGIN { printf "[" ; n = 0; name = "" }
	/^qdisc / { emit(); name = $2 " " $3 " " $4; if ($4 == "parent") name = name " " $5; sb = sp = dr = ov = rq = 0 }
	/^ *Sent / { sb = $2; sp = $4; dr = $7; ov = $9; rq = $11; gsub(/[^0-9]/, "", dr); gsub(/[^0-9]/, "", ov); gsub(/[^0-9]/, "", rq) }
	END { emit(); printf "]" }'
}

# delta of two qdisc_json arrays (matched by position/name)
qdisc_delta() {
	awk -v A="$1" -v B="$2" '
	function parse(s, arr,   i, m, obj, k) {
		k = 0
		while (match(s, /\{[^}]*\}/)) {
			obj = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			k++; arr[k, "q"] = getstr(obj, "q")
			arr[k, "bytes"] = getnum(obj, "bytes"); arr[k, "pkts"] = getnum(obj, "pkts")
			arr[k, "dropped"] = getnum(obj, "dropped"); arr[k, "overlimits"] = getnum(obj, "overlimits")
			arr[k, "requeues"] = getnum(obj, "requeues")
		}
		return k
	}
	function getnum(s, key,   re) { re = "\"" key "\":-?[0-9.]+"; if (match(s, re)) return substr(s, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0; return 0 }
	function getstr(s, key,   re) { re = "\"" key "\":\"[^\"]*\""; if (match(s, re)) return substr(s, RSTART + length(key) + 4, RLENGTH - length(key) - 5); return "" }
	BEGIN {
		na = parse(A, a); nb = parse(B, b); printf "["
		for (i = 1; i <= nb; i++) {
			j = 0; for (x = 1; x <= na; x++) if (a[x, "q"] == b[i, "q"]) { j = x; break }
			printf "%s{\"q\":\"%s\",\"pkts\":%d,\"bytes\":%d,\"dropped\":%d,\"overlimits\":%d,\"requeues\":%d}", (i > 1 ? "," : ""), b[i, "q"],
				b[i, "pkts"] - (j ? a[j, "pkts"] : 0), b[i, "bytes"] - (j ? a[j, "bytes"] : 0), b[i, "dropped"] - (j ? a[j, "dropped"] : 0),
				b[i, "overlimits"] - (j ? a[j, "overlimits"] : 0), b[i, "requeues"] - (j ? a[j, "requeues"] : 0)
		}
		printf "]"
	}'
}

# derived numbers from monitor + sender lines + qdisc delta
derive() { # derive MONITOR_FILE SENDERS_FILE QDELTA
	awk -v Q="$3" '
	function getnum(s, key,   re) { re = "\"" key "\":-?[0-9.eE+]+"; if (match(s, re)) return substr(s, RSTART + length(key) + 3, RLENGTH - length(key) - 3) + 0; return -1 }
	FNR == NR { mon = $0; next }
	/"role":"sender"/ { sent += getnum($0, "sent"); errs += getnum($0, "errors"); scpu += getnum($0, "utime_s") + getnum($0, "stime_s");
	                    su += getnum($0, "utime_s"); ss += getnum($0, "stime_s"); e = getnum($0, "elapsed_s"); if (e > el) el = e; ns++ }
	END {
		win = getnum(mon, "window_s"); devp = getnum(mon, "dev_pkts"); busy = getnum(mon, "busy_s")
		qp = getnum(Q, "pkts"); qd = getnum(Q, "dropped"); qr = getnum(Q, "requeues")
		pk = (devp > 0 ? devp : (qp > 0 ? qp : sent))
		printf "\"pps_dev\":%.0f,\"pps_qdisc\":%.0f,\"pps_sent\":%.0f,\"dev_pkts\":%d,\"qdisc_root_pkts\":%d,\"qdisc_root_dropped\":%d,\"qdisc_root_requeues\":%d,\"sent\":%d,\"send_errors\":%d,",
			(win > 0 && devp >= 0 ? devp / win : -1), (el > 0 ? qp / el : -1), (el > 0 ? sent / el : -1), devp, qp, qd, qr, sent, errs
		printf "\"cpu_busy_s\":%.2f,\"ns_per_pkt_cpu\":%.1f,\"sender_cpu_s\":%.3f,\"sender_user_s\":%.3f,\"sender_sys_s\":%.3f,\"ns_per_pkt_sender\":%.1f",
			busy, (pk > 0 ? busy * 1e9 / pk : -1), scpu, su, ss, (sent > 0 ? scpu * 1e9 / sent : -1)
	}' "$1" "$2"
}

# iputils ping output -> same JSON shape as pingrtt.c (times in us)
ping_json() {
	awk -v C="$PING_COUNT" '
	/time=/ { if (match($0, /time=[0-9.]+/)) { v[++n] = substr($0, RSTART + 5, RLENGTH - 5) * 1000; seq = seq (n > 1 ? "," : "") sprintf("%.1f", v[n]); s += v[n] } }
	function pct(p,   k) { k = int(p / 100 * n + 0.999999); if (k < 1) k = 1; if (k > n) k = n; return v[k] }
	END {
		for (i = 2; i <= n; i++) { x = v[i]; j = i - 1; while (j > 0 && v[j] > x) { v[j + 1] = v[j]; j-- } v[j + 1] = x }
		printf "{\"role\":\"ping\",\"count\":%d,\"received\":%d,\"rtt_seq_us\":[%s]", C, n, seq
		if (n > 0) printf ",\"rtt_us\":{\"min\":%.1f,\"avg\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}", v[1], s / n, pct(50), pct(90), pct(99), v[n]
		printf "}"
	}'
}

qdisc_conf() { tc -n "$1" qdisc show dev "$2" 2>&1 | paste -sd'|' | tr -d '"\\'; }
load1() { cut -d' ' -f1 /proc/loadavg; }

# run_udp NS DEV COUNTER DST CASE_JSON_PREFIX NSENDERS
run_udp() {
	local ns=$1 dev=$2 counter=$3 dst=$4 meta=$5 nsend=$6 rep cpus cpu start q0 q1 qd try
	cpus=(0); [ "$nsend" -ge 2 ] && cpus=(0 1)
	for rep in $(seq 1 "$REPS"); do
		for try in 1 2 3; do
			wait_quiet
			local la0 hb0 la1 hb1 waited=$WAITED pids=()
			la0=$(load1); hb0=$(heavy_count)
			q0=$(qdisc_json "$ns" "$dev")
			: > "$TMP/senders"
			start=$(( $(date +%s%N) + 400000000 ))
			ip netns exec "$ns" "$UF" -M -w "$start" -t "$DURATION" -i "$dev" -k "$counter" > "$TMP/mon" &
			pids+=($!)
			for cpu in "${cpus[@]}"; do
				ip netns exec "$ns" taskset -c "$cpu" "$UF" -d "$dst" -s "$PAYLOAD" -t "$DURATION" -w "$start" > "$TMP/s$cpu" &
				pids+=($!)
			done
			local saved=("${PIDS[@]}")
			PIDS=("${saved[@]}" "${pids[@]}")
			wait "${pids[@]}"
			PIDS=("${saved[@]}")
			q1=$(qdisc_json "$ns" "$dev")
			la1=$(load1); hb1=$(heavy_count)
			for cpu in "${cpus[@]}"; do cat "$TMP/s$cpu" >> "$TMP/senders"; done
			if [ "$hb1" -gt 0 ] && [ "$try" -lt 3 ]; then
				log "cargo/rustc appeared during the run; repeating rep $rep"
				continue
			fi
			qd=$(qdisc_delta "$q0" "$q1")
			printf '{"type":"udp",%s,"senders":%d,"sender_cpus":"%s","rep":%d,"duration_s":%s,"payload":%d,"frame_len":%d,"loadavg1_before":%s,"loadavg1_after":%s,"heavy_procs_before":%d,"heavy_procs_after":%d,"waited_quiet_s":%d,%s,"monitor":%s,"sender":[%s],"qdisc_delta":%s}\n' \
				"$meta" "$nsend" "$(IFS=,; echo "${cpus[*]}")" "$rep" "$DURATION" "$PAYLOAD" "$((PAYLOAD + 42))" \
				"$la0" "$la1" "$hb0" "$hb1" "$waited" \
				"$(derive "$TMP/mon" "$TMP/senders" "$qd")" \
				"$(cat "$TMP/mon")" "$(paste -sd, "$TMP/senders")" "$qd"
			log "  $nsend sender(s) rep $rep: $(derive "$TMP/mon" "$TMP/senders" "$qd" | cut -c1-120)"
			break
		done
	done
}

# ------------------------------------------------------------------ header

XDEV=ifb; XCOUNTER=rx_packets
mkns probe
if ip -n "$TAG-probe" link add p0 type dummy 2>/dev/null; then XDEV=dummy; XCOUNTER=tx_packets; fi
delns probe

KHZ=$( (zcat /proc/config.gz 2>/dev/null | grep -E '^CONFIG_HZ=' | cut -d= -f2) || true)
IRQT=$( (zcat /proc/config.gz 2>/dev/null | grep -cE '^CONFIG_IRQ_TIME_ACCOUNTING=y') || true)
printf '{"type":"header","tool":"scripts/calibrate/cpu.sh","uname_r":"%s","nproc":%d,"cpu_model":"%s","date":"%s","user_hz":%d,"kernel_hz":"%s","irq_time_accounting":%s,"clocksource":"%s","default_qdisc":"%s","xmit_dev":"%s","xmit_counter":"%s","duration_s":%s,"reps":%d,"payload":%d,"frame_len":%d,"ping_count":%d,"ping_interval_s":%s,"loadavg":"%s"}\n' \
	"$(uname -r)" "$(nproc)" "$(jstr "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')")" "$(date -Iseconds)" \
	"$(getconf CLK_TCK)" "${KHZ:-unknown}" "$([ "${IRQT:-0}" -gt 0 ] && echo true || echo false)" \
	"$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)" \
	"$(cat /proc/sys/net/core/default_qdisc 2>/dev/null)" "$XDEV" "$XCOUNTER" "$DURATION" "$REPS" "$PAYLOAD" "$((PAYLOAD + 42))" \
	"$PING_COUNT" "$PING_INTERVAL" "$(cat /proc/loadavg)"
log "transmit device: $XDEV (counter $XCOUNTER); ${DURATION}s x $REPS reps per case"

# ------------------------------------------------------------------ 1. UDP through one qdisc on dummy/ifb

XNS="$TAG-x"
setup_xdev() { # setup_xdev NTXQ
	mkns x
	ip -n "$XNS" link add d0 txqueuelen 1000 numtxqueues "$1" numrxqueues "$1" type "$XDEV" || die "creating $XDEV"
	ip -n "$XNS" link set d0 up
	ip -n "$XNS" addr add 10.201.0.1/24 dev d0
	ip -n "$XNS" neigh replace 10.201.0.2 lladdr 02:00:00:00:02:02 nud permanent dev d0
	if [ "$1" -ge 2 ]; then
		ip netns exec "$XNS" sh -c 'echo 1 > /sys/class/net/d0/queues/tx-0/xps_cpus && echo 2 > /sys/class/net/d0/queues/tx-1/xps_cpus' ||
			log "setting XPS failed"
	fi
}
xps_state() { ip netns exec "$XNS" sh -c 'for q in /sys/class/net/d0/queues/tx-*; do printf "%s=%s " "${q##*/}" "$(cat $q/xps_cpus 2>/dev/null)"; done' | sed 's/ $//'; }

udp_xcase() { # udp_xcase CASE NTXQ QDISC_SETUP_FN DESCRIPTION
	local name=$1 ntxq=$2 fn=$3 desc=$4 err meta
	setup_xdev "$ntxq"
	if ! err=$($fn 2>&1); then
		printf '{"type":"note","case":"%s","dev":"%s","txq":%d,"what":"qdisc setup refused","qdisc_request":"%s","error":"%s"}\n' \
			"$name" "$XDEV" "$ntxq" "$(jstr "$desc")" "$(jstr "$err")"
		log "case $name: qdisc setup refused: $err"
		delns x
		return
	fi
	meta=$(printf '"case":"%s","path":"%s","dev":"%s","txq":%d,"qdisc_request":"%s","qdisc_config":"%s","xps":"%s"' \
		"$name" "$XDEV" "$XDEV" "$ntxq" "$(jstr "$desc")" "$(qdisc_conf "$XNS" d0)" "$(xps_state)")
	log "case $name ($desc)"
	run_udp "$XNS" d0 "$XCOUNTER" 10.201.0.2 "$meta" 1
	run_udp "$XNS" d0 "$XCOUNTER" 10.201.0.2 "$meta" 2
	delns x
}

q_pfifo() { tc -n "$XNS" qdisc replace dev d0 root handle 1: pfifo limit 1000; }
q_mq_pfifo() {
	tc -n "$XNS" qdisc replace dev d0 root handle 1: mq &&
		tc -n "$XNS" qdisc add dev d0 parent 1:1 handle 10: pfifo limit 1000 &&
		tc -n "$XNS" qdisc add dev d0 parent 1:2 handle 20: pfifo limit 1000
}
q_default() { true; }
q_noqueue() { tc -n "$XNS" qdisc replace dev d0 root noqueue; }

udp_xcase pfifo_root_2txq 2 q_pfifo "root pfifo limit 1000 over 2 txqs (one root lock)"
udp_xcase mq_pfifo_2txq 2 q_mq_pfifo "root mq, pfifo limit 1000 per txq, XPS cpu0->tx-0 cpu1->tx-1"
udp_xcase pfifo_fast_1txq 1 q_default "default pfifo_fast, 1 txq"
udp_xcase mq_pfifo_fast_2txq 2 q_default "default mq + pfifo_fast per txq, XPS cpu0->tx-0 cpu1->tx-1"
udp_xcase noqueue_2txq 2 q_noqueue "root noqueue over 2 txqs, XPS cpu0->tx-0 cpu1->tx-1"

# ------------------------------------------------------------------ 2. ping RTT, veth paths

ANS="$TAG-a"; BNS="$TAG-b"; WNS="$TAG-w"
mkns a; mkns b; mkns w
# bridge path: A:vA <-> W:wA -- br0 -- W:wB <-> B:vB   (10.202.0.0/24)
ip -n "$WNS" link add br0 type bridge stp_state 0 forward_delay 0 || die "bridge"
ip -n "$WNS" link set br0 up
ip -n "$ANS" link add vA type veth peer name wA netns "$WNS" || die "veth A-W"
ip -n "$BNS" link add vB type veth peer name wB netns "$WNS" || die "veth B-W"
ip -n "$WNS" link set wA master br0; ip -n "$WNS" link set wB master br0
ip -n "$WNS" link set wA up; ip -n "$WNS" link set wB up
ip -n "$ANS" addr add 10.202.0.1/24 dev vA; ip -n "$ANS" link set vA up
ip -n "$BNS" addr add 10.202.0.2/24 dev vB; ip -n "$BNS" link set vB up
# direct path: A:xA <-> B:xB   (10.203.0.0/24)
ip -n "$ANS" link add xA type veth peer name xB netns "$BNS" || die "veth A-B"
ip -n "$ANS" addr add 10.203.0.1/24 dev xA; ip -n "$ANS" link set xA up
ip -n "$BNS" addr add 10.203.0.2/24 dev xB; ip -n "$BNS" link set xB up
mac() { ip -n "$1" -o link show "$2" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p'; }
ip -n "$ANS" neigh replace 10.202.0.2 lladdr "$(mac "$BNS" vB)" nud permanent dev vA
ip -n "$BNS" neigh replace 10.202.0.1 lladdr "$(mac "$ANS" vA)" nud permanent dev vB
ip -n "$ANS" neigh replace 10.203.0.2 lladdr "$(mac "$BNS" xB)" nud permanent dev xA
ip -n "$BNS" neigh replace 10.203.0.1 lladdr "$(mac "$ANS" xA)" nud permanent dev xB
sleep 1
BRNF=$(ip netns exec "$WNS" cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null || echo n/a)
# warm-up (bridge FDB learning, first-packet effects)
ip netns exec "$ANS" "$PR" -c 5 -i 0.01 10.202.0.2 >/dev/null
ip netns exec "$ANS" "$PR" -c 5 -i 0.01 10.203.0.2 >/dev/null

for path in bridge direct; do
	dst=10.202.0.2; [ "$path" = direct ] && dst=10.203.0.2
	for rep in $(seq 1 "$PING_REPS"); do
		wait_quiet
		w=$WAITED; la0=$(load1); hb0=$(heavy_count)
		out=$(ip netns exec "$ANS" "$PR" -c "$PING_COUNT" -i "$PING_INTERVAL" "$dst")
		la1=$(load1); hb1=$(heavy_count)
		printf '{"type":"ping","path":"%s","desc":"%s","rep":%d,"tool":"pingrtt.c (iputils-style timing)","bridge_nf_call_iptables":"%s","qdiscs":"default (veth noqueue)","loadavg1_before":%s,"loadavg1_after":%s,"heavy_procs_before":%d,"heavy_procs_after":%d,"waited_quiet_s":%d,"ping":%s}\n' \
			"$path" "$([ "$path" = bridge ] && echo 'A veth <-> W bridge port .. W bridge port <-> B veth' || echo 'single veth pair A <-> B')" \
			"$rep" "$BRNF" "$la0" "$la1" "$hb0" "$hb1" "$w" "$out"
		log "ping $path rep $rep: $(echo "$out" | grep -o '"rtt_us":{[^}]*}')"
	done
	# cross-check with the system's iputils ping when there is one
	if command -v ping >/dev/null; then
		for rep in $(seq 1 "$PING_REPS"); do
			wait_quiet
			w=$WAITED; la0=$(load1); hb0=$(heavy_count)
			out=$(ip netns exec "$ANS" ping -n -c "$PING_COUNT" -i "$PING_INTERVAL" "$dst" 2>&1 | ping_json)
			la1=$(load1); hb1=$(heavy_count)
			printf '{"type":"ping","path":"%s","rep":%d,"tool":"system ping","bridge_nf_call_iptables":"%s","qdiscs":"default (veth noqueue)","loadavg1_before":%s,"loadavg1_after":%s,"heavy_procs_before":%d,"heavy_procs_after":%d,"waited_quiet_s":%d,"ping":%s}\n' \
				"$path" "$rep" "$BRNF" "$la0" "$la1" "$hb0" "$hb1" "$w" "$out"
			log "system ping $path rep $rep: $(echo "$out" | grep -o '"rtt_us":{[^}]*}')"
		done
	else
		printf '{"type":"note","what":"no system ping binary; only pingrtt.c was used","path":"%s"}\n' "$path"
	fi
done

# ------------------------------------------------------------------ 3. UDP over the A-W-B veth path

if [ "$DO_VETH" = 1 ]; then
	ip netns exec "$BNS" "$UF" -l -p 9 -t 3600 > "$TMP/sink" &
	SINKPID=$!
	PIDS=("$SINKPID")
	sleep 0.3
	for qd in noqueue pfifo; do
		if [ "$qd" = pfifo ]; then
			tc -n "$ANS" qdisc replace dev vA root handle 1: pfifo limit 1000 || { log "pfifo on vA refused"; continue; }
			desc="root pfifo limit 1000 on A's veth (1 txq), bridge in W, sink socket in B"
		else
			desc="veth default noqueue, bridge in W, sink socket in B"
		fi
		meta=$(printf '"case":"veth_bridge_%s","path":"veth A-W(bridge)-B","dev":"veth","txq":1,"qdisc_request":"%s","qdisc_config":"%s","xps":"n/a","bridge_nf_call_iptables":"%s"' \
			"$qd" "$(jstr "$desc")" "$(qdisc_conf "$ANS" vA)" "$BRNF")
		log "case veth_bridge_$qd"
		run_udp "$ANS" vA tx_packets 10.202.0.2 "$meta" 1
		run_udp "$ANS" vA tx_packets 10.202.0.2 "$meta" 2
	done
	kill "$SINKPID" 2>/dev/null; wait "$SINKPID" 2>/dev/null
	PIDS=()
fi

log "done"
