/*
 * vtest.h: what the verbs test programs (cqex, mrshared) share: their
 * checks, opening a device by name, connecting an RC QP to a peer.
 */
#ifndef VTEST_H
#define VTEST_H

#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed;

/* check prints one line per check, so that a test compares them all. */
static void check(int ok, const char *what)
{
	printf("%s: %s\n", what, ok ? "ok" : "WRONG");
	if (!ok)
		failed = 1;
}

static void die(const char *what)
{
	perror(what);
	exit(2);
}

static struct ibv_context *open_dev(const char *name)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name) == 0) {
			struct ibv_context *c = ibv_open_device(list[i]);
			ibv_free_device_list(list);
			if (!c)
				die("ibv_open_device");
			return c;
		}
	}
	fprintf(stderr, "no device %s\n", name);
	exit(2);
}

/* rc_connect takes an RC QP through INIT, RTR and RTS to peer, whose
 * port has GID dgid (index 1, RoCEv2), with remote READ and WRITE
 * access. */
static void rc_connect(struct ibv_qp *qp, struct ibv_qp *peer, union ibv_gid *dgid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qp_num;
	a.rq_psn = 0x100;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0x100;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS");
}

#endif
