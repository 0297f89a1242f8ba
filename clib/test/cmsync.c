/*
 * cmsync SERVER_ADDR CLIENT_ADDR PORT: synchronous rdma_cm IDs and
 * rdma_migrate_id on librdmacm.so.1 for rnicd.
 *
 * A synchronous active endpoint (rdma_create_ep: address and route
 * resolved, QP made) connecting where nobody listens fails with
 * ECONNREFUSED, the REJECTED in id->event. A server thread makes a passive synchronous endpoint on SERVER_ADDR
 * (rdma_create_ep with QP attributes), listens, and takes the client's
 * connect request with rdma_get_request: the new ID comes with its QP
 * and the request's event (id->event), the client's address as its
 * destination. rdma_accept returns once the connection is established
 * (id->event is ESTABLISHED); rdma_init_qp_attr then gives INIT's
 * attributes and RTR's and RTS's of the connected QP (RTR's naming the
 * client's QP). The client, an ID on an event channel from
 * CLIENT_ADDR, connects; a message goes each way, bytes checked. The
 * client's ID then moves to a second channel (rdma_migrate_id); the
 * server's rdma_disconnect returns with its DISCONNECTED, and the
 * client's DISCONNECTED arrives on the second channel, none on the
 * first. Before them, loopback_listener binds 127.0.0.1 as the kernel's
 * rdma_cm does. Each step prints one line; the last is PASS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cmsync"
#include "cmtest.h"

/* wait_wc polls cq for one completion, which must succeed. */
static void wait_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;
	for (int i = 0; i < 10000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			fail(what);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "cmsync: %s: %s\n", what, ibv_wc_status_str(wc.status));
				exit(1);
			}
			return;
		}
		if (i > 1000)
			poll(NULL, 0, 1);
	}
	errno = ETIMEDOUT;
	fail(what);
}

static void post_recv(struct rdma_cm_id *id, struct ibv_mr *mr)
{
	struct ibv_sge sge = {.addr = (uintptr_t)mr->addr, .length = 32, .lkey = mr->lkey};
	struct ibv_recv_wr wr = {.sg_list = &sge, .num_sge = 1}, *bad;
	if (ibv_post_recv(id->qp, &wr, &bad))
		fail("ibv_post_recv");
}

static void post_send(struct rdma_cm_id *id, struct ibv_mr *mr, const char *msg)
{
	strcpy((char *)mr->addr + 32, msg);
	struct ibv_sge sge = {.addr = (uintptr_t)mr->addr + 32, .length = strlen(msg) + 1, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	if (ibv_post_send(id->qp, &wr, &bad))
		fail("ibv_post_send");
}

static const char *srv_addr, *cli_addr, *port;
static sem_t listening, pinged, migrated;
static char srv_got[32];

static void *server(void *arg)
{
	(void)arg;
	struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP}, *res;
	if (rdma_getaddrinfo(srv_addr, port, &hints, &res))
		fail("rdma_getaddrinfo");
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
					.sq_sig_all = 1};
	struct rdma_cm_id *lid, *id;
	if (rdma_create_ep(&lid, res, NULL, &attr))
		fail("rdma_create_ep (passive)");
	rdma_freeaddrinfo(res);
	if (lid->qp)
		fail("a passive endpoint with a QP");
	if (rdma_listen(lid, 0))
		fail("rdma_listen");
	sem_post(&listening);
	if (rdma_get_request(lid, &id))
		fail("rdma_get_request");
	struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(id);
	char txt[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &peer->sin_addr, txt, sizeof(txt));
	if (!id->event || id->event->event != RDMA_CM_EVENT_CONNECT_REQUEST || id->event->listen_id != lid ||
	    strcmp(txt, cli_addr) || !id->qp || id->channel == lid->channel || !id->send_cq || !id->recv_cq)
		fail("rdma_get_request's ID");
	printf("rdma_get_request: a connect request from %s, its QP made\n", txt);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fail("ibv_reg_mr");
	post_recv(id, mr);
	uint32_t client_qpn = id->event->param.conn.qp_num;
	if (rdma_accept(id, NULL))
		fail("rdma_accept");
	if (!id->event || id->event->event != RDMA_CM_EVENT_ESTABLISHED)
		fail("rdma_accept returned before ESTABLISHED");
	printf("rdma_accept returned with ESTABLISHED\n");
	struct ibv_qp_attr qa = {.qp_state = IBV_QPS_INIT};
	int mask = 0;
	if (rdma_init_qp_attr(id, &qa, &mask) || qa.qp_state != IBV_QPS_INIT || qa.port_num != 1 ||
	    mask != (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("rdma_init_qp_attr INIT");
	qa.qp_state = IBV_QPS_RTR;
	if (rdma_init_qp_attr(id, &qa, &mask) || qa.qp_state != IBV_QPS_RTR || qa.dest_qp_num != client_qpn ||
	    !(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_AV))
		fail("rdma_init_qp_attr RTR");
	qa.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(id, &qa, &mask) || qa.qp_state != IBV_QPS_RTS || !(mask & IBV_QP_SQ_PSN))
		fail("rdma_init_qp_attr RTS");
	printf("rdma_init_qp_attr: INIT, RTR (the client's QPN) and RTS\n");
	wait_wc(id->recv_cq, "server receive");
	memcpy(srv_got, mr->addr, sizeof(srv_got));
	post_send(id, mr, "pong from server");
	wait_wc(id->send_cq, "server send");
	sem_post(&pinged);
	sem_wait(&migrated);
	if (rdma_disconnect(id))
		fail("rdma_disconnect");
	if (!id->event || id->event->event != RDMA_CM_EVENT_DISCONNECTED)
		fail("rdma_disconnect returned before DISCONNECTED");
	ibv_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(lid);
	return NULL;
}

