/*
 * id.c: CM IDs (struct rdma_cm_id) and the calls on them, as cma.c
 * makes them with the kernel's ucma replaced by rnicd's CM requests.
 *
 * An ID is created here and made in an rnicd when it is bound to one
 * (rdma_bind_addr of an rnicd's address, rdma_resolve_addr): then its
 * verbs is that rnicd's ibv_context and every request about it goes on
 * that context's connection, where the program's QP for it lives. A
 * listener bound to the wildcard address is an ID in every rnicd, each
 * listening, as the kernel's rdma_listen on a port alone listens on
 * every device. Address and route resolution have nothing to wait for
 * on RoCEv2 (the GID is the IP address, the path is the port's), so
 * their events are queued at once.
 *
 * A synchronous ID (rdma_create_id without a channel) is one on a
 * private channel whose calls wait for the event they make and return
 * its result (sync_complete), as cma.c's ucma_complete: rdma_create_ep,
 * rdma_get_request and rdma_server/rdma_client are built on them.
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cma.h"

static uint32_t random32(void)
{
	uint32_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint32_t)(uintptr_t)&v ^ (uint32_t)rand();
	return v;
}

/* An ephemeral port for an ID bound without one: Linux's default
 * ip_local_port_range, 32768-60999. */
static uint16_t ephemeral_port(void) { return htons(32768 + random32() % 28232); }

static uint16_t *port_of(struct sockaddr *a)
{
	if (a->sa_family == AF_INET6)
		return &((struct sockaddr_in6 *)a)->sin6_port;
	return &((struct sockaddr_in *)a)->sin_port;
}

EXPORT __be16 rdma_get_src_port(struct rdma_cm_id *id) { return *port_of(&id->route.addr.src_addr); }
EXPORT __be16 rdma_get_dst_port(struct rdma_cm_id *id) { return *port_of(&id->route.addr.dst_addr); }

void id_bind_dev(struct cm_id *c, struct cm_dev *d)
{
	c->dev = d;
	c->id.verbs = d->verbs;
	c->id.port_num = 1;
	c->id.route.addr.addr.ibaddr.sgid = d->gid;
}

/* id_set_route fills the route to dst: RoCEv2's path is the port's, one
 * path record as cma.c's ucma_query_route gives the program. */
void id_set_route(struct cm_id *c, const struct sockaddr *dst)
{
	struct ibv_sa_path_rec *p = &c->path;
	memset(p, 0, sizeof(*p));
	addr_to_gid(dst, &p->dgid);
	p->sgid = c->dev->gid;
	p->pkey = htons(0xffff);
	p->hop_limit = 64; /* the kernel's default for RoCE (IPV6_DEFAULT_HOPLIMIT) */
	p->reversible = 1;
	p->numb_path = 1;
	p->mtu_selector = 2; /* exactly */
	p->mtu = c->dev->mtu;
	c->id.route.addr.addr.ibaddr.dgid = p->dgid;
	c->id.route.path_rec = p;
	c->id.route.num_paths = 1;
}

/* sync_complete waits, on a synchronous ID, for the event the call
 * just made (acking the one before), and turns its status into the
 * call's result as ucma_complete does: a REJECTED is ECONNREFUSED. */
int sync_complete(struct cm_id *c)
{
	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &c->id.event))
		return -1;
	struct rdma_cm_event *e = c->id.event;
	if (!e->status)
		return 0;
	if (e->event == RDMA_CM_EVENT_REJECTED)
		return cm_err(ECONNREFUSED);
	return cm_err(e->status < 0 ? -e->status : e->status);
}

EXPORT int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
			  enum rdma_port_space ps)
{
	if (!id)
		return cm_err(EINVAL);
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IB) {
		rnic_log("rdma_create_id: port space 0x%x is not built; rnicd's rdma_cm has RDMA_PS_TCP (RC), RDMA_PS_IB "
			 "(RC, XRC) and RDMA_PS_UDP (UD)",
			 ps);
		return cm_err(ENOSYS);
	}
	int sync = !channel;
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct cm_channel *ch = to_channel(channel);
	struct cm_id *c = id_alloc(ch, context, ps);
	if (!c) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return cm_err(ENOMEM);
	}
	c->sync = sync;
	channel_add(ch, c);
	*id = &c->id;
	return 0;
}

