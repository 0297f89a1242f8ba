/*
 * addrinfo.c: rdma_getaddrinfo and rdma_freeaddrinfo, as rdma-core's
 * addrinfo.c makes them from getaddrinfo: a passive lookup gives the
 * source address, an active one the destination; the QP type and port
 * space follow the socket type. There is no ACM service to ask for a
 * route (ai_route stays empty), as with rdma-core when ibacm is not
 * running.
 */
#include <netdb.h>
#include <stdlib.h>
#include <string.h>

#include "cma.h"

static int copy_addr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return EAI_MEMORY;
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

static int from_ai(struct rdma_addrinfo *rai, const struct rdma_addrinfo *hints, const struct addrinfo *ai)
{
	rai->ai_family = ai->ai_family;
	rai->ai_qp_type = hints->ai_qp_type ? hints->ai_qp_type : ai->ai_socktype == SOCK_DGRAM ? IBV_QPT_UD : IBV_QPT_RC;
	rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space
				: ai->ai_protocol == IPPROTO_UDP ? RDMA_PS_UDP : RDMA_PS_TCP;
	if (ai->ai_flags & AI_PASSIVE) {
		rai->ai_flags = RAI_PASSIVE;
		return copy_addr(&rai->ai_src_addr, &rai->ai_src_len, ai->ai_addr, ai->ai_addrlen);
	}
	return copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, ai->ai_addr, ai->ai_addrlen);
}

EXPORT int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
			    struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo none;
	if (!node && !service && !hints)
		return cm_err(EINVAL);
	if (!hints)
		hints = &none;
	struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));
	if (!rai)
		return cm_err(ENOMEM);
	int ret = 0;
	if (node || service) {
		struct addrinfo h, *ai;
		memset(&h, 0, sizeof(h));
		h.ai_flags = (hints->ai_flags & RAI_PASSIVE ? AI_PASSIVE : 0) |
			     (hints->ai_flags & RAI_NUMERICHOST ? AI_NUMERICHOST : 0);
		h.ai_family = hints->ai_family;
		h.ai_socktype = hints->ai_qp_type == IBV_QPT_UD || hints->ai_port_space == RDMA_PS_UDP ? SOCK_DGRAM
			      : SOCK_STREAM;
		ret = getaddrinfo(node, service, &h, &ai);
		if (!ret) {
			ret = from_ai(rai, hints, ai);
			freeaddrinfo(ai);
		}
	} else {
		rai->ai_flags = hints->ai_flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = hints->ai_qp_type;
		rai->ai_port_space = hints->ai_port_space;
		if (hints->ai_dst_len)
			ret = copy_addr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr, hints->ai_dst_len);
	}
	if (!ret && !rai->ai_src_len && hints->ai_src_len)
		ret = copy_addr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr, hints->ai_src_len);
	if (ret) {
		rdma_freeaddrinfo(rai);
		return ret;
	}
	*res = rai;
	return 0;
}

EXPORT void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *n = res->ai_next;
		free(res->ai_connect);
		free(res->ai_route);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res);
		res = n;
	}
}
