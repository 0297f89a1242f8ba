/*
 * wr.c: the ibv_wr_* API of QPs made by ibv_create_qp_ex.
 */
#include <errno.h>
#include <string.h>

#include "qp.h"

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

struct ibv_send_wr *wr_begin(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
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
		ring = ring_post(q->sq, q->sq_prod, 1);
	}
	pthread_spin_unlock(&q->slock);
	if (ring)
		err = conn_doorbell(&to_rctx(qp->context)->conn, q->h, DOORBELL_SEND);
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
static void wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t sz, uint16_t mss)
{
	(void)hdr; (void)sz; (void)mss;
	wr_unsupported(x);
}
static void wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn) { from_qpx(x)->wrb.wr.qp_type.xrc.remote_srqn = srqn; }
static void wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *v)
{
	(void)rkey; (void)addr; (void)v;
	wr_unsupported(x);
}

#define SUPPORTED_SEND_OPS                                                                                             \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                        \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |                \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_BIND_MW |               \
	 IBV_QP_EX_WITH_LOCAL_INV)

struct ibv_qp *create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->qp_type == IBV_QPT_XRC_RECV)
		return create_xrc_recv_qp(ctx, a);
	if ((a->comp_mask & ~known) || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~(uint64_t)SUPPORTED_SEND_OPS))) {
		rnic_log("create_qp_ex: comp_mask %#x, create_flags %#x, send_ops_flags %#llx: rnicd has RC/UC/UD QPs "
			 "with the send, RDMA, atomic, bind and local invalidate operations only",
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
