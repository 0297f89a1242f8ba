/*
 * cmevents: librdmacm's event channel and a refused connect, seen from a
 * C program on rnicd.
 *
 *   cmevents SRC_ADDR DST_ADDR PORT
 *
 * On a channel made non-blocking: rdma_get_cm_event fails with EAGAIN
 * and the fd is not readable while no event waits; ADDR_RESOLVED and
 * ROUTE_RESOLVED make it readable until they are fetched; the ID is on
 * the rnicd holding SRC_ADDR, its verbs one of rdma_get_devices'
 * contexts (those the library opened). rdma_create_qp without a send CQ
 * makes one for the ID, and rdma_destroy_qp destroys it. A connect to PORT on DST_ADDR, where
 * nobody listens, ends in REJECTED with status 8 (REJ reason 8, invalid
 * service ID) and the QP in ERR. rdma_establish on an ID with a QP
 * fails with EINVAL, as cma.c's, and so does rdma_join_multicast on an
 * ID past ADDR_RESOLVED. Each step prints one line; the last is PASS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cmevents"
#include "cmtest.h"

static int readable(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cmevents SRC_ADDR DST_ADDR PORT\n");
		return 2;
	}
	struct sockaddr_in src, dst;
	addr(argv[1], 0, &src);
	addr(argv[2], atoi(argv[3]), &dst);

	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		fail("rdma_create_event_channel");
	if (fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK))
		fail("fcntl");
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e) != -1 || errno != EAGAIN || readable(ch, 0))
		fail("an empty non-blocking channel");
	printf("empty channel: EAGAIN, fd not readable\n");

	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000))
		fail("rdma_resolve_addr");
	e = next(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (e->id != id || e->status != 0 || !id->verbs)
		fail("ADDR_RESOLVED's ID");
	rdma_ack_cm_event(e);
	if (readable(ch, 0))
		fail("readable after the only event was fetched");
	struct sockaddr_in *local = (struct sockaddr_in *)rdma_get_local_addr(id);
	if (local->sin_addr.s_addr != src.sin_addr.s_addr || !rdma_get_src_port(id) ||
	    rdma_get_dst_port(id) != dst.sin_port)
		fail("the ID's addresses");
	printf("ADDR_RESOLVED on %s, source %s with a port\n", ibv_get_device_name(id->verbs->device), argv[1]);
	int ndev = 0, found = 0;
	struct ibv_context **devs = rdma_get_devices(&ndev);
	for (int i = 0; devs && devs[i]; i++)
		found += devs[i] == id->verbs;
	rdma_free_devices(devs);
	if (found != 1)
		fail("the ID's verbs is not one of rdma_get_devices' contexts");
	printf("rdma_get_devices: %d devices, the ID's verbs one of them\n", ndev);

	if (rdma_resolve_route(id, 2000))
		fail("rdma_resolve_route");
	e = next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	rdma_ack_cm_event(e);
	if (id->route.num_paths != 1 || memcmp(id->route.path_rec->dgid.raw + 12, &dst.sin_addr, 4))
		fail("the route");
	printf("ROUTE_RESOLVED: one path to %s\n", argv[2]);

	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
	if (!cq)
		fail("PD and CQ");
	/* No send CQ: librdmacm makes one for the ID, with a channel. */
	struct ibv_qp_init_attr qa = {.recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1}};
	if (rdma_create_qp(id, pd, &qa))
		fail("rdma_create_qp");
	if (id->qp->state != IBV_QPS_INIT)
		fail("rdma_create_qp's QP is not in INIT");
	if (!id->send_cq || !id->send_cq_channel || id->qp->send_cq != id->send_cq || id->qp->recv_cq != cq ||
	    id->recv_cq)
		fail("the QP's CQs");
	printf("rdma_create_qp: a QP in INIT, its send CQ and channel made for the ID\n");
	if (rdma_connect(id, NULL))
		fail("rdma_connect");
	e = next(ch, RDMA_CM_EVENT_REJECTED);
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	if (e->status != 8 || ibv_query_qp(id->qp, &at, IBV_QP_STATE, &ia) || at.qp_state != IBV_QPS_ERR)
		fail("REJECTED's status or the QP's state");
	rdma_ack_cm_event(e);
	printf("REJECTED, status 8 (nobody listens), the QP in ERR\n");

	if (rdma_establish(id) != -1 || errno != EINVAL)
		fail("rdma_establish");
	if (rdma_join_multicast(id, (struct sockaddr *)&dst, NULL) != -1 || errno != EINVAL)
		fail("rdma_join_multicast");
	printf("rdma_establish: EINVAL; rdma_join_multicast: EINVAL\n");

	rdma_destroy_qp(id);
	if (id->qp || id->send_cq || id->send_cq_channel)
		fail("rdma_destroy_qp left the QP or the ID's CQ");
	return pass(ch, id, cq, pd);
}
