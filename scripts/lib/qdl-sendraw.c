/*
 * qdl-sendraw DEV LEN COUNT [GAP_US] [tos TOS] — inject COUNT broadcast
 * Ethernet frames of exactly LEN bytes on DEV through an AF_PACKET raw socket;
 * with GAP_US, frame i leaves at start + i*GAP_US and the program returns at
 * start + COUNT*GAP_US (absolute CLOCK_MONOTONIC deadlines: no drift).
 * With `tos TOS` they are IPv4 instead (ethertype 0x0800; a 20-byte header
 * 10.0.0.1 -> 10.0.0.2, protocol 253 (RFC 3692's experimental), TTL 64, DF,
 * that TOS byte -- its low two bits the ECN field -- and a valid checksum),
 * for qdiscs that read the ECN field (dualpi2). The kernel's packet_snd
 * parses the protocol from the header (packet_parse_headers).
 *
 * Static C twin of send_frames() in scripts/capture-goldens.sh (the guest
 * initramfs of scripts/capture-goldens-vm.sh has no python): same socket
 * (AF_PACKET, SOCK_RAW, protocol 0, bound to DEV), same frame bytes
 * (dst ff:ff:ff:ff:ff:ff, src 02:00:00:00:00:01, ethertype 0x88b5, zero
 * payload), and ENOBUFS -- the qdisc dropped the frame -- is not an error.
 * skb->priority is 0, so prio puts these frames in band 1 (priomap[0]).
 *
 * Built by scripts/capture-goldens-vm.sh with `gcc -static -O2`.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Sleep until t0 + off_us on CLOCK_MONOTONIC. */
static void until(const struct timespec *t0, long long off_us)
{
	long long ns = (long long)t0->tv_nsec + off_us * 1000;
	struct timespec t = { t0->tv_sec + ns / 1000000000, ns % 1000000000 };
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
		;
}

int main(int argc, char **argv)
{
	long tos = -1;
	if (argc >= 6 && strcmp(argv[argc - 2], "tos") == 0) {
		char *end;
		tos = strtol(argv[argc - 1], &end, 0);
		if (*end || tos < 0 || tos > 255) {
			fprintf(stderr, "qdl-sendraw: bad TOS\n");
			return 2;
		}
		argc -= 2;
	}
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s DEV LEN COUNT [GAP_US] [tos TOS]\n", argv[0]);
		return 2;
	}
	const char *dev = argv[1];
	long len = strtol(argv[2], NULL, 10), cnt = strtol(argv[3], NULL, 10);
	long long gap = argc == 5 ? strtoll(argv[4], NULL, 10) : 0;
	static const unsigned char hdr[14] = {
		0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
		0x02, 0x00, 0x00, 0x00, 0x00, 0x01,
		0x88, 0xb5,
	};
	if (len < (long)sizeof(hdr) + (tos < 0 ? 0 : 20) || len > 65535 || cnt < 0 || gap < 0) {
		fprintf(stderr, "qdl-sendraw: bad LEN or COUNT\n");
		return 2;
	}
	int s = socket(AF_PACKET, SOCK_RAW, 0);
	if (s < 0) { perror("socket"); return 1; }
	struct sockaddr_ll sll;
	memset(&sll, 0, sizeof(sll));
	sll.sll_family = AF_PACKET;
	sll.sll_protocol = 0;
	sll.sll_ifindex = (int)if_nametoindex(dev);
	if (!sll.sll_ifindex) { perror(dev); return 1; }
	if (bind(s, (struct sockaddr *)&sll, sizeof(sll)) < 0) { perror("bind"); return 1; }
	unsigned char *buf = calloc(1, (size_t)len);
	if (!buf) { perror("calloc"); return 1; }
	memcpy(buf, hdr, sizeof(hdr));
	if (tos >= 0) {
		unsigned char *ip = buf + sizeof(hdr);
		unsigned long sum = 0;
		buf[12] = 0x08, buf[13] = 0x00;
		ip[0] = 0x45, ip[1] = (unsigned char)tos;
		ip[2] = (unsigned char)((len - 14) >> 8), ip[3] = (unsigned char)(len - 14);
		ip[6] = 0x40, ip[8] = 64, ip[9] = 253;
		ip[12] = 10, ip[15] = 1, ip[16] = 10, ip[19] = 2;
		for (int i = 0; i < 20; i += 2)
			sum += (unsigned long)(ip[i] << 8 | ip[i + 1]);
		while (sum >> 16)
			sum = (sum & 0xffff) + (sum >> 16);
		ip[10] = (unsigned char)(~sum >> 8), ip[11] = (unsigned char)~sum;
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < cnt; i++) {
		if (gap)
			until(&t0, i * gap);
		if (send(s, buf, (size_t)len, 0) < 0 && errno != ENOBUFS) {
			perror("send");
			return 1;
		}
	}
	if (gap)
		until(&t0, cnt * gap);
	close(s);
	return 0;
}
