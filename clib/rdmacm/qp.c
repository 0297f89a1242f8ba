/*
 * qp.c: the QP of a cm_id (rdma_create_qp, rdma_create_qp_ex,
 * rdma_destroy_qp), made with this folder's libibverbs on the cm_id's
 * device and left in INIT, as cma.c's ucma_init_conn_qp leaves it, so
 * that receives may be posted before the connection; the CM agent moves
 * it to RTR and RTS when the peer's values are known. A side without a
 * CQ gets one of the ID's (id->send_cq, id->recv_cq), destroyed with
 * the QP.
 *
 * XRC (RDMA_PS_IB, rdma_xserver -c x) as cma.c builds it: an XRC_SEND ID
 * gets an initiator QP as any other connected QP; an XRC_RECV ID gets a
 * target QP in the device's XRC domain, with no CQs, and rdma_create_srq
 * then gives it an XRC SRQ in that domain completing on id->recv_cq, where
 * rdma_get_recv_comp waits; the SRQ's number travels in the REP's private
 * data, which is the application's business (rdma_xserver sends it).
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

/* default_pd is the device's PD for a QP made without one (cma.c's
 * cma_dev->pd), allocated on first use and kept with the device. */
static struct ibv_pd *default_pd(struct cm_dev *d)
{
	pthread_mutex_lock(&d->pd_mu);
	if (!d->pd)
		d->pd = ibv_alloc_pd(d->verbs);
	struct ibv_pd *pd = d->pd;
	pthread_mutex_unlock(&d->pd_mu);
	return pd;
}

/* default_xrcd is the device's XRC domain for XRC_RECV IDs (cma.c's
 * ucma_get_xrcd: fd -1, a domain of this process's own), opened on first
 * use and kept with the device. */
static struct ibv_xrcd *default_xrcd(struct cm_dev *d)
{
	pthread_mutex_lock(&d->pd_mu);
	if (!d->xrcd) {
		struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
					       .fd = -1,
					       .oflags = O_CREAT};
		d->xrcd = ibv_open_xrcd(d->verbs, &a);
	}
	struct ibv_xrcd *x = d->xrcd;
	pthread_mutex_unlock(&d->pd_mu);
	return x;
}

/* id_cq gives the ID a CQ of its own, with a completion channel, for a
 * side the program left without one (cma.c's ucma_create_cqs; cmtime
 * does this): room for the side's WRs, at least one. */
static int id_cq(struct rdma_cm_id *id, uint32_t wrs, struct ibv_cq **cq, struct ibv_comp_channel **ch)
{
	*ch = ibv_create_comp_channel(id->verbs);
	if (*ch)
		*cq = ibv_create_cq(id->verbs, wrs ? wrs : 1, id, *ch, 0);
	if (*cq)
		return 0;
	if (*ch)
		ibv_destroy_comp_channel(*ch);
	*ch = NULL;
	return -1;
}

/* id_cqs_release destroys the CQs and channels id_cq made, but not while
 * an XRC_RECV ID's SRQ completes on them (cma.c's ucma_destroy_cqs). */
static void id_cqs_release(struct rdma_cm_id *id)
{
	if (id->qp_type == IBV_QPT_XRC_RECV && id->srq)
		return;
	struct ibv_cq **cqs[2] = {&id->send_cq, &id->recv_cq};
	struct ibv_comp_channel **chs[2] = {&id->send_cq_channel, &id->recv_cq_channel};
	for (int i = 0; i < 2; i++) {
		if (*cqs[i])
			ibv_destroy_cq(*cqs[i]);
		if (*chs[i])
			ibv_destroy_comp_channel(*chs[i]);
		*cqs[i] = NULL;
		*chs[i] = NULL;
	}
}

/* conn_init moves a connected QP to INIT with the access the agent's
 * INIT gives a connection, which it may cut again (rnic/cm toInit: READ
 * only with responder resources). */
static int conn_init(struct ibv_qp *qp, uint8_t port)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* RDMA_UDP_QKEY: the Q_Key of rdma_cm's UDP port space (cma.c). */
#define RDMA_UDP_QKEY 0x01234567

/* ud_ready moves a UD QP through INIT and RTR to RTS with rdma_cm's
 * Q_Key, as cma.c's ucma_init_ud_qp: nothing connects it. */
static int ud_ready(struct ibv_qp *qp, uint8_t port)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port, .qkey = RDMA_UDP_QKEY};
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (!err) {
		a.qp_state = IBV_QPS_RTR;
		err = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	}
	if (!err) {
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = 0;
		err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	return err;
}

/* xrc_target makes an XRC_RECV ID's QP: a target in the program's XRC
 * domain or the device's, with no PD, CQs or queues; the ID keeps the PD
 * (the device's unless the program gave one) for its SRQ and its memory
 * (rdma_reg_msgs), as cma.c's request IDs keep the device's. */
