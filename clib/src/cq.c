/*
 * cq.c: completion channels and CQs.
 *
 * A CQ is a ring the daemon writes completions into: ibv_poll_cq reads
 * them and stores the consumer index, with no system call;
 * ibv_req_notify_cq writes the ring's armed word. An armed CQ's event
 * counts in the ring's events word and writes its channel's wake pipe,
 * whose read end is the channel's fd, which ibv_get_cq_event waits on.
 * The daemon makes the pipe and keeps the write end: the flags a program
 * sets on its fd (O_NONBLOCK) are the read end's alone and cannot make
 * the daemon's write block.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cq.h"

struct rchan {
	struct ibv_comp_channel ch;
	uint32_t h;
	pthread_mutex_t mu;
	struct rcq *cqs; /* the CQs reporting here */
};

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct rchan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	struct buf rep;
	int fd = -1;
	int err = call(ctx, K_CREATE_CHANNEL, NULL, -1, &rep, &fd);
	if (!err && fd < 0) {
		rnic_log("rnicd's reply to create_comp_channel carries no wake pipe");
		err = EPROTO;
	}
	if (err) {
		if (fd >= 0)
			close(fd);
		free(c);
		errno = err;
		return NULL;
	}
	/* Blocking, as libibverbs' channel fd is until the program sets
	 * O_NONBLOCK, which ibv_get_cq_event honours. */
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
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

struct rcq *cq_new(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel)
{
	if (cqe < 1) {
		errno = EINVAL;
		return NULL;
	}
	struct rcq *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[8];
	struct buf req = {.p = b, .len = 8};
	put32(&req, cqe);
	put32(&req, channel ? ((struct rchan *)channel)->h : 0);
	/* The reply's second descriptor is the CQ's wake pipe: the daemon
	 * writes into it when it completes into a ring whose waiting word
	 * is set. ibv_poll_cq waits on it on an oversubscribed core (see
	 * poll_cq); ibv_get_cq_event waits on the channel. */
	struct ring_reply r;
	int err = create_rings(ctx, K_CREATE_CQ, K_DESTROY_CQ, &req, -1, &r, &q->mem, &q->memlen, 1, CQE_BYTES, 0);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	q->h = r.h;
	q->wake = r.wake_fd;
	if (q->wake >= 0 && fcntl(q->wake, F_SETFL, O_NONBLOCK) < 0) {
		close(q->wake);
		q->wake = -1;
	}
	q->ring = q->mem + r.send.off;
	q->slots = r.send.slots;
	pthread_spin_init(&q->lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->arm_lock, PTHREAD_PROCESS_PRIVATE);
	q->cq.context = ctx;
	q->cq.channel = channel;
	q->cq.cq_context = cq_context;
	q->cq.handle = r.h;
	q->cq.cqe = r.max_send_wr;
	pthread_mutex_init(&q->cq.mutex, NULL);
	pthread_cond_init(&q->cq.cond, NULL);
	async_track(ctx, K_DESTROY_CQ, r.h, &q->cq);
	if (channel) {
		struct rchan *c = (struct rchan *)channel;
		pthread_mutex_lock(&c->mu);
		q->next = c->cqs;
		c->cqs = q;
		q->seen = ring_load(q->ring, RING_EVENTS);
		pthread_mutex_unlock(&c->mu);
	}
	return q;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	struct rcq *q = cq_new(ctx, cqe, cq_context, channel);
	return q ? &q->cq : NULL;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct rcq *q = (struct rcq *)cq;
	uint32_t reported;
	int err = async_destroy(cq->context, K_DESTROY_CQ, q->h, &reported);
	if (err)
		return err;
	async_wait_acked(&cq->mutex, &cq->cond, &cq->async_events_completed, reported);
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
	if (q->wake >= 0)
		close(q->wake);
	munmap(q->mem, q->memlen);
	free(q);
	return 0;
}

/* verbs.CQ.Poll's figures: spin this many empty polls, then yield. */
#define POLL_SPIN 64

