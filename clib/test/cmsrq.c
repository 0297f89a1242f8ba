/*
 * cmsrq SERVER_ADDR CLIENT_ADDR PORT: an SRQ of a connected rdma_cm ID
 * (rdma_create_srq, rdma_destroy_srq) on librdmacm.so.1 for rnicd, as
 * cma.c makes them for an RC ID: a basic SRQ on the ID's PD (the
 * device's, no PD given) that the ID's QP, made after it, takes as its
 * receive queue.
 *
 * The server's ID for the client's connect request gets its SRQ, then
 * its QP (rdma_create_qp, whose QP names the SRQ); rdma_create_srq_ex
 * without IBV_SRQ_INIT_ATTR_TYPE, and a second SRQ on the ID, are
 * EINVAL. A receive posted through the ID (rdma_post_recv) goes to the
 * SRQ; the client's 20 bytes land there, bytes and completion checked
 * (rdma_get_recv_comp on the ID's CQ). After the disconnect,
 * rdma_destroy_qp then rdma_destroy_srq leave the ID with neither. Each
 * step prints one line; the last is PASS.
 */
#include <rdma/rdma_verbs.h>

#define PROG "cmsrq"
#include "cmtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_in srv, cli;
	server_client(argc, argv, &srv, &cli);
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *lid, *cid;
	listen_pair(&sch, &cch, &lid, &cid, NULL, &srv);
	resolve(cch, cid, &cli, &srv);
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	if (rdma_create_qp(cid, NULL, &qa))
		fail("client rdma_create_qp");
	if (rdma_connect(cid, NULL))
		fail("rdma_connect");

	struct rdma_cm_event *req = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *sid = req->id;
	struct ibv_srq_init_attr_ex bad = {.attr = {.max_wr = 2, .max_sge = 1}};
	if (rdma_create_srq_ex(sid, &bad) != -1 || errno != EINVAL)
		fail("rdma_create_srq_ex without a type succeeded");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 2, .max_sge = 1}};
	if (rdma_create_srq(sid, NULL, &sa))
		fail("rdma_create_srq");
	if (!sid->srq || !sid->pd || sid->srq->pd != sid->pd)
		fail("the SRQ is not the ID's, on its PD");
	if (rdma_create_srq(sid, NULL, &sa) != -1 || errno != EINVAL)
		fail("a second rdma_create_srq succeeded");
	printf("rdma_create_srq: a basic SRQ on the ID's PD; no type or a second one: EINVAL\n");
	struct ibv_qp_init_attr sqa = {.cap = {.max_send_wr = 2, .max_send_sge = 1}, .qp_type = IBV_QPT_RC};
	if (rdma_create_qp(sid, NULL, &sqa))
		fail("server rdma_create_qp");
	if (sid->qp->srq != sid->srq)
		fail("the QP does not take the ID's SRQ");
	printf("rdma_create_qp: the QP takes the ID's SRQ\n");
	char buf[32] = {0};
	struct ibv_mr *mr = rdma_reg_msgs(sid, buf, sizeof(buf));
	if (!mr)
		fail("rdma_reg_msgs");
	if (rdma_post_recv(sid, buf, buf, sizeof(buf), mr))
		fail("rdma_post_recv");
	if (rdma_accept(sid, NULL))
		fail("rdma_accept");
	rdma_ack_cm_event(req);
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_ESTABLISHED));
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_ESTABLISHED));

	char msg[20] = "through the ID's SRQ";
	struct ibv_mr *cmr = rdma_reg_msgs(cid, msg, sizeof(msg));
	if (!cmr || rdma_post_send(cid, NULL, msg, sizeof(msg), cmr, 0))
		fail("rdma_post_send");
	struct ibv_wc wc;
	if (rdma_get_send_comp(cid, &wc) != 1 || wc.status != IBV_WC_SUCCESS)
		fail("the client's send");
	if (rdma_get_recv_comp(sid, &wc) != 1)
		fail("rdma_get_recv_comp");
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != sizeof(msg) ||
	    wc.wr_id != (uintptr_t)buf || wc.qp_num != sid->qp->qp_num || memcmp(buf, msg, sizeof(msg))) {
		fprintf(stderr, "cmsrq: completion status %d opcode %d len %u qp %u, bytes %.20s\n", wc.status, wc.opcode,
			wc.byte_len, wc.qp_num, buf);
		exit(1);
	}
	printf("server got \"%.20s\" through the SRQ, its completion on the ID's QP\n", buf);

	if (rdma_disconnect(cid))
		fail("rdma_disconnect");
	rdma_ack_cm_event(next(sch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_DISCONNECTED));
	rdma_dereg_mr(mr);
	rdma_dereg_mr(cmr);
	rdma_destroy_qp(sid);
	rdma_destroy_srq(sid);
	if (sid->qp || sid->srq || sid->recv_cq || sid->send_cq)
		fail("rdma_destroy_srq left the ID something");
	printf("rdma_destroy_qp, rdma_destroy_srq: the ID holds no QP, SRQ or CQ\n");
	if (rdma_destroy_id(sid) || rdma_destroy_id(lid))
		fail("rdma_destroy_id");
	rdma_destroy_qp(cid);
	if (rdma_destroy_id(cid))
		fail("rdma_destroy_id");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	printf("PASS\n");
	return 0;
}
