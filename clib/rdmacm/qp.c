/*
 * qp.c: the QP of a cm_id (rdma_create_qp, rdma_create_qp_ex,
 * rdma_destroy_qp), made with this folder's libibverbs on the cm_id's
 * device and left in INIT, as cma.c's ucma_init_conn_qp leaves it, so
 * that receives may be posted before the connection; the CM agent moves
 * it to RTR and RTS when the peer's values are known. A side without a
 * CQ gets one of the ID's (id->send_cq, id->recv_cq), destroyed with
 * the QP.
 */
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

/* id_cqs_release destroys the CQs and channels id_cq made. */
static void id_cqs_release(struct rdma_cm_id *id)
{
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
		rnic_log("rdma_create_qp: QP type %d on an ID of port space 0x%x: rnicd's rdma_cm connects RC QPs "
			 "(RDMA_PS_TCP) and UD QPs (RDMA_PS_UDP)", attr->qp_type, id->ps);
		return cm_err(ENOSYS);
	}
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
