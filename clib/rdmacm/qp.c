/*
 * qp.c: the QP of a cm_id (rdma_create_qp, rdma_create_qp_ex,
 * rdma_destroy_qp), made with this folder's libibverbs on the cm_id's
 * device and left in INIT, as cma.c's ucma_init_conn_qp leaves it, so
 * that receives may be posted before the connection; the CM agent moves
 * it to RTR and RTS when the peer's values are known.
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
	if (attr->qp_type != IBV_QPT_RC) {
		rnic_log("rdma_create_qp: QP type %d is not built; rnicd's rdma_cm connects RC QPs", attr->qp_type);
		return cm_err(ENOSYS);
	}
	if (!attr->send_cq || !attr->recv_cq) {
		rnic_log("rdma_create_qp: CQs made by librdmacm (send_cq or recv_cq NULL) are not built; pass both");
		return cm_err(ENOSYS);
	}
	struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp)
		return -1;
	/* The access the agent's INIT gives a connection it may cut again
	 * (rnic/cm toInit: READ only with responder resources). */
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = id->port_num,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
	int err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (err) {
		ibv_destroy_qp(qp);
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
}
