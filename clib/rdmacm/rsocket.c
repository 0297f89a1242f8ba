/*
 * rsocket.c: rsockets (rdma-core's <rdma/rsocket.h>) on rnicd: stream
 * sockets whose bytes travel over an RC QP that this library's rdma_cm
 * connects, speaking rdma-core's rsocket wire protocol (version 1), so
 * that an rsocket here talks to one on rxe or a ConnectX.
 *
 * The protocol, as rdma-core's librdmacm/rsocket.c puts it on the wire:
 *
 *   - Connection: rdma_cm over RDMA_PS_TCP. The REQ's private data (after
 *     rdma_cm's 36-byte cma_hdr) and the REP's carry 40 bytes of
 *     connection data: version 1; flags (bit 0: the sender is big-endian,
 *     bit 1: it has an iomap); be16 credits (its receive queue's size);
 *     3 reserved bytes; the size of its target iomap (below), scaled
 *     into a byte (n up to 128, else 128 | n / 256); then two {be64
 *     addr, be32 rkey, be32 length} entries: the sender's target list
 *     (an array of {addr, key, length} entries, in the sender's byte
 *     order, that the peer RDMA WRITEs to offer it receive buffer;
 *     length here is the entry count, 2) and the first half of its
 *     receive buffer. rdma-core always sets the iomap flag, as here.
 *   - Every message is an RDMA WRITE WITH IMMEDIATE, which consumes one
 *     of the receiver's zero-SGE receives; the immediate's top 3 bits
 *     are the operation, the low 29 its data:
 *       0 DATA: data is the length of the bytes the write placed in the
 *         receiver's buffer, which it reads as a ring in arrival order;
 *       4 SGL: data is the new credit limit (the sender's message sequence
 *         number up to which it may send); if the write carries 16 bytes
 *         they are a target-list entry offering the next half of the
 *         buffer (an imm-only write, length 0, carries credits alone);
 *       6 IOMAP_SGL: data is an index into the receiver's target
 *         iomap, and the write's 24 bytes are that entry;
 *       7 CTRL: data 0 DISCONNECT (no more in either direction),
 *         1 KEEPALIVE (ignored), 2 SHUTDOWN (no more from the sender).
 *   - Each side offers its receive buffer half by half: the first in the
 *     connection data, the next at once by SGL, then each half again as
 *     the program reads it out. A DATA write never crosses a target
 *     entry, so the bytes sit contiguously in the ring.
 *   - At most 4 control messages (SGL, CTRL) are in flight, each sender
 *     keeps that many send WRs for them; every send is signalled, and its
 *     wr_id holds its immediate, whose completion returns its credits.
 *   - iomap (riomap, riowrite): the target iomap is an array of
 *     RDMA_IOMAPSIZE entries {u64 offset; u64 addr; u32 key; u32 length}
 *     in the receiver's byte order, right behind its target list and
 *     under the same rkey. riomap(PROT_WRITE) registers a buffer for
 *     remote writes and takes a free index of the peer's iomap; the
 *     entry goes as an IOMAP_SGL (a data message: one credit, one send
 *     WR) before the next rsend or riowrite. riowrite looks its offset
 *     up in the iomap the peer wrote and RDMA WRITEs (no immediate, so
 *     no credit, and nothing tells the peer: programs say so with an
 *     rsend, or watch their buffer) at addr + offset - entry offset.
 *     riounmap tells the peer nothing either: a later write of its
 *     fails at the NIC's rkey check, and the connection with it.
 *
 * What is not built: datagram rsockets (SOCK_DGRAM, rdma-core's UDP
 * service), keepalive messages (SO_KEEPALIVE on), RDMA_ROUTE, and the
 * /etc/rdma/rsocket tunables; each fails with a message saying so.
 *
 * Unlike rdma-core no thread runs behind the program: a listener accepts
 * its connect requests, and every socket takes its completions and CM
 * events, when the program calls in (raccept, rrecv, rsend, rpoll, ...).
 * A request waits in rnicd's CM agent meanwhile (the peer's CM retries
 * for about a minute), so a program that never calls its listener is
 * what delays the peer, as with a TCP listener's program that never
 * calls accept.
 *
 * A socket's number is the fd of its own rdma_cm event channel, so that
 * it is a real open file no other open can return, and rpoll can tell
 * rsockets from the program's other fds by looking them up.
 */
#include <byteswap.h>
#include <endian.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cma.h"

/* The wire protocol's constants (see above). */
enum {
	RS_VERSION = 1,
	RS_FLAG_NET = 1 << 0, /* the sender's host order is big-endian */
	RS_FLAG_IOMAP = 1 << 1,
	RS_CONN_DATA = 40,
	RS_SGE = 16,      /* a target-list entry: u64 addr, u32 key, u32 length */
	RS_TARGETS = 2,   /* entries in a target list: the buffer's two halves */
	RS_OP_DATA = 0,
	RS_OP_WRITE = 2, /* riowrite's RDMA WRITE: in a send's wr_id only */
	RS_OP_SGL = 4,
	RS_OP_IOMAP_SGL = 6,
	RS_OP_CTRL = 7,
	RS_CTRL_DISCONNECT = 0,
	RS_CTRL_KEEPALIVE = 1,
	RS_CTRL_SHUTDOWN = 2,
	RS_CTRL_SLOTS = 4, /* control messages in flight (rdma-core's RS_QP_CTRL_SIZE) */
	RS_IOMAP_ENTRY = 24,
	/* The largest iomap a byte of connection data can say: 128 | 127,
	 * 127 * 256 entries. */
	RS_IOMAP_MAX = 127 << 8,
};
#define RS_MSG(op, data) ((uint32_t)(op) << 29 | ((uint32_t)(data) & 0x1fffffff))
#define RS_MSG_OP(m) ((m) >> 29)
#define RS_MSG_DATA(m) ((m) & 0x1fffffff)
/* A receive's wr_id has the top bit set; a send's holds its immediate. */
#define RS_WRID_RECV (1ULL << 63)

/* Sizes. rdma-core's defaults, so that both ends of a mixed connection
 * offer the same: 384 send and receive WRs, 64 bytes inline, 128 KiB
 * send and receive buffers. A send waits for 2 KiB of free send buffer
 * (RS_SNDLOWAT), and a message grows from 2 KiB to 64 KiB as a long
 * send goes on, so that the first bytes leave early. */
enum {
	DEF_QSIZE = 384,
	DEF_INLINE = 64,
	DEF_BUF = 1 << 17,
	QSIZE_MIN = 16,
	QSIZE_MAX = 0xfffe,
	SNDLOWAT = 2048,
	XFER_START = 2048,
	XFER_MAX = 65536,
	/* Connections a listener holds accepted and not yet taken by
	 * raccept; past it a request is rejected, as a full backlog. */
	ACCEPT_MAX = 64,
	/* The longest sleep of a wait before it looks again: another
	 * thread on the same socket (rsend beside rrecv) may take the
	 * completion event that would have woken it, or the completions
	 * themselves. rdma-core's rpoll wakes as often (wake_up_interval). */
	WAKE_MS = 500,
};

/* A socket's states. CONNECTED with READABLE and WRITABLE is a working
 * connection; rshutdown and the peer's SHUTDOWN clear the two, the
 * peer's DISCONNECT or the CM's DISCONNECTED makes it DISCONNECTED. */
enum {
	ST_INIT,
	ST_BOUND,
	ST_LISTENING,
	ST_RESOLVING,   /* rconnect: address and route resolution under way */
	ST_CONNECTING,  /* REQ sent, no REP yet */
	ST_ACCEPTING,   /* REP sent, no RTU yet (a listener's pending socket) */
	ST_CONNECTED,
	ST_DISCONNECTED,
	ST_CONNECT_ERROR,
	ST_ERROR,
};

/* A target-list entry as it lies in memory (either end's target list). */
struct rs_sge {
	uint64_t addr;
	uint32_t key;
	uint32_t length;
};

/* A target iomap entry: the peer's mapping of offsets [offset, offset +
 * sge.length) onto its memory at sge.addr. */
struct rs_iomap {
	uint64_t offset;
	struct rs_sge sge;
};
_Static_assert(sizeof(struct rs_iomap) == RS_IOMAP_ENTRY, "an iomap entry is 24 bytes on the wire");

/* A buffer riomap registered: for the peer to write (index into the
 * peer's iomap) or, without PROT_WRITE, for nothing but the record
 * (index -1, on the local list). */
struct rs_iomr {
	struct rs_iomr *next;
	uint64_t offset;
	struct ibv_mr *mr;
	int index;
	int pending; /* its IOMAP_SGL is yet to be sent */
};

struct rsock {
	int fd;
	int domain;
	pthread_mutex_t mu;
	int state;
	int readable, writable;
	int nonblock; /* O_NONBLOCK by rfcntl */
	int fl;       /* the file status flags rfcntl F_SETFL gave */
	int err;      /* SO_ERROR */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;

	/* Options: sizes take effect at the connection. */
	uint32_t sbuf_size, rbuf_size;
	uint32_t sq_size, rq_size, sq_inline;
	uint32_t iomap_size; /* entries of the target iomap offered the peer */
	int reuseaddr, nodelay, oobinline, linger_off, v6only, keepidle;

	/* A listener's accepted sockets: pending (REP sent) and ready. */
	struct rsock *pending, *ready;
	int naccepted;
	struct rsock *next;

	/* The connection's resources. */
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	int armed;
	uint8_t *sbuf, *rbuf;
	struct rs_sge *targets; /* our target list, which the peer writes */
	volatile struct rs_iomap *tiomap; /* our target iomap, behind it, which the peer writes too */
	uint8_t *ctrl;          /* SGL entries to send when they cannot go inline */
	struct ibv_mr *smr, *rmr, *tmr, *cmr;

	/* Sending. */
	uint16_t sseq_no, sseq_comp; /* messages sent; the peer's credit limit */
	int tidx;                    /* the target entry being filled */
	uint32_t sqe_avail;          /* send WRs free for data */
	uint32_t sbuf_avail, shead;  /* free bytes of sbuf; where the next copy goes */
	unsigned ctrl_seqno, ctrl_max;
	int swap;                    /* the peer's byte order is not ours */

