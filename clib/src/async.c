/*
 * async.c: asynchronous events (ibv_get_async_event, ibv_ack_async_event)
 * and the SRQ limit that raises one (ibv_modify_srq, ibv_query_srq).
 *
 * The daemon keeps each connection's events in a bounded queue (hostif's
 * asyncev.go) and writes a wake pipe whose read end is the context's
 * async_fd, so that poll and epoll on it work as on the kernel's async
 * event file; an event names the daemon's handle of the object, which
 * this file maps back to the program's ibv_qp, ibv_cq or ibv_srq. When
 * the daemon goes, the pipe reads end of file: DEVICE_FATAL, once, then
 * EIO. Destroying an object waits until every event this library returned
 * for it was acknowledged, as rdma-core's destroy waits for events_reported.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "qp.h"
#include "rnic.h"

/* aobj is one object whose events the program may get. */
struct aobj {
	uint32_t h;
	int k;             /* its kind, as its destroy names it (K_DESTROY_QP, _CQ, _SRQ) */
	void *obj;         /* the ibv_qp, ibv_cq or ibv_srq */
	uint32_t reported; /* events returned for it (rdma-core's events_reported) */
	struct aobj *next;
};

int async_open(struct ibv_context *ctx, int *errp)
{
	struct rctx *c = to_rctx(ctx);
	pthread_mutex_init(&c->ev_mu, NULL);
	struct buf rep;
	int fd = -1;
	int err = *errp = call(ctx, K_OPEN_ASYNC, NULL, -1, &rep, &fd);
	if (err || fd < 0) {
		if (fd >= 0)
			close(fd);
		/* A daemon without the queue, or one that refused it (the
		 * client at its -client-max-fds: the refusal is on stderr
		 * already, from reply_error, and ibv_open_device says what
		 * the context lacks): DEVICE_FATAL alone, from the
		 * connection's hang-up, on an fd that never becomes ready. */
		return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	}
	/* Blocking, as libibverbs' async fd is until the program sets
	 * O_NONBLOCK, which ibv_get_async_event honours. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	c->ev_open = 1;
	return fd;
}

void async_close(struct ibv_context *ctx)
{
	struct rctx *c = to_rctx(ctx);
	while (c->aobjs) {
		struct aobj *o = c->aobjs;
		c->aobjs = o->next;
		free(o);
	}
	pthread_mutex_destroy(&c->ev_mu);
}

void async_track(struct ibv_context *ctx, int k, uint32_t h, void *obj)
{
	struct rctx *c = to_rctx(ctx);
	struct aobj *o = calloc(1, sizeof(*o));
	if (!o)
		return; /* its events are then skipped, never misdirected */
	o->h = h;
	o->k = k;
	o->obj = obj;
	pthread_mutex_lock(&c->ev_mu);
	o->next = c->aobjs;
	c->aobjs = o;
	pthread_mutex_unlock(&c->ev_mu);
}

int async_destroy(struct ibv_context *ctx, int k, uint32_t h, uint32_t *reported)
{
	struct rctx *c = to_rctx(ctx);
	/* Under ev_mu, so that no ibv_get_async_event takes an event of
	 * the object between the daemon's destroy (which drops the ones
	 * still queued) and the count read here. */
	pthread_mutex_lock(&c->ev_mu);
	int err = destroy(ctx, k, h);
	*reported = 0;
	if (!err) {
		for (struct aobj **p = &c->aobjs; *p; p = &(*p)->next) {
			if ((*p)->h == h) {
				struct aobj *o = *p;
				*p = o->next;
				*reported = o->reported;
				free(o);
				break;
			}
		}
	}
	pthread_mutex_unlock(&c->ev_mu);
	return err;
}

void async_wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, uint32_t *completed, uint32_t reported)
{
	pthread_mutex_lock(mu);
	while (*completed != reported)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

/* drain empties the wake pipe; it returns 1 at its end of file (the
 * daemon is gone). Called with ev_mu held. */
static int drain(int fd)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, 0) <= 0 || !(p.revents & (POLLIN | POLLHUP)))
			return 0;
		char b[256];
		ssize_t n = read(fd, b, sizeof(b));
		if (n == 0)
			return 1;
		if (n < 0)
			return errno == EINTR ? drain(fd) : 0;
	}
}

static int is_qp_event(int t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return 1;
	}
	return 0;
}

/* event_kind is the kind of object an event of type t is affiliated
 * with (K_DESTROY_QP, _CQ or _SRQ), or 0 for one of the port or device. */
static int event_kind(int t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return K_DESTROY_CQ;
	case IBV_EVENT_SRQ_LIMIT_REACHED:
	case IBV_EVENT_SRQ_ERR:
		return K_DESTROY_SRQ;
	}
	return is_qp_event(t) ? K_DESTROY_QP : 0;
}

/* take asks the daemon for the next event; it returns 1 with *ev
 * filled, 0 for none, or -1 with errno (ENODEV: the daemon is gone).
 * Called with ev_mu held. */
