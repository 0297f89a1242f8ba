/*
 * qp.h: the QP as qp.c (create, modify, post) and wr.c (the ibv_wr_*
 * API) both see it.
 */
#ifndef QP_H
#define QP_H

#include "rnic.h"

/* rring is a receive ring (a QP's or an SRQ's) seen from the poster. */
struct rring {
	uint8_t *ring;
	uint32_t slots, slot_bytes, prod;
	uint32_t max_sge;
};

/* rsrq is an SRQ and its receive ring. */
struct rsrq {
	struct ibv_srq srq;
	uint32_t h;
	uint8_t *mem;
	size_t memlen;
	struct ibv_srq_attr attr;
	pthread_spinlock_t lock;
	struct rring rq;
	uint32_t srq_num; /* an XRC SRQ's (ibv_get_srq_num); 0 for others */
};

/* rah is an address handle: rnicd has no AH object, a UD WQE carries
 * the GRH fields itself. */
struct rah {
	struct ibv_ah ah;
	struct ibv_global_route grh;
};

/* rqp is a QP: its ibv_qp_ex (whose first member is the ibv_qp the
 * program sees), its rings and the state of the ibv_wr_* API. */
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

static inline struct rqp *to_rqp(struct ibv_qp *qp) { return (struct rqp *)qp; }

/* encode_send writes one send WR into a send ring slot. */
int encode_send(struct rqp *q, struct ibv_send_wr *wr, uint8_t *slot);
struct buf wqe_head(struct rqp *q, uint8_t *slot, struct ibv_send_wr *wr, unsigned flags);

/* qp.c: a QP of any type (XRC_RECV: no PD, xrcd its domain); an SRQ
 * filled from the daemon's reply. */
struct ring_reply;
struct ibv_qp *qp_create(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_qp_init_attr *a, struct ibv_xrcd *xrcd);
void srq_init(struct rsrq *s, struct ring_reply *r, struct ibv_pd *pd, struct ibv_srq_attr *attr, void *srq_context);

/* xrc.c: the checks and request of an XRC QP for qp_create. */
int xrc_qp_ok(struct ibv_qp_init_attr *a, struct ibv_pd *pd, struct ibv_xrcd *xrcd);
void put_xrc_qp_req(struct buf *b, struct ibv_qp_init_attr *a, struct ibv_pd *pd, struct ibv_xrcd *xrcd);

/* mw.c: a BIND_MW or LOCAL_INV WR into a send slot; the ibv_wr_* API's
 * bind and local invalidate (built with wr.c's wr_begin). */
int encode_local(struct rqp *q, struct ibv_send_wr *wr, uint8_t *slot);
struct ibv_send_wr *wr_begin(struct ibv_qp_ex *x, enum ibv_wr_opcode op);
void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b);
void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey);

#endif