/*
 * On a core shared with threads that do not yield (a CPU hog, a build),
 * a yield gives the core away for a whole time slice, milliseconds, and
 * a program spinning on its CQ sees each completion that much late:
 * rstream's 64-byte ping-pong beside two hogs on 2 cores took 2 ms a
 * message each way, 47 times its 43 us alone. A yield that took longer
 * than YIELD_SLOW_NS says so; the next POLL_WAITS empty polls then wait
 * up to POLL_WAIT_MS for the daemon's wake (the ring's waiting word and
 * the CQ's wake pipe, as verbs.CQ.Wait does), so that the completion
 * wakes the program instead of the scheduler's next turn. The poll still
 * returns within POLL_WAIT_MS; on an idle core yields return at once and
 * the program only spins.
 */
#define YIELD_SLOW_NS 200000
#define POLL_WAITS 64
#define POLL_WAIT_MS 1

/*
 * yield_due counts an empty poll past POLL_SPIN and says whether to yield
 * at it: at every one while the thread's involuntary context switches
 * grow (another thread wants this core: a yield that found it, or a
 * preemption), at half as many each time YIELD_CHECK polls find them
 * still, down to one in YIELD_MAX. Where every spinning thread has a
 * core a yield finds no one and only delays the next look at the ring
 * (on a quiet 16-core machine sched_yield was the largest cost of the
 * poll loop). Go's package internal/spin is the same, for verbs.CQ.Poll
 * and the daemon's engine.
 */
#define YIELD_CHECK 32
#define YIELD_MAX 32

static int yield_due(struct rcq *q)
{
	uint32_t n = __atomic_add_fetch(&q->ypolls, 1, __ATOMIC_RELAXED);
	uint32_t e = __atomic_load_n(&q->yevery, __ATOMIC_RELAXED);
	if (n % YIELD_CHECK == 0) {
		struct rusage ru;
		if (getrusage(RUSAGE_THREAD, &ru) != 0 ||
		    __atomic_exchange_n(&q->ynivcsw, ru.ru_nivcsw, __ATOMIC_RELAXED) != ru.ru_nivcsw)
			e = 1;
		else
			e = e < 2 ? 2 : (2 * e > YIELD_MAX ? YIELD_MAX : 2 * e);
		__atomic_store_n(&q->yevery, e, __ATOMIC_RELAXED);
	}
	return e <= 1 || n % e == 0;
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec;
}

/* wait_cqe waits up to POLL_WAIT_MS for a completion into q's ring
 * (read under q's lock, counted in q->waiters) after cons.
 * The waiting word is stored before the producer is looked at again,
 * both sequentially consistent, against the daemon's store of the
 * producer and swap of the word (qpmgr's cqeRing.publish): one of the
 * two sees the other's. */
static void wait_cqe(struct rcq *q, uint8_t *ring, uint32_t cons)
{
	__atomic_store_n((uint32_t *)(ring + RING_WAITING), 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n((uint32_t *)(ring + RING_PRODUCER), __ATOMIC_SEQ_CST) == cons) {
		struct pollfd p = {.fd = q->wake, .events = POLLIN};
		poll(&p, 1, POLL_WAIT_MS);
	}
	/* Whatever woke it, the pipe is emptied, so that the next wait
	 * sleeps until its own wake. */
	uint8_t v[64];
	while (read(q->wake, v, sizeof(v)) > 0)
		;
}

