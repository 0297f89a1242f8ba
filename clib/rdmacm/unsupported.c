/*
 * unsupported.c: the rest of Debian's librdmacm.so.1, which rnicd's
 * rdma_cm does not build: each fails with ENOSYS and says so on stderr,
 * so that a program that needs one stops with a reason instead of
 * running on without it. They are here at all because Debian's binaries
 * resolve every symbol they import when they start (rping imports rpoll,
 * rdma_establish and rdma_init_qp_attr for options it may never use).
 */
#include <rdma/rsocket.h>

#include "cma.h"

static int nosys(const char *call, const char *why)
{
	rnic_log("%s is not built on rnicd%s%s", call, why ? ": " : "", why ? why : "");
	return cm_err(ENOSYS);
}

#define NO_SRQ "make the SRQ with ibv_create_srq"
#define NO_MC "rnicd has no multicast groups: its RoCEv2 port sends and receives unicast UDP only"
#define NO_RS "rsockets (their own protocol over RC, librspreload) are not built"

EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	(void)id, (void)pd, (void)attr;
	return nosys("rdma_create_srq", NO_SRQ);
}
EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	(void)id, (void)attr;
	return nosys("rdma_create_srq_ex", NO_SRQ);
}
EXPORT void rdma_destroy_srq(struct rdma_cm_id *id) { (void)id, nosys("rdma_destroy_srq", NO_SRQ); }
EXPORT int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)id, (void)addr, (void)context;
	return nosys("rdma_join_multicast", NO_MC);
}
EXPORT int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	(void)id, (void)attr, (void)context;
	return nosys("rdma_join_multicast_ex", NO_MC);
}
EXPORT int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id, (void)addr;
	return nosys("rdma_leave_multicast", NO_MC);
}
EXPORT int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)id, (void)event;
	return nosys("rdma_notify", "the CM agent sees the RTU itself");
}
EXPORT int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return nosys("rdma_set_local_ece", "rnicd has no ECE");
}
EXPORT int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return nosys("rdma_get_remote_ece", "rnicd has no ECE");
}

/* rsockets (rsocket.h). */
EXPORT int rsocket(int domain, int type, int protocol)
{
	(void)domain, (void)type, (void)protocol;
	return nosys("rsocket", NO_RS);
}
EXPORT int rbind(int s, const struct sockaddr *a, socklen_t l) { (void)s, (void)a, (void)l; return nosys("rbind", NO_RS); }
EXPORT int rlisten(int s, int b) { (void)s, (void)b; return nosys("rlisten", NO_RS); }
EXPORT int raccept(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return nosys("raccept", NO_RS); }
EXPORT int rconnect(int s, const struct sockaddr *a, socklen_t l) { (void)s, (void)a, (void)l; return nosys("rconnect", NO_RS); }
EXPORT int rshutdown(int s, int how) { (void)s, (void)how; return nosys("rshutdown", NO_RS); }
EXPORT int rclose(int s) { (void)s; return nosys("rclose", NO_RS); }
EXPORT ssize_t rrecv(int s, void *b, size_t n, int f) { (void)s, (void)b, (void)n, (void)f; return nosys("rrecv", NO_RS); }
EXPORT ssize_t rrecvfrom(int s, void *b, size_t n, int f, struct sockaddr *a, socklen_t *l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return nosys("rrecvfrom", NO_RS);
}
EXPORT ssize_t rrecvmsg(int s, struct msghdr *m, int f) { (void)s, (void)m, (void)f; return nosys("rrecvmsg", NO_RS); }
EXPORT ssize_t rsend(int s, const void *b, size_t n, int f) { (void)s, (void)b, (void)n, (void)f; return nosys("rsend", NO_RS); }
EXPORT ssize_t rsendto(int s, const void *b, size_t n, int f, const struct sockaddr *a, socklen_t l)
{
	(void)s, (void)b, (void)n, (void)f, (void)a, (void)l;
	return nosys("rsendto", NO_RS);
}
EXPORT ssize_t rsendmsg(int s, const struct msghdr *m, int f) { (void)s, (void)m, (void)f; return nosys("rsendmsg", NO_RS); }
EXPORT ssize_t rread(int s, void *b, size_t n) { (void)s, (void)b, (void)n; return nosys("rread", NO_RS); }
EXPORT ssize_t rreadv(int s, const struct iovec *v, int n) { (void)s, (void)v, (void)n; return nosys("rreadv", NO_RS); }
EXPORT ssize_t rwrite(int s, const void *b, size_t n) { (void)s, (void)b, (void)n; return nosys("rwrite", NO_RS); }
EXPORT ssize_t rwritev(int s, const struct iovec *v, int n) { (void)s, (void)v, (void)n; return nosys("rwritev", NO_RS); }
EXPORT int rpoll(struct pollfd *fds, nfds_t n, int t) { (void)fds, (void)n, (void)t; return nosys("rpoll", NO_RS); }
EXPORT int rselect(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t)
{
	(void)n, (void)r, (void)w, (void)e, (void)t;
	return nosys("rselect", NO_RS);
}
EXPORT int rgetpeername(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return nosys("rgetpeername", NO_RS); }
EXPORT int rgetsockname(int s, struct sockaddr *a, socklen_t *l) { (void)s, (void)a, (void)l; return nosys("rgetsockname", NO_RS); }
EXPORT int rsetsockopt(int s, int lv, int o, const void *v, socklen_t l)
{
	(void)s, (void)lv, (void)o, (void)v, (void)l;
	return nosys("rsetsockopt", NO_RS);
}
EXPORT int rgetsockopt(int s, int lv, int o, void *v, socklen_t *l)
{
	(void)s, (void)lv, (void)o, (void)v, (void)l;
	return nosys("rgetsockopt", NO_RS);
}
EXPORT int rfcntl(int s, int cmd, ...) { (void)s, (void)cmd; return nosys("rfcntl", NO_RS); }
EXPORT off_t riomap(int s, void *b, size_t n, int p, int f, off_t o)
{
	(void)s, (void)b, (void)n, (void)p, (void)f, (void)o;
	return nosys("riomap", NO_RS);
}
EXPORT int riounmap(int s, void *b, size_t n) { (void)s, (void)b, (void)n; return nosys("riounmap", NO_RS); }
EXPORT size_t riowrite(int s, const void *b, size_t n, off_t o, int f)
{
	(void)s, (void)b, (void)n, (void)o, (void)f;
	return (size_t)nosys("riowrite", NO_RS);
}
