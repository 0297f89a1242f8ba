/*
 * mcrefuse: UD multicast's calls on rnicd, the ones that work and the
 * ones that must be refused, from a C program.
 *
 *   mcrefuse ADDR GROUP N
 *
 * On the rnicd holding ADDR, with GROUP an IPv4 group (239.x.y.z) no
 * other program joins: rdma_join_multicast before a bind is EINVAL, of a
 * unicast address EINVAL, of an IPv6 group EOPNOTSUPP; a join gives a
 * MULTICAST_JOIN with QPN 0xFFFFFF, RDMA_UDP_QKEY, an AH to ::ffff:GROUP
 * (hop limit 64) and the join's context, and its QP is attached (a
 * second ibv_attach_mcast changes nothing); a second join is
 * EADDRINUSE. ibv_attach_mcast of a unicast GID or of an RC QP is
 * EINVAL; a QP attached to N groups (the device's 64, or the client's
 * share of them) gets ENOMEM for one more; a detach of a group not
 * attached is EINVAL. rdma_leave_multicast
 * detaches the QP (its detach after is EINVAL), a second leave is
 * EADDRNOTAVAIL; a send-only join (rdma_join_multicast_ex) attaches
 * nothing. Each step prints one line; the last is PASS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "mcrefuse"
#include "cmtest.h"

static void gid_of(const char *s, union ibv_gid *g)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	if (inet_pton(AF_INET, s, &g->raw[12]) != 1)
		fail("group address");
}

int main(int argc, char **argv)
{
	if (argc != 4 || atoi(argv[3]) < 1 || atoi(argv[3]) > 64) {
		fprintf(stderr, "usage: mcrefuse ADDR GROUP N (1-64)\n");
		return 2;
	}
	int n = atoi(argv[3]);
	struct sockaddr_in src, grp, uni;
	addr(argv[1], 0, &src);
	addr(argv[2], 0, &grp);
	addr(argv[1], 0, &uni);
	struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "ff0e::1", &v6.sin6_addr);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_UDP))
		fail("rdma_create_id");
	if (rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) != -1 || errno != EINVAL)
		fail("a join before a bind");
	printf("join before a bind: EINVAL\n");
	if (rdma_bind_addr(id, (struct sockaddr *)&src))
		fail("rdma_bind_addr");
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
	if (!cq)
		fail("PD and CQ");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, pd, &qa))
		fail("rdma_create_qp");
	if (rdma_join_multicast(id, (struct sockaddr *)&uni, NULL) != -1 || errno != EINVAL)
		fail("a join of a unicast address");
	if (rdma_join_multicast(id, (struct sockaddr *)&v6, NULL) != -1 || errno != EOPNOTSUPP)
		fail("a join of an IPv6 group");
	printf("join of a unicast address: EINVAL; of an IPv6 group: EOPNOTSUPP\n");

	int ctx;
	if (rdma_join_multicast(id, (struct sockaddr *)&grp, &ctx))
		fail("rdma_join_multicast");
	struct rdma_cm_event *e = next(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
	union ibv_gid g;
	gid_of(argv[2], &g);
	struct rdma_ud_param *u = &e->param.ud;
	if (e->id != id || u->qp_num != 0xFFFFFF || u->qkey != 0x01234567 || !u->ah_attr.is_global ||
	    memcmp(u->ah_attr.grh.dgid.raw, g.raw, 16) || u->ah_attr.grh.hop_limit != 64 || u->private_data != &ctx)
		fail("the MULTICAST_JOIN's ud param");
	rdma_ack_cm_event(e);
	printf("MULTICAST_JOIN: QPN 0xFFFFFF, RDMA_UDP_QKEY, AH to ::ffff:%s, the join's context\n", argv[2]);
	if (rdma_join_multicast(id, (struct sockaddr *)&grp, NULL) != -1 || errno != EADDRINUSE)
		fail("a second join");
	if (ibv_attach_mcast(id->qp, &g, 0))
		fail("a second attach of the joined group");
	printf("second join: EADDRINUSE; second attach: 0\n");

	union ibv_gid ug;
	gid_of(argv[1], &ug);
	struct ibv_qp_init_attr ra = qa;
	ra.qp_type = IBV_QPT_RC;
	struct ibv_qp *rc = ibv_create_qp(pd, &ra);
	if (!rc)
		fail("ibv_create_qp RC");
	if (ibv_attach_mcast(id->qp, &ug, 0) != EINVAL || ibv_attach_mcast(rc, &g, 0) != EINVAL)
		fail("an attach of a unicast GID or of an RC QP");
	printf("attach of a unicast GID: EINVAL; of an RC QP: EINVAL\n");

	/* The other groups, 238.y.z.i, up to N with the joined one. */
	union ibv_gid more = g;
	more.raw[12] = 238, more.raw[13] = g.raw[14], more.raw[14] = g.raw[15];
	for (int i = 1; i < n; i++) {
		more.raw[15] = i;
		if (ibv_attach_mcast(id->qp, &more, 0))
			fail("an attach within the limit");
	}
	more.raw[15] = n;
	if (ibv_attach_mcast(id->qp, &more, 0) != ENOMEM)
		fail("an attach past the limit");
	if (ibv_detach_mcast(id->qp, &more, 0) != EINVAL)
		fail("a detach of a group not attached");
	for (int i = 1; i < n; i++) {
		more.raw[15] = i;
		if (ibv_detach_mcast(id->qp, &more, 0))
			fail("a detach");
	}
	printf("%d groups attached, one more: ENOMEM; a detach of one not attached: EINVAL\n", n);

	if (rdma_leave_multicast(id, (struct sockaddr *)&grp))
		fail("rdma_leave_multicast");
	if (rdma_leave_multicast(id, (struct sockaddr *)&grp) != -1 || errno != EADDRNOTAVAIL)
		fail("a second leave");
	if (ibv_detach_mcast(id->qp, &g, 0) != EINVAL)
		fail("the leave left the QP attached");
	printf("leave: the QP detached; a second leave: EADDRNOTAVAIL\n");

	struct rdma_cm_join_mc_attr_ex x = {.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
					    .join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
					    .addr = (struct sockaddr *)&grp};
	if (rdma_join_multicast_ex(id, &x, NULL))
		fail("rdma_join_multicast_ex");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_MULTICAST_JOIN));
	if (ibv_detach_mcast(id->qp, &g, 0) != EINVAL)
		fail("a send-only join attached the QP");
	if (rdma_leave_multicast(id, (struct sockaddr *)&grp))
		fail("rdma_leave_multicast of the send-only join");
	printf("send-only join: MULTICAST_JOIN, the QP not attached\n");

	ibv_destroy_qp(rc);
	rdma_destroy_qp(id);
	return pass(ch, id, cq, pd);
}