void cqe_read(struct rcq *q, uint32_t idx, struct ibv_wc *w)
{
	static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	struct buf s = {.p = q->ring + RING_HEADER + (size_t)(idx % q->slots) * CQE_BYTES, .len = CQE_BYTES, .off = CQE_WR_ID};
	memset(w, 0, sizeof(*w));
	w->wr_id = get64(&s);
	s.off = CQE_STATUS;
	w->status = get8(&s);
	s.off = CQE_OPCODE;
	w->opcode = get8(&s);
	s.off = CQE_WC_FLAGS;
	w->wc_flags = get8(&s);
	s.off = CQE_BYTE_LEN;
	w->byte_len = get32(&s);
	s.off = CQE_IMM;
	uint32_t imm = get32(&s);
	/* The ring carries the immediate in host order, the verbs
	 * structure in network order; an invalidated rkey stays host. */
	w->imm_data = (w->wc_flags & IBV_WC_WITH_IMM) ? htonl(imm) : imm;
	s.off = CQE_QP_NUM;
	w->qp_num = get32(&s);
	s.off = CQE_SRC_QP;
	w->src_qp = get32(&s);
	s.off = CQE_PKEY_INDEX;
	w->pkey_index = get16(&s);
	/* A UD receive's sl says which L3 header the first 40 bytes
	 * hold, as a ConnectX's does for RoCE (its CQE's packet type:
	 * 2 IPv4, 1 IPv6): RoCE carries no SL, and UCX 1.13's ud_verbs
	 * reads the GRH's address by this alone, dropping every
	 * datagram when it says 0. rnicd's GRH is IPv4's (in the second
	 * 20 bytes, as rxe writes it) on an IPv4 port. */
	if (w->wc_flags & IBV_WC_GRH)
		w->sl = memcmp(to_rctx(q->cq.context)->dev->gid, v4mapped, 12) == 0 ? 2 : 1;
}

int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct rcq *q = (struct rcq *)cq;
	pthread_spin_lock(&q->lock);
	uint32_t prod = ring_load(q->ring, RING_PRODUCER);
	int k = 0;
	for (; k < n && q->cons != prod; k++, q->cons++)
		cqe_read(q, q->cons, &wc[k]);
	if (k == 0)
		return poll_none(q);
	ring_store(q->ring, RING_CONSUMER, q->cons);
	q->empty = 0;
	pthread_spin_unlock(&q->lock);
	return k;
}

/* yield_or_wait gives the core away at an empty poll: a yield, or, after
 * a slow one, a wait for the daemon's wake (YIELD_SLOW_NS). */
static void yield_or_wait(struct rcq *q, uint8_t *ring, uint32_t cons)
{
	uint32_t w = __atomic_load_n(&q->waits, __ATOMIC_RELAXED);
	if (w > 0 && q->wake >= 0) {
		__atomic_store_n(&q->waits, w - 1, __ATOMIC_RELAXED);
		wait_cqe(q, ring, cons);
		return;
	}
	uint64_t t0 = now_ns();
	sched_yield();
	if (q->wake >= 0 && now_ns() - t0 > YIELD_SLOW_NS)
		__atomic_store_n(&q->waits, POLL_WAITS, __ATOMIC_RELAXED);
}

int poll_none(struct rcq *q)
{
	struct ibv_cq *cq = &q->cq;
	/* A program spinning on a CQ whose daemon was killed would spin
	 * forever: every 2^16 empty polls in a row (a few milliseconds of
	 * spinning) it looks whether the daemon hung up, and the poll fails
	 * as on a device's fatal error. A SIGTERM's flushes come first.
	 * A completion that found the ring full was lost (the CQ is too
	 * small for its QPs): say so rather than let the program wait for
	 * it (rdma-core reports IBV_EVENT_CQ_ERR). */
	int dead = 0;
	int overrun = ring_load(q->ring, RING_FLAGS) & FLAG_OVERRUN;
	if (++q->empty % (1u << 16) == 0)
		dead = conn_hung_up(&to_rctx(cq->context)->conn);
	uint32_t empty = q->empty, cons = q->cons;
	uint8_t *ring = q->ring;
	int waiting = empty > POLL_SPIN && !overrun && !dead;
	if (waiting)
		__atomic_add_fetch(&q->waiters, 1, __ATOMIC_SEQ_CST);
	pthread_spin_unlock(&q->lock);
	/* A program spinning here holds a core the daemon's engine that is
	 * to fill the CQ may need (2 cores, two daemons, two perftests):
	 * after a short spin, empty polls give the core away, every one
	 * while another thread wants it (yield_due). */
	if (waiting) {
		if (yield_due(q))
			yield_or_wait(q, ring, cons);
		__atomic_sub_fetch(&q->waiters, 1, __ATOMIC_SEQ_CST);
	}
	if (overrun) {
		rnic_log("poll_cq: CQ of %d entries overran: completions were lost", cq->cqe);
		return -1;
	}
	if (dead) {
		rnic_log("poll_cq: the rnicd of %s hung up", cq->context->device->name);
		return -1;
	}
	return 0;
}

