/*
 * mw.c: memory windows, type 1 and type 2 (ibv_alloc_mw, ibv_dealloc_mw,
 * ibv_bind_mw, IBV_WR_BIND_MW, IBV_WR_LOCAL_INV). The daemon allocates a
 * window and gives its rkey; binds and invalidations are WQEs on a QP's
 * send ring, which the NIC runs in order with the QP's other work and
 * checks as rxe does (rnic/dma/mw.go).
 */
#include <errno.h>
#include <stdlib.h>

#include "qp.h"

static struct ibv_mw *alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct ibv_mw *mw = calloc(1, sizeof(*mw));
	if (!mw) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[8];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, pd->handle);
	put32(&req, type);
	int err = call(pd->context, K_ALLOC_MW, &req, -1, &rep, NULL);
	if (err) {
		free(mw);
		errno = err;
		return NULL;
	}
	mw->context = pd->context;
	mw->pd = pd;
	mw->type = type;
	mw->handle = get32(&rep);
	mw->rkey = get32(&rep);
	return mw;
}

static int dealloc_mw(struct ibv_mw *mw)
{
	int err = destroy(mw->context, K_DEALLOC_MW, mw->handle);
	if (!err)
		free(mw);
	return err;
}

/* bind_mw binds a type 1 window: a BIND_MW WR on qp with the next rkey
 * (ibv_inc_rkey), which goes into mw->rkey once posted, as rdma-core's
 * providers do; the application undoes it if the bind's completion is
 * an error. verbs.h has checked the type, the MR's PD and a range
 * without an MR. */
static int bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *b)
{
	if (b->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED)
		return EINVAL; /* o10-36.2.2: a type 1 window is never zero-based */
	struct ibv_send_wr wr = {
		.wr_id = b->wr_id,
		.opcode = IBV_WR_BIND_MW,
		.send_flags = b->send_flags,
		.bind_mw = {.mw = mw, .rkey = ibv_inc_rkey(mw->rkey), .bind_info = b->bind_info},
	};
	struct ibv_send_wr *bad;
	int err = post_send(qp, &wr, &bad);
	if (err)
		return err;
	mw->rkey = wr.bind_mw.rkey;
	return 0;
}

/* encode_local writes a BIND_MW or LOCAL_INV WR into a send slot (abi's
 * send WQE: a bind's fields in the slots its comment names). It has no
 * SGE; what it names is checked by the NIC when it runs. */
int encode_local(struct rqp *q, struct ibv_send_wr *wr, uint8_t *slot)
{
	/* rxe's opcode table: BIND_MW on RC and UC, LOCAL_INV on RC. */
	enum ibv_qp_type t = q->qpx.qp_base.qp_type;
	if (t != IBV_QPT_RC && (t != IBV_QPT_UC || wr->opcode != IBV_WR_BIND_MW))
		return EINVAL;
	if (wr->send_flags & ~(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED))
		return EINVAL;
	struct buf s = wqe_head(q, slot, wr, wr->send_flags);
	if (wr->opcode == IBV_WR_LOCAL_INV) {
		s.off = SWQE_INV_RKEY;
		put32(&s, wr->invalidate_rkey);
		return s.bad ? EINVAL : 0;
	}
	const struct ibv_mw_bind_info *b = &wr->bind_mw.bind_info;
	if (!wr->bind_mw.mw || (!b->mr && b->length))
		return EINVAL;
	s.off = SWQE_IMM;
	put32(&s, b->mr ? b->mr->lkey : 0);
	s.off = SWQE_INV_RKEY;
	put32(&s, wr->bind_mw.mw->rkey);
	s.off = SWQE_REMOTE_ADDR;
	put64(&s, b->addr);
	s.off = SWQE_RKEY;
	put32(&s, wr->bind_mw.rkey);
	s.off = SWQE_COMPARE_ADD;
	put64(&s, b->length);
	s.off = SWQE_SWAP;
	put64(&s, b->mw_access_flags);
	return s.bad ? EINVAL : 0;
}

/* The ibv_wr_* API's bind and local invalidate (qp.h's wrb). */
void wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *b)
{
	struct ibv_send_wr *wr = wr_begin(x, IBV_WR_BIND_MW);
	wr->bind_mw.mw = mw;
	wr->bind_mw.rkey = rkey;
	wr->bind_mw.bind_info = *b;
}

void wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey) { wr_begin(x, IBV_WR_LOCAL_INV)->invalidate_rkey = rkey; }

void fill_mw_ops(struct ibv_context_ops *o)
{
	o->alloc_mw = alloc_mw;
	o->dealloc_mw = dealloc_mw;
	o->bind_mw = bind_mw;
}
