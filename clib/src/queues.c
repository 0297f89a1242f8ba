/*
 * queues.c: PDs, MRs, completion channels, CQs, SRQs, QPs and AHs.
 *
 * Work requests and completions go through rings the daemon creates and
 * both sides map (the layout is rnic/hostif/ring.go's): a post writes
 * WQEs into the ring, stores the producer index and rings the doorbell,
 * a poll reads CQEs and stores the consumer index. Polling makes no
 * system call; a send doorbell is skipped while the previous one is still
 * on its way (the ring's bell word), as the Go verbs package does. The
 * daemon validates every WQE again: what this side checks is only what
 * libibverbs reports at post time (a full queue, too many SGEs).
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

/* call is conn_call with a reply buffer of this thread's. */
static __thread uint8_t reply_buf[MAX_MSG];

static int call(struct ibv_context *ctx, int k, struct buf *req, int fd, struct buf *rep, int *rfd)
{
	int dummy;
	rep->p = reply_buf;
	rep->len = sizeof(reply_buf);
	rep->off = 0;
	rep->bad = 0;
	int err = conn_call(&to_rctx(ctx)->conn, k, req, fd, rep, rfd ? rfd : &dummy);
	if (!err && !rfd && dummy >= 0)
		close(dummy);
	if (!err && rep->bad)
		err = EPROTO;
	return err;
}

static int destroy(struct ibv_context *ctx, int k, uint32_t h)
{
	uint8_t b[4];
	struct buf req = {.p = b, .len = 4}, rep;
	put32(&req, h);
	return call(ctx, k, &req, -1, &rep, NULL);
}

/* --- PD ---------------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct buf rep;
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	int err = call(ctx, K_ALLOC_PD, NULL, -1, &rep, NULL);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = get32(&rep);
	return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err = destroy(pd->context, K_DEALLOC_PD, pd->handle);
	if (!err)
		free(pd);
	return err;
}

/* --- MR ---------------------------------------------------------------- */

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	int fd;
	uint64_t off;
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	int err = mem_share(addr, len, &fd, &off);
	if (err) {
		free(mr);
		errno = err;
		return NULL;
	}
	uint8_t b[32];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, pd->handle);
	put32(&req, access & ~IBV_ACCESS_OPTIONAL_RANGE);
	put64(&req, off);
	put64(&req, len);
	put64(&req, iova);
	err = call(pd->context, K_REG_MR, &req, fd, &rep, NULL);
	if (err) {
		mem_unshare(addr, len);
		free(mr);
		errno = err;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->handle = get32(&rep);
	mr->lkey = get32(&rep);
	mr->rkey = get32(&rep);
	return mr;
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return reg_mr(pd, addr, len, (uintptr_t)addr, access);
}

#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err = destroy(mr->context, K_DEREG_MR, mr->handle);
	if (err)
		return err;
	/* The daemon has unmapped the region: its pages may move back. */
	mem_unshare(mr->addr, mr->length);
	free(mr);
	return 0;
}

/* --- completion channels and CQs --------------------------------------- */

struct rcq;

struct rchan {
	struct ibv_comp_channel ch;
	uint32_t h;
	pthread_mutex_t mu;
	struct rcq *cqs; /* the CQs reporting here */
};

struct rcq {
	struct ibv_cq cq;
	uint32_t h;
	uint8_t *mem, *ring;
	size_t memlen;
	uint32_t slots;
	pthread_spinlock_t lock;
	uint32_t cons; /* under lock */
	uint32_t empty; /* polls in a row that found nothing, under lock */
	uint32_t seen; /* events taken by ibv_get_cq_event, under the channel's mu */
	struct rcq *next;
};

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct rchan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	/* The daemon writes the eventfd, which must be non-blocking so that
	 * a saturated counter never stalls it. */
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fd < 0) {
		free(c);
		return NULL;
	}
	struct buf rep;
	int err = call(ctx, K_CREATE_CHANNEL, NULL, fd, &rep, NULL);
	if (err) {
		close(fd);
		free(c);
		errno = err;
		return NULL;
	}
	c->h = get32(&rep);
	c->ch.context = ctx;
	c->ch.fd = fd;
	c->ch.refcnt = 0;
	pthread_mutex_init(&c->mu, NULL);
	return &c->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct rchan *c = (struct rchan *)ch;
	if (c->cqs)
		return EBUSY;
	int err = destroy(ch->context, K_DESTROY_CHANNEL, c->h);
	if (err)
		return err;
	close(ch->fd);
	free(c);
	return 0;
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