/*
 * The armed word is stored sequentially consistent: the daemon stores
 * the producer and then loads armed (qpmgr's cqeRing.publish), this
 * stores armed and then the program loads the producer (ibv_poll_cq),
 * and on x86 a plain (release) store may pass the load that follows it,
 * which would let both miss the other's store: a completion with no
 * event, and a program asleep in ibv_get_cq_event. As on rxe
 * (rxe_req_notify_cq only sets the notify flag), completions already in
 * the CQ raise no event: programs poll after arming.
 */
int req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	struct rcq *q = (struct rcq *)cq;
	pthread_spin_lock(&q->arm_lock);
	__atomic_store_n((uint32_t *)(q->ring + RING_ARMED), solicited_only ? ARM_SOLICITED : ARM_ANY, __ATOMIC_SEQ_CST);
	pthread_spin_unlock(&q->arm_lock);
	return 0;
}

pthread_mutex_t *chan_mu(struct ibv_comp_channel *ch)
{
	return &((struct rchan *)ch)->mu;
}

/* chan_pending says whether an event of c's CQs waits to be taken. */
static int chan_pending(struct rchan *c)
{
	int pending = 0;
	pthread_mutex_lock(&c->mu);
	for (struct rcq *q = c->cqs; q; q = q->next)
		pending |= ring_load(q->ring, RING_EVENTS) != q->seen;
	pthread_mutex_unlock(&c->mu);
	return pending;
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
		int fl = fcntl(ch->fd, F_GETFL);
		if (fl < 0)
			return -1;
		if (!(fl & O_NONBLOCK)) {
			/* A blocking channel waits in read(2) on the wake pipe,
			 * as libibverbs' does on its event file: a signal whose
			 * handler has no SA_RESTART ends the call with EINTR
			 * (qperf stops each test so, from a SIGALRM, and hung
			 * for ever while a poll(2) here went on after it), and
			 * one with SA_RESTART lets it go on waiting. The daemon
			 * holds the pipe's only write end, so its end is EOF. */
			uint8_t v[512];
			ssize_t r = read(ch->fd, v, sizeof(v));
			if (r > 0)
				continue;
			if (r < 0 && errno != EAGAIN)
				return -1; /* EINTR included */
			if (r == 0 && !chan_pending(c)) {
				rnic_log("get_cq_event: the rnicd of %s hung up", ch->context->device->name);
				errno = EIO;
				return -1;
			}
			if (r == 0)
				continue;
		}
		struct pollfd p[2] = {{.fd = ch->fd, .events = POLLIN}, {.fd = x->conn.fd, .events = POLLRDHUP}};
		if (poll(p, 2, 0) < 0 && errno != EINTR)
			return -1;
		if (!(p[0].revents & POLLIN) && !(p[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			errno = EAGAIN; /* as libibverbs' read of a non-blocking channel fd */
			return -1;
		}
		/* Drained up to what is there, so that the fd is readable
		 * again only for what comes next: the events word says what
		 * happened. */
		int avail = 0;
		if ((p[0].revents & POLLIN) && ioctl(ch->fd, FIONREAD, &avail) == 0 && avail > 0) {
			uint8_t v[512];
			if (read(ch->fd, v, avail < (int)sizeof(v) ? avail : (int)sizeof(v)) < 0 && errno != EAGAIN)
				return -1;
		}
		if ((p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) && !chan_pending(c)) {
			/* Events the daemon sent before it went are taken first. */
			rnic_log("get_cq_event: the rnicd of %s hung up", ch->context->device->name);
			errno = EIO;
			return -1;
		}
	}
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += n;
	pthread_mutex_unlock(&cq->mutex);
}