EXPORT int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cm_id *c = to_id(id);
	int sync = !channel;
	if (sync && c->sync)
		return cm_err(EINVAL); /* already on a private channel */
	if (sync && !(channel = rdma_create_event_channel()))
		return -1;
	struct cm_channel *old = c->ch;
	int was_sync = c->sync;
	if (was_sync && c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	channel_move(c, to_channel(channel));
	c->sync = sync;
	if (was_sync && old != c->ch)
		rdma_destroy_event_channel(&old->ch);
	return 0;
}

/* make_remote makes the ID in d's rnicd (its CM ID there: *h). */
static int make_remote(struct cm_id *c, struct cm_dev *d, uint32_t *h)
{
	struct cm_channel *ch = c->home;
	cm_lock();
	uint32_t chh = 0;
	int err = channel_on(ch, d, &chh);
	if (!err) {
		uint8_t b[4], r[16];
		struct buf req = {.p = b, .len = 4}, rep = {.p = r, .len = sizeof(r)};
		put32(&req, chh);
		err = cm_call(d, K_CM_CREATE_ID, &req, -1, &rep);
		*h = get32(&rep);
		if (!err && (rep.bad || !*h))
			err = EPROTO;
	}
	cm_unlock();
	return err;
}

EXPORT int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cm_id *c = to_id(id);
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	/* The daemon ends what the ID had: a DREQ for a connection, a REJ
	 * for one under way, the listen. */
	if (c->h)
		cm_destroy_id(c->dev, c->h);
	for (int i = 0; c->wild && i < devs_count(); i++)
		if (c->lh[i])
			cm_destroy_id(dev_at(i), c->lh[i]);
	struct cm_channel *ch = c->ch, *home = channel_remove(c);
	if (home)
		channel_free(home);
	if (c->sync)
		rdma_destroy_event_channel(&ch->ch);
	pthread_cond_destroy(&c->acked);
	mcast_free(c);
	free(c->qp_init_attr);
	free(c);
	return 0;
}

static int check_family(const struct sockaddr *a)
{
	if (a->sa_family != AF_INET && a->sa_family != AF_INET6) {
		rnic_log("address family %d: rnicd's rdma_cm has AF_INET and AF_INET6", a->sa_family);
		return EAFNOSUPPORT;
	}
	return 0;
}

/* bind takes a's address and port (an ephemeral one for port 0); to the
 * rnicd that holds the address, unless it is the wildcard or a loopback
 * address no rnicd holds. The kernel's rdma_cm binds 127.0.0.1 too (rxe
 * in Debian 12's kernel: rping -s -a 127.0.0.1 listens, where an address
 * of no interface is EADDRNOTAVAIL), and a listen there is heard on every
 * device, as the wildcard's: libfabric's verbs provider, given no node,
 * binds "localhost" to check a message endpoint's domain, and without it
 * fi_getinfo found no msg endpoint (ENODATA). The address stays the
 * program's, so rdma_get_local_addr answers 127.0.0.1. */
static int bind_id(struct cm_id *c, const struct sockaddr *a)
{
	int err = check_family(a);
	if (err)
		return err;
	struct sockaddr_storage s;
	memset(&s, 0, sizeof(s));
	memcpy(&s, a, addr_len(a));
	if (!*port_of((struct sockaddr *)&s))
		*port_of((struct sockaddr *)&s) = ephemeral_port();
	if (is_wildcard(a) || (is_loopback(a) && !dev_owning(a))) {
		c->wild = 1;
	} else {
		struct cm_dev *d = dev_owning(a);
		if (!d) {
			char txt[INET6_ADDRSTRLEN] = "?";
			const void *ip = a->sa_family == AF_INET ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
								 : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
			inet_ntop(a->sa_family, ip, txt, sizeof(txt));
			rnic_log("rdma_bind_addr: no running rnicd holds %s", txt);
			return EADDRNOTAVAIL;
		}
		uint32_t h = 0;
		if ((err = make_remote(c, d, &h)))
			return err;
		id_bind_dev(c, d);
		c->h = h;
	}
	c->id.route.addr.src_storage = s;
	c->state = ID_BOUND;
	return 0;
}

EXPORT int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *c = to_id(id);
	if (!addr || c->state != ID_IDLE)
		return cm_err(EINVAL);
	int err = bind_id(c, addr);
	return err ? cm_err(err) : 0;
}

/* loopback_dst says whether dst is 127.0.0.1, ::1 or the wildcard and
 * no rnicd's port holds it (a daemon another directory holds is not in
 * this process's list, and a connect to it must leave). */