	/* Receiving. */
	uint16_t rseq_no, rseq_comp; /* messages read out; when to send credits next */
	uint32_t *rmsg;              /* lengths of the messages received, a ring */
	uint32_t rmsg_head, rmsg_tail, rmsg_cap;
	uint32_t roff;               /* where the next byte to read lies in rbuf */
	uint32_t rbuf_avail;         /* read out and not yet offered to the peer */
	uint32_t rfree;              /* the next half to offer */
	uint64_t peer_targets;       /* the peer's target list */
	uint32_t peer_tkey, peer_tcount, peer_tidx;

	/* iomap: the peer's target iomap, and what riomap registered. */
	uint64_t peer_iomap;
	uint32_t peer_iomap_key, peer_iomap_len;
	struct rs_iomr **iomaps;     /* by index into the peer's iomap (peer_iomap_len) */
	struct rs_iomr *iomaps_local;
	uint32_t iomaps_pending;
};

/* The open rsockets by number; tab_mu guards the table, each socket's mu
 * its state. */
static pthread_mutex_t tab_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rsock **tab;
static int tab_cap;

static struct rsock *lookup(int fd)
{
	pthread_mutex_lock(&tab_mu);
	struct rsock *rs = fd >= 0 && fd < tab_cap ? tab[fd] : NULL;
	pthread_mutex_unlock(&tab_mu);
	return rs;
}

/* lock_sock is the open rsocket s, locked; NULL and EBADF if none. */
static struct rsock *lock_sock(int s)
{
	struct rsock *rs = lookup(s);
	if (!rs) {
		errno = EBADF;
		return NULL;
	}
	pthread_mutex_lock(&rs->mu);
	return rs;
}

static int tab_insert(struct rsock *rs)
{
	pthread_mutex_lock(&tab_mu);
	if (rs->fd >= tab_cap) {
		int n = tab_cap ? tab_cap : 64;
		while (n <= rs->fd)
			n *= 2;
		struct rsock **t = realloc(tab, n * sizeof(*t));
		if (!t) {
			pthread_mutex_unlock(&tab_mu);
			return ENOMEM;
		}
		memset(t + tab_cap, 0, (n - tab_cap) * sizeof(*t));
		tab = t;
		tab_cap = n;
	}
	tab[rs->fd] = rs;
	pthread_mutex_unlock(&tab_mu);
	return 0;
}

static void tab_remove(struct rsock *rs)
{
	pthread_mutex_lock(&tab_mu);
	if (rs->fd >= 0 && rs->fd < tab_cap && tab[rs->fd] == rs)
		tab[rs->fd] = NULL;
	pthread_mutex_unlock(&tab_mu);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int nosys(const char *call, const char *why)
{
	rnic_log("%s: %s", call, why);
	return cm_err(ENOSYS);
}

/* rs_new makes a socket with its event channel and CM ID; inherit is
 * the listener whose options an accepted socket takes. id, when given,
 * is an accepted connection's ID, moved onto the new channel. */
static struct rsock *rs_new(int domain, const struct rsock *inherit, struct rdma_cm_id *id)
{
	struct rsock *rs = calloc(1, sizeof(*rs));
	if (!rs)
		return NULL;
	pthread_mutex_init(&rs->mu, NULL);
	rs->domain = domain;
	rs->fd = -1;
	if (inherit) {
		rs->sbuf_size = inherit->sbuf_size;
		rs->rbuf_size = inherit->rbuf_size;
		rs->sq_size = inherit->sq_size;
		rs->rq_size = inherit->rq_size;
		rs->sq_inline = inherit->sq_inline;
		rs->iomap_size = inherit->iomap_size;
		rs->nodelay = inherit->nodelay;
	} else {
		rs->sbuf_size = rs->rbuf_size = DEF_BUF;
		rs->sq_size = rs->rq_size = DEF_QSIZE;
		rs->sq_inline = DEF_INLINE;
	}
	/* The channel's fd is the socket's number; it is non-blocking so
	 * that events are taken without waiting, the program's blocking
	 * being made by the waits here. */
	rs->ch = rdma_create_event_channel();
	if (!rs->ch || set_nonblock(rs->ch->fd))
		goto err;
	if (id) {
		if (rdma_migrate_id(id, rs->ch))
			goto err;
		id->context = rs;
		rs->id = id;
	} else if (rdma_create_id(rs->ch, &rs->id, rs, RDMA_PS_TCP)) {
		goto err;
	}
	rs->fd = rs->ch->fd;
	return rs;
err:;
	int e = errno;
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	pthread_mutex_destroy(&rs->mu);
	free(rs);
	errno = e;
	return NULL;
}

static void iomr_free(struct rs_iomr *m)
{
	ibv_dereg_mr(m->mr);
	free(m);
}

/* rs_release frees a connection's resources (the QP first, which no
 * longer writes into the buffers then), riomap's registrations too. */
static void rs_release(struct rsock *rs)
{
	if (rs->id && rs->id->qp)
		rdma_destroy_qp(rs->id);
	if (rs->cq)
		ibv_destroy_cq(rs->cq);
	if (rs->cc)
		ibv_destroy_comp_channel(rs->cc);
	for (uint32_t i = 0; rs->iomaps && i < rs->peer_iomap_len; i++)
		if (rs->iomaps[i])
			iomr_free(rs->iomaps[i]);
	while (rs->iomaps_local) {
		struct rs_iomr *m = rs->iomaps_local;
		rs->iomaps_local = m->next;
		iomr_free(m);
	}
	struct ibv_mr *mrs[4] = {rs->smr, rs->rmr, rs->tmr, rs->cmr};
	for (int i = 0; i < 4; i++)
		if (mrs[i])
			ibv_dereg_mr(mrs[i]);
	free(rs->sbuf);
	free(rs->rbuf);
	free(rs->targets);
	free(rs->ctrl);
	free(rs->rmsg);
	free(rs->iomaps);
	rs->cq = NULL;
	rs->cc = NULL;
	rs->smr = rs->rmr = rs->tmr = rs->cmr = NULL;
	rs->sbuf = rs->rbuf = rs->ctrl = NULL;
	rs->targets = NULL;
	rs->tiomap = NULL;
	rs->rmsg = NULL;
	rs->iomaps = NULL;
	rs->iomaps_pending = 0;
}

static void rs_free_all(struct rsock *rs);

/* rs_destroy ends a socket: its connection's resources, its ID (the
 * daemon sends a DREQ for a connection, a REJ for one under way), its
 * channel, and a listener's accepted sockets that nobody took. */
static void rs_destroy(struct rsock *rs)
{
	rs_free_all(rs->pending);
	rs_free_all(rs->ready);
	rs_release(rs);
	if (rs->id)
		rdma_destroy_id(rs->id);
	if (rs->ch)
		rdma_destroy_event_channel(rs->ch);
	pthread_mutex_destroy(&rs->mu);
	free(rs);
}

static void rs_free_all(struct rsock *rs)
{
	while (rs) {
		struct rsock *n = rs->next;
		rs_destroy(rs);
		rs = n;
	}
}

static uint32_t clamp_qsize(uint32_t n, uint32_t max)
{
	if (max > QSIZE_MAX)
		max = QSIZE_MAX;
	return n < QSIZE_MIN ? QSIZE_MIN : n > max ? max : n;
}

static void *page_alloc(size_t n)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, n))
		return NULL;
	memset(p, 0, n);
	return p;
}

static int post_recvs(struct rsock *rs, uint32_t n)
{
	/* Zero SGEs: every message is a WRITE WITH IMMEDIATE, whose bytes
	 * land where the write says; the receive only carries the
	 * immediate. */
	struct ibv_recv_wr wr = {.wr_id = RS_WRID_RECV}, *bad;
	for (uint32_t i = 0; i < n; i++) {
		int err = ibv_post_recv(rs->id->qp, &wr, &bad);
		if (err)
			return err;
	}
	return 0;
}

/* rs_setup makes the connection's CQ, QP, buffers and receives on the
 * ID's device, before the connection data can be written. */
