/*
 * channel.c: event channels and their events (rdma_create_event_channel,
 * rdma_get_cm_event, rdma_ack_cm_event).
 *
 * Each rnicd an ID of the channel uses gets a CM channel of the daemon
 * (created on first use), whose wake pipe the daemon writes when it
 * queues an event; the events made here (ADDR_RESOLVED, ROUTE_RESOLVED)
 * write the channel's eventfd. The channel's fd is an epoll instance
 * watching them all (see struct cm_channel). rdma_get_cm_event drains
 * them, fetches what every rnicd holds into the channel's queue and hands
 * out the oldest; while the queue is not empty the fd stays readable, so
 * a program that polls the fd (rping of rdma-core 45 and later) sees an
 * event exactly when rdma_get_cm_event has one, as with the kernel's
 * /dev/infiniband/rdma_cm. A program that set O_NONBLOCK on the fd gets
 * EAGAIN instead of a wait, as cma.c documents.
 *
 * The daemon's events become rdma_cm's as cma.c's rdma_get_cm_event
 * turns the kernel's: a connect request gets a new cm_id (the listener's
 * context, its port, the peer's address from the cma_hdr, whose 36 bytes
 * are taken off the private data); ESTABLISHED finds the QP in RTS (the
 * agent moved it: ucma_process_conn_resp's work); REJECTED moves the QP
 * to ERR (ucma_modify_qp_err) and its status is the REJ reason; no other
 * event touches the QP.
 *
 * rnicd has no request that moves a CM ID to another CM channel, so
 * rdma_migrate_id (and a synchronous ID, which is one on a private
 * channel, cma.c's sync) leaves the ID's events arriving on the channel
 * it was made on, its home: whoever waits on any channel fetches the
 * events of every channel and hands each to the channel its ID is on
 * now, whose fd then watches the home's wake pipes too. That is why one
 * lock guards them all: an event crosses channels on its way.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cma.h"

/* lib_mu guards every channel and ID (cma.c's per-ID locks would need
 * an order across channels; a process makes a few CM calls per
 * connection); channels lists them all for fetch. */
static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static struct cm_channel *channels;

void cm_lock(void) { pthread_mutex_lock(&lib_mu); }
void cm_unlock(void) { pthread_mutex_unlock(&lib_mu); }

/* The daemon's event types (enum rnic_cm_event) as rdma_cm's. */
static int cm_type(uint8_t t)
{
	switch (t) {
	case CM_EV_CONNECT_REQUEST: return RDMA_CM_EVENT_CONNECT_REQUEST;
	case CM_EV_ESTABLISHED: return RDMA_CM_EVENT_ESTABLISHED;
	case CM_EV_REJECTED: return RDMA_CM_EVENT_REJECTED;
	case CM_EV_UNREACHABLE: return RDMA_CM_EVENT_UNREACHABLE;
	case CM_EV_CONNECT_ERROR: return RDMA_CM_EVENT_CONNECT_ERROR;
	case CM_EV_DISCONNECTED: return RDMA_CM_EVENT_DISCONNECTED;
	case CM_EV_TIMEWAIT_EXIT: return RDMA_CM_EVENT_TIMEWAIT_EXIT;
	default: return -1;
	}
}

EXPORT struct rdma_event_channel *rdma_create_event_channel(void)
{
	int err = devs_init();
	if (err) {
		errno = err;
		return NULL;
	}
	struct cm_channel *ch = calloc(1, sizeof(*ch));
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	ch->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ch->ch.fd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = {.events = EPOLLIN};
	if (ch->efd < 0 || ch->ch.fd < 0 || epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, ch->efd, &ev) < 0) {
		int err = errno;
		if (ch->efd >= 0)
			close(ch->efd);
		if (ch->ch.fd >= 0)
			close(ch->ch.fd);
		free(ch);
		errno = err;
		return NULL;
	}
	for (int i = 0; i < MAX_DEVS; i++)
		ch->wake[i] = -1;
	cm_lock();
	ch->next = channels;
	channels = ch;
	cm_unlock();
	return &ch->ch;
}

/* teardown ends a closed channel that is home to no ID: its CM
 * channels in rnicd, its queue, its place in the list; it returns
 * whether the memory and fds may go too (no thread waits in it). Under
 * lib_mu. */