/* ring_reply is hostif.RingReply. */
struct ring_desc {
	uint32_t off, size, slots, slot_bytes;
};
struct ring_reply {
	uint32_t h, qpn;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	struct ring_desc send, recv;
};

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

/* ring_ok checks a ring the daemon described lies in the memory mapped. */
static int ring_ok(struct ring_desc *d, size_t memlen)
{
	return d->slots > 0 && (uint64_t)d->off + d->size <= memlen &&
	       RING_HEADER + (uint64_t)d->slots * d->slot_bytes <= d->size;
}

/* create_rings makes an object with rings (request k, undone by dk):
 * the reply's rings are mapped and checked to lie in the memory, the
 * send ring (with slots of send_slot bytes, if not 0) if need_send, the
 * receive ring if need_recv. On failure nothing is left behind. */
static int create_rings(struct ibv_context *ctx, int k, int dk, struct buf *req, int fd, struct ring_reply *r,
			uint8_t **mem, size_t *memlen, int need_send, uint32_t send_slot, int need_recv)
{
	struct buf rep;
	int rfd = -1;
	int err = call(ctx, k, req, fd, &rep, &rfd);
	if (err)
		return err;
	get_ring_reply(&rep, r);
	*mem = map_ring(rfd, memlen);
	if (*mem && (!need_send || (ring_ok(&r->send, *memlen) && (!send_slot || r->send.slot_bytes == send_slot))) &&
	    (!need_recv || ring_ok(&r->recv, *memlen)))
		return 0;
	if (*mem)
		munmap(*mem, *memlen);
	destroy(ctx, dk, r->h);
	rnic_log("rnicd's reply to %s describes rings outside their memory", k == K_CREATE_QP ? "create_qp" : "create_cq/srq");
	return EPROTO;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	if (cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	struct rcq *q = calloc(1, sizeof(*q));
	int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!q || wake < 0) {
		free(q);
		if (wake >= 0)
			close(wake);
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[8];
	struct buf req = {.p = b, .len = 8};
	put32(&req, cqe);
	put32(&req, channel ? ((struct rchan *)channel)->h : 0);
	/* The eventfd is for a client that sleeps in the ring's waiting
	 * word; this library waits on the channel instead, so the daemon's
	 * copy is the only one needed. */
	struct ring_reply r;
	int err = create_rings(ctx, K_CREATE_CQ, K_DESTROY_CQ, &req, wake, &r, &q->mem, &q->memlen, 1, CQE_BYTES, 0);
	close(wake);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	q->h = r.h;
	q->ring = q->mem + r.send.off;
	q->slots = r.send.slots;
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	q->cq.context = ctx;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.handle = r.h;
	q->cq.cqe = r.max_send_wr;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	if (channel) {
		struct rchan *c = (struct rchan *)channel;
		pthread_mutex_lock(&c->mu);
		q->next = c->cqs;
		c->cqs = q;
		q->seen = ring_load(q->ring, RING_EVENTS);
		pthread_mutex_unlock(&c->mu);
	}
	return &q->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct rcq *q = (struct rcq *)cq;
	int err = destroy(cq->context, K_DESTROY_CQ, q->h);
	if (err)
		return err;
	if (cq->channel) {
		struct rchan *c = (struct rchan *)cq->channel;
		pthread_mutex_lock(&c->mu);
		for (struct rcq **p = &c->cqs; *p; p = &(*p)->next) {
			if (*p == q) {
				*p = q->next;
				break;
			}
		}
		pthread_mutex_unlock(&c->mu);
	}
	munmap(q->mem, q->memlen);
	free(q);
	return 0;
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

static int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct rcq *q = (struct rcq *)cq;
	pthread_spin_lock(&q->lock);
	uint32_t prod = ring_load(q->ring, RING_PRODUCER);
	int k = 0;
	for (; k < n && q->cons != prod; k++, q->cons++) {
		struct buf s = {.p = q->ring + RING_HEADER + (size_t)(q->cons % q->slots) * CQE_BYTES, .len = CQE_BYTES};
		struct ibv_wc *w = &wc[k];
		memset(w, 0, sizeof(*w));
		w->wr_id = get64(&s);
		w->status = get8(&s);
		w->opcode = get8(&s);
		w->wc_flags = get8(&s);
		get8(&s);
		w->byte_len = get32(&s);
		uint32_t imm = get32(&s);
		/* The ring carries the immediate in host order, the verbs
		 * structure in network order; an invalidated rkey stays host. */
		w->imm_data = (w->wc_flags & IBV_WC_WITH_IMM) ? htonl(imm) : imm;
		w->qp_num = get32(&s);
		w->src_qp = get32(&s);
		w->pkey_index = get16(&s);
	}
	if (k > 0)
		ring_store(q->ring, RING_CONSUMER, q->cons);
	/* A program spinning on a CQ whose daemon was killed would spin
	 * forever: every 2^16 empty polls in a row (a few milliseconds of
	 * spinning) it looks whether the daemon hung up, and the poll fails
	 * as on a device's fatal error. A SIGTERM's flushes come first. */
	int dead = 0, overrun = 0;
	if (k > 0) {
		q->empty = 0;
	} else {
		/* A completion that found the ring full was lost (the CQ is too
		 * small for its QPs): say so rather than let the program wait
		 * for it (rdma-core reports IBV_EVENT_CQ_ERR). */
		overrun = ring_load(q->ring, RING_FLAGS) & 1;
		if (++q->empty % (1u << 16) == 0)
			dead = conn_hung_up(&to_rctx(cq->context)->conn);
	}
	pthread_spin_unlock(&q->lock);
	if (overrun) {
		rnic_log("poll_cq: CQ of %d entries overran: completions were lost", cq->cqe);
		return -1;
	}
	if (dead) {
		rnic_log("poll_cq: the rnicd of %s hung up", cq->context->device->name);
		return -1;
	}
	return k;
}

static int req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	ring_store(((struct rcq *)cq)->ring, RING_ARMED, solicited_only ? ARM_SOLICITED : ARM_ANY);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	struct rchan *c = (struct rchan *)ch;
	struct rctx *x = to_rctx(ch->context);
	for (;;) {
		pthread_mutex_lock(&c->mu);
		for (struct rcq *q = c->cqs; q; q = q->next) {
			if (ring_load(q->ring, RING_EVENTS) != q->seen) {
				q->seen++;
				*cq = &q->cq;
				*cq_context = q->cq.cq_context;
				pthread_mutex_unlock(&c->mu);
				return 0;
			}
		}
		pthread_mutex_unlock(&c->mu);
		struct pollfd p[2] = {{.fd = ch->fd, .events = POLLIN}, {.fd = x->conn.fd, .events = POLLRDHUP}};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -1;
		uint64_t v;
		if (read(ch->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			return -1;
		if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
			/* Events the daemon sent before it went are taken first. */
			int pending = 0;
			pthread_mutex_lock(&c->mu);
			for (struct rcq *q = c->cqs; q; q = q->next)
				pending |= ring_load(q->ring, RING_EVENTS) != q->seen;
			pthread_mutex_unlock(&c->mu);
			if (!pending) {
				rnic_log("get_cq_event: the rnicd of %s hung up", ch->context->device->name);
				errno = EIO;
				return -1;
			}
		}
	}
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_mutex_unlock(&cq->mutex);
}

/* --- receive rings (QPs and SRQs) --------------------------------------- */

struct rring {
	uint8_t *ring;
	uint32_t slots, slot_bytes, prod;
	uint32_t max_sge;
};

/* post_recv writes receive WRs into r; the caller holds its lock. */
static int post_recv_ring(struct rring *r, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int err = 0;
	for (; wr; wr = wr->next) {
		if (r->prod - ring_load(r->ring, RING_CONSUMER) >= r->slots) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > r->max_sge ||
		    16 + (size_t)SGE_BYTES * wr->num_sge > r->slot_bytes) {
			err = EINVAL;
			break;
		}
		struct buf s = {.p = r->ring + RING_HEADER + (size_t)(r->prod % r->slots) * r->slot_bytes,
				.len = r->slot_bytes};
		put64(&s, wr->wr_id);
		put32(&s, wr->num_sge);
		put32(&s, 0);
		for (int i = 0; i < wr->num_sge; i++) {
			put64(&s, wr->sg_list[i].addr);
			put32(&s, wr->sg_list[i].length);
			put32(&s, wr->sg_list[i].lkey);
		}
		r->prod++;
	}
	ring_store(r->ring, RING_PRODUCER, r->prod);
	if (err)
		*bad = wr;
	return err;
}

