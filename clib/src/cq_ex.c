/*
 * cq_ex.c: extended CQs (ibv_create_cq_ex) and the ibv_start_poll API,
 * with rxe's semantics.
 *
 * An extended CQ is an ordinary CQ (cq.c: the same ring, events and
 * destroy) whose ibv_cq_ex part holds the poll functions. ibv_start_poll
 * takes the CQ's lock and, when the ring is empty, releases it and fails
 * with ENOENT; otherwise the lock is held until ibv_end_poll, which
 * consumes the CQE the poll stands on; ibv_next_poll consumes one and
 * moves to the next, or fails with ENOENT leaving the last one to
 * ibv_end_poll. Each CQE is decoded once, by the code ibv_poll_cq uses,
 * so every ibv_wc_read_* answers what ibv_poll_cq would have returned
 * for it. As rxe, only the readers of the fields asked for in wc_flags
 * are set, and a field the CQE does not carry (completion timestamps,
 * cvlan, flow tag, tag matching) is refused with EOPNOTSUPP.
 */
#include <errno.h>
#include <stdlib.h>

#include "cq.h"

/* What rnicd's CQE carries: IBV_WC_STANDARD_FLAGS (slid and
 * dlid_path_bits are 0 on RoCE, as rxe reports them). */
#define CQEX_WC_FLAGS                                                                                     \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

static inline struct rcq *to_rcq(struct ibv_cq_ex *cx)
{
	return (struct rcq *)cx;
}

/* stand makes the CQE in slot idx the one the poll stands on. */
static void stand(struct rcq *q, uint32_t idx)
{
	cqe_read(q, idx, &q->cur);
	q->cqx.status = q->cur.status;
	q->cqx.wr_id = q->cur.wr_id;
}

static int start_poll(struct ibv_cq_ex *cx, struct ibv_poll_cq_attr *attr)
{
	(void)attr; /* comp_mask 0 is the only one; rxe looks at none */
	struct rcq *q = to_rcq(cx);
	pthread_spin_lock(&q->lock);
	if (ring_load(q->ring, RING_PRODUCER) == q->cons) {
		/* The lock is released: the program calls no ibv_end_poll. A
		 * CQ that overran or whose daemon hung up is a failure, not an
		 * empty CQ that a loop on ENOENT would wait on for ever. */
		errno = poll_none(q) < 0 ? EIO : ENOENT;
		return errno;
	}
	q->empty = 0;
	stand(q, q->cons);
	return 0;
}

static int next_poll(struct ibv_cq_ex *cx)
{
	struct rcq *q = to_rcq(cx);
	if (ring_load(q->ring, RING_PRODUCER) == q->cons + 1) {
		errno = ENOENT;
		return ENOENT;
	}
	q->cons++;
	ring_store(q->ring, RING_CONSUMER, q->cons);
	stand(q, q->cons);
	return 0;
}

static void end_poll(struct ibv_cq_ex *cx)
{
	struct rcq *q = to_rcq(cx);
	q->cons++;
	ring_store(q->ring, RING_CONSUMER, q->cons);
	pthread_spin_unlock(&q->lock);
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.opcode;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.vendor_err;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.byte_len;
}

static __be32 read_imm_data(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.imm_data;
}

static uint32_t read_qp_num(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.qp_num;
}

static uint32_t read_src_qp(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.src_qp;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.wc_flags;
}

static uint32_t read_slid(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.slid;
}

static uint8_t read_sl(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.sl;
}

static uint8_t read_dlid_path_bits(struct ibv_cq_ex *cx)
{
	return to_rcq(cx)->cur.dlid_path_bits;
}

struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *a)
{
	/* libibverbs' own check (ibv_cmd_create_cq_ex): masks it does not
	 * know are EOPNOTSUPP. A parent domain is not looked at, as on rxe,
	 * which has none either. */
	if (a->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
		rnic_log("create_cq_ex: comp_mask 0x%x has bits libibverbs does not know", a->comp_mask);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->wc_flags & ~(uint64_t)CQEX_WC_FLAGS) {
		rnic_log("create_cq_ex: wc_flags 0x%llx: rnicd's completions carry no timestamp, cvlan, flow tag "
			 "or tag matching information (they carry 0x%x)",
			 (unsigned long long)a->wc_flags, CQEX_WC_FLAGS);
		errno = EOPNOTSUPP;
		return NULL;
	}
	/* IGNORE_OVERRUN goes to the kernel as a CQ flag, which rxe refuses
	 * (EOPNOTSUPP; UCX then makes a plain CQ); SINGLE_THREADED is a
	 * hint to the provider's locking that rxe ignores. */
	if ((a->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (a->flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)) {
		rnic_log("create_cq_ex: IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: an overrun CQ fails its polls on rnicd");
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (a->cqe < 1 || a->cqe > 0x7fffffff) {
		errno = EINVAL;
		return NULL;
	}
	struct rcq *q = cq_new(ctx, (int)a->cqe, a->cq_context, a->channel);
	if (!q)
		return NULL;
	struct ibv_cq_ex *cx = &q->cqx;
	cx->comp_mask = 0;
	cx->start_poll = start_poll;
	cx->next_poll = next_poll;
	cx->end_poll = end_poll;
	cx->read_opcode = read_opcode;
	cx->read_vendor_err = read_vendor_err;
	cx->read_wc_flags = read_wc_flags;
	if (a->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		cx->read_byte_len = read_byte_len;
	if (a->wc_flags & IBV_WC_EX_WITH_IMM)
		cx->read_imm_data = read_imm_data;
	if (a->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		cx->read_qp_num = read_qp_num;
	if (a->wc_flags & IBV_WC_EX_WITH_SRC_QP)
		cx->read_src_qp = read_src_qp;
	if (a->wc_flags & IBV_WC_EX_WITH_SLID)
		cx->read_slid = read_slid;
	if (a->wc_flags & IBV_WC_EX_WITH_SL)
		cx->read_sl = read_sl;
	if (a->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		cx->read_dlid_path_bits = read_dlid_path_bits;
	return cx;
}
