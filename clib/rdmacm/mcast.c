/*
 * mcast.c: rdma_join_multicast, _ex and rdma_leave_multicast on RoCEv2,
 * as the kernel's cma.c does them for RoCE (cma_iboe_join_multicast):
 * there is no SA to ask, the group's MGID is its IPv4 address, mapped
 * (::ffff:a.b.c.d), so a join completes at once with a
 * RDMA_CM_EVENT_MULTICAST_JOIN whose ud param sends to the group: an AH
 * to the MGID (hop limit 64, as cma.c sets for RoCEv2), QPN 0xFFFFFF,
 * Q_Key RDMA_UDP_QKEY, and the program's context as its private_data.
 * The ID's QP, if it has one (rdma_create_qp), is attached to the group
 * (ibv_attach_mcast), unless the join is send-only, as rdma-core's
 * ucma_process_join does; the daemon's port then joins the IP group.
 * IPv6 groups are refused as the kernel refuses them on RoCEv2.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

/* cm_mc is one group an ID joined. */
struct cm_mc {
	struct cm_mc *next;
	struct sockaddr_storage addr;
	union ibv_gid mgid;
	int attached; /* the ID's QP is attached to the group */
};

/* The most groups one ID joins: a bound, the daemon's port has its own. */
#define MAX_ID_GROUPS 64

/* RDMA_UDP_QKEY: the Q_Key of rdma_cm's UDP port space. */
#define UDP_QKEY 0x01234567

static int same_addr(const struct sockaddr *a, const struct sockaddr_storage *b)
{
	if (a->sa_family != b->ss_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

static int join(struct cm_id *c, const struct sockaddr *addr, int send_only, void *context)
{
	if (!addr)
		return cm_err(EINVAL);
	/* As cma.c's rdma_join_multicast: an ID on a device, its address
	 * bound or resolved (ADDR_BOUND, ADDR_RESOLVED) and nothing more. */
	if (!c->dev || (c->state != ID_BOUND && c->state != ID_ADDR_RESOLVED)) {
		rnic_log("rdma_join_multicast: the ID must be bound to an rnicd's address or have one resolved, and no more");
		return cm_err(EINVAL);
	}
	if (addr->sa_family == AF_INET6) {
		rnic_log("rdma_join_multicast: IPv6 groups are not joined on RoCEv2 (as the kernel's rdma_cm)");
		return cm_err(EOPNOTSUPP);
	}
	if (addr->sa_family != AF_INET)
		return cm_err(EAFNOSUPPORT);
	uint32_t a = ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr);
	if ((a >> 28) != 0xe) {
		char s[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, s, sizeof(s));
		rnic_log("rdma_join_multicast: %s is not a multicast address (224.0.0.0/4)", s);
		return cm_err(EINVAL);
	}
	int n = 0;
	for (struct cm_mc *m = c->mcs; m; m = m->next, n++)
		if (same_addr(addr, &m->addr))
			return cm_err(EADDRINUSE); /* cma.c: the ID joined the group already */
	if (n >= MAX_ID_GROUPS) {
		rnic_log("rdma_join_multicast: the ID has joined %d groups, the most it may", MAX_ID_GROUPS);
		return cm_err(ENOMEM);
	}
	struct cm_mc *m = calloc(1, sizeof(*m));
	if (!m)
		return cm_err(ENOMEM);
	memcpy(&m->addr, addr, sizeof(struct sockaddr_in));
	addr_to_gid(addr, &m->mgid);
	if (c->id.qp && !send_only) {
		int err = ibv_attach_mcast(c->id.qp, &m->mgid, 0);
		if (err) {
			free(m);
			return cm_err(err);
		}
		m->attached = 1;
	}
	m->next = c->mcs;
	c->mcs = m;

	struct rdma_ud_param ud;
	memset(&ud, 0, sizeof(ud));
	ud.private_data = context;
	ud.ah_attr.is_global = 1;
	ud.ah_attr.grh.dgid = m->mgid;
	ud.ah_attr.grh.hop_limit = 64; /* IPV6_DEFAULT_HOPLIMIT, cma.c's for RoCEv2 */
	ud.ah_attr.port_num = 1;
	ud.qp_num = 0xFFFFFF;
	ud.qkey = c->id.ps == RDMA_PS_UDP ? UDP_QKEY : 0;
	queue_ud_event(c->ch, c, RDMA_CM_EVENT_MULTICAST_JOIN, &ud);
	return sync_complete(c);
}

EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	return join(to_id(id), addr, 0, context);
}

EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	if (!attr || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
		return cm_err(EINVAL);
	if (attr->join_flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && attr->join_flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER)
		return cm_err(EINVAL);
	return join(to_id(id), attr->addr, attr->join_flags == RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, context);
}

EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct cm_id *c = to_id(id);
	if (!addr)
		return cm_err(EINVAL);
	for (struct cm_mc **p = &c->mcs; *p; p = &(*p)->next) {
		struct cm_mc *m = *p;
		if (!same_addr(addr, &m->addr))
			continue;
		*p = m->next;
		/* As rdma-core's: a detach that fails (the QP is gone) does
		 * not stop the leave. */
		if (m->attached && c->id.qp)
			ibv_detach_mcast(c->id.qp, &m->mgid, 0);
		free(m);
		return 0;
	}
	return cm_err(EADDRNOTAVAIL);
}

/* mcast_free forgets an ID's groups (rdma_destroy_id: its QP, if the
 * program has not destroyed it, leaves them when it goes). */
void mcast_free(struct cm_id *c)
{
	while (c->mcs) {
		struct cm_mc *m = c->mcs;
		c->mcs = m->next;
		free(m);
	}
}