/* --- SRQ --------------------------------------------------------------- */

struct rsrq {
	struct ibv_srq srq;
	uint32_t h;
	uint8_t *mem;
	size_t memlen;
	struct ibv_srq_attr attr;
	pthread_spinlock_t lock;
	struct rring rq;
};

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct rsrq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[16];
	struct buf req = {.p = b, .len = sizeof(b)};
	put32(&req, pd->handle);
	put32(&req, a->attr.max_wr);
	put32(&req, a->attr.max_sge);
	put32(&req, a->attr.srq_limit);
	struct ring_reply r;
	int err = create_rings(pd->context, K_CREATE_SRQ, K_DESTROY_SRQ, &req, -1, &r, &s->mem, &s->memlen, 0, 0, 1);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	s->h = r.h;
	s->rq = (struct rring){s->mem + r.recv.off, r.recv.slots, r.recv.slot_bytes, 0, r.max_recv_sge};
	a->attr.max_wr = r.max_recv_wr;
	a->attr.max_sge = r.max_recv_sge;
	s->attr = a->attr;
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = a->srq_context;
	s->srq.pd = pd;
	s->srq.handle = r.h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	(void)srq;
	(void)attr;
	(void)mask;
	return EOPNOTSUPP; /* no SRQ limit events or resizing in rnicd's host interface yet */
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	*attr = ((struct rsrq *)srq)->attr;
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct rsrq *s = (struct rsrq *)srq;
	int err = destroy(srq->context, K_DESTROY_SRQ, s->h);
	if (err)
		return err;
	munmap(s->mem, s->memlen);
	free(s);
	return 0;
}