static int rs_setup(struct rsock *rs)
{
	struct ibv_device_attr da;
	if (ibv_query_device(rs->id->verbs, &da))
		return errno ? errno : EIO;
	rs->sq_size = clamp_qsize(rs->sq_size, da.max_qp_wr);
	rs->rq_size = clamp_qsize(rs->rq_size, da.max_qp_wr);
	if (!(rs->cc = ibv_create_comp_channel(rs->id->verbs)) || set_nonblock(rs->cc->fd))
		return errno ? errno : EIO;
	/* One CQ for both queues: a send's completion may be what a
	 * receiver waits for (credits back, room in the send buffer). */
	if (!(rs->cq = ibv_create_cq(rs->id->verbs, rs->sq_size + rs->rq_size, rs, rs->cc, 0)))
		return errno ? errno : EIO;
	struct ibv_qp_init_attr qa = {
		.qp_context = rs,
		.send_cq = rs->cq,
		.recv_cq = rs->cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = {.max_send_wr = rs->sq_size, .max_recv_wr = rs->rq_size, .max_send_sge = 2,
			.max_recv_sge = 1, .max_inline_data = rs->sq_inline},
	};
	if (rdma_create_qp(rs->id, NULL, &qa))
		return errno ? errno : EIO;
	rs->sq_inline = qa.cap.max_inline_data;
	struct ibv_pd *pd = rs->id->qp->pd;
	rs->sbuf = page_alloc(rs->sbuf_size);
	rs->rbuf = page_alloc(rs->rbuf_size);
	/* The target list and the target iomap behind it, where the peer
	 * finds it (its address + 16 * the list's length), one region the
	 * peer may write and no byte more: an IOMAP_SGL for an index past
	 * the iomap fails at the NIC's rkey check. The SGL entries this
	 * side sends when they may not go inline (RDMA_INLINE below 16)
	 * have a region of their own, which the peer cannot write. */
	size_t tlen = RS_TARGETS * RS_SGE + (size_t)rs->iomap_size * RS_IOMAP_ENTRY;
	rs->targets = page_alloc(tlen);
	rs->ctrl = page_alloc(RS_CTRL_SLOTS * RS_SGE);
	rs->rmsg_cap = rs->rq_size + 1;
	rs->rmsg = calloc(rs->rmsg_cap, sizeof(*rs->rmsg));
	if (!rs->sbuf || !rs->rbuf || !rs->targets || !rs->ctrl || !rs->rmsg)
		return ENOMEM;
	rs->tiomap = (volatile struct rs_iomap *)((uint8_t *)rs->targets + RS_TARGETS * RS_SGE);
	rs->smr = ibv_reg_mr(pd, rs->sbuf, rs->sbuf_size, IBV_ACCESS_LOCAL_WRITE);
	rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->tmr = ibv_reg_mr(pd, rs->targets, tlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rs->cmr = ibv_reg_mr(pd, rs->ctrl, RS_CTRL_SLOTS * RS_SGE, IBV_ACCESS_LOCAL_WRITE);
	if (!rs->smr || !rs->rmr || !rs->tmr || !rs->cmr)
		return errno ? errno : EIO;
	rs->sbuf_avail = rs->sbuf_size;
	rs->sqe_avail = rs->sq_size - RS_CTRL_SLOTS;
	rs->ctrl_max = RS_CTRL_SLOTS;
	/* The first half goes in the connection data; the second is free,
	 * offered by the first credit update. */
	rs->rfree = rs->rbuf_size / 2;
	rs->rbuf_avail = rs->rbuf_size / 2;
	rs->rseq_comp = rs->rq_size / 2;
	if (ibv_req_notify_cq(rs->cq, 0) == 0)
		rs->armed = 1;
	return post_recvs(rs, rs->rq_size);
}

static void put_wire_sge(uint8_t *p, uint64_t addr, uint32_t key, uint32_t length)
{
	uint64_t a = htobe64(addr);
	uint32_t k = htobe32(key), l = htobe32(length);
	memcpy(p, &a, 8);
	memcpy(p + 8, &k, 4);
	memcpy(p + 12, &l, 4);
}

static void get_wire_sge(const uint8_t *p, struct rs_sge *s)
{
	uint64_t a;
	uint32_t k, l;
	memcpy(&a, p, 8);
	memcpy(&k, p + 8, 4);
	memcpy(&l, p + 12, 4);
	s->addr = be64toh(a);
	s->key = be32toh(k);
	s->length = be32toh(l);
}

static int host_is_net(void) { return __BYTE_ORDER == __BIG_ENDIAN; }

/* The iomap's size in a byte of connection data, as rdma-core scales
 * it: up to 128 as it is, above in units of 256 (the rest dropped). */
static uint8_t iomap_to_scale(uint32_t n) { return n <= 128 ? n : 128 | (n >> 8); }
static uint32_t iomap_from_scale(uint8_t b) { return b <= 128 ? b : (uint32_t)(b & 127) << 8; }

/* conn_data writes this side's connection data into p (40 bytes). */
static void conn_data(const struct rsock *rs, uint8_t *p)
{
	memset(p, 0, RS_CONN_DATA);
	p[0] = RS_VERSION;
	p[1] = RS_FLAG_IOMAP | (host_is_net() ? RS_FLAG_NET : 0);
	uint16_t credits = htobe16(rs->rq_size);
	memcpy(p + 2, &credits, 2);
	p[7] = iomap_to_scale(rs->iomap_size);
	put_wire_sge(p + 8, (uintptr_t)rs->targets, rs->tmr->rkey, RS_TARGETS);
	put_wire_sge(p + 24, (uintptr_t)rs->rbuf, rs->rmr->rkey, rs->rbuf_size / 2);
}

/* take_conn_data reads the peer's connection data; EPROTO for what no
 * version 1 rsocket sends. */
static int take_conn_data(struct rsock *rs, const void *pd, size_t n)
{
	const uint8_t *p = pd;
	if (!p || n < RS_CONN_DATA || p[0] != RS_VERSION) {
		rnic_log("rsocket: the peer's connection data is not rsockets version %d (%zu bytes, version %d)",
			 RS_VERSION, n, p && n ? p[0] : -1);
		return EPROTO;
	}
	rs->swap = !!(p[1] & RS_FLAG_NET) != host_is_net();
	uint16_t credits;
	memcpy(&credits, p + 2, 2);
	struct rs_sge tl, data;
	get_wire_sge(p + 8, &tl);
	get_wire_sge(p + 24, &data);
	/* A target list of no entries could never be written, and an
	 * offered half larger than 2^29 bytes could not be described by a
	 * DATA message's length. */
	if (tl.length == 0 || tl.length > 0xffff || data.length > 0x1fffffff) {
		rnic_log("rsocket: the peer's connection data offers %u target entries and %u bytes", tl.length,
			 data.length);
		return EPROTO;
	}
	rs->peer_targets = tl.addr;
	rs->peer_tkey = tl.key;
	rs->peer_tcount = tl.length;
	rs->peer_tidx = 1; /* entry 0 is the half the connection data gave */
	rs->targets[0] = (struct rs_sge){.addr = data.addr, .key = data.key, .length = data.length};
	rs->sseq_comp = be16toh(credits);
	/* The peer's iomap lies behind its target list, under its key. */
	if (p[1] & RS_FLAG_IOMAP) {
		rs->peer_iomap = tl.addr + (uint64_t)RS_SGE * tl.length;
		rs->peer_iomap_key = tl.key;
		rs->peer_iomap_len = iomap_from_scale(p[7]);
	}
	return 0;
}

static void set_connected(struct rsock *rs)
{
	rs->state = ST_CONNECTED;
	rs->readable = rs->writable = 1;
}

static void set_error(struct rsock *rs, int err)
{
	if (rs->state == ST_CONNECTED) {
		rs->state = ST_ERROR;
		rs->err = err;
	}
	rs->readable = rs->writable = 0;
}

static void set_disconnected(struct rsock *rs)
{
	rs->state = ST_DISCONNECTED;
	rs->readable = rs->writable = 0;
}

/* post_msg sends a message with no bytes: credits, or a control. The
 * write's address and key go unchecked for a zero-length write (IBTA
 * and rxe alike), so none are given. */
static int post_msg(struct rsock *rs, uint32_t msg)
{
	struct ibv_send_wr wr = {.wr_id = msg, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .imm_data = htobe32(msg)}, *bad;
	return ibv_post_send(rs->id->qp, &wr, &bad);
}

static int ctrl_avail(const struct rsock *rs) { return rs->ctrl_seqno != rs->ctrl_max; }

/* give_credits offers the peer the next half of the receive buffer once
 * it is read out, or, with half the receive queue's messages read since
 * the last update, raises the credit limit alone. */
static void give_credits(struct rsock *rs)
{
	if (rs->state != ST_CONNECTED || !ctrl_avail(rs))
		return;
	uint32_t half = rs->rbuf_size / 2;
	if (rs->rbuf_avail < half && (int16_t)(rs->rseq_no - rs->rseq_comp) < 0)
		return;
	rs->ctrl_seqno++;
	rs->rseq_comp = rs->rseq_no + rs->rq_size / 2;
	uint32_t msg = RS_MSG(RS_OP_SGL, (uint16_t)(rs->rseq_no + rs->rq_size));
	if (rs->rbuf_avail < half) {
		if (post_msg(rs, msg))
			set_error(rs, EIO);
		return;
	}
	/* The entry in the peer's byte order: it reads it as it lies. */
	struct rs_sge e = {.addr = (uintptr_t)rs->rbuf + rs->rfree, .key = rs->rmr->rkey, .length = half};
	if (rs->swap)
		e = (struct rs_sge){.addr = bswap_64(e.addr), .key = bswap_32(e.key), .length = bswap_32(e.length)};
	struct ibv_sge sge = {.length = sizeof(e)};
	int flags = 0;
	if (rs->sq_inline >= sizeof(e)) {
		sge.addr = (uintptr_t)&e;
		flags = IBV_SEND_INLINE;
	} else {
		/* One slot per control message in flight: the slot is free
		 * again when its write completed. */
		uint8_t *slot = rs->ctrl + RS_SGE * (rs->ctrl_seqno % RS_CTRL_SLOTS);
		memcpy(slot, &e, sizeof(e));
		sge.addr = (uintptr_t)slot;
		sge.lkey = rs->cmr->lkey;
	}
	struct ibv_send_wr wr = {.wr_id = msg, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				 .send_flags = flags, .imm_data = htobe32(msg)}, *bad;
	wr.wr.rdma.remote_addr = rs->peer_targets + (uint64_t)rs->peer_tidx * RS_SGE;
	wr.wr.rdma.rkey = rs->peer_tkey;
	if (ibv_post_send(rs->id->qp, &wr, &bad)) {
		set_error(rs, EIO);
		return;
	}
	rs->rbuf_avail -= half;
	rs->rfree = (rs->rfree + half) % rs->rbuf_size;
	rs->peer_tidx = (rs->peer_tidx + 1) % rs->peer_tcount;
}

/* take_recv handles a message received, counting the receive to post again. */
static void take_recv(struct rsock *rs, const struct ibv_wc *wc, uint32_t *reposts)
{
	if (wc->status != IBV_WC_SUCCESS)
		return; /* flushed: the QP is in error */
	(*reposts)++;
	if (!(wc->wc_flags & IBV_WC_WITH_IMM)) {
		/* A SEND: what rdma-core sends for iWARP only. */
		rnic_log("rsocket: the peer sent a message without immediate data (iWARP's rsockets); closing");
		set_error(rs, EPROTO);
		return;
	}
	uint32_t msg = be32toh(wc->imm_data);
	switch (RS_MSG_OP(msg)) {
	case RS_OP_DATA: {
		uint32_t n = RS_MSG_DATA(msg);
		/* A write never exceeds a half, and at most rq_size messages
		 * are unread (the credits given): anything else is a peer
		 * that does not keep the protocol. */
		uint32_t next = (rs->rmsg_tail + 1) % rs->rmsg_cap;
		if (n > rs->rbuf_size / 2 || next == rs->rmsg_head) {
			rnic_log("rsocket: the peer wrote %u bytes past its credits or its buffer; closing", n);
			set_error(rs, EPROTO);
			return;
		}
		rs->rmsg[rs->rmsg_tail] = n;
		rs->rmsg_tail = next;
		break;
	}
	case RS_OP_SGL:
		rs->sseq_comp = (uint16_t)RS_MSG_DATA(msg);
		break;
	case RS_OP_IOMAP_SGL:
		/* The entry is in place (riowrite reads it when it needs it);
		 * an index past what was offered is a peer that does not
		 * keep the protocol, whose write may have gone elsewhere. */
		if (RS_MSG_DATA(msg) >= rs->iomap_size) {
			rnic_log("rsocket: the peer wrote iomap entry %u of the %u offered; closing", RS_MSG_DATA(msg),
				 rs->iomap_size);
			set_error(rs, EPROTO);
		}
		break;
	case RS_OP_CTRL:
		switch (RS_MSG_DATA(msg)) {
		case RS_CTRL_DISCONNECT:
			set_disconnected(rs);
			break;
		case RS_CTRL_SHUTDOWN:
			/* The peer sends no more; with this side done writing
			 * too, the connection is over. */
			if (rs->writable)
				rs->readable = 0;
			else
				set_disconnected(rs);
			break;
		}
		break;
	}
}

/* take_send returns a send's credits: its WR, its bytes of sbuf, or
 * its control slot. */
static void take_send(struct rsock *rs, const struct ibv_wc *wc)
{
	uint32_t msg = (uint32_t)wc->wr_id;
	switch (RS_MSG_OP(msg)) {
	case RS_OP_SGL:
		rs->ctrl_max++;
		break;
	case RS_OP_CTRL:
		rs->ctrl_max++;
		if (RS_MSG_DATA(msg) == RS_CTRL_DISCONNECT && rs->state == ST_CONNECTED)
			set_disconnected(rs);
		break;
	case RS_OP_IOMAP_SGL:
		rs->sqe_avail++;
		rs->sbuf_avail += RS_IOMAP_ENTRY;
		break;
	default: /* DATA, WRITE: data is the length */
		rs->sqe_avail++;
		rs->sbuf_avail += RS_MSG_DATA(msg);
		break;
	}
	if (wc->status != IBV_WC_SUCCESS)
		set_error(rs, EIO);
}

/* take_completions takes every completion, puts back the receives used, and
 * gives the peer what credits are due. */
static void take_completions(struct rsock *rs)
{
	if (!rs->cq)
		return;
	struct ibv_wc wc[16];
	uint32_t reposts = 0;
	int n;
	while ((n = ibv_poll_cq(rs->cq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].wr_id & RS_WRID_RECV)
				take_recv(rs, &wc[i], &reposts);
			else
				take_send(rs, &wc[i]);
		}
	}
	if (n < 0)
		set_error(rs, EIO);
	if (rs->state == ST_CONNECTED && reposts && post_recvs(rs, reposts))
		set_error(rs, EIO);
	give_credits(rs);
}