static int teardown(struct cm_channel *ch)
{
	if (!ch->closed || ch->ids || ch->gone)
		return 0;
	ch->gone = 1;
	for (int i = 0; i < devs_count(); i++) {
		if (!ch->h[i])
			continue;
		uint8_t b[4], r[16];
		struct buf req = {.p = b, .len = 4}, rep = {.p = r, .len = sizeof(r)};
		put32(&req, ch->h[i]);
		cm_call(dev_at(i), K_CM_DESTROY_CHANNEL, &req, -1, &rep);
		ch->h[i] = 0;
		close(ch->wake[i]); /* which takes it out of every epoll set watching it */
		ch->wake[i] = -1;
	}
	for (struct cm_channel **p = &channels; *p; p = &(*p)->next) {
		if (*p == ch) {
			*p = ch->next;
			break;
		}
	}
	struct cm_event *e = ch->head;
	ch->head = ch->tail = NULL;
	while (e) {
		struct cm_event *n = e->next;
		free(e);
		e = n;
	}
	return ch->waiters == 0;
}

/* channel_free frees what teardown let go. */
void channel_free(struct cm_channel *ch)
{
	close(ch->ch.fd);
	close(ch->efd);
	free(ch);
}

/* rdma_destroy_event_channel: the program destroyed the channel's IDs
 * and acked its events first (rdma_cma.h). A thread still blocked in
 * rdma_get_cm_event on it (rping's CM thread at exit) stays blocked, as
 * in a read of the kernel's closed rdma_cm file; the channel's memory
 * and fd are left to it. IDs made on it and migrated away keep it, out
 * of the program's sight, until they go. */
EXPORT void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cm_channel *ch = to_channel(channel);
	cm_lock();
	ch->closed = 1;
	int done = teardown(ch);
	cm_unlock();
	if (done)
		channel_free(ch);
}

/* channel_on returns the channel's CM channel on d's rnicd, creating it
 * and watching its wake pipe (from the channels its migrated IDs are on
 * too); lib_mu is held. */
int channel_on(struct cm_channel *ch, struct cm_dev *d, uint32_t *h)
{
	int i = dev_index(d);
	if (!ch->h[i]) {
		uint8_t r[16];
		struct buf req = {.p = NULL, .len = 0}, rep = {.p = r, .len = sizeof(r)};
		int wake = -1;
		int err = cm_call_rfd(d, K_CM_CREATE_CHANNEL, &req, &rep, &wake);
		if (err)
			return err;
		uint32_t hh = get32(&rep);
		struct epoll_event ev = {.events = EPOLLIN};
		if (rep.bad || !hh || wake < 0 || epoll_ctl(ch->ch.fd, EPOLL_CTL_ADD, wake, &ev) < 0) {
			if (wake >= 0)
				close(wake);
			if (hh) {
				uint8_t b[4];
				struct buf dreq = {.p = b, .len = 4}, drep = {.p = r, .len = sizeof(r)};
				put32(&dreq, hh);
				cm_call(d, K_CM_DESTROY_CHANNEL, &dreq, -1, &drep);
			}
			return rep.bad || !hh || wake < 0 ? EPROTO : errno;
		}
		ch->h[i] = hh;
		ch->wake[i] = wake;
		for (struct cm_id *c = ch->ids; c; c = c->next)
			if (c->ch != ch)
				epoll_ctl(c->ch->ch.fd, EPOLL_CTL_ADD, wake, &ev); /* EEXIST: watched */
	}
	*h = ch->h[i];
	return 0;
}

static void signal_fd(struct cm_channel *ch)
{
	uint64_t one = 1;
	if (write(ch->efd, &one, sizeof(one)) < 0) {
		/* Only an overflow of the counter fails: it is readable then. */
	}
}

static void append(struct cm_channel *ch, struct cm_event *e)
{
	e->next = NULL;
	if (ch->tail)
		ch->tail->next = e;
	else
		ch->head = e;
	ch->tail = e;
}

/* queue_event queues an event made here (no rnicd sends it). */
static void queue_full_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, int status,
			     const struct rdma_ud_param *ud);

void queue_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, int status)
{
	queue_full_event(ch, id, type, status, NULL);
}

