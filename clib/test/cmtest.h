/*
 * cmtest.h: what the rdma_cm test programs share. PROG names the
 * program in its messages; each step of a program prints one line.
 */
#ifndef CMTEST_H
#define CMTEST_H

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fail(const char *what)
{
	fprintf(stderr, "%s: %s (errno %d: %s)\n", PROG, what, errno, strerror(errno));
	exit(1);
}

/* next waits up to 10 s for the channel's next event, which must be want. */
static inline struct rdma_cm_event *next(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	if (poll(&p, 1, 10000) != 1 || !(p.revents & POLLIN))
		fail("no event within 10 s");
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		fail("rdma_get_cm_event");
	if (e->event != want) {
		fprintf(stderr, "%s: %s (status %d), want %s\n", PROG, rdma_event_str(e->event), e->status,
			rdma_event_str(want));
		exit(1);
	}
	return e;
}

/* addr makes an IPv4 address and port. */
static void addr(const char *s, int port, struct sockaddr_in *a)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	if (inet_pton(AF_INET, s, &a->sin_addr) != 1)
		fail("address");
}

/* server_client reads the arguments SERVER_ADDR CLIENT_ADDR PORT of a
 * program that plays both ends: the server's address with the port, the
 * client's with none. */
static inline void server_client(int argc, char **argv, struct sockaddr_in *srv, struct sockaddr_in *cli)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s SERVER_ADDR CLIENT_ADDR PORT\n", PROG);
		exit(2);
	}
	addr(argv[1], atoi(argv[3]), srv);
	addr(argv[2], 0, cli);
}

/* listen_pair makes the two ends of a test in RDMA_PS_TCP: a server
 * channel (*sch) with an ID listening on srv (*lid, its context ctx),
 * and a client channel (*cch) with an ID (*cid). */
static inline void listen_pair(struct rdma_event_channel **sch, struct rdma_event_channel **cch, struct rdma_cm_id **lid,
			       struct rdma_cm_id **cid, void *ctx, const struct sockaddr_in *srv)
{
	*sch = rdma_create_event_channel();
	*cch = rdma_create_event_channel();
	if (!*sch || !*cch)
		fail("rdma_create_event_channel");
	if (rdma_create_id(*sch, lid, ctx, RDMA_PS_TCP) || rdma_create_id(*cch, cid, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	if (rdma_bind_addr(*lid, (struct sockaddr *)srv) || rdma_listen(*lid, 1))
		fail("rdma_bind_addr, rdma_listen");
}

/* resolve resolves id's address, from src (NULL: the route's) to dst,
 * and its route, taking each event from ch (NULL: a synchronous ID). */
static inline void resolve(struct rdma_event_channel *ch, struct rdma_cm_id *id, const struct sockaddr_in *src,
			   const struct sockaddr_in *dst)
{
	if (rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, 2000))
		fail("rdma_resolve_addr");
	if (ch)
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		fail("rdma_resolve_route");
	if (ch)
		rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
}

/* pass destroys what a program made last (its CQ, PD, ID and channel)
 * and says PASS. */
static inline int pass(struct rdma_event_channel *ch, struct rdma_cm_id *id, struct ibv_cq *cq, struct ibv_pd *pd)
{
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	if (rdma_destroy_id(id))
		fail("rdma_destroy_id");
	rdma_destroy_event_channel(ch);
	printf("PASS\n");
	return 0;
}

#endif