static int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rsrq *s = (struct rsrq *)srq;
	pthread_spin_lock(&s->lock);
	int err = post_recv_ring(&s->rq, wr, bad);
	pthread_spin_unlock(&s->lock);
	int e2 = conn_doorbell(&to_rctx(srq->context)->conn, s->h, 1);
	return err ? err : e2;
}

/* --- AH ---------------------------------------------------------------- */

struct rah {
	struct ibv_ah ah;
	struct ibv_global_route grh;
};

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!attr->is_global) {
		rnic_log("create_ah: RoCE needs a GRH (ah_attr.is_global and a GID; -g/-x in the tools)");
		errno = EINVAL;
		return NULL;
	}
	struct rah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->grh = attr->grh;
	return &a->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	free(ah);
	return 0;
}

/* ibv_init_ah_from_wc answers a UD message: the sender's GID is in the
 * 40 bytes the NIC put before the payload, an IPv4 header in the last 20
 * for an IPv4 sender (RoCEv2), else an IPv6 header. */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah)
{
	(void)ctx;
	memset(ah, 0, sizeof(*ah));
	if (!(wc->wc_flags & IBV_WC_GRH))
		return -1;
	const uint8_t *g = (const uint8_t *)grh;
	ah->is_global = 1;
	ah->port_num = port;
	ah->grh.sgid_index = 1;
	ah->grh.hop_limit = 64;
	if ((g[20] >> 4) == 4) {
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		memcpy(ah->grh.dgid.raw + 12, g + 20 + 12, 4);
	} else {
		memcpy(ah->grh.dgid.raw, g + 8, 16);
	}
	ah->dlid = 0;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) {
		errno = EINVAL;
		return NULL;
	}
	return ibv_create_ah(pd, &a);
}

/* --- QP ---------------------------------------------------------------- */

struct rqp {
	struct ibv_qp_ex qpx; /* qp_base first: an ibv_qp */
	uint32_t h;
	uint8_t *mem;
	size_t memlen;
	struct ibv_qp_cap cap;
	int sig_all;
	pthread_spinlock_t slock, rlock;
	uint8_t *sq;
	uint32_t sq_slots, sq_slot_bytes, sq_prod;
	struct rring rq; /* ring NULL with an SRQ */

	/* The ibv_wr_* API (created by ibv_create_qp_ex with send ops):
	 * between wr_start and wr_complete, under slock, the WR being built
	 * and how many of the batch are already in the ring. */
	int has_ex;
	struct {
		int open, err;
		uint32_t batch;
		struct ibv_send_wr wr;
		struct ibv_sge sge[32];
		uint8_t inl[1024]; /* inline data, copied at the setter; the NIC's most */
	} wrb;
};