/* queue_ud_event queues an event made here that carries a ud param (a
 * MULTICAST_JOIN). */
void queue_ud_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, const struct rdma_ud_param *ud)
{
	queue_full_event(ch, id, type, 0, ud);
}

static void queue_full_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, int status,
			     const struct rdma_ud_param *ud)
{
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!e)
		return; /* the program waits for an event that never comes: cma.c's ENOMEM is as fatal */
	e->id = id;
	e->ev.id = &id->id;
	e->ev.event = type;
	e->ev.status = status;
	if (ud)
		e->ev.param.ud = *ud;
	cm_lock();
	append(ch, e);
	cm_unlock();
	signal_fd(ch);
}

void channel_add(struct cm_channel *ch, struct cm_id *id)
{
	cm_lock();
	id->next = ch->ids;
	ch->ids = id;
	cm_unlock();
}

/* unlink_id takes id off its home's list; lib_mu is held. */
static void unlink_id(struct cm_id *id)
{
	for (struct cm_id **p = &id->home->ids; *p; p = &(*p)->next) {
		if (*p == id) {
			*p = id->next;
			break;
		}
	}
}

/* take_events takes off ch's queue the events of id (and connect
 * requests to it, when it listens) into a list of their own, in order;
 * lib_mu is held. */
static struct cm_event *take_events(struct cm_channel *ch, struct cm_id *id)
{
	struct cm_event *out = NULL, **tail = &out;
	for (struct cm_event **p = &ch->head; *p;) {
		struct cm_event *e = *p;
		if (e->id == id || e->ev.listen_id == &id->id) {
			*p = e->next;
			e->next = NULL;
			*tail = e;
			tail = &e->next;
		} else {
			p = &e->next;
		}
	}
	ch->tail = NULL;
	for (struct cm_event *e = ch->head; e; e = e->next)
		ch->tail = e;
	return out;
}

/* channel_remove takes id off its home once the program acked its
 * events, and drops the events queued for it (a connect request to it,
 * when it listened, with the request's ID, which rnicd then rejects);
 * it returns its home when that is now to be freed (channel_free,
 * after lib_mu). rdma_destroy_id calls it after the ID is gone from
 * rnicd, so that a closed home's CM channels are used by nothing. */
struct cm_channel *channel_remove(struct cm_id *id)
{
	cm_lock();
	while (id->events > 0)
		pthread_cond_wait(&id->acked, &lib_mu);
	struct cm_channel *home = id->home;
	unlink_id(id);
	struct cm_event *e = take_events(id->ch, id);
	while (e) {
		struct cm_event *n = e->next;
		if (e->id != id) {
			unlink_id(e->id);
			cm_destroy_id(e->id->dev, e->id->h);
			pthread_cond_destroy(&e->id->acked);
			free(e->id);
		}
		free(e);
		e = n;
	}
	int done = teardown(home);
	cm_unlock();
	return done ? home : NULL;
}

/* channel_move puts id on channel to (rdma_migrate_id): its queued
 * events go along; an ID not yet made in rnicd changes home too, and
 * one that was keeps its home, whose wake pipes to's fd now watches. A
 * listener's connect requests not yet handed out go with it, and their
 * new IDs. */
void channel_move(struct cm_id *id, struct cm_channel *to)
{
	cm_lock();
	struct cm_channel *from = id->ch;
	struct cm_event *e = take_events(from, id);
	int any = e != NULL;
	while (e) {
		struct cm_event *n = e->next;
		if (e->id != id)
			e->id->ch = to, e->id->id.channel = &to->ch;
		append(to, e);
		e = n;
	}
	if (!id->h && !id->wild) {
		unlink_id(id);
		id->next = to->ids;
		to->ids = id;
		id->home = to;
	} else if (id->home != to) {
		struct epoll_event ev = {.events = EPOLLIN};
		for (int i = 0; i < devs_count(); i++)
			if (id->home->h[i])
				epoll_ctl(to->ch.fd, EPOLL_CTL_ADD, id->home->wake[i], &ev); /* EEXIST: watched */
	}
	id->ch = to;
	id->id.channel = &to->ch;
	cm_unlock();
	if (any)
		signal_fd(to);
}

