/*
 * rnic.h: the library's own declarations, shared by its files.
 *
 * libibverbs for rnicd. A program linked against libibverbs.so.1 and
 * started with LD_LIBRARY_PATH pointing here finds one device per running
 * rnicd and drives it through the daemon's host interface (hostif):
 * control requests over the daemon's SOCK_SEQPACKET socket, work requests
 * and completions through rings in memory both map. The structures are
 * the system's own <infiniband/verbs.h>, so the header's inline functions
 * (ibv_post_send, ibv_poll_cq, ibv_query_device_ex, ...) call into the
 * context ops this library fills in.
 *
 * One concern a file: proto.c speaks the control protocol, cmd.c what
 * every object's request shares, device.c finds and opens devices,
 * mem.c makes registered memory reachable by the NIC, pdmr.c has PDs and
 * MRs, cq.c completion channels and CQs, qp.c QPs, SRQs and AHs, wr.c the
 * ibv_wr_* API, misc.c the small helpers of the API (strings, rates, and
 * the calls rnicd has no equivalent for).
 */
#ifndef RNIC_H
#define RNIC_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/*
 * The ABI between the device and its clients, Go package abi: proto.go
 * (request kinds, the header, reply codes, CM event codes), messages.go
 * (doorbell queues) and ring.go (ring header words, slot layouts). Every
 * value here is checked against the Go side by abi's TestCHeaderABI, which
 * compiles a program printing them; the code below uses these names, never
 * the numbers.
 */

/* Request kinds (abi.Kind); values are the protocol. */
enum rnic_kind {
	K_QUERY_PORT = 1,
	K_ALLOC_PD = 2,
	K_DEALLOC_PD = 3,
	K_REG_MR = 4,
	K_DEREG_MR = 5,
	K_CREATE_CHANNEL = 6,
	K_DESTROY_CHANNEL = 7,
	K_CREATE_CQ = 8,
	K_DESTROY_CQ = 9,
	K_CREATE_SRQ = 10,
	K_DESTROY_SRQ = 11,
	K_CREATE_QP = 12,
	K_MODIFY_QP = 13,
	K_QUERY_QP = 14,
	K_DESTROY_QP = 15,
	K_LIST_QPS = 16, /* the tools' (rnic res); this library sends none */
	K_COUNTERS = 17, /* the tools' (rnic stat) */
	K_DOORBELL = 18,
	K_CM_CREATE_CHANNEL = 20,
	K_CM_DESTROY_CHANNEL = 21,
	K_CM_CREATE_ID = 22,
	K_CM_DESTROY_ID = 23,
	K_CM_LISTEN = 24,
	K_CM_CONNECT = 25,
	K_CM_ACCEPT = 26,
	K_CM_REJECT = 27,
	K_CM_DISCONNECT = 28,
	K_CM_GET_EVENT = 29,
	K_LIST_CM_IDS = 30, /* the tools' (rnic res cm_id) */
	K_REG_MR_SHM = 31,
	K_ATTACH_MCAST = 32, /* struct mcast_req */
	K_DETACH_MCAST = 33,
	K_OPEN_ASYNC = 40, /* async.c */
	K_GET_ASYNC_EVENT = 41,
	K_MODIFY_SRQ = 42,
	K_QUERY_SRQ = 43,
	K_ALLOC_MW = 44, /* pd, type; reply: handle, rkey */
	K_DEALLOC_MW = 45,
	K_OPEN_XRCD = 48,
	K_CLOSE_XRCD = 49,
	K_CREATE_XRC_SRQ = 50, /* reply: a ring reply with the SRQ number as qpn */
	K_CREATE_XRC_QP = 51,
	K_OPEN_XRCD_FILE = 52, /* carries the file's descriptor */
	K_REG_MR_MAPPED = 56, /* the daemon opens the mapping through /proc/PID/map_files */
	K_RESIZE_CQ = 60, /* cq_resize.c; reply: a ring reply and the new ring's memfd */
};

#define HDR_LEN 16
#define MAX_MSG (64 << 10)
#define FLAG_REPLY 1