static struct rqp *to_rqp(struct ibv_qp *qp) { return (struct rqp *)qp; }

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
		rnic_log("create_qp: QP type %d; rnicd has RC, UC and UD", a->qp_type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!a->send_cq || !a->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	struct rqp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[64];
	struct buf req = {.p = b, .len = sizeof(b)};
	put32(&req, pd->handle);
	put32(&req, ((struct rcq *)a->send_cq)->h);
	put32(&req, ((struct rcq *)a->recv_cq)->h);
	put32(&req, a->srq ? ((struct rsrq *)a->srq)->h : 0);
	put8(&req, a->qp_type);
	put8(&req, a->sq_sig_all ? 1 : 0);
	put32(&req, a->cap.max_send_wr);
	put32(&req, a->srq ? 0 : a->cap.max_recv_wr);
	put32(&req, a->cap.max_send_sge);
	put32(&req, a->srq ? 0 : a->cap.max_recv_sge);
	put32(&req, a->cap.max_inline_data);
	struct ring_reply r;
	int err = create_rings(pd->context, K_CREATE_QP, K_DESTROY_QP, &req, -1, &r, &q->mem, &q->memlen, 1, 0, !a->srq);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	q->h = r.h;
	q->sq = q->mem + r.send.off;
	q->sq_slots = r.send.slots;
	q->sq_slot_bytes = r.send.slot_bytes;
	if (!a->srq)
		q->rq = (struct rring){q->mem + r.recv.off, r.recv.slots, r.recv.slot_bytes, 0, r.max_recv_sge};
	q->cap = (struct ibv_qp_cap){r.max_send_wr, r.max_recv_wr, r.max_send_sge, r.max_recv_sge, r.max_inline};
	a->cap = q->cap;
	q->sig_all = a->sq_sig_all;
	pthread_spin_init(&q->slock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rlock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = pd->context;
	qp->qp_context = a->qp_context;
	qp->pd = pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = r.h;
	qp->qp_num = r.qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	return qp;
}

/* put_attr encodes ibv_qp_attr as hostif's encodeAttr. */
static void put_attr(struct buf *b, struct ibv_qp_attr *a)
{
	put8(b, a->qp_state);
	put8(b, a->path_mtu);
	put32(b, a->qkey);
	put32(b, a->rq_psn);
	put32(b, a->sq_psn);
	put32(b, a->dest_qp_num);
	put32(b, a->qp_access_flags);
	put16(b, a->pkey_index);
	put8(b, a->port_num);
	putn(b, a->ah_attr.grh.dgid.raw, 16);
	put32(b, a->ah_attr.grh.flow_label);
	put8(b, a->ah_attr.grh.sgid_index);
	put8(b, a->ah_attr.grh.hop_limit);
	put8(b, a->ah_attr.grh.traffic_class);
	put8(b, a->timeout);
	put8(b, a->retry_cnt);
	put8(b, a->rnr_retry);
	put8(b, a->min_rnr_timer);
	put8(b, a->max_rd_atomic);
	put8(b, a->max_dest_rd_atomic);
}

static void get_attr(struct buf *b, struct ibv_qp_attr *a)
{
	a->qp_state = get8(b);
	a->path_mtu = get8(b);
	a->qkey = get32(b);
	a->rq_psn = get32(b);
	a->sq_psn = get32(b);
	a->dest_qp_num = get32(b);
	a->qp_access_flags = get32(b);
	a->pkey_index = get16(b);
	a->port_num = get8(b);
	getn(b, a->ah_attr.grh.dgid.raw, 16);
	a->ah_attr.grh.flow_label = get32(b);
	a->ah_attr.grh.sgid_index = get8(b);
	a->ah_attr.grh.hop_limit = get8(b);
	a->ah_attr.grh.traffic_class = get8(b);
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = a->port_num;
	a->timeout = get8(b);
	a->retry_cnt = get8(b);
	a->rnr_retry = get8(b);
	a->min_rnr_timer = get8(b);
	a->max_rd_atomic = get8(b);
	a->max_dest_rd_atomic = get8(b);
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct rqp *q = to_rqp(qp);
	if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global) {
		rnic_log("modify_qp: RoCE needs a GRH (ah_attr.is_global and a GID; -g/-x in the tools)");
		return EINVAL;
	}
	uint8_t b[80];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, q->h);
	put32(&req, mask);
	put_attr(&req, attr);
	int err = call(qp->context, K_MODIFY_QP, &req, -1, &rep, NULL);
	if (err)
		return err;
	if (mask & IBV_QP_STATE) {
		pthread_spin_lock(&q->slock);
		pthread_spin_lock(&q->rlock);
		qp->state = attr->qp_state;
		if (attr->qp_state == IBV_QPS_RESET)
			q->sq_prod = q->rq.prod = 0; /* the daemon reset the rings too */
		pthread_spin_unlock(&q->rlock);
		pthread_spin_unlock(&q->slock);
	}
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct rqp *q = to_rqp(qp);
	uint8_t b[4];
	struct buf req = {.p = b, .len = 4}, rep;
	put32(&req, q->h);
	int err = call(qp->context, K_QUERY_QP, &req, -1, &rep, NULL);
	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	get_attr(&rep, attr);
	attr->cap = q->cap;
	attr->cur_qp_state = attr->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct rqp *q = to_rqp(qp);
	int err = destroy(qp->context, K_DESTROY_QP, q->h);
	if (err)
		return err;
	munmap(q->mem, q->memlen);
	free(q);
	return 0;
}

