/*
 * qdl-capture DEV OUT IDLE_MS MAX_MS — record the frames arriving on DEV (the
 * peer of the device whose qdisc is under test), for scripts/diff-kernel-vm.sh.
 *
 * An AF_PACKET socket (ETH_P_ALL) bound to DEV with SO_TIMESTAMPNS: the kernel's
 * CLOCK_REALTIME receive stamp, taken in netif_rx on the sending CPU (veth), i.e.
 * when the qdisc released the packet. Frames that are IPv4/UDP with the payload
 * "QDL1" + u32 id (scripts/lib/qdl-inject.c) are written as
 *   "ID TS_NS FRAME_LEN TOS"
 * anything else as "other TS_NS FRAME_LEN ETHERTYPE". Creates OUT.ready once
 * listening; exits after IDLE_MS without a frame (counted from the first frame) or
 * MAX_MS in all.
 *
 * Built static by scripts/diff-kernel-vm.sh (gcc -static -O2).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/net_tstamp.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s DEV OUT IDLE_MS MAX_MS\n", argv[0]);
		return 2;
	}
	int idle = atoi(argv[3]);
	uint64_t max = (uint64_t)atoll(argv[4]);
	int s = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (s < 0) { perror("socket"); return 1; }
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL) };
	sll.sll_ifindex = (int)if_nametoindex(argv[1]);
	if (!sll.sll_ifindex) { perror(argv[1]); return 1; }
	if (bind(s, (struct sockaddr *)&sll, sizeof(sll)) < 0) { perror("bind"); return 1; }
	int on = 1;
	if (setsockopt(s, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0) { perror("SO_TIMESTAMPNS"); return 1; }
	int rcvbuf = 8 << 20;
	setsockopt(s, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
	FILE *out = fopen(argv[2], "w");
	if (!out) { perror(argv[2]); return 1; }
	char ready[512];
	snprintf(ready, sizeof(ready), "%s.ready", argv[2]);
	FILE *r = fopen(ready, "w");
	if (r) fclose(r);
	uint64_t start = mono_ms(), last = 0;
	static unsigned char buf[65536];
	char ctrl[256];
	for (;;) {
		uint64_t nowms = mono_ms();
		if (nowms - start >= max) break;
		if (last && nowms - last >= (uint64_t)idle) break;
		int to = last ? (int)(last + (uint64_t)idle - nowms) : (int)(start + max - nowms);
		struct pollfd p = { .fd = s, .events = POLLIN };
		int n = poll(&p, 1, to > 0 ? to : 1);
		if (n < 0 && errno != EINTR) { perror("poll"); return 1; }
		if (n <= 0) continue;
		struct iovec iov = { buf, sizeof(buf) };
		struct sockaddr_ll from;
		struct msghdr m = { .msg_name = &from, .msg_namelen = sizeof(from), .msg_iov = &iov, .msg_iovlen = 1,
				    .msg_control = ctrl, .msg_controllen = sizeof(ctrl) };
		ssize_t len = recvmsg(s, &m, MSG_TRUNC);
		if (len < 0) { if (errno == EINTR) continue; perror("recvmsg"); return 1; }
		last = mono_ms();
		if (from.sll_pkttype == PACKET_OUTGOING) continue;
		uint64_t ts = 0;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
			if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
				struct timespec t;
				memcpy(&t, CMSG_DATA(c), sizeof(t));
				ts = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
			}
		unsigned et = len >= 14 ? (unsigned)(buf[12] << 8 | buf[13]) : 0;
		/* Ethernet 14 + IPv4 (IHL) + UDP 8 + "QDL1" + id */
		if (et == 0x0800 && len >= 14 + 20 + 8 + 8 && buf[14 + 9] == 17) {
			int ihl = (buf[14] & 15) * 4;
			const unsigned char *pl = buf + 14 + ihl + 8;
			if (len >= 14 + ihl + 8 + 8 && memcmp(pl, "QDL1", 4) == 0) {
				uint32_t id;
				memcpy(&id, pl + 4, 4);
				fprintf(out, "%u %llu %zd %u\n", ntohl(id), (unsigned long long)ts, len, buf[15]);
				continue;
			}
		}
		fprintf(out, "other %llu %zd %04x\n", (unsigned long long)ts, len, et);
	}
	fclose(out);
	return 0;
}
