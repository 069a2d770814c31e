/*
 * qdl-inject SCHEDULE LOG — send a crafted UDP packet sequence with exact timing,
 * one connected UDP socket per flow (for scripts/diff-kernel-vm.sh).
 *
 * SCHEDULE (written by scripts/lib/diff_vm.py), one directive per line:
 *   src A.B.C.D                 local address every socket binds to
 *   dst A.B.C.D                 peer address every socket connects to
 *   flow IDX SPORT DPORT TOS PRIO MAXRATE
 *                               flow IDX (0, 1, ... in order): a UDP socket bound to
 *                               src:SPORT and connected to dst:DPORT; IP_TOS = TOS (ECN
 *                               bits included: UDP keeps them) set first, since it
 *                               rewrites sk_priority; then SO_PRIORITY = PRIO; then
 *                               SO_MAX_PACING_RATE = MAXRATE bytes/s unless 0.
 *   pkt ID T_US FLOW LEN        at T_US after the start, send a datagram on FLOW
 *                               whose Ethernet frame is LEN bytes (UDP payload
 *                               LEN - 42): "QDL1", ID (u32, big endian), zeros.
 * Packets are sent in file order; a packet whose time has come is sent at once
 * (a burst is several packets with the same T_US, sent back to back).
 *
 * Why UDP sockets and not AF_PACKET: fq keys a connected socket's packets by the
 * socket, and fq_codel picks the bucket from skb->priority = handle:minor, both
 * deterministic. Socket-less (or AF_PACKET: TCP_CLOSE) traffic is keyed by
 * skb->hash, whose flow-dissector seed is random per boot.
 *
 * LOG: "t0 NS" (CLOCK_REALTIME at the start), then per packet
 * "ID BEFORE_NS AFTER_NS RET ERRNO": CLOCK_REALTIME around send(). A qdisc drop
 * is not an error for UDP (ENOBUFS is swallowed without IP_RECVERR).
 *
 * Built static by scripts/diff-kernel-vm.sh (gcc -static -O2).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif

#define MAXFLOWS 256
#define MAXPKTS 100000

struct pkt { uint32_t id; uint64_t t_us; int flow; int len; };

static uint64_t ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s SCHEDULE LOG\n", argv[0]);
		return 2;
	}
	FILE *f = fopen(argv[1], "r");
	if (!f) { perror(argv[1]); return 1; }
	static struct pkt pk[MAXPKTS];
	static int fd[MAXFLOWS];
	static char line[512];
	struct in_addr src = {0}, dst = {0};
	int nflows = 0, npk = 0;
	while (fgets(line, sizeof(line), f)) {
		char a[64];
		unsigned idx, sport, dport, tos, prio, id, fl, len;
		unsigned long long maxrate, t;
		if (sscanf(line, "src %63s", a) == 1) {
			if (!inet_aton(a, &src)) { fprintf(stderr, "bad src %s\n", a); return 2; }
		} else if (sscanf(line, "dst %63s", a) == 1) {
			if (!inet_aton(a, &dst)) { fprintf(stderr, "bad dst %s\n", a); return 2; }
		} else if (sscanf(line, "flow %u %u %u %u %u %llu", &idx, &sport, &dport, &tos, &prio, &maxrate) == 6) {
			if (idx != (unsigned)nflows || nflows >= MAXFLOWS) { fprintf(stderr, "flows must be numbered 0,1,...\n"); return 2; }
			int s = socket(AF_INET, SOCK_DGRAM, 0);
			if (s < 0) { perror("socket"); return 1; }
			struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(sport), .sin_addr = src };
			if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0) { perror("bind"); return 1; }
			struct sockaddr_in da = { .sin_family = AF_INET, .sin_port = htons(dport), .sin_addr = dst };
			if (connect(s, (struct sockaddr *)&da, sizeof(da)) < 0) { perror("connect"); return 1; }
			int v = (int)tos;
			if (setsockopt(s, IPPROTO_IP, IP_TOS, &v, sizeof(v)) < 0) { perror("IP_TOS"); return 1; }
			v = (int)prio;
			if (setsockopt(s, SOL_SOCKET, SO_PRIORITY, &v, sizeof(v)) < 0) { perror("SO_PRIORITY"); return 1; }
			if (maxrate) {
				unsigned long r = (unsigned long)maxrate;
				if (setsockopt(s, SOL_SOCKET, SO_MAX_PACING_RATE, &r, sizeof(r)) < 0) { perror("SO_MAX_PACING_RATE"); return 1; }
			}
			fd[nflows++] = s;
		} else if (sscanf(line, "pkt %u %llu %u %u", &id, &t, &fl, &len) == 4) {
			if (npk >= MAXPKTS || fl >= (unsigned)nflows || len < 50 || len > 65000) {
				fprintf(stderr, "bad pkt line: %s", line);
				return 2;
			}
			pk[npk++] = (struct pkt){ id, t, (int)fl, (int)len };
		} else if (line[0] != '#' && line[0] != '\n') {
			fprintf(stderr, "bad line: %s", line);
			return 2;
		}
	}
	fclose(f);
	FILE *log = fopen(argv[2], "w");
	if (!log) { perror(argv[2]); return 1; }
	static unsigned char buf[65536];
	memcpy(buf, "QDL1", 4);
	static uint64_t before[MAXPKTS], after[MAXPKTS];
	static int ret[MAXPKTS], err[MAXPKTS];
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	uint64_t t0 = ns(CLOCK_REALTIME);
	for (int i = 0; i < npk; i++) {
		struct timespec due = start;
		uint64_t d = (uint64_t)due.tv_nsec + pk[i].t_us * 1000ull;
		due.tv_sec += (time_t)(d / 1000000000ull);
		due.tv_nsec = (long)(d % 1000000000ull);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
		uint32_t nid = htonl(pk[i].id);
		memcpy(buf + 4, &nid, 4);
		before[i] = ns(CLOCK_REALTIME);
		ssize_t r = send(fd[pk[i].flow], buf, (size_t)(pk[i].len - 42), 0);
		after[i] = ns(CLOCK_REALTIME);
		ret[i] = (int)r;
		err[i] = r < 0 ? errno : 0;
	}
	fprintf(log, "t0 %llu\n", (unsigned long long)t0);
	for (int i = 0; i < npk; i++)
		fprintf(log, "%u %llu %llu %d %d\n", pk[i].id, (unsigned long long)before[i],
			(unsigned long long)after[i], ret[i], err[i]);
	fclose(log);
	for (int i = 0; i < nflows; i++)
		close(fd[i]);
	return 0;
}