/* encode_send writes one send WR into slot s (hostif's send WQE). */
static int encode_send(struct rqp *q, struct ibv_send_wr *wr, uint8_t *slot)
{
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_SEND_WITH_INV:
		break;
	default:
		return EINVAL;
	}
	unsigned flags = wr->send_flags;
	if (flags & ~(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE))
		return EINVAL;
	int inl = flags & IBV_SEND_INLINE;
	if (wr->num_sge < 0 || (!inl && (uint32_t)wr->num_sge > q->cap.max_send_sge))
		return EINVAL;
	size_t total = 0;
	if (inl) {
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total > q->cap.max_inline_data || SEND_FIXED + total > q->sq_slot_bytes)
			return EINVAL;
	} else if (SEND_FIXED + (size_t)SGE_BYTES * wr->num_sge > q->sq_slot_bytes) {
		return EINVAL;
	}
	struct buf s = {.p = slot, .len = q->sq_slot_bytes};
	memset(slot, 0, SEND_FIXED);
	put64(&s, wr->wr_id);
	put8(&s, wr->opcode);
	put8(&s, flags);
	put8(&s, inl ? 0 : wr->num_sge);
	struct rah *ah = NULL;
	if (q->qpx.qp_base.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		ah = (struct rah *)wr->wr.ud.ah;
	}
	put8(&s, ah ? 1 : 0);
	put32(&s, inl ? total : 0);
	uint32_t imm = 0, inv = 0;
	if (wr->opcode == IBV_WR_SEND_WITH_INV)
		inv = wr->invalidate_rkey;
	else if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		imm = ntohl(wr->imm_data);
	put32(&s, imm);
	put32(&s, inv);
	int atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	put64(&s, atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr);
	put32(&s, atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey);
	if (ah) {
		/* The union's ud member overlaps rdma's: write it only for UD. */
		s.off = 36;
		put32(&s, wr->wr.ud.remote_qpn);
		put32(&s, wr->wr.ud.remote_qkey);
		put8(&s, ah->grh.hop_limit);
		put8(&s, ah->grh.traffic_class);
		put8(&s, ah->grh.sgid_index);
		put8(&s, 0);
		put32(&s, ah->grh.flow_label);
	}
	s.off = 56;
	if (atomic) {
		put64(&s, wr->wr.atomic.compare_add);
		put64(&s, wr->wr.atomic.swap);
	}
	if (ah) {
		s.off = 72;
		putn(&s, ah->grh.dgid.raw, 16);
	}
	s.off = SEND_FIXED;
	for (int i = 0; i < wr->num_sge; i++) {
		if (inl) {
			putn(&s, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		} else {
			put64(&s, wr->sg_list[i].addr);
			put32(&s, wr->sg_list[i].length);
			put32(&s, wr->sg_list[i].lkey);
		}
	}
	return s.bad ? EINVAL : 0;
}

static int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct rqp *q = to_rqp(qp);
	int err = 0;
	pthread_spin_lock(&q->slock);
	switch (qp->state) {
	case IBV_QPS_RTS:
	case IBV_QPS_SQD:
	case IBV_QPS_ERR:
		break;
	default:
		pthread_spin_unlock(&q->slock);
		*bad = wr;
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		if (q->sq_prod - ring_load(q->sq, RING_CONSUMER) >= q->sq_slots) {
			err = ENOMEM;
			break;
		}
		err = encode_send(q, wr, q->sq + RING_HEADER + (size_t)(q->sq_prod % q->sq_slots) * q->sq_slot_bytes);
		if (err)
			break;
		q->sq_prod++;
	}
	ring_store(q->sq, RING_PRODUCER, q->sq_prod);
	/* One doorbell on its way is enough: the daemon clears the bell
	 * before it reads the producer index (hostif.Ring.RingBell). */
	int ring = __atomic_exchange_n((uint32_t *)(q->sq + RING_BELL), 1, __ATOMIC_SEQ_CST) == 0;
	pthread_spin_unlock(&q->slock);
	if (err)
		*bad = wr;
	if (ring) {
		int e2 = conn_doorbell(&to_rctx(qp->context)->conn, q->h, 0);
		if (!err)
			err = e2;
	}
	return err;
}