static int fd_readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* take_cq_event takes the completion event that woke a wait; the CQ is
 * armed again before the next. */
static void take_cq_event(struct rsock *rs)
{
	struct ibv_cq *cq;
	void *ctx;
	if (rs->cc && ibv_get_cq_event(rs->cc, &cq, &ctx) == 0) {
		ibv_ack_cq_events(cq, 1);
		rs->armed = 0;
	}
}

static int event_errno(const struct rdma_cm_event *e)
{
	switch (e->event) {
	case RDMA_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case RDMA_CM_EVENT_UNREACHABLE:
		return ETIMEDOUT;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return EHOSTUNREACH;
	default:
		return e->status < 0 ? -e->status : e->status ? e->status : ECONNRESET;
	}
}

static void connect_failed(struct rsock *rs, int err)
{
	rs->state = ST_CONNECT_ERROR;
	rs->err = err;
}

/* do_connect sends the REQ with this side's connection data. */
static int do_connect(struct rsock *rs)
{
	int err = rs_setup(rs);
	if (err)
		return err;
	uint8_t cd[RS_CONN_DATA];
	conn_data(rs, cd);
	struct rdma_conn_param p = {.private_data = cd, .private_data_len = sizeof(cd), .flow_control = 1,
				    .retry_count = 7, .rnr_retry_count = 7};
	if (rdma_connect(rs->id, &p))
		return errno;
	rs->state = ST_CONNECTING;
	return 0;
}

/* conn_event moves a connecting or connected socket on one CM event. */
static void conn_event(struct rsock *rs, struct rdma_cm_event *e)
{
	int err;
	switch (e->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rs->state == ST_RESOLVING && rdma_resolve_route(rs->id, 2000))
			connect_failed(rs, errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (rs->state == ST_RESOLVING && (err = do_connect(rs)))
			connect_failed(rs, err);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (rs->state == ST_CONNECTING) {
			err = take_conn_data(rs, e->param.conn.private_data, e->param.conn.private_data_len);
			if (err)
				connect_failed(rs, err);
			else
				set_connected(rs);
		} else if (rs->state == ST_ACCEPTING) {
			set_connected(rs);
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (rs->state == ST_CONNECTED)
			set_disconnected(rs);
		else if (rs->state == ST_ACCEPTING || rs->state == ST_CONNECTING)
			connect_failed(rs, ECONNRESET);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
		if (rs->state == ST_CONNECTED)
			set_error(rs, event_errno(e));
		else if (rs->state < ST_CONNECTED)
			connect_failed(rs, event_errno(e));
		break;
	default:
		break;
	}
}

/* accept_request makes a socket of a connect request to listener l:
 * its own channel, QP and buffers, then the REP with its connection
 * data; it is ready for raccept at the RTU (ESTABLISHED), so that
 * nothing is written to a peer whose QP is not yet ready to receive. */
static void accept_request(struct rsock *l, struct rdma_cm_event *e)
{
	struct rdma_cm_id *id = e->id;
	struct rdma_conn_param req = e->param.conn;
	uint8_t pd[256]; /* private_data_len is a u8 */
	size_t n = req.private_data_len;
	if (n)
		memcpy(pd, req.private_data, n);
	rdma_ack_cm_event(e);
	if (l->naccepted >= ACCEPT_MAX) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	struct rsock *rs = rs_new(l->domain, l, id);
	if (!rs) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	int err = rs_setup(rs);
	if (!err)
		err = take_conn_data(rs, n ? pd : NULL, n);
	if (!err) {
		uint8_t cd[RS_CONN_DATA];
		conn_data(rs, cd);
		struct rdma_conn_param p = req;
		p.private_data = cd;
		p.private_data_len = sizeof(cd);
		if (rdma_accept(rs->id, &p))
			err = errno;
	}
	if (err) {
		rdma_reject(rs->id, NULL, 0);
		rs_destroy(rs);
		return;
	}
	rs->state = ST_ACCEPTING;
	struct rsock **t = &l->pending; /* at the end: raccept gives them in the order they came */
	while (*t)
		t = &(*t)->next;
	*t = rs;
	l->naccepted++;
}

/* take_cm_events handles what the socket's channel holds. */
static void take_cm_events(struct rsock *rs)
{
	struct rdma_cm_event *e;
	while (rdma_get_cm_event(rs->ch, &e) == 0) {
		if (rs->state == ST_LISTENING && e->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			accept_request(rs, e); /* acks it */
			continue;
		}
		conn_event(rs, e);
		rdma_ack_cm_event(e);
	}
}

/* listen_progress accepts the requests waiting and moves the accepted
 * sockets whose RTU came to the ready list, in the order they came. */
static void listen_progress(struct rsock *l)
{
	if (fd_readable(l->fd))
		take_cm_events(l);
	for (struct rsock **p = &l->pending; *p;) {
		struct rsock *rs = *p;
		if (fd_readable(rs->fd))
			take_cm_events(rs);
		if (rs->state == ST_ACCEPTING) {
			p = &rs->next;
			continue;
		}
		*p = rs->next;
		if (rs->state != ST_CONNECTED) {
			l->naccepted--;
			rs_destroy(rs);
			continue;
		}
		rs->next = NULL;
		struct rsock **t = &l->ready;
		while (*t)
			t = &(*t)->next;
		*t = rs;
	}
}

/* progress takes what came for the socket: completions, credits, CM
 * events. The CM channel is looked at only when its fd is readable: a
 * look asks every rnicd, too slow for every rsend of a busy loop. */
static void progress(struct rsock *rs)
{
	if (rs->state == ST_LISTENING) {
		listen_progress(rs);
		return;
	}
	take_completions(rs);
	if (fd_readable(rs->fd)) {
		take_cm_events(rs);
		take_completions(rs);
	}
}

static int can_send(const struct rsock *rs)
{
	volatile const struct rs_sge *t = &rs->targets[rs->tidx];
	return rs->sqe_avail && rs->sbuf_avail >= SNDLOWAT && rs->sseq_no != rs->sseq_comp && t->length != 0;
}

static int have_data(const struct rsock *rs) { return rs->rmsg_head != rs->rmsg_tail; }

static int opening(const struct rsock *rs)
{
	return rs->state == ST_RESOLVING || rs->state == ST_CONNECTING || rs->state == ST_ACCEPTING;
}

/* Conditions a wait ends on. */
static int ready_send(struct rsock *rs) { return can_send(rs) || !rs->writable; }
static int ready_recv(struct rsock *rs) { return have_data(rs) || !rs->readable; }
static int ready_ctrl(struct rsock *rs) { return ctrl_avail(rs) || rs->state != ST_CONNECTED; }
static int ready_open(struct rsock *rs) { return !opening(rs); }
static int ready_accept(struct rsock *rs) { return rs->ready != NULL; }
static int ready_drained(struct rsock *rs)
{
	return rs->state != ST_CONNECTED ||
	       (rs->ctrl_max - rs->ctrl_seqno) + rs->sqe_avail == rs->sq_size;
}

/* wait_fds lists the fds that wake a wait on rs: its CM channel, its
 * CQ's channel once armed, a listener's pending sockets' channels;
 * returns how many it wrote (at most cap). */
static int wait_fds(struct rsock *rs, struct pollfd *p, int cap)
{
	int n = 0;
	if (n < cap)
		p[n++] = (struct pollfd){.fd = rs->fd, .events = POLLIN};
	if (rs->cc && n < cap)
		p[n++] = (struct pollfd){.fd = rs->cc->fd, .events = POLLIN};
	for (struct rsock *c = rs->pending; c && n < cap; c = c->next)
		p[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
	return n;
}

/* arm asks for the next completion's event, and says whether one may
 * have come before it was asked (so that the caller looks again). */
static int arm(struct rsock *rs)
{
	if (!rs->cq || rs->armed)
		return 0;
	if (ibv_req_notify_cq(rs->cq, 0))
		return 0;
	rs->armed = 1;
	return 1;
}

/* wake takes a wait's wake-up: the completion event, if it came. */
static void wake(struct rsock *rs, const struct pollfd *p, int n)
{
	for (int i = 0; i < n; i++)
		if (rs->cc && p[i].fd == rs->cc->fd && p[i].revents)
			take_cq_event(rs);
}

/* wait_for makes progress until ready(rs); a non-blocking call gets
 * EAGAIN instead of a wait. rs->mu is held, and let go while asleep. */
static int wait_for(struct rsock *rs, int (*ready)(struct rsock *), int nonblock)
{
	struct pollfd p[2 + ACCEPT_MAX];
	for (;;) {
		progress(rs);
		if (ready(rs))
			return 0;
		if (nonblock)
			return EAGAIN;
		if (arm(rs))
			continue;
		int n = wait_fds(rs, p, 2 + ACCEPT_MAX);
		pthread_mutex_unlock(&rs->mu);
		int r = poll(p, n, WAKE_MS);
		pthread_mutex_lock(&rs->mu);
		if (r < 0 && errno != EINTR)
			return errno;
		wake(rs, p, n);
	}
}

static int nonblocking(const struct rsock *rs, int flags) { return rs->nonblock || (flags & MSG_DONTWAIT); }

/* get_open looks up a socket and finishes a connect under way, as an
 * rrecv or rsend on a socket still connecting does. Returns the socket
 * locked, or NULL with errno set. */
static struct rsock *get_open(int s, int flags)
{
	struct rsock *rs = lock_sock(s);
	if (rs && opening(rs)) {
		int err = wait_for(rs, ready_open, nonblocking(rs, flags));
		if (err) {
			pthread_mutex_unlock(&rs->mu);
			errno = err;
			return NULL;
		}
	}
	return rs;
}

EXPORT int rsocket(int domain, int type, int protocol)
{
	if (domain != AF_INET && domain != AF_INET6) {
		rnic_log("rsocket: domain %d: rnicd's rsockets have AF_INET and AF_INET6 (no AF_IB)", domain);
		return cm_err(EAFNOSUPPORT);
	}
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) == SOCK_DGRAM)
		return nosys("rsocket", "datagram rsockets (SOCK_DGRAM, rdma-core's UD service) are not built on rnicd");
	if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM || (protocol && protocol != IPPROTO_TCP))
		return cm_err(ENOTSUP);
	struct rsock *rs = rs_new(domain, NULL, NULL);
	if (!rs)
		return -1;
	if (type & SOCK_NONBLOCK) {
		rs->nonblock = 1;
		rs->fl = O_NONBLOCK;
	}
	int err = tab_insert(rs);
	if (err) {
		rs_destroy(rs);
		return cm_err(err);
	}
	return rs->fd;
}