struct cm_id *id_alloc(struct cm_channel *ch, void *context, enum rdma_port_space ps)
{
	struct cm_id *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->ch = ch;
	c->home = ch;
	c->id.channel = &ch->ch;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
	c->id.route.addr.addr.ibaddr.pkey = htons(0xffff);
	pthread_cond_init(&c->acked, NULL);
	return c;
}

/* find_id is the ID homed on ch that is CM ID h on device i; lib_mu held. */
static struct cm_id *find_id(struct cm_channel *ch, int i, uint32_t h, int listener)
{
	for (struct cm_id *c = ch->ids; c; c = c->next) {
		if (listener && c->wild ? c->lh[i] == h : (c->dev == dev_at(i) && c->h == h))
			return c;
	}
	return NULL;
}

/* The fields of abi.CMEvent. */
struct wire_event {
	uint8_t type;
	uint32_t id, listen;
	uint16_t reject_reason;
	uint8_t gid[16];
	uint32_t remote_qpn, psn;
	uint8_t mtu, resp_res, init_depth, retry, rnr_retry;
	uint16_t pd_len;
	const uint8_t *pd;
	uint32_t qkey; /* a UD connect's: the SIDR_REP's Q_Key */
};

static int decode_event(struct buf *b, struct wire_event *w)
{
	w->type = get8(b);
	w->id = get32(b);
	w->listen = get32(b);
	w->reject_reason = get16(b);
	uint16_t n = get16(b);
	b->off += n; /* the error's text: the status says it */
	if (b->off > b->len)
		b->bad = 1;
	getn(b, w->gid, 16);
	w->remote_qpn = get32(b);
	w->psn = get32(b);
	w->mtu = get8(b);
	w->resp_res = get8(b);
	w->init_depth = get8(b);
	w->retry = get8(b);
	w->rnr_retry = get8(b);
	w->pd_len = get16(b);
	w->pd = b->p + b->off;
	b->off += w->pd_len;
	w->qkey = get32(b);
	return b->bad || b->off != b->len ? EPROTO : 0;
}

/* event_param fills the event's parameters from the daemon's: a UD
 * ID's (RDMA_PS_UDP, through SIDR) are rdma_ud_param, with an address
 * handle to the peer's GID (hop limit 64, as the IP route gives), as
 * cma.c's ucma_copy_ud_event; the others rdma_conn_param. */
static void event_param(struct cm_event *e, enum rdma_port_space ps, const struct wire_event *w, const uint8_t *pd,
			size_t n)
{
	if (n > sizeof(e->data))
		n = sizeof(e->data);
	memcpy(e->data, pd, n);
	if (ps == RDMA_PS_UDP) {
		struct rdma_ud_param *u = &e->ev.param.ud;
		u->private_data = n ? e->data : NULL;
		u->private_data_len = n;
		u->ah_attr.is_global = 1;
		memcpy(u->ah_attr.grh.dgid.raw, w->gid, 16);
		u->ah_attr.grh.hop_limit = 64;
		u->ah_attr.port_num = 1;
		u->qp_num = w->remote_qpn;
		u->qkey = w->qkey;
		return;
	}
	struct rdma_conn_param *p = &e->ev.param.conn;
	p->private_data = n ? e->data : NULL;
	p->private_data_len = n;
	p->responder_resources = w->resp_res;
	p->initiator_depth = w->init_depth;
	p->retry_count = w->retry;
	p->rnr_retry_count = w->rnr_retry;
	p->qp_num = w->remote_qpn;
}

/* connect_request makes the new cm_id of a connect request to listener
 * l, homed on l's home ch and on l's channel (cma.c
 * ucma_process_conn_req); lib_mu is held. */