/* Reply codes (abi.Code): the first word of every reply. */
enum rnic_code {
	CODE_OK = 0,
	CODE_INVALID = 1,
	CODE_NO_HANDLE = 2,
	CODE_MALFORMED = 3,
	CODE_UNKNOWN = 4,
	CODE_BUSY = 5,
	CODE_FAILED = 6,
	CODE_LIMIT = 7,
};

/* A port's state in a query_port reply (abi.PortDown, PortActive). */
#define PORT_DOWN 1
#define PORT_ACTIVE 4

/* A doorbell's queue (abi.DoorbellSend, DoorbellRecv). */
#define DOORBELL_SEND 0
#define DOORBELL_RECV 1

/* The daemon's CM event types (abi.CMEvent*, rnic/cm's EventType). */
enum rnic_cm_event {
	CM_EV_CONNECT_REQUEST = 1,
	CM_EV_ESTABLISHED = 2,
	CM_EV_REJECTED = 3,
	CM_EV_UNREACHABLE = 4,
	CM_EV_CONNECT_ERROR = 5,
	CM_EV_DISCONNECTED = 6,
	CM_EV_TIMEWAIT_EXIT = 7,
};

/* Ring header words: byte offsets of uint32s. */
#define RING_PRODUCER 0
#define RING_DEPTH 8
#define RING_SLOT_SIZE 12
#define RING_ARMED 16
#define RING_FLAGS 20
#define RING_EVENTS 24
#define RING_WAITING 28
#define RING_BELL 32
#define RING_ASLEEP 36
#define RING_CONSUMER 64
#define RING_HEADER 128
#define ARM_ANY 1
#define ARM_SOLICITED 2
#define FLAG_OVERRUN 1

/* Send WQE slot: byte offsets of its fields (little-endian), then
 * num_sge SGEs or the inline data from SEND_FIXED. */
#define SWQE_WR_ID 0           /* uint64 */
#define SWQE_OPCODE 8          /* uint8, ibv_wr_opcode */
#define SWQE_SEND_FLAGS 9      /* uint8, ibv_send_flags */
#define SWQE_NUM_SGE 10        /* uint8 */
#define SWQE_HAS_AH 11         /* uint8: 1, the AH fields are valid */
#define SWQE_INLINE_LEN 12     /* uint32 */
#define SWQE_IMM 16            /* uint32, host order */
#define SWQE_INV_RKEY 20       /* uint32 */
#define SWQE_REMOTE_ADDR 24    /* uint64 */
#define SWQE_RKEY 32           /* uint32 */
#define SWQE_REMOTE_QPN 36     /* uint32 */
#define SWQE_REMOTE_QKEY 40    /* uint32 */
#define SWQE_HOP_LIMIT 44      /* uint8 */
#define SWQE_TRAFFIC_CLASS 45  /* uint8 */
#define SWQE_SGID_INDEX 46     /* uint8 */
#define SWQE_FLOW_LABEL 48     /* uint32 */
#define SWQE_REMOTE_SRQN 52    /* uint32: wr.qp_type.xrc.remote_srqn */
#define SWQE_COMPARE_ADD 56    /* uint64 */
#define SWQE_SWAP 64           /* uint64 */
#define SWQE_DGID 72           /* 16 bytes */
#define SEND_FIXED 96
/* An SGE in a slot. */
#define SGE_ADDR 0   /* uint64 */
#define SGE_LENGTH 8 /* uint32 */
#define SGE_LKEY 12  /* uint32 */
#define SGE_BYTES 16
/* Receive WQE slot: then num_sge SGEs from RECV_FIXED. */
#define RWQE_WR_ID 0   /* uint64 */
#define RWQE_NUM_SGE 8 /* uint32 */
#define RECV_FIXED 16
/* CQE slot. */
#define CQE_WR_ID 0      /* uint64 */
#define CQE_STATUS 8     /* uint8 */
#define CQE_OPCODE 9     /* uint8 */
#define CQE_WC_FLAGS 10  /* uint8 */
#define CQE_BYTE_LEN 12  /* uint32 */
#define CQE_IMM 16       /* uint32, host order (or the invalidated rkey) */
#define CQE_QP_NUM 20    /* uint32 */
#define CQE_SRC_QP 24    /* uint32 */
#define CQE_PKEY_INDEX 28 /* uint16 */
#define CQE_BYTES 32