EXPORT int rbind(int s, const struct sockaddr *addr, socklen_t len)
{
	if (!addr || len < sizeof(struct sockaddr_in))
		return cm_err(lookup(s) ? EINVAL : EBADF);
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int ret = rs->state != ST_INIT ? cm_err(EINVAL) : rdma_bind_addr(rs->id, (struct sockaddr *)addr);
	if (!ret)
		rs->state = ST_BOUND;
	pthread_mutex_unlock(&rs->mu);
	return ret;
}

EXPORT int rlisten(int s, int backlog)
{
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int ret = 0;
	if (rs->state != ST_LISTENING) {
		if (rs->state != ST_BOUND)
			ret = cm_err(EINVAL); /* rdma_cm listens on a bound ID only */
		else if (!(ret = rdma_listen(rs->id, backlog)))
			rs->state = ST_LISTENING;
	}
	pthread_mutex_unlock(&rs->mu);
	return ret;
}

static void copy_addr(struct sockaddr *dst, socklen_t *len, const struct sockaddr *src)
{
	if (!dst || !len)
		return;
	socklen_t n = src->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	memcpy(dst, src, *len < n ? *len : n);
	*len = n;
}

EXPORT int raccept(int s, struct sockaddr *addr, socklen_t *len)
{
	struct rsock *l = lock_sock(s);
	if (!l)
		return -1;
	if (l->state != ST_LISTENING) {
		pthread_mutex_unlock(&l->mu);
		return cm_err(EINVAL);
	}
	int err = wait_for(l, ready_accept, l->nonblock);
	struct rsock *rs = NULL;
	if (!err) {
		rs = l->ready;
		l->ready = rs->next;
		l->naccepted--;
		rs->next = NULL;
		err = tab_insert(rs);
		if (err) {
			rs_destroy(rs);
			rs = NULL;
		}
	}
	pthread_mutex_unlock(&l->mu);
	if (!rs)
		return cm_err(err);
	copy_addr(addr, len, rdma_get_peer_addr(rs->id));
	return rs->fd;
}

EXPORT int rconnect(int s, const struct sockaddr *addr, socklen_t len)
{
	if (!addr || len < sizeof(struct sockaddr_in))
		return cm_err(lookup(s) ? EINVAL : EBADF);
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int err = 0;
	switch (rs->state) {
	case ST_INIT:
	case ST_BOUND:
		rs->state = ST_RESOLVING;
		if (rdma_resolve_addr(rs->id, NULL, (struct sockaddr *)addr, 2000)) {
			err = errno;
			connect_failed(rs, err);
			break;
		}
		/* fall through */
	case ST_RESOLVING:
	case ST_CONNECTING:
		err = wait_for(rs, ready_open, rs->nonblock);
		if (err == EAGAIN)
			err = EINPROGRESS;
		else if (!err && rs->state == ST_CONNECT_ERROR)
			err = rs->err;
		break;
	case ST_CONNECTED:
		err = EISCONN;
		break;
	default:
		err = rs->state == ST_CONNECT_ERROR ? rs->err : EINVAL;
		break;
	}
	pthread_mutex_unlock(&rs->mu);
	return err ? cm_err(err) : 0;
}

/* copy_out takes up to len bytes of the received messages into buf
 * (none of them consumed when peek). */
static size_t copy_out(struct rsock *rs, uint8_t *buf, size_t len, int peek)
{
	uint32_t head = rs->rmsg_head, off = rs->roff;
	size_t done = 0;
	while (done < len && head != rs->rmsg_tail) {
		uint32_t n = rs->rmsg[head];
		uint32_t take = len - done < n ? (uint32_t)(len - done) : n;
		for (uint32_t left = take; left;) {
			uint32_t chunk = rs->rbuf_size - off < left ? rs->rbuf_size - off : left;
			memcpy(buf + done, rs->rbuf + off, chunk);
			done += chunk;
			left -= chunk;
			off = (off + chunk) % rs->rbuf_size;
		}
		if (peek) {
			if (take < n)
				break;
			head = (head + 1) % rs->rmsg_cap;
			continue;
		}
		rs->rbuf_avail += take;
		if (take < n) {
			rs->rmsg[head] = n - take;
		} else {
			head = (head + 1) % rs->rmsg_cap;
			rs->rseq_no++;
		}
	}
	if (!peek) {
		rs->rmsg_head = head;
		rs->roff = off;
	}
	return done;
}

EXPORT ssize_t rrecv(int s, void *buf, size_t len, int flags)
{
	struct rsock *rs = get_open(s, flags);
	if (!rs)
		return -1;
	if (rs->state < ST_CONNECTED || rs->state == ST_CONNECT_ERROR) {
		int e = rs->state == ST_CONNECT_ERROR && rs->err ? rs->err : ENOTCONN;
		pthread_mutex_unlock(&rs->mu);
		return cm_err(e);
	}
	if (len == 0) {
		pthread_mutex_unlock(&rs->mu);
		return 0; /* as recv: nothing asked, nothing waited for */
	}
	size_t done = 0;
	int err = 0;
	do {
		err = wait_for(rs, ready_recv, nonblocking(rs, flags));
		if (err)
			break;
		done += copy_out(rs, (uint8_t *)buf + done, len - done, flags & MSG_PEEK);
		if (flags & MSG_PEEK)
			break;
		give_credits(rs); /* what was read out may be offered again */
	} while (done < len && (flags & MSG_WAITALL) && rs->readable);
	pthread_mutex_unlock(&rs->mu);
	if (done || len == 0)
		return done;
	if (err)
		return cm_err(err);
	/* Nothing to read and nothing coming: the end of the stream, or the
	 * error that ended the connection. */
	if (rs->state == ST_ERROR)
		return cm_err(rs->err ? rs->err : ECONNRESET);
	return 0;
}

/* gather copies len bytes from the iovec at (*iov, *off) into dst,
 * moving the position on. */
static void gather(uint8_t *dst, const struct iovec **iov, size_t *off, size_t len)
{
	while (len) {
		size_t n = (*iov)->iov_len - *off;
		if (n > len)
			n = len;
		memcpy(dst, (const uint8_t *)(*iov)->iov_base + *off, n);
		dst += n;
		len -= n;
		*off += n;
		if (*off == (*iov)->iov_len) {
			(*iov)++;
			*off = 0;
		}
	}
}

/* next_len is the length of the next message of left bytes to a target
 * with room bytes: at most the window, which grows from 2 to 64 KiB
 * message by message, so that the first bytes leave early, and the send
 * buffer free. */
static uint32_t next_len(const struct rsock *rs, size_t left, uint32_t *window, uint64_t room)
{
	uint64_t n = left;
	if (n > *window) {
		n = *window;
		if (*window < XFER_MAX)
			*window <<= 1;
	}
	if (n > rs->sbuf_avail)
		n = rs->sbuf_avail;
	return n > room ? (uint32_t)room : (uint32_t)n;
}

/* stage copies n bytes of the iovec at (*iov, *off) into the send
 * buffer, a ring freed in completion order, and describes them in sge:
 * a copy wrapping the ring's end takes two SGEs. Returns how many. The
 * caller has n bytes of sbuf_avail. */
static int stage(struct rsock *rs, const struct iovec **iov, size_t *off, uint32_t n, struct ibv_sge *sge)
{
	uint32_t first = rs->sbuf_size - rs->shead;
	if (first > n)
		first = n;
	gather(rs->sbuf + rs->shead, iov, off, first);
	sge[0] = (struct ibv_sge){.addr = (uintptr_t)rs->sbuf + rs->shead, .length = first, .lkey = rs->smr->lkey};
	int nsge = 1;
	if (first < n) {
		gather(rs->sbuf, iov, off, n - first);
		sge[1] = (struct ibv_sge){.addr = (uintptr_t)rs->sbuf, .length = n - first, .lkey = rs->smr->lkey};
		nsge = 2;
	}
	rs->shead = (rs->shead + n) % rs->sbuf_size;
	return nsge;
}

/* send_iomaps sends the IOMAP_SGL of each mapping riomap made since the
 * last send, in the peer's byte order, each a data message as rdma-core
 * sends it (a credit, a send WR, 24 bytes of the send buffer), so that
 * it reaches the peer's iomap before whatever this side sends next. */