static struct cm_event *connect_request(struct cm_channel *ch, struct cm_dev *d, struct cm_id *l,
					const struct wire_event *w)
{
	struct cm_id *c = id_alloc(l->ch, l->id.context, l->id.ps);
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!c || !e) {
		free(c);
		free(e);
		cm_destroy_id(d, w->id); /* the REQ is rejected */
		return NULL;
	}
	id_bind_dev(c, d);
	c->id.qp_type = l->id.qp_type; /* an XRC_RECV listener's IDs are XRC_RECV (ucma_process_conn_req) */
	c->h = w->id;
	c->home = ch;
	c->state = ID_CONNECTING;
	/* The cma_hdr (wire/mad/cma.go): version 0, IP version in the top
	 * nibble, the peer's port, its address, the address it connected to. */
	const uint8_t *pd = w->pd;
	size_t n = w->pd_len;
	if (n >= 36 && pd[0] == 0 && ((pd[1] >> 4) == 4 || (pd[1] >> 4) == 6)) {
		uint8_t src[16] = {0}, dst[16] = {0};
		if ((pd[1] >> 4) == 4) {
			src[10] = src[11] = dst[10] = dst[11] = 0xff;
			memcpy(src + 12, pd + 16, 4);
			memcpy(dst + 12, pd + 32, 4);
		} else {
			memcpy(src, pd + 4, 16);
			memcpy(dst, pd + 20, 16);
		}
		uint16_t sport;
		memcpy(&sport, pd + 2, 2);
		gid_to_addr(dst, rdma_get_src_port(&l->id), &c->id.route.addr.src_storage);
		/* A listener bound to 127.0.0.1 (or ::1) hears every device, as
		 * the wildcard's does, but only what was sent to a loopback
		 * address, as the kernel's listener matches its bound address
		 * against the request's (cma_match_private_data): a server
		 * that bound 127.0.0.1 is not reached from another host. */
		if (is_loopback(&l->id.route.addr.src_addr) && !is_loopback(&c->id.route.addr.src_addr)) {
			pthread_cond_destroy(&c->acked);
			free(c);
			free(e);
			cm_destroy_id(d, w->id); /* the REQ is rejected */
			return NULL;
		}
		gid_to_addr(src, sport, &c->id.route.addr.dst_storage);
		pd += 36;
		n -= 36;
	} else {
		gid_to_addr(d->gid.raw, rdma_get_src_port(&l->id), &c->id.route.addr.src_storage);
		gid_to_addr(w->gid, 0, &c->id.route.addr.dst_storage);
	}
	id_set_route(c, &c->id.route.addr.dst_addr);
	c->next = ch->ids;
	ch->ids = c;
	e->id = c;
	e->ev.id = &c->id;
	e->ev.listen_id = &l->id;
	e->ev.event = RDMA_CM_EVENT_CONNECT_REQUEST;
	event_param(e, l->id.ps, w, pd, n);
	return e;
}

/* convert turns the daemon's event into rdma_cm's, or NULL for an event
 * of an ID the program destroyed meanwhile; lib_mu is held. */
static struct cm_event *convert(struct cm_channel *ch, int i, const struct wire_event *w)
{
	struct cm_dev *d = dev_at(i);
	int type = cm_type(w->type);
	if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		struct cm_id *l = find_id(ch, i, w->listen, 1);
		if (!l || l->state != ID_LISTEN) {
			cm_destroy_id(d, w->id);
			return NULL;
		}
		return connect_request(ch, d, l, w);
	}
	struct cm_id *c = find_id(ch, i, w->id, 0);
	if (!c || type < 0)
		return NULL;
	struct cm_event *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	e->id = c;
	e->ev.id = &c->id;
	e->ev.event = type;
	event_param(e, c->id.ps, w, w->pd, w->pd_len);
	int ud = c->id.ps == RDMA_PS_UDP; /* a UD QP is in RTS from the start and no connection moves it */
	switch (type) {
	case RDMA_CM_EVENT_ESTABLISHED:
		/* The active side's QP went to RTS at the REP: the state its
		 * posts check follows (the passive side's did at accept). */
		c->state = ID_CONNECTED;
		if (!ud && c->id.qp && c->id.qp->state != IBV_QPS_RTS)
			rnicd_qp_sync(c->id.qp);
		break;
	case RDMA_CM_EVENT_REJECTED:
		/* The status is the REJ reason, as the kernel's rdma_cm
		 * reports it (8, invalid service ID: nobody listens). */
		e->ev.status = w->reject_reason;
		/* fall through */
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		/* UNREACHABLE: no answer, or a SIDR_REP's status other than
		 * success (cma_sidr_rep_handler reports it as the status). */
		if (type == RDMA_CM_EVENT_UNREACHABLE)
			e->ev.status = w->reject_reason ? w->reject_reason : -ETIMEDOUT;
		else if (type == RDMA_CM_EVENT_CONNECT_ERROR)
			e->ev.status = -ECONNRESET;
		c->state = ID_DISCONNECTED;
		if (c->id.qp && !ud) {
			struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
			ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE);
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		/* The agent moved the QP to ERR; posts still go to rnicd and
		 * flush there. The QP is not touched: rping destroys it with
		 * ibv_destroy_qp, leaving id->qp behind, while this event is
		 * fetched (cma.c does not touch it here either). */
		c->state = ID_DISCONNECTED;
		break;
	}
	return e;
}