/* A message being built or read: little-endian fields, as abi's
 * encoder and decoder. A read past the end sets bad. */
struct buf {
	uint8_t *p;
	size_t len, off;
	int bad;
};

void put8(struct buf *b, uint8_t v);
void put16(struct buf *b, uint16_t v);
void put32(struct buf *b, uint32_t v);
void put64(struct buf *b, uint64_t v);
void putn(struct buf *b, const void *v, size_t n);
uint8_t get8(struct buf *b);
uint16_t get16(struct buf *b);
uint32_t get32(struct buf *b);
uint64_t get64(struct buf *b);
void getn(struct buf *b, void *v, size_t n);

/* put_sge writes an SGE into a slot at offset off. */
static inline void put_sge(struct buf *b, size_t off, const struct ibv_sge *sg)
{
	b->off = off + SGE_ADDR;
	put64(b, sg->addr);
	b->off = off + SGE_LENGTH;
	put32(b, sg->length);
	b->off = off + SGE_LKEY;
	put32(b, sg->lkey);
}

/* conn is one control connection to a daemon. */
struct conn {
	int fd;
	pthread_mutex_t mu; /* one request and its reply at a time */
	uint32_t id;        /* atomic: doorbells take ids without mu */
};

int conn_dial(struct conn *c, const char *path);
void conn_close(struct conn *c);
/* conn_call sends request kind k with body req (and fd if >= 0) and
 * reads its reply body into rep (its buffer must hold MAX_MSG); *rfd
 * gets the descriptor the reply carries, or -1. It returns 0 or an errno
 * value, and prints the daemon's message for a refused request. */
int conn_call(struct conn *c, int k, struct buf *req, int fd, struct buf *rep, int *rfd);
/* conn_call_fds is conn_call for a reply that carries up to nrfd
 * descriptors, into rfd[0..nrfd) (-1 for each it did not carry). */
int conn_call_fds(struct conn *c, int k, struct buf *req, int fd, struct buf *rep, int *rfd, int nrfd);
int conn_doorbell(struct conn *c, uint32_t h, uint8_t queue);
int conn_hung_up(struct conn *c);

/* rdev is a device: one running rnicd. */
struct rdev {
	struct ibv_device dev;
	char sock[108];
	uint8_t gid[16];
	uint32_t mtu; /* active MTU in bytes */
	uint64_t guid; /* host order */
};

/* rctx is an open device: the verbs_context the header's inline
 * functions reach, and the connection behind it. */
struct rmr;

struct rctx {
	struct verbs_context vctx; /* its ibv_context is the last field */
	struct rdev *dev;
	struct conn conn;
	/* The context's MRs, so that ibv_close_device gives their pages
	 * back even when the program did not deregister them. */
	pthread_mutex_t mrs_mu;
	struct rmr *mrs;
	/* Asynchronous events (async.c), under ev_mu: DEVICE_FATAL was
	 * returned; the daemon's event queue is open (async_fd is its wake
	 * pipe); the objects whose events the program may get. */
	pthread_mutex_t ev_mu;
	int fatal_told, ev_open;
	struct aobj *aobjs;
};

/* async.c: async_open returns the context's async_fd (*err the daemon's
 * refusal of its queue, if any); async_track makes
 * the object obj with handle h, of kind k (the request that destroys
 * it: K_DESTROY_QP, _CQ or _SRQ), an event's element; async_destroy
 * destroys it (request k) and says how many events were returned for it,
 * which async_wait_acked waits to see acknowledged. */
struct aobj;
int async_open(struct ibv_context *ctx, int *err);
void async_close(struct ibv_context *ctx);
void async_track(struct ibv_context *ctx, int k, uint32_t h, void *obj);
int async_destroy(struct ibv_context *ctx, int k, uint32_t h, uint32_t *reported);
void async_wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, uint32_t *completed, uint32_t reported);