static int send_iomaps(struct rsock *rs, int nonblock)
{
	for (uint32_t i = 0; rs->iomaps_pending && i < rs->peer_iomap_len; i++) {
		if (!rs->iomaps[i] || !rs->iomaps[i]->pending)
			continue;
		int err = 0;
		if (rs->writable && !can_send(rs) && (err = wait_for(rs, ready_send, nonblock)))
			return err;
		if (!rs->writable)
			return rs->state == ST_ERROR && rs->err ? rs->err : ECONNRESET;
		/* Looked up again: another thread's riounmap may have taken
		 * it while the wait let the socket go. */
		struct rs_iomr *m = rs->iomaps[i];
		if (!m || !m->pending)
			continue;
		struct rs_iomap e = {.offset = m->offset,
				     .sge = {.addr = (uintptr_t)m->mr->addr, .key = m->mr->rkey, .length = m->mr->length}};
		if (rs->swap)
			e = (struct rs_iomap){.offset = bswap_64(e.offset),
					      .sge = {.addr = bswap_64(e.sge.addr), .key = bswap_32(e.sge.key),
						      .length = bswap_32(e.sge.length)}};
		uint32_t msg = RS_MSG(RS_OP_IOMAP_SGL, i);
		struct ibv_sge sge[2];
		struct ibv_send_wr wr = {.wr_id = msg, .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .imm_data = htobe32(msg)}, *bad;
		wr.wr.rdma.remote_addr = rs->peer_iomap + (uint64_t)i * RS_IOMAP_ENTRY;
		wr.wr.rdma.rkey = rs->peer_iomap_key;
		if (rs->sq_inline >= sizeof(e)) {
			sge[0] = (struct ibv_sge){.addr = (uintptr_t)&e, .length = sizeof(e)};
			wr.send_flags = IBV_SEND_INLINE;
		} else {
			struct iovec v = {.iov_base = &e, .iov_len = sizeof(e)};
			const struct iovec *vp = &v;
			size_t off = 0;
			wr.num_sge = stage(rs, &vp, &off, sizeof(e), sge);
		}
		if (ibv_post_send(rs->id->qp, &wr, &bad)) {
			set_error(rs, EIO);
			return EIO;
		}
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_avail -= sizeof(e);
		m->pending = 0;
		rs->iomaps_pending--;
	}
	return 0;
}

/* send_iov sends the bytes of iov (cnt entries, len bytes in all): each
 * message as long as the send buffer, the target entry and a window
 * growing from 2 to 64 KiB allow, copied into the send buffer (or inline
 * when short) and written to the peer's offered half. */
static ssize_t send_iov(int s, const struct iovec *iov, int cnt, int flags)
{
	size_t len = 0;
	for (int i = 0; i < cnt; i++)
		len += iov[i].iov_len;
	struct rsock *rs = get_open(s, flags);
	if (!rs)
		return -1;
	if (rs->state < ST_CONNECTED || rs->state == ST_CONNECT_ERROR) {
		pthread_mutex_unlock(&rs->mu);
		return cm_err(ENOTCONN);
	}
	size_t done = 0, off = 0;
	uint32_t window = XFER_START;
	int err = send_iomaps(rs, nonblocking(rs, flags));
	while (!err && done < len) {
		if (rs->writable && !can_send(rs) && (err = wait_for(rs, ready_send, nonblocking(rs, flags))))
			break;
		if (!rs->writable) {
			/* rdma-core's answer to a send on a connection that
			 * ended or was shut down for writing. */
			err = rs->state == ST_ERROR && rs->err ? rs->err : ECONNRESET;
			break;
		}
		volatile struct rs_sge *t = &rs->targets[rs->tidx];
		uint64_t taddr = t->addr;
		uint32_t tkey = t->key, tlen = t->length;
		size_t n = next_len(rs, len - done, &window, tlen);
		uint32_t msg = RS_MSG(RS_OP_DATA, n);
		struct ibv_sge sge[2];
		struct ibv_send_wr wr = {.wr_id = msg, .sg_list = sge, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
					 .imm_data = htobe32(msg)}, *bad;
		wr.wr.rdma.remote_addr = taddr;
		wr.wr.rdma.rkey = tkey;
		uint8_t inl[1024];
		if (n <= rs->sq_inline && n <= sizeof(inl)) {
			/* Copied by the post: nothing of sbuf is used. */
			gather(inl, &iov, &off, n);
			sge[0] = (struct ibv_sge){.addr = (uintptr_t)inl, .length = n};
			wr.num_sge = 1;
			wr.send_flags = IBV_SEND_INLINE;
		} else {
			wr.num_sge = stage(rs, &iov, &off, n, sge);
		}
		if (ibv_post_send(rs->id->qp, &wr, &bad)) {
			set_error(rs, EIO);
			err = EIO;
			break;
		}
		rs->sseq_no++;
		rs->sqe_avail--;
		rs->sbuf_avail -= n; /* inline too: its completion gives it back */
		t->addr = taddr + n;
		t->length = tlen - n;
		if (tlen == n)
			rs->tidx = (rs->tidx + 1) % RS_TARGETS;
		done += n;
	}
	pthread_mutex_unlock(&rs->mu);
	if (done || len == 0)
		return done;
	return cm_err(err);
}

EXPORT ssize_t rsend(int s, const void *buf, size_t len, int flags)
{
	struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
	return send_iov(s, &v, 1, flags);
}

EXPORT ssize_t rwrite(int s, const void *buf, size_t n) { return rsend(s, buf, n, 0); }
EXPORT ssize_t rwritev(int s, const struct iovec *v, int n)
{
	if (n < 0 || (n && !v))
		return cm_err(EINVAL);
	return send_iov(s, v, n, 0);
}
EXPORT ssize_t rread(int s, void *buf, size_t n) { return rrecv(s, buf, n, 0); }

/* rreadv fills the vectors in order: each rrecv takes what is there,
 * and the next vector waits only if the first had nothing. */
static ssize_t recv_iov(int s, const struct iovec *v, int n, int flags)
{
	if (n < 0 || (n && !v))
		return cm_err(EINVAL);
	ssize_t done = 0;
	for (int i = 0; i < n; i++) {
		if (!v[i].iov_len)
			continue;
		ssize_t r = rrecv(s, v[i].iov_base, v[i].iov_len, done ? flags | MSG_DONTWAIT : flags);
		if (r < 0)
			return done ? done : r;
		done += r;
		if ((size_t)r < v[i].iov_len)
			break;
	}
	return done;
}

EXPORT ssize_t rreadv(int s, const struct iovec *v, int n) { return recv_iov(s, v, n, 0); }

EXPORT ssize_t rrecvfrom(int s, void *buf, size_t n, int flags, struct sockaddr *a, socklen_t *l)
{
	ssize_t r = rrecv(s, buf, n, flags);
	if (r >= 0 && a)
		rgetpeername(s, a, l);
	return r;
}

EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int flags)
{
	if (!m || (m->msg_control && m->msg_controllen))
		return cm_err(ENOTSUP);
	return recv_iov(s, m->msg_iov, (int)m->msg_iovlen, flags);
}

EXPORT ssize_t rsendto(int s, const void *buf, size_t n, int flags, const struct sockaddr *a, socklen_t l)
{
	if (a || l)
		return cm_err(EISCONN); /* a stream socket's peer is its connection's */
	return rsend(s, buf, n, flags);
}

EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int flags)
{
	if (!m || (m->msg_control && m->msg_controllen) || m->msg_name)
		return cm_err(m && m->msg_name ? EISCONN : ENOTSUP);
	return send_iov(s, m->msg_iov, (int)m->msg_iovlen, flags);
}

/* revents says what a poll of rs finds, after progress. */
static short revents(struct rsock *rs, short events)
{
	progress(rs);
	short r = 0;
	switch (rs->state) {
	case ST_LISTENING:
		if (rs->ready)
			r |= events & POLLIN;
		break;
	case ST_CONNECT_ERROR:
		r |= (events & (POLLIN | POLLOUT)) | POLLERR;
		break;
	case ST_CONNECTED:
	case ST_DISCONNECTED:
	case ST_ERROR:
		if (ready_recv(rs))
			r |= events & POLLIN;
		if (rs->writable && can_send(rs))
			r |= events & POLLOUT;
		/* Hung up only once the bytes that came before the end are
		 * read: the peer's DISCONNECT follows its last data, often in
		 * the same drain of the CQ, and a program that stops at
		 * POLLHUP (rstream -T a) would lose them. TCP's poll does
		 * the same with a FIN behind data. */
		if (!have_data(rs) && rs->state == ST_DISCONNECTED)
			r |= POLLHUP;
		else if (!have_data(rs) && rs->state == ST_ERROR)
			r |= POLLERR;
		break;
	default:
		break;
	}
	return r;
}

/* check looks at every fd once without waiting: rsockets by their
 * state, the rest by poll. */
static int check(struct pollfd *fds, nfds_t n)
{
	int cnt = 0;
	for (nfds_t i = 0; i < n; i++) {
		fds[i].revents = 0;
		struct rsock *rs = lookup(fds[i].fd);
		if (rs) {
			pthread_mutex_lock(&rs->mu);
			fds[i].revents = revents(rs, fds[i].events);
			pthread_mutex_unlock(&rs->mu);
		} else if (fds[i].fd >= 0 && poll(&fds[i], 1, 0) < 0) {
			return -1;
		}
		if (fds[i].revents)
			cnt++;
	}
	return cnt;
}

