/*
 * cma.h: librdmacm for rnicd, the declarations its files share.
 *
 * A program linked against librdmacm.so.1 and started with
 * LD_LIBRARY_PATH pointing here (beside this folder's libibverbs.so.1)
 * gets rdma_cm on rnicd: the daemon's CM agent (rnic/cm) runs the
 * connections on QP1 and answers the CM requests of hostif (kinds
 * 20-30), which this library sends on the control connection of the
 * ibv_context a cm_id uses. It mirrors rdma-core's librdmacm/cma.c with
 * the kernel's ucma replaced by those requests, as the Go package
 * rdmacm/ does:
 *
 *   - devices: every running rnicd, opened once and kept open while the
 *     library is loaded (rdma_get_devices), as cma.c's ucma_init does;
 *   - addresses: a RoCEv2 GID is an IP address, so an ID takes the rnicd
 *     whose port holds its source address, or the one its destination is
 *     routed through (the one that holds it, else the one that holds
 *     the routing table's source address for it, else the longest
 *     common prefix), and ADDR_RESOLVED and ROUTE_RESOLVED are made here;
 *   - an event channel spans the rnicds its IDs use: one CM channel on
 *     each, whose wake pipes the channel's fd (an epoll instance) watches.
 *
 * One concern a file: dev.c the devices and addresses, channel.c event
 * channels and events, id.c CM IDs and their calls, qp.c the QP calls,
 * addrinfo.c rdma_getaddrinfo, mcast.c multicast, unsupported.c what is
 * not built.
 */
#ifndef CMA_H
#define CMA_H

#include <infiniband/verbs.h>
#include <errno.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>

#include "../src/rnic.h"

/* The private entries of this folder's libibverbs (src/private.c). */
int rnicd_cm_call(struct ibv_context *ctx, int k, const void *req, size_t reqlen, int fd, int *rfd, void *rep,
		  size_t cap, size_t *replen);
int rnicd_qp_sync(struct ibv_qp *qp);

/* The most rnicds one process uses: a listener on the wildcard address
 * listens on each. */
#define MAX_DEVS 16

/* cm_dev is one rnicd as this library opened it. */
struct cm_dev {
	struct ibv_context *verbs;
	union ibv_gid gid; /* the port's GID: its IP address, IPv4-mapped */
	enum ibv_mtu mtu;  /* the port's active MTU */
	uint8_t max_resp_res, max_init_depth;
	pthread_mutex_t pd_mu;
	struct ibv_pd *pd; /* the default PD (rdma_create_qp without one) */
	struct ibv_xrcd *xrcd; /* the XRC domain of XRC_RECV IDs (cma.c's ucma_get_xrcd), under pd_mu */
};

/* dev.c */
int devs_init(void);
int devs_count(void);
struct cm_dev *dev_at(int i);
int dev_index(struct cm_dev *d);
struct cm_dev *dev_owning(const struct sockaddr *a);
struct cm_dev *dev_route(const struct sockaddr *dst);
int is_wildcard(const struct sockaddr *a);
int is_loopback(const struct sockaddr *a);
void addr_to_gid(const struct sockaddr *a, union ibv_gid *gid);
void gid_to_addr(const uint8_t gid[16], uint16_t port_be, struct sockaddr_storage *out);
socklen_t addr_len(const struct sockaddr *a);
int cm_call(struct cm_dev *d, int k, struct buf *req, int fd, struct buf *rep);
int cm_call_rfd(struct cm_dev *d, int k, struct buf *req, struct buf *rep, int *rfd);
void cm_destroy_id(struct cm_dev *d, uint32_t h);

/* Local states of a cm_id: what the program has asked of it, enough to
 * refuse a call out of order and to know a DISCONNECTED was seen. */
enum id_state {
	ID_IDLE,
	ID_BOUND,
	ID_ADDR_RESOLVED,
	ID_ROUTE_RESOLVED,
	ID_LISTEN,
	ID_CONNECTING, /* rdma_connect sent; or a connect request not yet answered */
	ID_CONNECTED,
	ID_DISCONNECTED,
};

struct cm_channel;

