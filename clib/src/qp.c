/*
 * qp.c: QPs, SRQs and address handles.
 *
 * Work requests go through rings the daemon creates and both sides map
 * (the layout is abi/ring.go's): a post writes WQEs into the
 * ring, stores the producer index and rings the doorbell. A send
 * doorbell is skipped while the previous one is still on its way (the
 * ring's bell word), as the Go verbs package does. The daemon validates
 * every WQE again: what this side checks is only what libibverbs reports
 * at post time (a full queue, too many SGEs).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qp.h"

/* --- receive rings (QPs and SRQs) --------------------------------------- */

/* post_recv writes receive WRs into r; the caller holds its lock. It
 * sets *ring when a doorbell must follow (ring_post). */
static int post_recv_ring(int *ring, struct rring *r, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	int err = 0;
	for (; wr; wr = wr->next) {
		if (r->prod - ring_load(r->ring, RING_CONSUMER) >= r->slots) {
			err = ENOMEM;
			break;
		}
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > r->max_sge ||
		    RECV_FIXED + (size_t)SGE_BYTES * wr->num_sge > r->slot_bytes) {
			err = EINVAL;
			break;
		}
		struct buf s = {.p = r->ring + RING_HEADER + (size_t)(r->prod % r->slots) * r->slot_bytes,
				.len = r->slot_bytes};
		memset(s.p, 0, RECV_FIXED);
		s.off = RWQE_WR_ID;
		put64(&s, wr->wr_id);
		s.off = RWQE_NUM_SGE;
		put32(&s, wr->num_sge);
		for (int i = 0; i < wr->num_sge; i++)
			put_sge(&s, RECV_FIXED + (size_t)SGE_BYTES * i, &wr->sg_list[i]);
		r->prod++;
	}
	*ring = ring_post(r->ring, r->prod, 0);
	if (err)
		*bad = wr;
	return err;
}

/* --- SRQ --------------------------------------------------------------- */

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *a)
{
	struct rsrq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[16];
	struct buf req = {.p = b, .len = sizeof(b)};
	put32(&req, pd->handle);
	put32(&req, a->attr.max_wr);
	put32(&req, a->attr.max_sge);
	put32(&req, a->attr.srq_limit);
	struct ring_reply r;
	int err = create_rings(pd->context, K_CREATE_SRQ, K_DESTROY_SRQ, &req, -1, &r, &s->mem, &s->memlen, 0, 0, 1);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	srq_init(s, &r, pd, &a->attr, a->srq_context);
	return &s->srq;
}

/* srq_init fills s from the daemon's reply r; attr gets the sizes made. */
void srq_init(struct rsrq *s, struct ring_reply *r, struct ibv_pd *pd, struct ibv_srq_attr *attr, void *srq_context)
{
	if (r->wake_fd >= 0)
		close(r->wake_fd); /* only a CQ's reply carries one */
	s->h = r->h;
	s->rq = (struct rring){s->mem + r->recv.off, r->recv.slots, r->recv.slot_bytes, 0, r->max_recv_sge};
	attr->max_wr = r->max_recv_wr;
	attr->max_sge = r->max_recv_sge;
	s->attr = *attr;
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = r->h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	async_track(pd->context, K_DESTROY_SRQ, r->h, &s->srq);
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct rsrq *s = (struct rsrq *)srq;
	uint32_t reported;
	int err = async_destroy(srq->context, K_DESTROY_SRQ, s->h, &reported);
	if (err)
		return err;
	async_wait_acked(&srq->mutex, &srq->cond, &srq->events_completed, reported);
	munmap(s->mem, s->memlen);
	free(s);
	return 0;
}

int post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rsrq *s = (struct rsrq *)srq;
	pthread_spin_lock(&s->lock);
	int ring;
	int err = post_recv_ring(&ring, &s->rq, wr, bad);
	pthread_spin_unlock(&s->lock);
	int e2 = ring ? conn_doorbell(&to_rctx(srq->context)->conn, s->h, DOORBELL_RECV) : 0;
	return err ? err : e2;
}

/* --- AH ---------------------------------------------------------------- */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!attr->is_global) {
		rnic_log("create_ah: RoCE needs a GRH (ah_attr.is_global and a GID; -g/-x in the tools)");
		errno = EINVAL;
		return NULL;
	}
	struct rah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->grh = attr->grh;
	return &a->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	free(ah);
	return 0;
}