EXPORT int rpoll(struct pollfd *fds, nfds_t n, int timeout)
{
	if (n && !fds)
		return cm_err(EFAULT);
	int64_t deadline = timeout > 0 ? now_ms() + timeout : 0;
	struct pollfd *w = NULL;
	size_t wcap = 0;
	int ret;
	for (;;) {
		ret = check(fds, n);
		if (ret != 0 || timeout == 0)
			break;
		/* Arm every CQ, then look again: a completion between the
		 * look and the arming made no event. */
		int armed = 0;
		for (nfds_t i = 0; i < n; i++) {
			struct rsock *rs = lookup(fds[i].fd);
			if (rs) {
				pthread_mutex_lock(&rs->mu);
				armed |= arm(rs);
				pthread_mutex_unlock(&rs->mu);
			}
		}
		if (armed && (ret = check(fds, n)) != 0)
			break;
		/* What wakes the sleep: each rsocket's fds, the others as
		 * given. */
		size_t need = 0;
		for (nfds_t i = 0; i < n; i++)
			need += lookup(fds[i].fd) ? 2 + ACCEPT_MAX : 1;
		if (need > wcap) {
			struct pollfd *nw = realloc(w, need * sizeof(*w));
			if (!nw) {
				ret = cm_err(ENOMEM);
				break;
			}
			w = nw;
			wcap = need;
		}
		size_t k = 0;
		for (nfds_t i = 0; i < n; i++) {
			struct rsock *rs = lookup(fds[i].fd);
			if (rs) {
				pthread_mutex_lock(&rs->mu);
				k += wait_fds(rs, w + k, 2 + ACCEPT_MAX);
				pthread_mutex_unlock(&rs->mu);
			} else {
				w[k++] = (struct pollfd){.fd = fds[i].fd, .events = fds[i].events};
			}
		}
		int left = WAKE_MS;
		if (timeout > 0) {
			int64_t rem = deadline - now_ms();
			if (rem <= 0) {
				ret = 0;
				break;
			}
			if (rem < left)
				left = (int)rem;
		}
		if (poll(w, k, left) < 0) {
			ret = -1;
			break;
		}
		for (nfds_t i = 0; i < n; i++) {
			struct rsock *rs = lookup(fds[i].fd);
			if (rs) {
				pthread_mutex_lock(&rs->mu);
				wake(rs, w, k);
				pthread_mutex_unlock(&rs->mu);
			}
		}
	}
	free(w);
	return ret;
}

EXPORT int rselect(int nfds, fd_set *r, fd_set *wr, fd_set *e, struct timeval *t)
{
	if (nfds < 0 || nfds > FD_SETSIZE)
		return cm_err(EINVAL);
	struct pollfd *p = calloc(nfds ? nfds : 1, sizeof(*p));
	if (!p)
		return cm_err(ENOMEM);
	int n = 0;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = (r && FD_ISSET(fd, r) ? POLLIN : 0) | (wr && FD_ISSET(fd, wr) ? POLLOUT : 0);
		if (ev || (e && FD_ISSET(fd, e)))
			p[n++] = (struct pollfd){.fd = fd, .events = ev};
	}
	int ret = rpoll(p, n, t ? (int)(t->tv_sec * 1000 + t->tv_usec / 1000) : -1);
	if (ret >= 0) {
		if (r)
			FD_ZERO(r);
		if (wr)
			FD_ZERO(wr);
		if (e)
			FD_ZERO(e);
		ret = 0;
		for (int i = 0; i < n; i++) {
			if (r && (p[i].revents & (POLLIN | POLLHUP))) {
				FD_SET(p[i].fd, r);
				ret++;
			}
			if (wr && (p[i].revents & POLLOUT)) {
				FD_SET(p[i].fd, wr);
				ret++;
			}
			if (e && (p[i].revents & ~(POLLIN | POLLOUT))) {
				FD_SET(p[i].fd, e);
				ret++;
			}
		}
	}
	free(p);
	return ret;
}

/* shutdown_locked tells the peer what is over, and waits until every
 * send this side posted completed, so that rclose may free the buffers
 * they read from. */
static int shutdown_locked(struct rsock *rs, int how)
{
	int err = 0;
	if (rs->state == ST_CONNECTED) {
		int ctrl;
		if (how == SHUT_RDWR) {
			ctrl = RS_CTRL_DISCONNECT;
			rs->readable = rs->writable = 0;
		} else if (how == SHUT_WR) {
			rs->writable = 0;
			ctrl = rs->readable ? RS_CTRL_SHUTDOWN : RS_CTRL_DISCONNECT;
		} else {
			rs->readable = 0;
			if (rs->writable)
				return 0; /* nothing to tell: the peer may go on writing, unread */
			ctrl = RS_CTRL_DISCONNECT;
		}
		err = wait_for(rs, ready_ctrl, 0);
		if (!err && rs->state == ST_CONNECTED) {
			rs->ctrl_seqno++;
			if (post_msg(rs, RS_MSG(RS_OP_CTRL, ctrl)))
				set_error(rs, EIO);
		}
	}
	if (!err && rs->state == ST_CONNECTED)
		err = wait_for(rs, ready_drained, 0);
	if (rs->state == ST_DISCONNECTED && rs->id->qp) {
		/* Flush the receives: a wait on the CQ wakes. */
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
	}
	return err;
}

EXPORT int rshutdown(int s, int how)
{
	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return cm_err(EINVAL);
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int err = rs->state == ST_CONNECTED || rs->state == ST_DISCONNECTED || rs->state == ST_ERROR
			  ? shutdown_locked(rs, how)
			  : ENOTCONN;
	pthread_mutex_unlock(&rs->mu);
	return err ? cm_err(err) : 0;
}

EXPORT int rclose(int s)
{
	struct rsock *rs = lookup(s);
	if (!rs)
		return cm_err(EBADF);
	tab_remove(rs);
	pthread_mutex_lock(&rs->mu);
	if (rs->state == ST_CONNECTED)
		shutdown_locked(rs, SHUT_RDWR);
	pthread_mutex_unlock(&rs->mu);
	rs_destroy(rs);
	return 0;
}

EXPORT int rgetpeername(int s, struct sockaddr *a, socklen_t *l)
{
	if (!a || !l)
		return cm_err(lookup(s) ? EFAULT : EBADF);
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int ok = rs->state >= ST_CONNECTED && rs->state != ST_CONNECT_ERROR;
	if (ok)
		copy_addr(a, l, rdma_get_peer_addr(rs->id));
	pthread_mutex_unlock(&rs->mu);
	return ok ? 0 : cm_err(ENOTCONN);
}

EXPORT int rgetsockname(int s, struct sockaddr *a, socklen_t *l)
{
	if (!a || !l)
		return cm_err(lookup(s) ? EFAULT : EBADF);
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	struct sockaddr_storage st;
	memset(&st, 0, sizeof(st));
	if (rs->state == ST_INIT)
		st.ss_family = rs->domain; /* unbound: the wildcard, port 0, as an unbound socket's */
	else
		memcpy(&st, rdma_get_local_addr(rs->id), sizeof(st));
	copy_addr(a, l, (struct sockaddr *)&st);
	pthread_mutex_unlock(&rs->mu);
	return 0;
}

static int int_opt(const void *v, socklen_t l, int *out)
{
	if (!v || l < sizeof(int))
		return EINVAL;
	memcpy(out, v, sizeof(int));
	return 0;
}

EXPORT int rsetsockopt(int s, int level, int name, const void *v, socklen_t l)
{
	struct rsock *rs = lookup(s);
	if (!rs)
		return cm_err(EBADF);
	int val = 0, err;
	if (level == SOL_SOCKET && name == SO_LINGER) {
		struct linger lg;
		if (!v || l < sizeof(lg))
			return cm_err(EINVAL);
		memcpy(&lg, v, sizeof(lg));
		val = lg.l_onoff;
	} else if ((err = int_opt(v, l, &val))) {
		return cm_err(err);
	}
	pthread_mutex_lock(&rs->mu);
	/* Sizes apply to the connection's resources, made at rconnect or
	 * at a listener's accept: later ones are too late. */
	int made = rs->sbuf != NULL || opening(rs) || rs->state >= ST_CONNECTED;
	err = 0;
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR:
			rs->reuseaddr = !!val;
			break;
		case SO_RCVBUF:
		case SO_SNDBUF:
			/* As setsockopt and rdma-core: the size given, doubled,
			 * at least 4 KiB for the two halves' 2 KiB low mark; at
			 * most 256 MiB, so that a half's length fits a message. */
			if (!made) {
				uint64_t n = (uint64_t)(val < 0 ? 0 : val) * 2;
				n = n < 2 * SNDLOWAT ? 2 * SNDLOWAT : n > (1u << 28) ? (1u << 28) : n;
				n &= ~(uint64_t)1;
				if (name == SO_RCVBUF)
					rs->rbuf_size = n;
				else
					rs->sbuf_size = n;
			}
			break;
		case SO_LINGER:
			rs->linger_off = !val;
			break;
		case SO_KEEPALIVE:
			if (val) {
				rnic_log("rsetsockopt SO_KEEPALIVE: rsockets' keepalive messages are not built on rnicd");
				err = ENOTSUP;
			}
			break;
		case SO_OOBINLINE:
			rs->oobinline = !!val;
			break;
		default:
			err = ENOTSUP;
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY:
			rs->nodelay = !!val; /* every rsend goes at once anyway */
			break;
		case TCP_KEEPIDLE:
			if (val <= 0)
				err = EINVAL;
			else
				rs->keepidle = val;
			break;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL:
		case TCP_MAXSEG:
			break; /* nothing to do over a reliable connection */
		default:
			err = ENOTSUP;
		}
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			rs->v6only = !!val;
		else
			err = ENOTSUP;
		break;
	case SOL_RDMA:
		if (made) {
			err = EINVAL;
			break;
		}
		switch (name) {
		case RDMA_SQSIZE:
			rs->sq_size = val < 0 ? 0 : (uint32_t)val > QSIZE_MAX ? QSIZE_MAX : (uint32_t)val;
			break;
		case RDMA_RQSIZE:
			rs->rq_size = val < 0 ? 0 : (uint32_t)val > QSIZE_MAX ? QSIZE_MAX : (uint32_t)val;
			break;
		case RDMA_INLINE:
			rs->sq_inline = val < 0 ? 0 : val > 1024 ? 1024 : (uint32_t)val;
			break;
		case RDMA_IOMAPSIZE:
			/* Rounded to what the connection data can say, as
			 * rdma-core: 1-128, then multiples of 256 to 32512. */
			rs->iomap_size = iomap_from_scale(
				iomap_to_scale(val < 0 ? 0 : (uint32_t)val > RS_IOMAP_MAX ? RS_IOMAP_MAX : (uint32_t)val));
			break;
		case RDMA_ROUTE:
			rnic_log("rsetsockopt RDMA_ROUTE: routes are resolved by rnicd's rdma_cm; a given path is not built");
			err = ENOTSUP;
			break;
		default:
			err = ENOTSUP;
		}
		break;
	default:
		err = ENOTSUP;
	}
	pthread_mutex_unlock(&rs->mu);
	return err ? cm_err(err) : 0;
}

static int put_int(void *v, socklen_t *l, int val)
{
	if (!v || !l || *l < sizeof(int))
		return EINVAL;
	memcpy(v, &val, sizeof(int));
	*l = sizeof(int);
	return 0;
}

