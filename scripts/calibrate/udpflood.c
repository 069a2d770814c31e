/*
 * udpflood: small helper for scripts/calibrate/cpu.sh (qdisc-lab CPU-model calibration).
 *
 * Three modes, all printing exactly one JSON object on stdout:
 *
 *   sender  : udpflood -d DST_IP [-p PORT] [-s PAYLOAD] [-t SECONDS] [-w START_NS]
 *             Plain send() loop on a connected UDP socket. Payload 58 bytes by
 *             default = 100-byte Ethernet frame (14 eth + 20 IP + 8 UDP + 58).
 *             With -w it sleeps until CLOCK_REALTIME START_NS, then sends for
 *             exactly SECONDS. Reports datagrams sent, send() errors and the
 *             process's user/sys CPU seconds (getrusage).
 *
 *   monitor : udpflood -M -w START_NS -t SECONDS [-i IFNAME] [-k COUNTER]
 *             Sleeps until START_NS, snapshots /proc/stat (per CPU) and
 *             /sys/class/net/IFNAME/statistics/<counters>, sleeps until START_NS+SECONDS,
 *             snapshots again, prints the deltas. Run it inside the device's
 *             namespace (ip netns exec remounts /sys for it).
 *
 *   sink    : udpflood -l [-p PORT] [-t SECONDS]
 *             Binds 0.0.0.0:PORT with a tiny SO_RCVBUF and never reads, so that
 *             datagrams are dropped at the socket (no ICMP port-unreachable
 *             goes back to the sender). Exits after SECONDS (default 3600) or
 *             on SIGTERM.
 *
 * Written for this project; no kernel code in here.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until_realtime(int64_t t_ns)
{
	struct timespec ts = { .tv_sec = t_ns / 1000000000LL, .tv_nsec = t_ns % 1000000000LL };
	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static double tv_s(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

/* ---------------------------------------------------------------- monitor */

#define MAXCPU 256
#define NFIELD 10
static const char *stat_names[NFIELD] = { "user", "nice", "system", "idle", "iowait",
					   "irq", "softirq", "steal", "guest", "guest_nice" };

struct cpustat {
	int ncpu;
	int id[MAXCPU];
	unsigned long long v[MAXCPU][NFIELD];
};

static void read_stat(struct cpustat *s)
{
	char line[1024];
	FILE *f = fopen("/proc/stat", "r");
	s->ncpu = 0;
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		int id;
		unsigned long long *v;
		if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
			continue;
		if (s->ncpu >= MAXCPU)
			break;
		v = s->v[s->ncpu];
		memset(v, 0, sizeof(s->v[0]));
		if (sscanf(line + 3, "%d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &id, &v[0],
			   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 5)
			s->id[s->ncpu++] = id;
	}
	fclose(f);
}

#define NDEV 8
static const char *dev_names[NDEV] = { "tx_packets", "tx_bytes", "tx_dropped", "tx_errors",
				       "rx_packets", "rx_bytes", "rx_dropped", "rx_errors" };

static void read_dev(const char *ifname, long long *out)
{
	char path[256];
	for (int i = 0; i < NDEV; i++) {
		FILE *f;
		out[i] = -1;
		if (!ifname)
			continue;
		snprintf(path, sizeof path, "/sys/class/net/%s/statistics/%s", ifname, dev_names[i]);
		f = fopen(path, "r");
		if (f) {
			if (fscanf(f, "%lld", &out[i]) != 1)
				out[i] = -1;
			fclose(f);
		}
	}
}

static int run_monitor(int64_t start_ns, double secs, const char *ifname, const char *counter)
{
	static struct cpustat a, b;
	long long da[NDEV], db[NDEV];
	double hz = (double)sysconf(_SC_CLK_TCK);
	int64_t t0, t1;
	double busy = 0, total = 0;

	if (start_ns > 0)
		sleep_until_realtime(start_ns);
	else
		start_ns = now_ns(CLOCK_REALTIME);
	read_stat(&a);
	read_dev(ifname, da);
	t0 = now_ns(CLOCK_MONOTONIC);
	sleep_until_realtime(start_ns + (int64_t)(secs * 1e9));
	read_stat(&b);
	read_dev(ifname, db);
	t1 = now_ns(CLOCK_MONOTONIC);

	printf("{\"role\":\"monitor\",\"window_s\":%.6f,\"user_hz\":%.0f,\"ifname\":\"%s\",\"dev\":{",
	       (t1 - t0) / 1e9, hz, ifname ? ifname : "");
	for (int i = 0; i < NDEV; i++)
		printf("%s\"%s\":%lld", i ? "," : "", dev_names[i],
		       (da[i] >= 0 && db[i] >= 0) ? db[i] - da[i] : -1LL);
	{
		long long pk = -1;
		for (int i = 0; i < NDEV; i++)
			if (counter && strcmp(counter, dev_names[i]) == 0 && da[i] >= 0 && db[i] >= 0)
				pk = db[i] - da[i];
		printf("},\"dev_counter\":\"%s\",\"dev_pkts\":%lld,\"per_cpu\":[", counter ? counter : "",
		       pk);
	}
	for (int c = 0; c < b.ncpu && c < a.ncpu; c++) {
		double d[NFIELD], cb = 0, ct = 0;
		printf("%s{\"cpu\":%d", c ? "," : "", b.id[c]);
		for (int k = 0; k < NFIELD; k++) {
			d[k] = (double)(b.v[c][k] - a.v[c][k]) / hz;
			/* guest/guest_nice are already included in user/nice */
			if (k < 8)
				ct += d[k];
			if (k != 3 && k != 4 && k != 7 && k < 8)
				cb += d[k];
			printf(",\"%s\":%.2f", stat_names[k], d[k]);
		}
		printf(",\"busy\":%.2f,\"total\":%.2f}", cb, ct);
		busy += cb;
		total += ct;
	}
	printf("],\"busy_s\":%.2f,\"total_s\":%.2f}\n", busy, total);
	return 0;
}

