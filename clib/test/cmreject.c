/*
 * cmreject: a connect request seen by the listener, and rejected, in one
 * C program on two rnicd through librdmacm.
 *
 *   cmreject SERVER_ADDR CLIENT_ADDR PORT
 *
 * A listener on SERVER_ADDR:PORT (its own event channel) gets the
 * CONNECT_REQUEST of a client on CLIENT_ADDR (another channel): the new
 * ID's listen_id is the listener, its context the listener's, its
 * addresses the client's and the listener's, its verbs the server's
 * rnicd, and the private data the client's 20 bytes without rdma_cm's
 * header. rdma_reject with 9 bytes of private data ends the client's
 * connect in REJECTED, status 28 (consumer defined), with those bytes.
 * Each step prints one line; the last is PASS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cmreject"
#include "cmtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_in srv, cli;
	server_client(argc, argv, &srv, &cli);
	struct rdma_event_channel *sch, *cch;
	static int listener_ctx;
	struct rdma_cm_id *lid, *cid;
	listen_pair(&sch, &cch, &lid, &cid, &listener_ctx, &srv);
	printf("listening on %s:%s\n", argv[1], argv[3]);

	resolve(cch, cid, &cli, &srv);
	struct ibv_pd *pd = ibv_alloc_pd(cid->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(cid->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!cq || rdma_create_qp(cid, pd, &qa))
		fail("the client's QP");
	const char hello[20] = "hello from rdma_cm!";
	struct rdma_conn_param cp = {.private_data = hello, .private_data_len = sizeof(hello), .retry_count = 7,
				     .rnr_retry_count = 7};
	if (rdma_connect(cid, &cp))
		fail("rdma_connect");

	struct rdma_cm_event *req = next(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *nid = req->id;
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(nid);
	struct sockaddr_in *local = (struct sockaddr_in *)rdma_get_local_addr(nid);
	if (req->listen_id != lid || nid == lid || nid->context != &listener_ctx || !nid->verbs ||
	    strcmp(ibv_get_device_name(nid->verbs->device), ibv_get_device_name(lid->verbs->device)))
		fail("the new ID");
	if (peer->sin_addr.s_addr != cli.sin_addr.s_addr || peer->sin_port != rdma_get_src_port(cid) ||
	    local->sin_addr.s_addr != srv.sin_addr.s_addr || local->sin_port != srv.sin_port)
		fail("the new ID's addresses");
	if (req->param.conn.private_data_len < sizeof(hello) ||
	    memcmp(req->param.conn.private_data, hello, sizeof(hello)))
		fail("the request's private data");
	printf("CONNECT_REQUEST on %s from %s and the client's port: \"%s\"\n", ibv_get_device_name(nid->verbs->device),
	       argv[2], (const char *)req->param.conn.private_data);
	const char no[9] = "go away!";
	if (rdma_reject(nid, no, sizeof(no)))
		fail("rdma_reject");
	rdma_ack_cm_event(req);

	struct rdma_cm_event *rej = next(cch, RDMA_CM_EVENT_REJECTED);
	if (rej->status != 28 || rej->param.conn.private_data_len < sizeof(no) ||
	    memcmp(rej->param.conn.private_data, no, sizeof(no)))
		fail("REJECTED's status or private data");
	printf("REJECTED, status 28, \"%s\"\n", (const char *)rej->param.conn.private_data);
	rdma_ack_cm_event(rej);

	rdma_destroy_qp(cid);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	if (rdma_destroy_id(nid) || rdma_destroy_id(cid) || rdma_destroy_id(lid))
		fail("rdma_destroy_id");
	rdma_destroy_event_channel(cch);
	rdma_destroy_event_channel(sch);
	printf("PASS\n");
	return 0;
}