static int xrc_target(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_xrcd *xrcd = attr->comp_mask & IBV_QP_INIT_ATTR_XRCD ? attr->xrcd : NULL;
	if (!xrcd && !(xrcd = default_xrcd(to_id(id)->dev)))
		return -1;
	struct ibv_qp_init_attr_ex x = {.qp_context = attr->qp_context, .qp_type = IBV_QPT_XRC_RECV,
					.comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xrcd};
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, &x);
	if (!qp)
		return -1;
	int err = conn_init(qp, id->port_num);
	if (err) {
		ibv_destroy_qp(qp);
		return cm_err(err);
	}
	attr->comp_mask |= IBV_QP_INIT_ATTR_XRCD;
	attr->xrcd = xrcd;
	id->pd = attr->pd;
	id->qp = qp;
	return 0;
}

EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cm_id *c = to_id(id);
	if (id->qp || !id->verbs || !attr)
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		if (!(attr->pd = default_pd(c->dev)))
			return -1;
	} else if (attr->pd->context != id->verbs) {
		rnic_log("rdma_create_qp: the PD is of another device than the cm_id's (make it on id->verbs)");
		return cm_err(EINVAL);
	}
	if (attr->qp_type != id->qp_type) {
		rnic_log("rdma_create_qp: QP type %d on an ID of QP type %d (port space 0x%x): rnicd's rdma_cm connects "
			 "the ID's QP type, RC (RDMA_PS_TCP, RDMA_PS_IB), XRC (RDMA_PS_IB) or UD (RDMA_PS_UDP)",
			 attr->qp_type, id->qp_type, id->ps);
		return cm_err(ENOSYS);
	}
	if (id->qp_type == IBV_QPT_XRC_RECV)
		return xrc_target(id, attr);
	if ((id->send_cq && attr->send_cq && id->send_cq != attr->send_cq) ||
	    (id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq))
		return cm_err(EINVAL);
	if ((!attr->recv_cq && !id->recv_cq && id_cq(id, attr->cap.max_recv_wr, &id->recv_cq, &id->recv_cq_channel)) ||
	    (!attr->send_cq && !id->send_cq && id_cq(id, attr->cap.max_send_wr, &id->send_cq, &id->send_cq_channel))) {
		int err = errno;
		id_cqs_release(id);
		return cm_err(err);
	}
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq && id->qp_type != IBV_QPT_XRC_SEND)
		attr->srq = id->srq;
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp) {
		int err = errno;
		id_cqs_release(id);
		return cm_err(err);
	}
	int err = id->qp_type == IBV_QPT_UD ? ud_ready(qp, id->port_num) : conn_init(qp, id->port_num);
	if (err) {
		ibv_destroy_qp(qp);
		id_cqs_release(id);
		return cm_err(err);
	}
	id->pd = qp->pd;
	id->qp = qp;
	return 0;
}

EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
	ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	ex.pd = pd ? pd : id->pd;
	int ret = rdma_create_qp_ex(id, &ex);
	memcpy(qp_init_attr, &ex, sizeof(*qp_init_attr));
	return ret;
}

EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	id_cqs_release(id);
}

/* rdma_create_srq_ex gives the ID an SRQ (cma.c's): the ID's PD unless
 * attr names one; an XRC SRQ is in the device's XRC domain and completes
 * on the ID's receive CQ (made here if the ID has none) unless attr names
 * its own. */
EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct cm_id *c = to_id(id);
	if (!attr || !id->verbs || id->srq || !(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return cm_err(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
		if (!(attr->pd = id->pd ? id->pd : default_pd(c->dev)))
			return -1;
	}
	int made_cq = 0;
	if (attr->srq_type == IBV_SRQT_XRC) {
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) || !attr->xrcd) {
			if (!(attr->xrcd = default_xrcd(c->dev)))
				return -1;
		}
		if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->cq) {
			if (!id->recv_cq) {
				if (id_cq(id, attr->attr.max_wr, &id->recv_cq, &id->recv_cq_channel))
					return -1;
				made_cq = 1;
			}
			attr->cq = id->recv_cq;
		}
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	}
	struct ibv_srq *srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq) {
		int err = errno;
		if (made_cq)
			id_cqs_release(id);
		return cm_err(err);
	}
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

/* rdma_create_srq is rdma_create_srq_ex with the SRQ type the ID's QP
 * type asks: XRC for XRC_RECV, basic otherwise. */
EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	if (!attr)
		return cm_err(EINVAL);
	struct ibv_srq_init_attr_ex ex;
	memset(&ex, 0, sizeof(ex));
	memcpy(&ex, attr, sizeof(*attr));
	ex.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	ex.srq_type = id->qp_type == IBV_QPT_XRC_RECV ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
	ex.pd = pd;
	int ret = rdma_create_srq_ex(id, &ex);
	memcpy(attr, &ex, sizeof(*attr));
	return ret;
}

/* rdma_destroy_srq destroys the ID's SRQ, and the CQs the ID made once
 * no QP of the ID is left to use them. */
EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
	if (!id->srq)
		return;
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	if (!id->qp)
		id_cqs_release(id);
}