/* ibv_init_ah_from_wc answers a UD message: the sender's GID is in the
 * 40 bytes the NIC put before the payload, an IPv4 header in the last 20
 * for an IPv4 sender (RoCEv2), else an IPv6 header. */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah)
{
	(void)ctx;
	memset(ah, 0, sizeof(*ah));
	if (!(wc->wc_flags & IBV_WC_GRH))
		return -1;
	const uint8_t *g = (const uint8_t *)grh;
	ah->is_global = 1;
	ah->port_num = port;
	ah->grh.sgid_index = 1;
	ah->grh.hop_limit = 64;
	if ((g[20] >> 4) == 4) {
		ah->grh.dgid.raw[10] = ah->grh.dgid.raw[11] = 0xff;
		memcpy(ah->grh.dgid.raw + 12, g + 20 + 12, 4);
	} else {
		memcpy(ah->grh.dgid.raw, g + 8, 16);
	}
	ah->dlid = 0;
	return 0;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr a;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &a)) {
		errno = EINVAL;
		return NULL;
	}
	return ibv_create_ah(pd, &a);
}

/* --- QP ---------------------------------------------------------------- */

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	return qp_create(pd->context, pd, a, NULL);
}

/* qp_create makes a QP of any type: an XRC_RECV one has no PD but an
 * XRC domain (xrc.c). */