/* connect_from makes an ID on channel ch (NULL: synchronous), from src
 * (NULL: the route's) to dst:dport, with a QP, and connects it. */
static struct rdma_cm_id *connect_from(struct rdma_event_channel *ch, const char *src, const char *dst, int dport)
{
	struct rdma_cm_id *id;
	struct sockaddr_in s, d;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	if (src)
		addr(src, 0, &s);
	addr(dst, dport, &d);
	resolve(ch, id, src ? &s : NULL, &d);
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
				      .qp_type = IBV_QPT_RC};
	if (rdma_create_qp(id, NULL, &qa))
		fail("rdma_create_qp");
	return id;
}

/* loopback_listener: an address no interface holds does not bind; a
 * listener bound to 127.0.0.1 keeps that address and is heard on
 * 127.0.0.1 only, as the kernel's: a connect from the client's rnicd to
 * the server's address at its port is rejected (once the listener's
 * channel is read: the library matches the address, where the kernel's
 * listener does at once), one to 127.0.0.1 brings its CONNECT_REQUEST,
 * addressed to 127.0.0.1. */
static void loopback_listener(void)
{
	struct rdma_cm_id *bad, *lid;
	struct sockaddr_in a;
	if (rdma_create_id(NULL, &bad, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	addr("198.51.100.7", 0, &a);
	if (rdma_bind_addr(bad, (struct sockaddr *)&a) != -1 || errno != EADDRNOTAVAIL)
		fail("rdma_bind_addr of an address no rnicd holds");
	rdma_destroy_id(bad);

	struct rdma_event_channel *lch = rdma_create_event_channel();
	if (!lch || rdma_create_id(lch, &lid, NULL, RDMA_PS_TCP))
		fail("rdma_create_id (listener)");
	int lport = atoi(port) + 2;
	addr("127.0.0.1", lport, &a);
	if (rdma_bind_addr(lid, (struct sockaddr *)&a) || rdma_listen(lid, 1))
		fail("rdma_bind_addr 127.0.0.1, rdma_listen");
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(lid);
	if (la->sin_addr.s_addr != htonl(INADDR_LOOPBACK) || ntohs(la->sin_port) != lport)
		fail("the listener's local address");

	/* The request to the server's address reaches the listener's
	 * rnicd, which hands it over when the listener's channel is read
	 * (rdma_get_cm_event): read there, it is refused and never shown. */
	struct rdma_event_channel *cch = rdma_create_event_channel();
	if (!cch)
		fail("rdma_create_event_channel");
	struct rdma_cm_id *far = connect_from(cch, cli_addr, srv_addr, lport);
	if (rdma_connect(far, NULL))
		fail("rdma_connect to the server's address");
	fcntl(lch->fd, F_SETFL, fcntl(lch->fd, F_GETFL) | O_NONBLOCK);
	for (int i = 0;; i++) {
		struct rdma_cm_event *got;
		if (rdma_get_cm_event(lch, &got) == 0)
			fail("a listener on 127.0.0.1 was shown a request sent to the server's address");
		struct pollfd p = {.fd = cch->fd, .events = POLLIN};
		if (poll(&p, 1, 10) == 1)
			break;
		if (i == 1000)
			fail("no answer to the request sent to the server's address in 10 s");
	}
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_REJECTED));
	rdma_destroy_qp(far);
	rdma_destroy_id(far);

	struct rdma_cm_id *near = connect_from(cch, NULL, "127.0.0.1", lport);
	if (rdma_connect(near, NULL))
		fail("rdma_connect to 127.0.0.1");
	struct rdma_cm_event *e = next(lch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct sockaddr_in *to = (struct sockaddr_in *)rdma_get_local_addr(e->id);
	if (e->listen_id != lid || to->sin_addr.s_addr != htonl(INADDR_LOOPBACK))
		fail("the connect request to 127.0.0.1");
	if (rdma_reject(e->id, NULL, 0))
		fail("rdma_reject");
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(next(cch, RDMA_CM_EVENT_REJECTED));
	rdma_destroy_qp(near);
	rdma_destroy_id(near);
	rdma_destroy_event_channel(cch);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(lch);
	printf("rdma_bind_addr: 198.51.100.7 EADDRNOTAVAIL; 127.0.0.1 listens, hears 127.0.0.1, refuses the server's address\n");
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: cmsync SERVER_ADDR CLIENT_ADDR PORT\n");
		return 2;
	}
	srv_addr = argv[1], cli_addr = argv[2], port = argv[3];
	setvbuf(stdout, NULL, _IOLBF, 0);
	sem_init(&listening, 0, 0);
	sem_init(&pinged, 0, 0);
	sem_init(&migrated, 0, 0);
	/* A synchronous active endpoint towards a port nobody listens on. */
	char none[16];
	snprintf(none, sizeof(none), "%d", atoi(port) + 1);
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP}, *res;
	if (rdma_getaddrinfo(srv_addr, none, &hints, &res))
		fail("rdma_getaddrinfo");
	struct ibv_qp_init_attr qa = {.cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct rdma_cm_id *rid;
	if (rdma_create_ep(&rid, res, NULL, &qa))
		fail("rdma_create_ep (active)");
	rdma_freeaddrinfo(res);
	if (!rid->qp || !rid->event || rid->event->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		fail("rdma_create_ep's ID");
	if (rdma_connect(rid, NULL) != -1 || errno != ECONNREFUSED || rid->event->event != RDMA_CM_EVENT_REJECTED ||
	    rid->event->status != 8)
		fail("rdma_connect where nobody listens");
	rdma_destroy_ep(rid);
	printf("rdma_connect where nobody listens: ECONNREFUSED, id->event REJECTED with status 8\n");
	loopback_listener();

	pthread_t th;
	pthread_create(&th, NULL, server, NULL);
	sem_wait(&listening);

	struct rdma_event_channel *ch = rdma_create_event_channel(), *ch2 = rdma_create_event_channel();
	if (!ch || !ch2)
		fail("rdma_create_event_channel");
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	struct sockaddr_in src, dst;
	addr(cli_addr, 0, &src);
	addr(srv_addr, atoi(port), &dst);
	resolve(ch, id, &src, &dst);
	struct ibv_qp_init_attr attr = {.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
					.qp_type = IBV_QPT_RC, .sq_sig_all = 1};
	if (rdma_create_qp(id, NULL, &attr))
		fail("rdma_create_qp");
	struct ibv_mr *mr = ibv_reg_mr(id->pd, calloc(1, 64), 64, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		fail("ibv_reg_mr");
	post_recv(id, mr);
	struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
	if (rdma_connect(id, &cp))
		fail("rdma_connect");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ESTABLISHED));
	post_send(id, mr, "ping from client");
	wait_wc(id->send_cq, "client send");
	wait_wc(id->recv_cq, "client receive");
	sem_wait(&pinged);
	printf("server got \"%s\", client got \"%s\"\n", srv_got, (char *)mr->addr);
	if (strcmp(srv_got, "ping from client") || strcmp(mr->addr, "pong from server"))
		fail("the messages");

	if (rdma_migrate_id(id, ch2))
		fail("rdma_migrate_id");
	if (id->channel != ch2)
		fail("rdma_migrate_id left the ID's channel");
	sem_post(&migrated);
	struct rdma_cm_event *e = next(ch2, RDMA_CM_EVENT_DISCONNECTED);
	if (e->id != id)
		fail("DISCONNECTED of another ID");
	rdma_ack_cm_event(e);
	fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	if (rdma_get_cm_event(ch, &e) != -1 || errno != EAGAIN)
		fail("an event on the channel the ID left");
	printf("rdma_migrate_id: DISCONNECTED on the new channel, none on the old\n");
	pthread_join(th, NULL);
	printf("rdma_disconnect returned with DISCONNECTED\n");
	rdma_disconnect(id);
	ibv_dereg_mr(mr);
	rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		fail("rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(ch2);
	printf("PASS\n");
	return 0;
}