static int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rqp *q = to_rqp(qp);
	if (!q->rq.ring || qp->state == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&q->rlock);
	int err = post_recv_ring(&q->rq, wr, bad);
	pthread_spin_unlock(&q->rlock);
	int e2 = conn_doorbell(&to_rctx(qp->context)->conn, q->h, 1);
	return err ? err : e2;
}

/* --- the ibv_wr_* API ---------------------------------------------------
 *
 * Each ibv_wr_<opcode> call ends the WR being built (writing it into the
 * ring slot after the batch's) and starts a new one; the setters fill it;
 * ibv_wr_complete publishes the batch with one producer store and one
 * doorbell, or, if any WR of it was refused, none of it. */

static struct rqp *from_qpx(struct ibv_qp_ex *x) { return (struct rqp *)x; }

static void wr_end(struct rqp *q)
{
	if (!q->wrb.open || q->wrb.err)
		return;
	q->wrb.open = 0;
	uint32_t at = q->sq_prod + q->wrb.batch;
	if (at - ring_load(q->sq, RING_CONSUMER) >= q->sq_slots) {
		q->wrb.err = ENOMEM;
		return;
	}
	q->wrb.err = encode_send(q, &q->wrb.wr, q->sq + RING_HEADER + (size_t)(at % q->sq_slots) * q->sq_slot_bytes);
	if (!q->wrb.err)
		q->wrb.batch++;
}

static struct ibv_send_wr *wr_begin(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct rqp *q = from_qpx(x);
	wr_end(q);
	memset(&q->wrb.wr, 0, sizeof(q->wrb.wr));
	q->wrb.wr.wr_id = x->wr_id;
	q->wrb.wr.send_flags = x->wr_flags;
	q->wrb.wr.opcode = op;
	q->wrb.wr.sg_list = q->wrb.sge;
	q->wrb.open = 1;
	return &q->wrb.wr;
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct rqp *q = from_qpx(x);
	pthread_spin_lock(&q->slock);
	q->wrb.open = q->wrb.err = 0;
	q->wrb.batch = 0;
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct rqp *q = from_qpx(x);
	struct ibv_qp *qp = &x->qp_base;
	wr_end(q);
	int err = q->wrb.err;
	if (!err && qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQD && qp->state != IBV_QPS_ERR)
		err = EINVAL;
	int ring = 0;
	if (!err && q->wrb.batch > 0) {
		q->sq_prod += q->wrb.batch;
		ring_store(q->sq, RING_PRODUCER, q->sq_prod);
		ring = __atomic_exchange_n((uint32_t *)(q->sq + RING_BELL), 1, __ATOMIC_SEQ_CST) == 0;
	}
	pthread_spin_unlock(&q->slock);
	if (ring)
		err = conn_doorbell(&to_rctx(qp->context)->conn, q->h, 0);
	return err;
}

static void wr_abort(struct ibv_qp_ex *x) { pthread_spin_unlock(&from_qpx(x)->slock); }

static void wr_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct ibv_send_wr *wr = wr_begin(x, op);
	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = addr;
	wr->imm_data = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr, 0); }
static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}
static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { wr_rdma(x, IBV_WR_RDMA_READ, rkey, addr, 0); }
static void wr_send(struct ibv_qp_ex *x) { wr_begin(x, IBV_WR_SEND); }
static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm) { wr_begin(x, IBV_WR_SEND_WITH_IMM)->imm_data = imm; }
static void wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey) { wr_begin(x, IBV_WR_SEND_WITH_INV)->invalidate_rkey = rkey; }