EXPORT int rgetsockopt(int s, int level, int name, void *v, socklen_t *l)
{
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int err = ENOTSUP;
	switch (level) {
	case SOL_SOCKET:
		switch (name) {
		case SO_REUSEADDR: err = put_int(v, l, rs->reuseaddr); break;
		case SO_KEEPALIVE: err = put_int(v, l, 0); break;
		case SO_OOBINLINE: err = put_int(v, l, rs->oobinline); break;
		case SO_RCVBUF: err = put_int(v, l, (int)rs->rbuf_size); break;
		case SO_SNDBUF: err = put_int(v, l, (int)rs->sbuf_size); break;
		case SO_ERROR:
			/* Read once, as a socket's pending error. */
			if (!(err = put_int(v, l, rs->err)))
				rs->err = 0;
			break;
		case SO_LINGER:
			if (!v || !l || *l < sizeof(struct linger)) {
				err = EINVAL;
			} else {
				struct linger lg = {.l_onoff = !rs->linger_off};
				memcpy(v, &lg, sizeof(lg));
				*l = sizeof(lg);
				err = 0;
			}
			break;
		}
		break;
	case IPPROTO_TCP:
		switch (name) {
		case TCP_NODELAY: err = put_int(v, l, rs->nodelay); break;
		case TCP_KEEPIDLE: err = put_int(v, l, rs->keepidle); break;
		case TCP_KEEPCNT:
		case TCP_KEEPINTVL: err = put_int(v, l, 1); break;
		case TCP_MAXSEG: {
			/* The path MTU's payload; 2048 before a route is known. */
			int mss = 2048;
			if (rs->id && rs->id->route.num_paths && rs->id->route.path_rec)
				mss = 1 << (7 + rs->id->route.path_rec->mtu);
			err = put_int(v, l, mss);
			break;
		}
		}
		break;
	case IPPROTO_IPV6:
		if (name == IPV6_V6ONLY)
			err = put_int(v, l, rs->v6only);
		break;
	case SOL_RDMA:
		switch (name) {
		case RDMA_SQSIZE: err = put_int(v, l, (int)rs->sq_size); break;
		case RDMA_RQSIZE: err = put_int(v, l, (int)rs->rq_size); break;
		case RDMA_INLINE: err = put_int(v, l, (int)rs->sq_inline); break;
		case RDMA_IOMAPSIZE: err = put_int(v, l, (int)rs->iomap_size); break;
		}
		break;
	}
	pthread_mutex_unlock(&rs->mu);
	return err ? cm_err(err) : 0;
}

EXPORT int rfcntl(int s, int cmd, ...)
{
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	va_list ap;
	va_start(ap, cmd);
	int ret;
	switch (cmd) {
	case F_GETFL:
		ret = rs->fl | O_RDWR;
		break;
	case F_SETFL: {
		/* Only O_NONBLOCK means anything to an rsocket; every fd
		 * under it stays non-blocking, the waits being made here. */
		int fl = va_arg(ap, int);
		rs->fl = fl & ~O_ACCMODE;
		rs->nonblock = !!(fl & O_NONBLOCK);
		ret = 0;
		break;
	}
	default:
		ret = cm_err(ENOTSUP);
	}
	pthread_mutex_unlock(&rs->mu);
	va_end(ap);
	return ret;
}

/* riomap registers len bytes at buf for rsockets' iomap: with
 * PROT_WRITE for the peer to riowrite into, at offsets from offset on
 * (-1: buf's address), the entry going to the peer before this side's
 * next rsend or riowrite; without, for nothing the peer can use, as
 * rdma-core. The peer's iomap full is ENOMEM, as rdma-core says. Like
 * rdma-core, overlapping offsets are not looked for. */
EXPORT off_t riomap(int s, void *buf, size_t len, int prot, int flags, off_t offset)
{
	(void)flags;
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	int err = 0;
	struct rs_iomr *m = NULL;
	int idx = -1;
	/* The QP's PD is made with the connection; an entry's length is a
	 * u32 on the wire. */
	if (!rs->id || !rs->id->qp || (prot & ~PROT_WRITE) || len > UINT32_MAX) {
		err = EINVAL;
		goto out;
	}
	if (prot & PROT_WRITE) {
		if (!rs->iomaps && rs->peer_iomap_len &&
		    !(rs->iomaps = calloc(rs->peer_iomap_len, sizeof(*rs->iomaps)))) {
			err = ENOMEM;
			goto out;
		}
		for (uint32_t i = 0; idx < 0 && i < rs->peer_iomap_len; i++)
			if (!rs->iomaps[i])
				idx = (int)i;
		if (idx < 0) {
			rnic_log("riomap: the peer's iomap has %u entries, all taken", rs->peer_iomap_len);
			err = ENOMEM;
			goto out;
		}
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		err = ENOMEM;
		goto out;
	}
	int access = IBV_ACCESS_LOCAL_WRITE | (prot & PROT_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0);
	if (!(m->mr = ibv_reg_mr(rs->id->qp->pd, buf, len, access))) {
		err = errno ? errno : EIO;
		free(m);
		goto out;
	}
	if (offset == -1)
		offset = (off_t)(uintptr_t)buf;
	m->offset = (uint64_t)offset;
	m->index = idx;
	if (idx >= 0) {
		m->pending = 1;
		rs->iomaps[idx] = m;
		rs->iomaps_pending++;
	} else {
		m->next = rs->iomaps_local;
		rs->iomaps_local = m;
	}
out:
	pthread_mutex_unlock(&rs->mu);
	return err ? cm_err(err) : offset;
}

/* riounmap ends the mapping riomap made of exactly buf and len; the
 * peer is not told (rdma-core does not either), its entry's writes
 * failing at the rkey check from now on. */
EXPORT int riounmap(int s, void *buf, size_t len)
{
	struct rsock *rs = lock_sock(s);
	if (!rs)
		return -1;
	struct rs_iomr *m = NULL;
	for (uint32_t i = 0; rs->iomaps && i < rs->peer_iomap_len; i++) {
		struct rs_iomr *c = rs->iomaps[i];
		if (c && c->mr->addr == buf && c->mr->length == len) {
			m = c;
			rs->iomaps[i] = NULL;
			if (m->pending)
				rs->iomaps_pending--;
			break;
		}
	}
	for (struct rs_iomr **p = &rs->iomaps_local; !m && *p; p = &(*p)->next) {
		if ((*p)->mr->addr == buf && (*p)->mr->length == len) {
			m = *p;
			*p = m->next;
		}
	}
	if (m)
		iomr_free(m);
	pthread_mutex_unlock(&rs->mu);
	return m ? 0 : cm_err(EINVAL);
}

/* find_iomap copies the entry of the iomap the peer wrote that holds
 * offset into e: the peer may rewrite an entry at any time, so it is
 * read once, and a lying one only aims a write at the peer's own
 * memory, which its NIC checks against the key. */
static int find_iomap(const struct rsock *rs, uint64_t offset, struct rs_iomap *e)
{
	for (uint32_t i = 0; i < rs->iomap_size; i++) {
		*e = (struct rs_iomap){.offset = rs->tiomap[i].offset,
				       .sge = {.addr = rs->tiomap[i].sge.addr, .key = rs->tiomap[i].sge.key,
					       .length = rs->tiomap[i].sge.length}};
		if (offset >= e->offset && offset - e->offset < e->sge.length)
			return 1;
	}
	return 0;
}

/* riowrite RDMA WRITEs count bytes of buf into the peer's mapping of
 * offset, in messages growing from 2 to 64 KiB as rsend's do, each
 * within one entry of the peer's iomap and going on into the entry
 * that holds the next offset. The peer is not told. Returns the bytes
 * written; a write that starts in none of the peer's entries is -1 with
 * EINVAL (rdma-core returns 0 there, with errno untouched, which a
 * program retrying on EAGAIN takes for "try again" for ever). */
EXPORT size_t riowrite(int s, const void *buf, size_t count, off_t offset, int flags)
{
	struct rsock *rs = get_open(s, flags);
	if (!rs)
		return (size_t)-1;
	if (rs->state < ST_CONNECTED || rs->state == ST_CONNECT_ERROR) {
		pthread_mutex_unlock(&rs->mu);
		return (size_t)cm_err(ENOTCONN);
	}
	int err = send_iomaps(rs, nonblocking(rs, flags));
	size_t done = 0;
	uint32_t window = XFER_START;
	struct rs_iomap e;
	int have = 0;
	while (!err && done < count) {
		uint64_t at = (uint64_t)offset + done;
		if (!have || at - e.offset >= e.sge.length) {
			if (!(have = find_iomap(rs, at, &e))) {
				if (!done) {
					rnic_log("riowrite: offset %llu is in none of the peer's %u iomap entries",
						 (unsigned long long)at, rs->iomap_size);
					err = EINVAL;
				}
				break;
			}
		}
		if (rs->writable && !can_send(rs) && (err = wait_for(rs, ready_send, nonblocking(rs, flags))))
			break;
		if (!rs->writable) {
			err = rs->state == ST_ERROR && rs->err ? rs->err : ECONNRESET;
			break;
		}
		size_t n = next_len(rs, count - done, &window, e.sge.length - (at - e.offset));
		uint32_t msg = RS_MSG(RS_OP_WRITE, n);
		struct ibv_sge sge[2];
		struct ibv_send_wr wr = {.wr_id = msg, .sg_list = sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad;
		wr.wr.rdma.remote_addr = e.sge.addr + (at - e.offset);
		wr.wr.rdma.rkey = e.sge.key;
		if (n <= rs->sq_inline) {
			sge[0] = (struct ibv_sge){.addr = (uintptr_t)buf + done, .length = n};
			wr.send_flags = IBV_SEND_INLINE;
		} else {
			struct iovec v = {.iov_base = (uint8_t *)buf + done, .iov_len = n};
			const struct iovec *vp = &v;
			size_t off = 0;
			wr.num_sge = stage(rs, &vp, &off, n, sge);
		}
		if (ibv_post_send(rs->id->qp, &wr, &bad)) {
			set_error(rs, EIO);
			err = EIO;
			break;
		}
		rs->sqe_avail--;
		rs->sbuf_avail -= n; /* inline too: its completion gives it back */
		done += n;
	}
	pthread_mutex_unlock(&rs->mu);
	if (done || count == 0)
		return done;
	return (size_t)cm_err(err);
}
