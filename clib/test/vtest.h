/*
 * vtest.h: what the verbs test programs share: their checks, a watchdog,
 * opening a device by name (with a PD and the GID of index 1, RoCEv2),
 * each side of a test between two (a registered buffer too), polling a
 * CQ for one completion, and taking a QP to RTS: UD, or connected to a
 * peer (RC, and XRC's initiator and target).
 *
 * Every function is static inline, so that a program takes what it
 * needs and -Wunused-function (-Werror) says nothing of the rest.
 */
#ifndef VTEST_H
#define VTEST_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failed;

/* check prints one line per check, so that a test compares them all,
 * and goes on after one that fails: the program ends with FAIL. */
static inline void check(int ok, const char *what)
{
	printf("%s: %s\n", what, ok ? "ok" : "WRONG");
	if (!ok)
		failed = 1;
}

/* verdict ends a program of checks: PASS if all held, its exit status. */
static inline int verdict(void)
{
	printf("%s\n", failed ? "FAIL" : "PASS");
	return failed;
}

/* must prints nothing for a check that holds and ends the program at
 * the first that does not, for the programs whose output a test
 * compares line by line, or whose next step needs the last. */
static inline void must(int ok, const char *what)
{
	if (!ok) {
		printf("FAIL: %s (errno %d)\n", what, errno);
		exit(1);
	}
}

/* die ends the program when a step that is no check fails. */
static inline void die(const char *what)
{
	perror(what);
	exit(2);
}

/* find_dev returns the device of list (n long) named name. */
static inline struct ibv_device *find_dev(struct ibv_device **list, int n, const char *name)
{
	if (!list)
		die("ibv_get_device_list");
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			return list[i];
	fprintf(stderr, "no device %s among %d\n", name, n);
	exit(2);
}

static inline struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *c = ibv_open_device(find_dev(list, n, name));
	ibv_free_device_list(list);
	if (!c)
		die("ibv_open_device");
	return c;
}

/* open_pd opens the device name with a PD, and reads its port's GID of
 * index 1 (RoCEv2). */
static inline struct ibv_context *open_pd(const char *name, struct ibv_pd **pd, union ibv_gid *gid)
{
	struct ibv_context *c = open_dev(name);
	if (!(*pd = ibv_alloc_pd(c)))
		die("ibv_alloc_pd");
	if (ibv_query_gid(c, 1, 1, gid))
		die("ibv_query_gid");
	return c;
}

/* wait_watchdog, a thread's start, ends the program if a wait that must end
 * has not within 120 seconds. */
static inline void *wait_watchdog(void *arg)
{
	(void)arg;
	sleep(120);
	printf("a wait did not end: WRONG\nFAIL\n");
	fflush(stdout);
	_exit(1);
}

/* side is one rnicd of a test between two: its context, PD, a buffer
 * of SIDE_BUF bytes registered for local write and remote read and
 * write, and its GID of index 1. */
#define SIDE_BUF 4096
struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char *buf;
	struct ibv_mr *mr;
	union ibv_gid gid;
};

static inline void side_open(struct side *s, const char *dev)
{
	s->ctx = open_pd(dev, &s->pd, &s->gid);
	if (!(s->buf = aligned_alloc(4096, SIDE_BUF)))
		die("aligned_alloc");
	memset(s->buf, 0, SIDE_BUF);
	s->mr = ibv_reg_mr(s->pd, s->buf, SIDE_BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		die("ibv_reg_mr");
}

/* readable says whether fd is readable within ms milliseconds. */
static inline int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* poll_wc polls cq for one completion for s seconds at most: 1, with
 * the completion in *wc, or 0 if none came. A failed poll ends the
 * program. */
static inline int poll_wc(struct ibv_cq *cq, struct ibv_wc *wc, int s)
{
	time_t deadline = time(NULL) + s;
	int n;
	while ((n = ibv_poll_cq(cq, 1, wc)) == 0 && time(NULL) <= deadline)
		;
	if (n < 0)
		die("ibv_poll_cq");
	return n;
}

/* ud_ready takes a UD QP through INIT and RTR to RTS, with qkey. */
static inline void ud_ready(struct ibv_qp *qp, uint32_t qkey)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = qkey};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("UD INIT");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("UD RTR");
	a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("UD RTS");
}

/* qp_path is where qp_connect takes a QP: the peer's QP number and its
 * port's GID (index 1 here, RoCEv2), the remote access the QP grants,
 * the PSN of both directions, and whether it stops at RTR. */
struct qp_path {
	uint32_t dest_qp_num;
	union ibv_gid dgid;
	unsigned int access;
	uint32_t psn;
	int rtr_only;
};

/* qp_connect takes a connected QP through INIT and RTR to RTS (or to
 * RTR only). An XRC initiator has no responder and an XRC target no
 * requester: their masks leave out the other side's attributes, as
 * ibv_xsrq_pingpong's do. */
static inline void qp_connect(struct ibv_qp *qp, const struct qp_path *p)
{
	int responder = qp->qp_type != IBV_QPT_XRC_SEND, requester = qp->qp_type != IBV_QPT_XRC_RECV;
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = p->access};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = p->dest_qp_num;
	a.rq_psn = p->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = p->dgid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (responder)
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTR");
	if (p->rtr_only)
		return;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = p->psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
	if (requester)
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(qp, &a, mask))
		die("modify to RTS");
}

/* rc_connect takes an RC QP to RTS towards peer, whose port has GID
 * dgid, with remote READ and WRITE access. */
static inline void rc_connect(struct ibv_qp *qp, struct ibv_qp *peer, union ibv_gid *dgid)
{
	qp_connect(qp, &(struct qp_path){.dest_qp_num = peer->qp_num, .dgid = *dgid,
					 .access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, .psn = 0x100});
}

#endif