static int loopback_dst(const struct sockaddr *dst)
{
	return !dev_owning(dst) && (is_loopback(dst) || is_wildcard(dst));
}

EXPORT int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
			     int timeout_ms)
{
	(void)timeout_ms; /* nothing to wait for: the event is queued at once */
	struct cm_id *c = to_id(id);
	if (!dst_addr)
		return cm_err(EINVAL);
	int err = check_family(dst_addr);
	if (err)
		return cm_err(err);
	if (src_addr && src_addr->sa_family && src_addr->sa_family != dst_addr->sa_family)
		return cm_err(EINVAL);
	if (c->state == ID_IDLE && src_addr && src_addr->sa_family && (err = bind_id(c, src_addr)))
		return cm_err(err);
	if (c->state == ID_IDLE || (c->state == ID_BOUND && c->wild)) {
		/* No source, or the wildcard: the rnicd dst is routed through. */
		struct cm_dev *d = dev_route(dst_addr);
		uint32_t h = 0;
		if ((err = make_remote(c, d, &h)))
			return cm_err(err);
		uint16_t port = c->state == ID_BOUND ? rdma_get_src_port(id) : ephemeral_port();
		id_bind_dev(c, d);
		c->h = h;
		c->wild = 0;
		gid_to_addr(d->gid.raw, port, &c->id.route.addr.src_storage);
	} else if (c->state != ID_BOUND) {
		return cm_err(EINVAL);
	}
	memset(&c->id.route.addr.dst_storage, 0, sizeof(c->id.route.addr.dst_storage));
	memcpy(&c->id.route.addr.dst_storage, dst_addr, addr_len(dst_addr));
	id_set_route(c, dst_addr);
	if (loopback_dst(dst_addr)) {
		/* As cma.c's cma_resolve_loopback: a loopback (or wildcard)
		 * destination no rnicd holds is the ID's own device, whose
		 * GID the path takes; the address stays what the program
		 * gave. Its REQ went to 127.0.0.1, where no rnicd listens,
		 * and the connect waited out every CM retry (qperf's client
		 * given 127.0.0.1 hung). */
		c->path.dgid = c->dev->gid;
		c->id.route.addr.addr.ibaddr.dgid = c->dev->gid;
	}
	c->state = ID_ADDR_RESOLVED;
	queue_event(c->ch, c, RDMA_CM_EVENT_ADDR_RESOLVED, 0);
	return sync_complete(c);
}

EXPORT int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	struct cm_id *c = to_id(id);
	if (c->state != ID_ADDR_RESOLVED)
		return cm_err(EINVAL);
	c->state = ID_ROUTE_RESOLVED;
	queue_event(c->ch, c, RDMA_CM_EVENT_ROUTE_RESOLVED, 0);
	return sync_complete(c);
}

/* service_id is the CM service ID of an rdma_cm port: the port space in
 * bits 16-31, the port in bits 0-15 (cma.c cma_get_service_id). */
static uint64_t service_id(struct cm_id *c, uint16_t port_be)
{
	return (uint64_t)c->id.ps << 16 | ntohs(port_be);
}

/* backlog travels to the daemon, which caps it as ucma_listen does (0,
 * negative or past 1024: 1024); so does the ID's QP type, whose requests
 * alone the listener hears (cma_ib_check_req_qp_type). */
static int listen_on(struct cm_dev *d, uint32_t h, uint64_t sid, int backlog, enum ibv_qp_type qp_type)
{
	uint8_t b[20], r[16];
	struct buf req = {.p = b, .len = sizeof(b)}, rep = {.p = r, .len = sizeof(r)};
	put32(&req, h);
	put64(&req, sid);
	put32(&req, backlog > 0 ? (uint32_t)backlog : 0);
	put8(&req, (uint8_t)qp_type);
	return cm_call(d, K_CM_LISTEN, &req, -1, &rep);
}

EXPORT int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct cm_id *c = to_id(id);
	if (c->state != ID_BOUND)
		return cm_err(EINVAL);
	uint64_t sid = service_id(c, rdma_get_src_port(id));
	int err = 0;
	if (!c->wild) {
		err = listen_on(c->dev, c->h, sid, backlog, id->qp_type);
	} else {
		for (int i = 0; i < devs_count() && !err; i++)
			if (!(err = make_remote(c, dev_at(i), &c->lh[i])))
				err = listen_on(dev_at(i), c->lh[i], sid, backlog, id->qp_type);
	}
	if (err)
		return cm_err(err == EINVAL ? EADDRINUSE : err);
	c->state = ID_LISTEN;
	return 0;
}