struct ibv_qp *qp_create(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_qp_init_attr *a, struct ibv_xrcd *xrcd)
{
	int xrc = a->qp_type == IBV_QPT_XRC_SEND || a->qp_type == IBV_QPT_XRC_RECV;
	if (!xrc && a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
		rnic_log("create_qp: QP type %d; rnicd has RC, UC, UD, XRC_SEND and XRC_RECV", a->qp_type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (xrc ? !xrc_qp_ok(a, pd, xrcd) : (!a->send_cq || !a->recv_cq)) {
		errno = EINVAL;
		return NULL;
	}
	struct rqp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[64];
	struct buf req = {.p = b, .len = sizeof(b)};
	if (xrc) {
		put_xrc_qp_req(&req, a, pd, xrcd);
		goto made;
	}
	put32(&req, pd->handle);
	put32(&req, a->send_cq->handle);
	put32(&req, a->recv_cq->handle);
	put32(&req, a->srq ? a->srq->handle : 0);
	put8(&req, a->qp_type);
	put8(&req, a->sq_sig_all ? 1 : 0);
	put32(&req, a->cap.max_send_wr);
	put32(&req, a->srq ? 0 : a->cap.max_recv_wr);
	put32(&req, a->cap.max_send_sge);
	put32(&req, a->srq ? 0 : a->cap.max_recv_sge);
	put32(&req, a->cap.max_inline_data);
made:;
	struct ring_reply r;
	int err = create_rings(ctx, xrc ? K_CREATE_XRC_QP : K_CREATE_QP, K_DESTROY_QP, &req, -1, &r, &q->mem, &q->memlen,
			       1, 0, !a->srq && !xrc);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	if (r.wake_fd >= 0)
		close(r.wake_fd); /* only a CQ's reply carries one */
	q->h = r.h;
	q->sq = q->mem + r.send.off;
	q->sq_slots = r.send.slots;
	q->sq_slot_bytes = r.send.slot_bytes;
	if (!a->srq && !xrc)
		q->rq = (struct rring){q->mem + r.recv.off, r.recv.slots, r.recv.slot_bytes, 0, r.max_recv_sge};
	q->cap = (struct ibv_qp_cap){r.max_send_wr, r.max_recv_wr, r.max_send_sge, r.max_recv_sge, r.max_inline};
	a->cap = q->cap;
	q->sig_all = a->sq_sig_all;
	pthread_spin_init(&q->slock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rlock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = ctx;
	qp->qp_context = a->qp_context;
	qp->pd = pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = r.h;
	qp->qp_num = r.qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	async_track(ctx, K_DESTROY_QP, r.h, qp);
	return qp;
}

/* put_attr encodes ibv_qp_attr as abi's encodeAttr. */
static void put_attr(struct buf *b, struct ibv_qp_attr *a)
{
	put8(b, a->qp_state);
	put8(b, a->path_mtu);
	put32(b, a->qkey);
	put32(b, a->rq_psn);
	put32(b, a->sq_psn);
	put32(b, a->dest_qp_num);
	put32(b, a->qp_access_flags);
	put16(b, a->pkey_index);
	put8(b, a->port_num);
	putn(b, a->ah_attr.grh.dgid.raw, 16);
	put32(b, a->ah_attr.grh.flow_label);
	put8(b, a->ah_attr.grh.sgid_index);
	put8(b, a->ah_attr.grh.hop_limit);
	put8(b, a->ah_attr.grh.traffic_class);
	put8(b, a->timeout);
	put8(b, a->retry_cnt);
	put8(b, a->rnr_retry);
	put8(b, a->min_rnr_timer);
	put8(b, a->max_rd_atomic);
	put8(b, a->max_dest_rd_atomic);
}

static void get_attr(struct buf *b, struct ibv_qp_attr *a)
{
	a->qp_state = get8(b);
	a->path_mtu = get8(b);
	a->qkey = get32(b);
	a->rq_psn = get32(b);
	a->sq_psn = get32(b);
	a->dest_qp_num = get32(b);
	a->qp_access_flags = get32(b);
	a->pkey_index = get16(b);
	a->port_num = get8(b);
	getn(b, a->ah_attr.grh.dgid.raw, 16);
	a->ah_attr.grh.flow_label = get32(b);
	a->ah_attr.grh.sgid_index = get8(b);
	a->ah_attr.grh.hop_limit = get8(b);
	a->ah_attr.grh.traffic_class = get8(b);
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = a->port_num;
	a->timeout = get8(b);
	a->retry_cnt = get8(b);
	a->rnr_retry = get8(b);
	a->min_rnr_timer = get8(b);
	a->max_rd_atomic = get8(b);
	a->max_dest_rd_atomic = get8(b);
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct rqp *q = to_rqp(qp);
	if ((mask & IBV_QP_AV) && !attr->ah_attr.is_global) {
		rnic_log("modify_qp: RoCE needs a GRH (ah_attr.is_global and a GID; -g/-x in the tools)");
		return EINVAL;
	}
	uint8_t b[80];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, q->h);
	put32(&req, mask);
	put_attr(&req, attr);
	int err = call(qp->context, K_MODIFY_QP, &req, -1, &rep, NULL);
	if (err)
		return err;
	if (mask & IBV_QP_STATE) {
		pthread_spin_lock(&q->slock);
		pthread_spin_lock(&q->rlock);
		qp->state = attr->qp_state;
		if (attr->qp_state == IBV_QPS_RESET)
			q->sq_prod = q->rq.prod = 0; /* the daemon reset the rings too */
		pthread_spin_unlock(&q->rlock);
		pthread_spin_unlock(&q->slock);
	}
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct rqp *q = to_rqp(qp);
	uint8_t b[4];
	struct buf req = {.p = b, .len = 4}, rep;
	put32(&req, q->h);
	int err = call(qp->context, K_QUERY_QP, &req, -1, &rep, NULL);
	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	get_attr(&rep, attr);
	attr->cap = q->cap;
	attr->cur_qp_state = attr->qp_state;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct rqp *q = to_rqp(qp);
	uint32_t reported;
	int err = async_destroy(qp->context, K_DESTROY_QP, q->h, &reported);
	if (err)
		return err;
	async_wait_acked(&qp->mutex, &qp->cond, &qp->events_completed, reported);
	munmap(q->mem, q->memlen);
	free(q);
	return 0;
}

/* wqe_head starts a send slot (abi's send WQE): cleared, with the WR's
 * id, opcode and flags. */
struct buf wqe_head(struct rqp *q, uint8_t *slot, struct ibv_send_wr *wr, unsigned flags)
{
	struct buf s = {.p = slot, .len = q->sq_slot_bytes};
	memset(slot, 0, SEND_FIXED);
	s.off = SWQE_WR_ID;
	put64(&s, wr->wr_id);
	s.off = SWQE_OPCODE;
	put8(&s, wr->opcode);
	s.off = SWQE_SEND_FLAGS;
	put8(&s, flags);
	return s;
}

/* encode_send writes one send WR into slot s (abi's send WQE). */
int encode_send(struct rqp *q, struct ibv_send_wr *wr, uint8_t *slot)
{
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_READ:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_SEND_WITH_INV:
		break;
	case IBV_WR_BIND_MW:
	case IBV_WR_LOCAL_INV:
		return encode_local(q, wr, slot);
	default:
		return EINVAL;
	}
	unsigned flags = wr->send_flags;
	if (flags & ~(IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE))
		return EINVAL;
	int inl = flags & IBV_SEND_INLINE;
	if (wr->num_sge < 0 || (!inl && (uint32_t)wr->num_sge > q->cap.max_send_sge))
		return EINVAL;
	size_t total = 0;
	if (inl) {
		for (int i = 0; i < wr->num_sge; i++)
			total += wr->sg_list[i].length;
		if (total > q->cap.max_inline_data || SEND_FIXED + total > q->sq_slot_bytes)
			return EINVAL;
	} else if (SEND_FIXED + (size_t)SGE_BYTES * wr->num_sge > q->sq_slot_bytes) {
		return EINVAL;
	}
	struct buf s = wqe_head(q, slot, wr, flags);
	s.off = SWQE_NUM_SGE;
	put8(&s, inl ? 0 : wr->num_sge);
	struct rah *ah = NULL;
	if (q->qpx.qp_base.qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		ah = (struct rah *)wr->wr.ud.ah;
	}
	s.off = SWQE_HAS_AH;
	put8(&s, ah ? 1 : 0);
	s.off = SWQE_INLINE_LEN;
	put32(&s, inl ? total : 0);
	uint32_t imm = 0, inv = 0;
	if (wr->opcode == IBV_WR_SEND_WITH_INV)
		inv = wr->invalidate_rkey;
	else if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
		imm = ntohl(wr->imm_data);
	s.off = SWQE_IMM;
	put32(&s, imm);
	s.off = SWQE_INV_RKEY;
	put32(&s, inv);
	int atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
	s.off = SWQE_REMOTE_ADDR;
	put64(&s, atomic ? wr->wr.atomic.remote_addr : wr->wr.rdma.remote_addr);
	s.off = SWQE_RKEY;
	put32(&s, atomic ? wr->wr.atomic.rkey : wr->wr.rdma.rkey);
	if (q->qpx.qp_base.qp_type == IBV_QPT_XRC_SEND) {
		s.off = SWQE_REMOTE_SRQN;
		put32(&s, wr->qp_type.xrc.remote_srqn);
	}
	if (ah) {
		/* The union's ud member overlaps rdma's: write it only for UD. */
		s.off = SWQE_REMOTE_QPN;
		put32(&s, wr->wr.ud.remote_qpn);
		s.off = SWQE_REMOTE_QKEY;
		put32(&s, wr->wr.ud.remote_qkey);
		s.off = SWQE_HOP_LIMIT;
		put8(&s, ah->grh.hop_limit);
		s.off = SWQE_TRAFFIC_CLASS;
		put8(&s, ah->grh.traffic_class);
		s.off = SWQE_SGID_INDEX;
		put8(&s, ah->grh.sgid_index);
		s.off = SWQE_FLOW_LABEL;
		put32(&s, ah->grh.flow_label);
		s.off = SWQE_DGID;
		putn(&s, ah->grh.dgid.raw, 16);
	}
	if (atomic) {
		s.off = SWQE_COMPARE_ADD;
		put64(&s, wr->wr.atomic.compare_add);
		s.off = SWQE_SWAP;
		put64(&s, wr->wr.atomic.swap);
	}
	s.off = SEND_FIXED;
	for (int i = 0; i < wr->num_sge; i++) {
		if (inl)
			putn(&s, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
		else
			put_sge(&s, SEND_FIXED + (size_t)SGE_BYTES * i, &wr->sg_list[i]);
	}
	return s.bad ? EINVAL : 0;
}

int post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct rqp *q = to_rqp(qp);
	int err = 0;
	pthread_spin_lock(&q->slock);
	switch (qp->state) {
	case IBV_QPS_RTS:
	case IBV_QPS_SQD:
	case IBV_QPS_ERR:
		break;
	default:
		pthread_spin_unlock(&q->slock);
		*bad = wr;
		return EINVAL;
	}
	for (; wr; wr = wr->next) {
		if (q->sq_prod - ring_load(q->sq, RING_CONSUMER) >= q->sq_slots) {
			err = ENOMEM;
			break;
		}
		err = encode_send(q, wr, q->sq + RING_HEADER + (size_t)(q->sq_prod % q->sq_slots) * q->sq_slot_bytes);
		if (err)
			break;
		q->sq_prod++;
	}
	/* No doorbell while the engine polls; one on its way is enough: the
	 * daemon clears the bell before it reads the producer index. */
	int ring = ring_post(q->sq, q->sq_prod, 1);
	pthread_spin_unlock(&q->slock);
	if (err)
		*bad = wr;
	if (ring) {
		int e2 = conn_doorbell(&to_rctx(qp->context)->conn, q->h, DOORBELL_SEND);
		if (!err)
			err = e2;
	}
	return err;
}

int post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct rqp *q = to_rqp(qp);
	if (!q->rq.ring || qp->state == IBV_QPS_RESET) {
		*bad = wr;
		return EINVAL;
	}
	pthread_spin_lock(&q->rlock);
	int ring;
	int err = post_recv_ring(&ring, &q->rq, wr, bad);
	pthread_spin_unlock(&q->rlock);
	int e2 = ring ? conn_doorbell(&to_rctx(qp->context)->conn, q->h, DOORBELL_RECV) : 0;
	return err ? err : e2;
}
