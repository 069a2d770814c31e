/*
 * qdl-autohandle DEV COUNT — advance the kernel's global qdisc auto-handle
 * counter by exactly COUNT, without creating any qdisc.
 *
 * Used by scripts/capture-goldens-vm.sh (in the guest, under TCG, where the
 * host script's ~32k `tc qdisc replace` per case would take ~20 s a case).
 *
 * How: qdisc_create() (net/sched/sch_api.c) takes an auto handle from
 * qdisc_alloc_handle() BEFORE it calls the qdisc's ->init(); an init that
 * fails still consumes the handle. So we send RTM_NEWQDISC "create pfifo as
 * DEV's root, handle 0" with an EMPTY TCA_OPTIONS, which fifo_init() rejects
 * (nla_len < sizeof(struct tc_fifo_qopt)) with -EINVAL: one handle consumed,
 * nothing created, nothing grafted. Messages are packed many per sendmsg()
 * (rtnetlink processes every nlmsg in the buffer) and every reply must be
 * -EINVAL, else we stop with an error. DEV's root must have handle 0 (the
 * default qdisc), so the request really takes the create path.
 *
 * The caller verifies the result with a real `tc qdisc add` (see
 * scripts/lib/vm-guest-init.sh), so a kernel that behaves otherwise is
 * caught, not silently mis-primed.
 */
#include <errno.h>
#include <linux/netlink.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CHUNK 128

struct req {
	struct nlmsghdr n;
	struct tcmsg t;
	struct rtattr kind_hdr;
	char kind[8];          /* "pfifo\0" padded to 8 */
	struct rtattr opt_hdr; /* empty TCA_OPTIONS */
};

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s DEV COUNT\n", argv[0]);
		return 2;
	}
	int ifindex = (int)if_nametoindex(argv[1]);
	long count = strtol(argv[2], NULL, 10);
	if (!ifindex) { perror(argv[1]); return 1; }
	if (count < 0) { fprintf(stderr, "bad COUNT\n"); return 2; }

	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (fd < 0) { perror("socket"); return 1; }
	int one = 1, big = 4 << 20;
	setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	struct sockaddr_nl sa = { .nl_family = AF_NETLINK };
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) { perror("bind"); return 1; }

	static struct req reqs[CHUNK];
	static char rbuf[1 << 16];
	unsigned seq = 1;
	long done = 0;
	while (done < count) {
		int n = count - done < CHUNK ? (int)(count - done) : CHUNK;
		memset(reqs, 0, sizeof(reqs));
		for (int i = 0; i < n; i++) {
			struct req *r = &reqs[i];
			r->n.nlmsg_len = sizeof(*r);
			r->n.nlmsg_type = RTM_NEWQDISC;
			r->n.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
			r->n.nlmsg_seq = seq + i;
			r->t.tcm_family = AF_UNSPEC;
			r->t.tcm_ifindex = ifindex;
			r->t.tcm_handle = 0;
			r->t.tcm_parent = TC_H_ROOT;
			r->kind_hdr.rta_len = RTA_LENGTH(6);
			r->kind_hdr.rta_type = TCA_KIND;
			memcpy(r->kind, "pfifo", 6);
			r->opt_hdr.rta_len = RTA_LENGTH(0);
			r->opt_hdr.rta_type = TCA_OPTIONS;
		}
		struct sockaddr_nl k = { .nl_family = AF_NETLINK };
		if (sendto(fd, reqs, sizeof(reqs[0]) * n, 0, (struct sockaddr *)&k, sizeof(k)) < 0) {
			perror("sendto");
			return 1;
		}
		int got = 0;
		while (got < n) {
			ssize_t len = recv(fd, rbuf, sizeof(rbuf), 0);
			if (len < 0) { perror("recv"); return 1; }
			for (struct nlmsghdr *h = (struct nlmsghdr *)rbuf; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
				if (h->nlmsg_type != NLMSG_ERROR) {
					fprintf(stderr, "qdl-autohandle: unexpected reply type %u\n", h->nlmsg_type);
					return 1;
				}
				struct nlmsgerr *e = NLMSG_DATA(h);
				if (e->error != -EINVAL) {
					fprintf(stderr, "qdl-autohandle: request %u: got %s, expected EINVAL\n",
						h->nlmsg_seq, e->error ? strerror(-e->error) : "success");
					return 1;
				}
				got++;
			}
		}
		seq += n;
		done += n;
	}
	close(fd);
	return 0;
}