/* resources applies cma.c's rules for responder resources and initiator
 * depth: RDMA_MAX_* (or no conn_param) means the device's most, more
 * than the device's most is refused. */
static int resources(struct cm_dev *d, struct rdma_conn_param *p, uint8_t *resp, uint8_t *init)
{
	*resp = d->max_resp_res;
	*init = d->max_init_depth;
	if (!p)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES) {
		if (p->responder_resources > d->max_resp_res)
			return EINVAL;
		*resp = p->responder_resources;
	}
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH) {
		if (p->initiator_depth > d->max_init_depth)
			return EINVAL;
		*init = p->initiator_depth;
	}
	return 0;
}

/* conn_start checks what rdma_connect and rdma_accept share: the ID's
 * state, its QP, the resources (into resp and init) and the length of
 * the private data (into n, at most max). */
static int conn_start(struct cm_id *c, enum id_state want, const char *call, struct rdma_conn_param *p,
		      size_t max, uint8_t *resp, uint8_t *init, size_t *n)
{
	if (c->state != want || !c->h)
		return EINVAL;
	if (!c->id.qp) {
		rnic_log("%s without rdma_create_qp (conn_param->qp_num) is not built: rnicd's CM moves the QP itself",
			 call);
		return ENOSYS;
	}
	*n = p && p->private_data ? p->private_data_len : 0;
	if (*n > max || resources(c->dev, p, resp, init))
		return EINVAL;
	return 0;
}

/* The cma_hdr rdma_cm puts before a REQ's private data (wire/mad/cma.go):
 * version 0, IP version, the source port, source and destination
 * addresses. */
enum {
	CMA_HDR = 36,
	REQ_PRIVATE = 92,
	REP_PRIVATE = 196,
	REJ_PRIVATE = 148,
	DREQ_PRIVATE = 220,
	SIDR_REQ_PRIVATE = 216,
	SIDR_REP_PRIVATE = 136,
};

static void cma_hdr(struct cm_id *c, uint8_t *h)
{
	const struct sockaddr *s = &c->id.route.addr.src_addr, *d = &c->id.route.addr.dst_addr;
	memset(h, 0, CMA_HDR);
	memcpy(h + 2, port_of((struct sockaddr *)s), 2);
	if (s->sa_family == AF_INET) {
		h[1] = 4 << 4;
		memcpy(h + 16, &((const struct sockaddr_in *)s)->sin_addr, 4);
		memcpy(h + 32, &((const struct sockaddr_in *)d)->sin_addr, 4);
	} else {
		h[1] = 6 << 4;
		memcpy(h + 4, &((const struct sockaddr_in6 *)s)->sin6_addr, 16);
		memcpy(h + 20, &((const struct sockaddr_in6 *)d)->sin6_addr, 16);
	}
}

EXPORT int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = to_id(id);
	uint8_t resp, init;
	size_t n;
	int ud = id->ps == RDMA_PS_UDP; /* a SIDR_REQ: the agent resolves the peer's UD QP and Q_Key */
	int err = conn_start(c, ID_ROUTE_RESOLVED, "rdma_connect", p, (ud ? SIDR_REQ_PRIVATE : REQ_PRIVATE) - CMA_HDR,
			     &resp, &init, &n);
	if (err)
		return cm_err(err);
	uint8_t b[160];
	struct buf req = {.p = b, .len = sizeof(b)}, rep = {.p = b, .len = 0};
	put32(&req, c->h);
	put32(&req, c->id.qp->handle);
	putn(&req, c->path.dgid.raw, 16);
	put64(&req, service_id(c, rdma_get_dst_port(id)));
	put32(&req, random32() & 0xffffff);
	put8(&req, c->dev->mtu); /* ibv_mtu's values are the IBTA codes */
	put8(&req, resp);
	put8(&req, init);
	put8(&req, p ? (p->retry_count > 7 ? 7 : p->retry_count) : 7);
	put8(&req, p ? (p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count) : 7);
	put16(&req, CMA_HDR + n);
	uint8_t h[CMA_HDR];
	cma_hdr(c, h);
	putn(&req, h, CMA_HDR);
	if (n)
		putn(&req, p->private_data, n);
	if ((err = cm_call(c->dev, K_CM_CONNECT, &req, -1, &rep)))
		return cm_err(err);
	c->state = ID_CONNECTING;
	return sync_complete(c);
}

