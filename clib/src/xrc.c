/*
 * xrc.c: XRC (IBTA annex A14): XRC domains, XRC SRQs and the XRC QPs,
 * reached through the verbs_context operations that libibverbs' inline
 * ibv_open_xrcd, ibv_close_xrcd, ibv_create_srq_ex, ibv_get_srq_num and
 * ibv_create_qp_ex call. A domain opened with a file descriptor is the
 * one every process that opens the same file on the same rnicd shares,
 * as the kernel keys it (by the file's inode); with fd -1 it is this
 * open's alone.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "qp.h"

struct rxrcd {
	struct ibv_xrcd xrcd; /* first: what the program sees */
	uint32_t h;
};

static uint32_t xrcd_handle(struct ibv_xrcd *x) { return ((struct rxrcd *)x)->h; }

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx, struct ibv_xrcd_init_attr *a)
{
	uint32_t need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
	if ((a->comp_mask & need) != need || (a->comp_mask & ~need)) {
		/* rdma-core's ibv_cmd_open_xrcd asks for both, and knows no more */
		errno = (a->comp_mask & ~need) ? EOPNOTSUPP : EINVAL;
		return NULL;
	}
	if (a->oflags & ~(O_CREAT | O_EXCL)) {
		errno = EINVAL;
		return NULL;
	}
	struct rxrcd *x = calloc(1, sizeof(*x));
	if (!x) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[4];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	int err;
	if (a->fd == -1) {
		err = call(ctx, K_OPEN_XRCD, &req, -1, &rep, NULL);
	} else {
		put32(&req, a->oflags);
		err = call(ctx, K_OPEN_XRCD_FILE, &req, a->fd, &rep, NULL);
	}
	if (err) {
		free(x);
		errno = err;
		return NULL;
	}
	x->h = get32(&rep);
	x->xrcd.context = ctx;
	return &x->xrcd;
}

static int close_xrcd(struct ibv_xrcd *xrcd)
{
	int err = destroy(xrcd->context, K_CLOSE_XRCD, xrcd_handle(xrcd));
	if (err)
		return err;
	free(xrcd);
	return 0;
}

static struct ibv_srq *create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *a)
{
	uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	int type = (a->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) ? a->srq_type : IBV_SRQT_BASIC;
	if ((a->comp_mask & ~known) || (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC)) {
		rnic_log("create_srq_ex: comp_mask %#x, srq_type %d: rnicd has basic and XRC SRQs", a->comp_mask, type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(a->comp_mask & IBV_SRQ_INIT_ATTR_PD) || a->pd->context != ctx) {
		errno = EINVAL;
		return NULL;
	}
	if (type == IBV_SRQT_BASIC) /* the extended attributes start with the basic ones */
		return ibv_create_srq(a->pd, (struct ibv_srq_init_attr *)a);
	uint32_t xc = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	if ((a->comp_mask & xc) != xc || !a->xrcd || !a->cq || a->xrcd->context != ctx || a->cq->context != ctx) {
		rnic_log("create_srq_ex: an XRC SRQ needs a PD, an XRC domain and a CQ");
		errno = EINVAL;
		return NULL;
	}
	struct rsrq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t b[24];
	struct buf req = {.p = b, .len = sizeof(b)};
	put32(&req, a->pd->handle);
	put32(&req, xrcd_handle(a->xrcd));
	put32(&req, a->cq->handle);
	put32(&req, a->attr.max_wr);
	put32(&req, a->attr.max_sge);
	put32(&req, a->attr.srq_limit);
	struct ring_reply r;
	int err = create_rings(ctx, K_CREATE_XRC_SRQ, K_DESTROY_SRQ, &req, -1, &r, &s->mem, &s->memlen, 0, 0, 1);
	if (err) {
		free(s);
		errno = err;
		return NULL;
	}
	srq_init(s, &r, a->pd, &a->attr, a->srq_context);
	s->srq_num = r.qpn;
	return &s->srq;
}

static int get_srq_num(struct ibv_srq *srq, uint32_t *num)
{
	struct rsrq *s = (struct rsrq *)srq;
	if (!s->srq_num)
		return EINVAL; /* not an XRC SRQ: nothing names it on the wire */
	*num = s->srq_num;
	return 0;
}

int xrc_qp_ok(struct ibv_qp_init_attr *a, struct ibv_pd *pd, struct ibv_xrcd *xrcd)
{
	if (a->qp_type == IBV_QPT_XRC_SEND)
		return pd && a->send_cq && !a->srq && !xrcd;
	return xrcd && !a->srq;
}

/* put_xrc_qp_req writes abi.CreateXRCQPReq. */
void put_xrc_qp_req(struct buf *b, struct ibv_qp_init_attr *a, struct ibv_pd *pd, struct ibv_xrcd *xrcd)
{
	int send = a->qp_type == IBV_QPT_XRC_SEND;
	put8(b, a->qp_type);
	put32(b, send ? pd->handle : 0);
	put32(b, send ? a->send_cq->handle : 0);
	put32(b, send ? 0 : xrcd_handle(xrcd));
	put8(b, send && a->sq_sig_all ? 1 : 0);
	put32(b, send ? a->cap.max_send_wr : 0);
	put32(b, 0);
	put32(b, send ? a->cap.max_send_sge : 0);
	put32(b, 0);
	put32(b, send ? a->cap.max_inline_data : 0);
}

/* create_xrc_recv_qp makes an XRC target: no PD, CQs or queues, an XRC
 * domain (IBV_QP_INIT_ATTR_XRCD). */
struct ibv_qp *create_xrc_recv_qp(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	if (a->comp_mask != IBV_QP_INIT_ATTR_XRCD || !a->xrcd || a->xrcd->context != ctx) {
		rnic_log("create_qp_ex: an XRC_RECV QP takes an XRC domain (IBV_QP_INIT_ATTR_XRCD) and nothing else");
		errno = EINVAL;
		return NULL;
	}
	struct ibv_qp_init_attr ia = {.qp_context = a->qp_context, .qp_type = IBV_QPT_XRC_RECV};
	struct ibv_qp *qp = qp_create(ctx, NULL, &ia, a->xrcd);
	if (qp)
		a->cap = ia.cap;
	return qp;
}

void fill_xrc_ops(struct verbs_context *v)
{
	v->open_xrcd = open_xrcd;
	v->close_xrcd = close_xrcd;
	v->create_srq_ex = create_srq_ex;
	v->get_srq_num = get_srq_num;
}