/* cm_id is struct rdma_cm_id and what rnicd knows it by. */
struct cm_id {
	struct rdma_cm_id id;
	struct cm_channel *ch;
	struct cm_dev *dev; /* NULL until bound */
	uint32_t h;         /* its CM ID in dev's rnicd; 0 for none */
	/* A listener bound to the wildcard address listens on every rnicd:
	 * its CM ID on each (lh[i] on dev_at(i)), dev and h unused. */
	int wild;
	uint32_t lh[MAX_DEVS];
	enum id_state state;
	struct ibv_sa_path_rec path;
	/* Events given to the program and not acked: rdma_destroy_id waits
	 * for them, as cma.c's does. Under ch->mu. */
	int events;
	pthread_cond_t acked;
	struct cm_id *next; /* in home->ids */
	/* home: the channel whose CM channels rnicd delivers its events on
	 * (rnicd has no migrate request); ch is where rdma_migrate_id put
	 * it, the channel its events are handed out on. Equal unless
	 * migrated after the ID was made in rnicd. */
	struct cm_channel *home;
	/* A synchronous ID (rdma_create_id without a channel, cma.c's
	 * sync): a private channel, and each call that makes an event waits
	 * for it (id.event holds it until the next). */
	int sync;
	struct ibv_qp_init_attr *qp_init_attr; /* a passive rdma_create_ep's: for rdma_get_request's IDs */
	struct cm_mc *mcs;                     /* the groups it joined (mcast.c) */
};

static inline struct cm_id *to_id(struct rdma_cm_id *id) { return (struct cm_id *)id; }

/* cm_event is struct rdma_cm_event and the private data it points at. */
struct cm_event {
	struct rdma_cm_event ev;
	struct cm_id *id;
	struct cm_event *next;
	uint8_t data[256];
};

/* cm_channel is struct rdma_event_channel. Each rnicd's CM channel of it
 * has a wake pipe the daemon writes, whose read end is wake[i]; efd is
 * an eventfd that queue_event writes for the events made here. The
 * program's fd is an epoll instance watching them all: readable exactly
 * when one of them is, and a file of its own, so that the O_NONBLOCK a
 * program sets on it is the program's alone. */
struct cm_channel {
	struct rdma_event_channel ch;
	int efd;
	uint32_t h[MAX_DEVS]; /* its CM channel on dev_at(i); 0: none yet */
	int wake[MAX_DEVS];   /* that CM channel's wake pipe (when h[i] != 0) */
	struct cm_event *head, *tail; /* events fetched or made, not yet given */
	/* The IDs made in rnicd on this channel's CM channels (their home):
	 * their events arrive here wherever rdma_migrate_id moved them. A
	 * channel the program destroyed lives on, closed, until the last of
	 * them is destroyed. */
	struct cm_id *ids;
	int waiters, closed, gone;
	struct cm_channel *next; /* in the library's list */
};

static inline struct cm_channel *to_channel(struct rdma_event_channel *c) { return (struct cm_channel *)c; }

/* channel.c. cm_lock guards every channel and ID of the library. */
void cm_lock(void);
void cm_unlock(void);
int channel_on(struct cm_channel *ch, struct cm_dev *d, uint32_t *h);
void queue_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, int status);
void queue_ud_event(struct cm_channel *ch, struct cm_id *id, enum rdma_cm_event_type type, const struct rdma_ud_param *ud);
void channel_add(struct cm_channel *ch, struct cm_id *id);
struct cm_channel *channel_remove(struct cm_id *id);
void channel_free(struct cm_channel *ch);
void channel_move(struct cm_id *id, struct cm_channel *to);
struct cm_id *id_alloc(struct cm_channel *ch, void *context, enum rdma_port_space ps);

/* id.c */
int sync_complete(struct cm_id *c);
void id_set_route(struct cm_id *c, const struct sockaddr *dst);
void id_bind_dev(struct cm_id *c, struct cm_dev *d);

/* mcast.c */
struct cm_mc;
void mcast_free(struct cm_id *c);

/* cm_err sets errno and returns -1, librdmacm's convention (ERR). */
static inline int cm_err(int e)
{
	errno = e;
	return -1;
}

#endif
