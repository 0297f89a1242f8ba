/*
 * cmd.c: what every object's verb shares: a control request with this
 * thread's reply buffer, a destroy by handle, and the creation of an
 * object with rings (CQ, SRQ, QP): the daemon creates the rings' memfd,
 * sized from the caps it granted, and this side maps it and checks that
 * the rings it describes lie inside it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rnic.h"

/* call_fds is conn_call_fds with a reply buffer of this thread's. */
static __thread uint8_t reply_buf[MAX_MSG];

static int call_fds(struct ibv_context *ctx, int k, struct buf *req, int fd, struct buf *rep, int *rfd, int nrfd)
{
	rep->p = reply_buf;
	rep->len = sizeof(reply_buf);
	rep->off = 0;
	rep->bad = 0;
	int err = conn_call_fds(&to_rctx(ctx)->conn, k, req, fd, rep, rfd, nrfd);
	if (!err && rep->bad) {
		/* Closed and forgotten: a caller closes what it holds on
		 * an error, and must not close them again. */
		for (int i = 0; i < nrfd; i++) {
			if (rfd[i] >= 0)
				close(rfd[i]);
			rfd[i] = -1;
		}
		err = EPROTO;
	}
	return err;
}

int call(struct ibv_context *ctx, int k, struct buf *req, int fd, struct buf *rep, int *rfd)
{
	int dummy;
	int err = call_fds(ctx, k, req, fd, rep, rfd ? rfd : &dummy, 1);
	if (!err && !rfd && dummy >= 0)
		close(dummy);
	return err;
}

int destroy(struct ibv_context *ctx, int k, uint32_t h)
{
	uint8_t b[4];
	struct buf req = {.p = b, .len = 4}, rep;
	put32(&req, h);
	return call(ctx, k, &req, -1, &rep, NULL);
}

/* map_ring maps the memfd of a create reply. */
static uint8_t *map_ring(int fd, size_t *len)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	void *m = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return NULL;
	*len = st.st_size;
	return m;
}

static void get_ring_reply(struct buf *b, struct ring_reply *r)
{
	r->h = get32(b);
	r->qpn = get32(b);
	r->max_send_wr = get32(b);
	r->max_recv_wr = get32(b);
	r->max_send_sge = get32(b);
	r->max_recv_sge = get32(b);
	r->max_inline = get32(b);
	struct ring_desc *d[2] = {&r->send, &r->recv};
	for (int i = 0; i < 2; i++) {
		d[i]->off = get32(b);
		d[i]->size = get32(b);
		d[i]->slots = get32(b);
		d[i]->slot_bytes = get32(b);
	}
}

/* ring_ok checks a ring the daemon described lies in the memory mapped.
 * A ring of 0 slots (a QP's queue of 0 WRs) is its header alone: every
 * post finds it full before a slot is computed. */
static int ring_ok(struct ring_desc *d, size_t memlen)
{
	return (uint64_t)d->off + d->size <= memlen &&
	       RING_HEADER + (uint64_t)d->slots * d->slot_bytes <= d->size;
}

/* create_rings makes an object with rings (request k, undone by dk):
 * the reply's rings are mapped and checked to lie in the memory, the
 * send ring (with slots of send_slot bytes, if not 0) if need_send, the
 * receive ring if need_recv. On failure nothing is left behind. A
 * request that makes no object (resize_cq, its new ring) has no dk: 0. */
int create_rings(struct ibv_context *ctx, int k, int dk, struct buf *req, int fd, struct ring_reply *r,
			uint8_t **mem, size_t *memlen, int need_send, uint32_t send_slot, int need_recv)
{
	struct buf rep;
	int rfd[2] = {-1, -1};
	int err = call_fds(ctx, k, req, fd, &rep, rfd, 2);
	if (err)
		return err;
	get_ring_reply(&rep, r);
	r->wake_fd = rfd[1];
	*mem = map_ring(rfd[0], memlen);
	if (*mem && (!need_send || (ring_ok(&r->send, *memlen) && (!send_slot || r->send.slot_bytes == send_slot))) &&
	    (!need_recv || ring_ok(&r->recv, *memlen)))
		return 0;
	if (*mem)
		munmap(*mem, *memlen);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	r->wake_fd = -1;
	if (dk)
		destroy(ctx, dk, r->h);
	rnic_log("rnicd's reply to %s describes rings outside their memory",
		 k == K_CREATE_QP ? "create_qp" : k == K_RESIZE_CQ ? "resize_cq" : "create_cq/srq");
	return EPROTO;
}