EXPORT int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	struct cm_id *c = to_id(id);
	uint8_t resp, init;
	size_t n;
	int ud = id->ps == RDMA_PS_UDP; /* a SIDR_REP naming the QP and RDMA_UDP_QKEY */
	int err = conn_start(c, ID_CONNECTING, "rdma_accept", p, ud ? SIDR_REP_PRIVATE : REP_PRIVATE, &resp, &init, &n);
	if (err)
		return cm_err(err);
	uint8_t b[256];
	struct buf req = {.p = b, .len = sizeof(b)}, rep = {.p = b, .len = 0};
	put32(&req, c->h);
	put32(&req, c->id.qp->handle);
	put32(&req, random32() & 0xffffff);
	put8(&req, resp); /* the agent cuts both to what the REQ offered */
	put8(&req, init);
	put8(&req, p ? (p->rnr_retry_count > 7 ? 7 : p->rnr_retry_count) : 7);
	put16(&req, n);
	if (n)
		putn(&req, p->private_data, n);
	if ((err = cm_call(c->dev, K_CM_ACCEPT, &req, -1, &rep)))
		return cm_err(err);
	/* The agent moved the QP through RTR to RTS before its REP, as
	 * cma.c's rdma_accept does: the program may post sends now. */
	if (!ud)
		rnicd_qp_sync(c->id.qp);
	return sync_complete(c);
}

static int send_data(struct cm_id *c, int k, uint16_t reason, const void *pd, size_t n, size_t max)
{
	if (!c->h || (pd == NULL && n))
		return cm_err(EINVAL);
	if (n > max)
		return cm_err(EINVAL);
	uint8_t b[256];
	struct buf req = {.p = b, .len = sizeof(b)}, rep = {.p = b, .len = 0};
	put32(&req, c->h);
	put16(&req, reason);
	put16(&req, n);
	if (n)
		putn(&req, pd, n);
	int err = cm_call(c->dev, k, &req, -1, &rep);
	return err ? cm_err(err) : 0;
}

/* reject sends a REJ with reason (0: the agent's 28, consumer defined,
 * as rdma_cm sends for rdma_reject). */
static int reject(struct rdma_cm_id *id, uint16_t reason, const void *private_data, uint8_t n)
{
	struct cm_id *c = to_id(id);
	int r = send_data(c, K_CM_REJECT, reason, private_data, n, REJ_PRIVATE);
	if (!r)
		c->state = ID_DISCONNECTED;
	return r;
}

EXPORT int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, 0, private_data, private_data_len);
}

/* rdma_reject_ece: IBTA's 35, vendor option not supported, as cma.c. */
EXPORT int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return reject(id, 35, private_data, private_data_len);
}

/* rdma_disconnect moves the QP to ERR (ucma_shutdown) and sends the
 * DREQ; after the peer's (DISCONNECTED seen here, or crossing ours in
 * the daemon) there is nothing to send, and it answers 0, as the
 * kernel's rdma_cm does. */
EXPORT int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cm_id *c = to_id(id);
	if (c->id.qp) {
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		int err = ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE);
		if (err)
			return cm_err(err);
	}
	switch (c->state) {
	case ID_DISCONNECTED:
		return 0;
	case ID_CONNECTED:
	case ID_CONNECTING:
		if (send_data(c, K_CM_DISCONNECT, 0, NULL, 0, DREQ_PRIVATE))
			return -1;
		c->state = ID_DISCONNECTED;
		/* A synchronous ID waits for its DISCONNECTED: the peer's DREP,
		 * or its DREQ, which crossed ours. */
		return sync_complete(c);
	default:
		return cm_err(EINVAL);
	}
}

EXPORT int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	(void)id;
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			/* rnicd holds no port of an ID that does not listen,
			 * and an ID's family is its address's. */
			return optval && optlen == sizeof(int) ? 0 : cm_err(EINVAL);
		case RDMA_OPTION_ID_TOS:
			if (optval && optlen == 1 && *(uint8_t *)optval == 0)
				return 0;
			rnic_log("rdma_set_option: a TOS other than 0 is not built (the CM's REQ carries traffic class 0)");
			return cm_err(ENOSYS);
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			rnic_log("rdma_set_option: RDMA_OPTION_ID_ACK_TIMEOUT is not built (the CM agent sets the QP's timeout)");
			return cm_err(ENOSYS);
		}
	}
	rnic_log("rdma_set_option: level %d option %d is not built", level, optname);
	return cm_err(ENOSYS);
}