/* ---------------------------------------------------------------- sink */

static volatile sig_atomic_t stop_flag;
static void on_term(int sig) { (void)sig; stop_flag = 1; }

static int run_sink(int port, double secs)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	int fd = socket(AF_INET, SOCK_DGRAM, 0), one = 1, small = 1; /* kernel clamps to its minimum */
	int64_t end = now_ns(CLOCK_MONOTONIC) + (int64_t)(secs * 1e9);
	signal(SIGTERM, on_term);
	signal(SIGINT, on_term);
	if (fd < 0) {
		perror("socket");
		return 1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("bind");
		return 1;
	}
	printf("{\"role\":\"sink\",\"port\":%d,\"pid\":%d}\n", port, (int)getpid());
	fflush(stdout);
	while (!stop_flag && now_ns(CLOCK_MONOTONIC) < end)
		usleep(100000);
	close(fd);
	return 0;
}

/* ---------------------------------------------------------------- sender */

static int run_sender(const char *dst, int port, int payload, double secs, int64_t start_ns)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rusage ru;
	char *buf;
	unsigned long long sent = 0, errors = 0, enobufs = 0;
	int first_errno = 0, cpu_start, cpu_end, fd;
	int64_t t0, t_end, t;

	if (inet_pton(AF_INET, dst, &sa.sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", dst);
		return 2;
	}
	buf = calloc(1, payload > 0 ? payload : 1);
	fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("socket/connect");
		return 1;
	}
	if (start_ns > 0)
		sleep_until_realtime(start_ns);
	cpu_start = sched_getcpu();
	t0 = now_ns(CLOCK_MONOTONIC);
	t_end = t0 + (int64_t)(secs * 1e9);
	for (;;) {
		for (int i = 0; i < 64; i++) {
			ssize_t r = send(fd, buf, payload, 0);
			if (r < 0) {
				errors++;
				if (errno == ENOBUFS)
					enobufs++;
				if (!first_errno)
					first_errno = errno;
			} else {
				sent++;
			}
		}
		t = now_ns(CLOCK_MONOTONIC);
		if (t >= t_end)
			break;
	}
	cpu_end = sched_getcpu();
	getrusage(RUSAGE_SELF, &ru);
	printf("{\"role\":\"sender\",\"pid\":%d,\"cpu_start\":%d,\"cpu_end\":%d,\"payload\":%d,"
	       "\"frame_len\":%d,\"sent\":%llu,\"errors\":%llu,\"enobufs\":%llu,\"first_errno\":%d,"
	       "\"elapsed_s\":%.6f,\"utime_s\":%.6f,\"stime_s\":%.6f,\"nvcsw\":%ld,\"nivcsw\":%ld}\n",
	       (int)getpid(), cpu_start, cpu_end, payload, payload + 42, sent, errors, enobufs,
	       first_errno, (t - t0) / 1e9, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_nvcsw,
	       ru.ru_nivcsw);
	close(fd);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: udpflood -d DST [-p PORT] [-s PAYLOAD] [-t SECS] [-w START_NS]\n"
		"       udpflood -M [-w START_NS] -t SECS [-i IFNAME] [-k COUNTER]\n"
		"       udpflood -l [-p PORT] [-t SECS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dst = NULL, *ifname = NULL, *counter = NULL;
	int port = 9, payload = 58, mode = 's', opt;
	double secs = -1;
	int64_t start_ns = 0;

	while ((opt = getopt(argc, argv, "d:p:s:t:w:Mi:k:lh")) != -1) {
		switch (opt) {
		case 'd': dst = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 's': payload = atoi(optarg); break;
		case 't': secs = atof(optarg); break;
		case 'w': start_ns = strtoll(optarg, NULL, 10); break;
		case 'M': mode = 'M'; break;
		case 'i': ifname = optarg; break;
		case 'k': counter = optarg; break;
		case 'l': mode = 'l'; break;
		default: usage();
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (mode == 'M')
		return run_monitor(start_ns, secs > 0 ? secs : 5, ifname, counter);
	if (mode == 'l')
		return run_sink(port, secs > 0 ? secs : 3600);
	if (!dst)
		usage();
	return run_sender(dst, port, payload, secs > 0 ? secs : 5, start_ns);
}
