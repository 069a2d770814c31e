/*
 * pingrtt: minimal ICMP echo RTT probe for scripts/calibrate/cpu.sh
 * (the calibration machine has no ping binary; this stands in for
 * `ping -c COUNT -i INTERVAL DST` and prints one JSON object).
 *
 *   pingrtt [-c COUNT] [-i INTERVAL_S] [-s PAYLOAD] [-W TIMEOUT_S] DST_IP
 *
 * Echo requests go out on a fixed schedule (start + k*INTERVAL), one at a
 * time; each reply is awaited (up to TIMEOUT) before the next slot.
 * RTT is measured the way iputils ping does it: send time = CLOCK_REALTIME
 * read just before sendto(), receive time = kernel SO_TIMESTAMPNS of the
 * reply ("rtt_us" fields). The time at which the process actually got the
 * reply back from recvmsg() is reported too ("rtt_user_us"), i.e. including
 * the wakeup of the pinging process.
 *
 * Written for this project; needs root (raw ICMP socket).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t ts_ns(const struct timespec *ts) { return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec; }
static int64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts_ns(&ts);
}

static uint16_t csum(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint32_t s = 0;
	for (; len > 1; p += 2, len -= 2)
		s += (uint32_t)p[0] << 8 | p[1];
	if (len)
		s += (uint32_t)p[0] << 8;
	while (s >> 16)
		s = (s & 0xffff) + (s >> 16);
	return htons((uint16_t)~s);
}

static int cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* nearest-rank percentile on a sorted array */
static double pct(const double *v, int n, double p)
{
	int k;
	if (n <= 0)
		return -1;
	k = (int)(p / 100.0 * n + 0.999999);
	if (k < 1)
		k = 1;
	if (k > n)
		k = n;
	return v[k - 1];
}

static void stats(const char *name, double *v, int n)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += v[i];
	qsort(v, n, sizeof *v, cmpd);
	printf(",\"%s\":{\"min\":%.1f,\"avg\":%.1f,\"p50\":%.1f,\"p90\":%.1f,\"p99\":%.1f,\"max\":%.1f}", name,
	       n ? v[0] : -1, n ? sum / n : -1, pct(v, n, 50), pct(v, n, 90), pct(v, n, 99),
	       n ? v[n - 1] : -1);
}

int main(int argc, char **argv)
{
	int count = 200, payload = 56, opt, fd, one = 1, got = 0;
	double interval = 0.01, timeout = 1.0;
	struct sockaddr_in dst = { .sin_family = AF_INET };
	uint16_t ident = (uint16_t)getpid();
	double *rtt, *rtt_user, *rtt_seq;
	uint8_t pkt[65536], rbuf[65536];
	int64_t start;

	while ((opt = getopt(argc, argv, "c:i:s:W:")) != -1) {
		switch (opt) {
		case 'c': count = atoi(optarg); break;
		case 'i': interval = atof(optarg); break;
		case 's': payload = atoi(optarg); break;
		case 'W': timeout = atof(optarg); break;
		default: fprintf(stderr, "usage: pingrtt [-c N] [-i S] [-s B] [-W S] DST\n"); return 2;
		}
	}
	if (optind >= argc || inet_pton(AF_INET, argv[optind], &dst.sin_addr) != 1) {
		fprintf(stderr, "need a destination IPv4 address\n");
		return 2;
	}
	if (payload < 8 || payload > 60000)
		payload = 56;
	fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
	if (fd < 0) {
		perror("socket(SOCK_RAW, ICMP)");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
	rtt = calloc(count, sizeof *rtt);
	rtt_user = calloc(count, sizeof *rtt_user);
	rtt_seq = calloc(count, sizeof *rtt_seq);

	start = now_ns(CLOCK_MONOTONIC) + 1000000;
	for (int seq = 0; seq < count; seq++) {
		struct icmphdr *h = (struct icmphdr *)pkt;
		struct timespec slot;
		int64_t t_slot = start + (int64_t)(seq * interval * 1e9), t_tx, deadline;

		slot.tv_sec = t_slot / 1000000000LL;
		slot.tv_nsec = t_slot % 1000000000LL;
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &slot, NULL) == EINTR)
			;
		memset(pkt, 0, sizeof(*h) + payload);
		for (int i = 0; i < payload; i++)
			pkt[sizeof(*h) + i] = (uint8_t)i;
		h->type = ICMP_ECHO;
		h->un.echo.id = htons(ident);
		h->un.echo.sequence = htons((uint16_t)seq);
		h->checksum = csum(pkt, sizeof(*h) + payload);

		t_tx = now_ns(CLOCK_REALTIME);
		if (sendto(fd, pkt, sizeof(*h) + payload, 0, (struct sockaddr *)&dst, sizeof dst) < 0)
			continue;
		deadline = now_ns(CLOCK_MONOTONIC) + (int64_t)(timeout * 1e9);
		for (;;) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };
			int64_t left = deadline - now_ns(CLOCK_MONOTONIC);
			char cbuf[512];
			struct iovec iov = { .iov_base = rbuf, .iov_len = sizeof rbuf };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
					     .msg_controllen = sizeof cbuf };
			struct cmsghdr *cm;
			ssize_t n;
			int64_t t_rx_k = 0, t_rx_u;
			struct iphdr *ip;
			struct icmphdr *r;

			if (left <= 0 || poll(&pfd, 1, (int)(left / 1000000) + 1) <= 0)
				break;
			n = recvmsg(fd, &mh, 0);
			t_rx_u = now_ns(CLOCK_REALTIME);
			if (n < (ssize_t)sizeof(struct iphdr))
				continue;
			ip = (struct iphdr *)rbuf;
			if (n < ip->ihl * 4 + (ssize_t)sizeof(*r))
				continue;
			r = (struct icmphdr *)(rbuf + ip->ihl * 4);
			if (r->type != ICMP_ECHOREPLY || ntohs(r->un.echo.id) != ident ||
			    ntohs(r->un.echo.sequence) != (uint16_t)seq)
				continue;
			for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
				if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS)
					t_rx_k = ts_ns((struct timespec *)CMSG_DATA(cm));
			if (!t_rx_k)
				t_rx_k = t_rx_u;
			rtt[got] = (t_rx_k - t_tx) / 1000.0;
			rtt_user[got] = (t_rx_u - t_tx) / 1000.0;
			rtt_seq[got] = rtt[got];
			got++;
			break;
		}
	}
	printf("{\"role\":\"ping\",\"count\":%d,\"received\":%d,\"interval_s\":%g,\"payload\":%d", count, got,
	       interval, payload);
	printf(",\"rtt_seq_us\":[");
	for (int i = 0; i < got; i++)
		printf("%s%.1f", i ? "," : "", rtt_seq[i]);
	printf("]");
	stats("rtt_us", rtt, got);
	stats("rtt_user_us", rtt_user, got);
	printf("}\n");
	return 0;
}
