/*
 * ep.c: rdma_cm's endpoint calls on synchronous IDs (rdma_create_ep,
 * rdma_destroy_ep, rdma_get_request), as cma.c makes them from the
 * others, and the QP attribute calls of programs that move their QP
 * themselves (rdma_init_qp_attr, rdma_establish).
 */
#include <stdlib.h>
#include <string.h>

#include "cma.h"
#include <rdma/rdma_verbs.h>

/* RDMA_UDP_QKEY: the Q_Key of rdma_cm's UDP port space (cma.c). */
#define RDMA_UDP_QKEY 0x01234567

/* rdma_create_ep: a synchronous ID for res. A passive one is bound to
 * the source address and keeps qp_init_attr and pd for the IDs
 * rdma_get_request gives; an active one resolves the address and the
 * route (each waiting for its event, 2000 ms as cma.c's) and gets its
 * QP. */
EXPORT int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
			  struct ibv_qp_init_attr *qp_init_attr)
{
	if (!id || !res)
		return cm_err(EINVAL);
	struct rdma_cm_id *cm_id;
	if (rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space))
		return -1;
	struct cm_id *c = to_id(cm_id);
	if (res->ai_qp_type)
		cm_id->qp_type = res->ai_qp_type;
	if (res->ai_flags & RAI_PASSIVE) {
		if (!res->ai_src_addr || rdma_bind_addr(cm_id, res->ai_src_addr))
			goto err;
		if (qp_init_attr) {
			if (!(c->qp_init_attr = malloc(sizeof(*qp_init_attr)))) {
				errno = ENOMEM;
				goto err;
			}
			*c->qp_init_attr = *qp_init_attr;
			c->qp_init_attr->qp_type = cm_id->qp_type;
		}
		cm_id->pd = pd;
		*id = cm_id;
		return 0;
	}
	if (rdma_resolve_addr(cm_id, res->ai_src_len ? res->ai_src_addr : NULL, res->ai_dst_addr, 2000) ||
	    rdma_resolve_route(cm_id, 2000))
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = cm_id->qp_type;
		if (rdma_create_qp(cm_id, pd, qp_init_attr))
			goto err;
	}
	*id = cm_id;
	return 0;
err:;
	int e = errno;
	rdma_destroy_id(cm_id);
	return cm_err(e);
}

EXPORT void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

/* rdma_get_request waits on a synchronous listener for a connect
 * request and gives its new ID, synchronous too, with a QP made from
 * the listener's rdma_create_ep attributes; the request's event stays
 * with it (id->event) until its next call, as cma.c's. */
EXPORT int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cm_id *l = to_id(listen);
	if (!l->sync || !id)
		return cm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(listen->channel, &e))
		return -1;
	int err = 0;
	if (e->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (e->status)
		err = e->status < 0 ? -e->status : e->status;
	else if (e->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	if (!err && rdma_migrate_id(e->id, NULL))
		err = errno;
	if (!err && l->qp_init_attr) {
		struct ibv_qp_init_attr a = *l->qp_init_attr;
		if (rdma_create_qp(e->id, listen->pd, &a))
			err = errno;
	}
	if (err) {
		listen->event = e;
		return cm_err(err);
	}
	*id = e->id;
	(*id)->event = e;
	return 0;
}

/* rdma_init_qp_attr gives the attributes that move a QP of the ID to
 * qp_attr->qp_state. INIT's are rdma_cm's own; RTR's and RTS's come
 * from the peer, which rnicd's CM agent alone knows: they are read back
 * from the ID's QP once the agent moved it there (rdma_accept, or the
 * ESTABLISHED of rdma_connect). */
EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	if (!id || !qp_attr || !qp_attr_mask)
		return cm_err(EINVAL);
	enum ibv_qp_state want = qp_attr->qp_state;
	if (want == IBV_QPS_INIT) {
		if (!id->verbs)
			return cm_err(EINVAL);
		memset(qp_attr, 0, sizeof(*qp_attr));
		qp_attr->qp_state = IBV_QPS_INIT;
		qp_attr->port_num = id->port_num;
		*qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
		if (id->qp_type == IBV_QPT_UD) {
			qp_attr->qkey = RDMA_UDP_QKEY;
			*qp_attr_mask |= IBV_QP_QKEY;
		} else {
			qp_attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
			*qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
		}
		return 0;
	}
	if (want != IBV_QPS_RTR && want != IBV_QPS_RTS)
		return cm_err(EINVAL);
	int mask = want == IBV_QPS_RTR ? IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER
				       : IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
						 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	if (id->qp_type == IBV_QPT_UD)
		mask = want == IBV_QPS_RTR ? IBV_QP_STATE : IBV_QP_STATE | IBV_QP_SQ_PSN;
	struct ibv_qp_init_attr init;
	if (!id->qp || ibv_query_qp(id->qp, qp_attr, mask, &init) || qp_attr->qp_state < want ||
	    qp_attr->qp_state > IBV_QPS_SQD) {
		rnic_log("rdma_init_qp_attr: the %s attributes of a QP the program moves itself are not built: rnicd's CM "
			 "agent moves the ID's QP (rdma_create_qp)", want == IBV_QPS_RTR ? "RTR" : "RTS");
		return cm_err(ENOSYS);
	}
	qp_attr->qp_state = want;
	*qp_attr_mask = mask;
	return 0;
}

/* rdma_establish: cma.c refuses it on an ID with a QP (the connection
 * completes by itself); without one the connect was refused already. */
EXPORT int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		return cm_err(EINVAL);
	rnic_log("rdma_establish is not built on rnicd: connections without rdma_create_qp are not");
	return cm_err(ENOSYS);
}