/* fetch moves every event the rnicds hold for any channel into the
 * queue of the channel its ID is on now, and signals those other than
 * self; lib_mu is held. */
static int fetch(struct cm_channel *self)
{
	static __thread uint8_t r[MAX_MSG];
	for (struct cm_channel *ch = channels; ch; ch = ch->next) {
		for (int i = 0; i < devs_count(); i++) {
			while (ch->h[i]) {
				uint8_t b[4];
				struct buf req = {.p = b, .len = 4}, rep = {.p = r, .len = sizeof(r)};
				put32(&req, ch->h[i]);
				int err = cm_call(dev_at(i), K_CM_GET_EVENT, &req, -1, &rep);
				if (err)
					return err;
				struct wire_event w;
				if (decode_event(&rep, &w)) {
					rnic_log("rdma_get_cm_event: rnicd's event does not decode");
					return EPROTO;
				}
				if (w.type == 0)
					break;
				struct cm_event *e = convert(ch, i, &w);
				if (!e)
					continue;
				append(e->id->ch, e);
				if (e->id->ch != self)
					signal_fd(e->id->ch);
			}
		}
	}
	return 0;
}

/* drain empties the channel's eventfd and every wake pipe (all
 * non-blocking) without waiting; lib_mu is held. Another channel's
 * eventfd is its own to drain: it says its queue holds events. */
static void drain(struct cm_channel *self)
{
	uint64_t v;
	if (read(self->efd, &v, sizeof(v)) < 0) {
		/* EAGAIN: nothing to drain */
	}
	for (struct cm_channel *ch = channels; ch; ch = ch->next) {
		for (int i = 0; i < devs_count(); i++) {
			uint8_t b[512];
			if (ch->h[i] && read(ch->wake[i], b, sizeof(b)) < 0) {
				/* EAGAIN: nothing to drain */
			}
		}
	}
}

EXPORT int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	if (!channel || !event)
		return cm_err(EINVAL);
	struct cm_channel *ch = to_channel(channel);
	int nonblock = fcntl(ch->ch.fd, F_GETFL) & O_NONBLOCK;
	cm_lock();
	ch->waiters++;
	for (;;) {
		if (ch->closed) {
			/* Destroyed under a waiting thread: it waits on, as
			 * on the kernel's file. */
			cm_unlock();
			for (;;)
				poll(NULL, 0, -1);
		}
		/* Drained before the rnicds are asked, so that an event they
		 * queue after the question wakes the next wait. */
		drain(ch);
		int err = fetch(ch);
		struct cm_event *e = ch->head;
		if (e) {
			ch->head = e->next;
			if (!ch->head)
				ch->tail = NULL;
			else
				signal_fd(ch); /* more to come: the fd stays readable */
			e->id->events++;
			if (e->ev.listen_id)
				to_id(e->ev.listen_id)->events++;
			ch->waiters--;
			cm_unlock();
			*event = &e->ev;
			return 0;
		}
		if (err || nonblock) {
			ch->waiters--;
			cm_unlock();
			return cm_err(err ? err : EAGAIN);
		}
		cm_unlock();
		struct pollfd p = {.fd = ch->ch.fd, .events = POLLIN};
		poll(&p, 1, -1);
		cm_lock();
	}
}

EXPORT int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	if (!event)
		return cm_err(EINVAL);
	struct cm_event *e = (struct cm_event *)event;
	cm_lock();
	e->id->events--;
	pthread_cond_broadcast(&e->id->acked);
	if (event->listen_id) {
		to_id(event->listen_id)->events--;
		pthread_cond_broadcast(&to_id(event->listen_id)->acked);
	}
	cm_unlock();
	free(e);
	return 0;
}

EXPORT const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}