/* pdmr.c: ibv_close_device's undo of every MR the program left. */
void mrs_release(struct rctx *c);

static inline struct rctx *to_rctx(struct ibv_context *c)
{
	return (struct rctx *)((char *)c - offsetof(struct rctx, vctx.context));
}

struct rdev *rdev_query(const char *name, const char *sock);
enum ibv_mtu mtu_enum(uint32_t bytes);

/* cmd.c: a request on ctx's connection, its reply read into rep (a
 * buffer of this thread's), its descriptor into *rfd (NULL: closed). */
int call(struct ibv_context *ctx, int k, struct buf *req, int fd, struct buf *rep, int *rfd);
int destroy(struct ibv_context *ctx, int k, uint32_t h);

/* ring_reply is abi.RingReply: an object's handle, the caps it got,
 * and where its rings lie in the memfd the reply carries. */
struct ring_desc {
	uint32_t off, size, slots, slot_bytes;
};
struct ring_reply {
	uint32_t h, qpn;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	struct ring_desc send, recv;
	/* wake_fd is the reply's second descriptor, a CQ's wake pipe (the
	 * read end), or -1; create_rings' caller owns it. */
	int wake_fd;
};
int create_rings(struct ibv_context *ctx, int k, int dk, struct buf *req, int fd, struct ring_reply *r,
		 uint8_t **mem, size_t *memlen, int need_send, uint32_t send_slot, int need_recv);

/* The context ops: the data path the header's inline functions call. */
int poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int req_notify_cq(struct ibv_cq *cq, int solicited_only);
int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
void fill_mw_ops(struct ibv_context_ops *o); /* mw.c: alloc_mw, bind_mw, dealloc_mw */
int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a);
struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a);
/* xrc.c: XRC's verbs_context operations, and its receive QPs. */
void fill_xrc_ops(struct verbs_context *v);
struct ibv_qp *create_xrc_recv_qp(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a);

/* mem.c */
/* mem_share's *fd when it is no descriptor: System V shm, which the
 * daemon attaches (K_REG_MR_SHM); a shared mapping the daemon opens
 * itself (K_REG_MR_MAPPED). */
enum { MEM_SHM = -1, MEM_MAPPED = -2 };
int mem_share(void *addr, size_t len, int *fd, uint64_t *off, uint32_t *shmid);
void mem_unshare(void *addr, size_t len);
void mem_sent(int fd);

/* Ring access: sync/atomic on the Go side, acquire/release here. */
static inline uint32_t ring_load(uint8_t *ring, int off)
{
	return __atomic_load_n((uint32_t *)(ring + off), __ATOMIC_ACQUIRE);
}
static inline void ring_store(uint8_t *ring, int off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(ring + off), v, __ATOMIC_RELEASE);
}

/* ring_post publishes a work queue's producer index and reports whether
 * a doorbell message must follow (abi.Ring.EngineAsleep, RingBell):
 * only when the daemon's engine sleeps, as virtio's event index
 * suppresses kicks, and, with bell, only when no doorbell is on its way.
 * The store and the load are sequentially consistent: the engine writes
 * its asleep word and then reads every producer index, so one of the two
 * sides sees the other's store (Dekker's order) and no post is missed. */
static inline int ring_post(uint8_t *ring, uint32_t prod, int bell)
{
	__atomic_store_n((uint32_t *)(ring + RING_PRODUCER), prod, __ATOMIC_SEQ_CST);
	if (!__atomic_load_n((uint32_t *)(ring + RING_ASLEEP), __ATOMIC_SEQ_CST))
		return 0;
	return !bell || __atomic_exchange_n((uint32_t *)(ring + RING_BELL), 1, __ATOMIC_SEQ_CST) == 0;
}

/* rnic_log prints a message naming the library (LOG_NAME, set by the
 * Makefile for each library) on stderr: a program that fails here says
 * why, as rdma-core's providers do. */
void rnic_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