static int take(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct rctx *c = to_rctx(ctx);
	for (;;) {
		struct buf rep;
		int err = call(ctx, K_GET_ASYNC_EVENT, NULL, -1, &rep, NULL);
		if (err) {
			errno = err;
			return -1;
		}
		int have = get8(&rep), type = get8(&rep), port = get8(&rep);
		get8(&rep);
		uint32_t h = get32(&rep);
		if (rep.bad) {
			errno = EPROTO;
			return -1;
		}
		if (!have)
			return 0;
		/* An event whose type does not fit what it names (a
		 * daemon's bug) is skipped, never returned: ibv_ack_async_event
		 * would write the counter of one kind of object into another,
		 * or through a null element, and a destroy would wait for the
		 * ack of an event counted against its object but never
		 * returned. */
		int k = event_kind(type);
		memset(ev, 0, sizeof(*ev));
		ev->event_type = type;
		if (h == 0) {
			if (k)
				continue;
			ev->element.port_num = port;
			return 1;
		}
		struct aobj *o = c->aobjs;
		while (o && o->h != h)
			o = o->next;
		if (!o || !k || o->k != k)
			continue; /* an object being destroyed: its events go with it */
		o->reported++;
		if (k == K_DESTROY_CQ)
			ev->element.cq = o->obj;
		else if (k == K_DESTROY_SRQ)
			ev->element.srq = o->obj;
		else
			ev->element.qp = o->obj;
		return 1;
	}
}

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct rctx *c = to_rctx(ctx);
	for (;;) {
		pthread_mutex_lock(&c->ev_mu);
		if (c->fatal_told) {
			pthread_mutex_unlock(&c->ev_mu);
			errno = EIO;
			return -1;
		}
		int gone = c->ev_open ? drain(ctx->async_fd) : conn_hung_up(&c->conn);
		int got = gone ? -1 : c->ev_open ? take(ctx, ev) : 0;
		if (got < 0 && (gone || conn_hung_up(&c->conn))) {
			/* As from the kernel's async event file of a device
			 * that is gone: DEVICE_FATAL once, then EIO
			 * (ibv_asyncwatch printed it 209,500 times a second). */
			c->fatal_told = 1;
			pthread_mutex_unlock(&c->ev_mu);
			memset(ev, 0, sizeof(*ev));
			ev->event_type = IBV_EVENT_DEVICE_FATAL;
			return 0;
		}
		pthread_mutex_unlock(&c->ev_mu);
		if (got)
			return got > 0 ? 0 : -1;
		int fl = fcntl(ctx->async_fd, F_GETFL);
		if (fl >= 0 && (fl & O_NONBLOCK)) {
			errno = EAGAIN;
			return -1;
		}
		struct pollfd p[2] = {{.fd = c->conn.fd, .events = POLLRDHUP}, {.fd = ctx->async_fd, .events = POLLIN}};
		if (poll(p, c->ev_open ? 2 : 1, -1) < 0 && errno != EINTR)
			return -1;
	}
}

/* ibv_ack_async_event counts the event as handled on its object, which
 * a destroy waits for (rdma-core's ibv_ack_async_event). */
EXPORT void ibv_ack_async_event(struct ibv_async_event *ev)
{
	int t = ev->event_type;
	if (t == IBV_EVENT_CQ_ERR) {
		struct ibv_cq *cq = ev->element.cq;
		pthread_mutex_lock(&cq->mutex);
		cq->async_events_completed++;
		pthread_cond_signal(&cq->cond);
		pthread_mutex_unlock(&cq->mutex);
	} else if (t == IBV_EVENT_SRQ_LIMIT_REACHED || t == IBV_EVENT_SRQ_ERR) {
		struct ibv_srq *srq = ev->element.srq;
		pthread_mutex_lock(&srq->mutex);
		srq->events_completed++;
		pthread_cond_signal(&srq->cond);
		pthread_mutex_unlock(&srq->mutex);
	} else if (is_qp_event(t)) {
		struct ibv_qp *qp = ev->element.qp;
		pthread_mutex_lock(&qp->mutex);
		qp->events_completed++;
		pthread_cond_signal(&qp->cond);
		pthread_mutex_unlock(&qp->mutex);
	}
}

/* ibv_modify_srq arms the SRQ's limit (IBV_SRQ_LIMIT; 0 disarms it):
 * SRQ_LIMIT_REACHED comes once when fewer WQEs than the limit are left,
 * then the limit reads 0, as on rxe. Resizing (IBV_SRQ_MAX_WR) is EINVAL:
 * rnicd's rings are fixed, and its device says no IBV_DEVICE_SRQ_RESIZE. */
EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	uint8_t b[16];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, ((struct rsrq *)srq)->h);
	put32(&req, mask);
	put32(&req, attr->max_wr);
	put32(&req, attr->srq_limit);
	return call(srq->context, K_MODIFY_SRQ, &req, -1, &rep, NULL);
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	uint8_t b[4];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, ((struct rsrq *)srq)->h);
	int err = call(srq->context, K_QUERY_SRQ, &req, -1, &rep, NULL);
	if (err)
		return err;
	attr->max_wr = get32(&rep);
	attr->max_sge = get32(&rep);
	attr->srq_limit = get32(&rep);
	return rep.bad ? EPROTO : 0;
}