static void wr_atomic(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t cmp_add, uint64_t swap)
{
	struct ibv_send_wr *wr = wr_begin(x, op);
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = addr;
	wr->wr.atomic.compare_add = cmp_add;
	wr->wr.atomic.swap = swap;
}
static void wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t cmp, uint64_t swap)
{
	wr_atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, cmp, swap);
}
static void wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct ibv_send_wr *wr = &from_qpx(x)->wrb.wr;
	wr->wr.ud.ah = ah;
	wr->wr.ud.remote_qpn = qpn;
	wr->wr.ud.remote_qkey = qkey;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct rqp *q = from_qpx(x);
	if (n > sizeof(q->wrb.sge) / sizeof(q->wrb.sge[0])) {
		q->wrb.err = EINVAL;
		return;
	}
	memcpy(q->wrb.sge, sg, n * sizeof(*sg));
	q->wrb.wr.num_sge = n;
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len)
{
	struct ibv_sge sge = {.addr = addr, .length = len, .lkey = lkey};
	wr_set_sge_list(x, 1, &sge);
}

/* Inline data is copied at once: the caller may reuse its buffers as
 * soon as the setter returns. */
static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct rqp *q = from_qpx(x);
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (bufs[i].length > sizeof(q->wrb.inl) - total) {
			q->wrb.err = EINVAL;
			return;
		}
		memcpy(q->wrb.inl + total, bufs[i].addr, bufs[i].length);
		total += bufs[i].length;
	}
	q->wrb.sge[0] = (struct ibv_sge){.addr = (uintptr_t)q->wrb.inl, .length = total};
	q->wrb.wr.num_sge = 1;
	q->wrb.wr.send_flags |= IBV_SEND_INLINE;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len)
{
	struct ibv_data_buf b = {.addr = addr, .length = len};
	wr_set_inline_data_list(x, 1, &b);
}

/* The operations rnicd does not have; ibv_create_qp_ex refuses send ops
 * flags that would reach them. */
static void wr_unsupported(struct ibv_qp_ex *x) { from_qpx(x)->wrb.err = EOPNOTSUPP; }
static void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	(void)mw; (void)rkey; (void)b;
	wr_unsupported(x);
}
static void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey) { (void)rkey; wr_unsupported(x); }
static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t sz, uint16_t mss)
{
	(void)hdr; (void)sz; (void)mss;
	wr_unsupported(x);
}
static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn) { (void)srqn; wr_unsupported(x); }
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *v)
{
	(void)rkey; (void)addr; (void)v;
	wr_unsupported(x);
}

#define SUPPORTED_SEND_OPS                                                                                             \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                        \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV)

static struct ibv_qp *create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if ((a->comp_mask & ~known) || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~(uint64_t)SUPPORTED_SEND_OPS))) {
		rnic_log("create_qp_ex: comp_mask %#x, create_flags %#x, send_ops_flags %#llx: rnicd has RC/UC/UD QPs "
			 "with the send, RDMA and atomic operations only",
			 a->comp_mask, a->create_flags, (unsigned long long)a->send_ops_flags);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	/* The extended attributes start with the basic ones (verbs.h casts
	 * them the same way). */
	struct ibv_qp *qp = ibv_create_qp(a->pd, (struct ibv_qp_init_attr *)a);
	if (!qp || !(a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return qp;
	struct rqp *q = to_rqp(qp);
	struct ibv_qp_ex *x = &q->qpx;
	q->has_ex = 1;
	x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = wr_atomic_fetch_add;
	x->wr_bind_mw = wr_bind_mw;
	x->wr_local_inv = wr_local_inv;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_send_inv = wr_send_inv;
	x->wr_send_tso = wr_send_tso;
	x->wr_set_ud_addr = wr_set_ud_addr;
	x->wr_set_xrc_srqn = wr_set_xrc_srqn;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_atomic_write = wr_atomic_write;
	return qp;
}

/* ibv_qp_to_qp_ex gives the ibv_wr_* API of a QP made by ibv_create_qp_ex
 * with send ops flags, NULL for any other (as rdma-core does). */
EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct rqp *q = to_rqp(qp);
	return q->has_ex ? &q->qpx : NULL;
}

void fill_device_ops(struct rctx *c);

void fill_ops(struct rctx *c)
{
	struct ibv_context_ops *o = &c->vctx.context.ops;
	o->poll_cq = poll_cq;
	o->req_notify_cq = req_notify_cq;
	o->post_send = post_send;
	o->post_recv = post_recv;
	o->post_srq_recv = post_srq_recv;
	c->vctx.create_qp_ex = create_qp_ex;
	fill_device_ops(c);
}
