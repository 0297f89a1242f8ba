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

#endif
