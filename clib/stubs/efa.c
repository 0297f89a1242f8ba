/*
 * libefa.so.1 stub, for the same reason as libmlx5's (mlx5.c): Debian's
 * perftest and libfabric 1.17 (its efa provider) link libefa and ask
 * efadv about an EFA device only. Every symbol they import is here (a
 * missing one or a missing version, EFA_1.2 for libfabric, fails the
 * program at load), each answering as rdma-core's efa provider does for
 * a device that is not EFA: int calls return EOPNOTSUPP, pointer calls
 * set errno to EOPNOTSUPP and return NULL. libfabric then leaves its efa
 * provider out and the verbs provider takes the device.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

/* EFA_1.0 */
EXPORT void *efadv_create_driver_qp(void *pd, void *attr, uint32_t driver_qp_type)
{
	(void)pd; (void)attr; (void)driver_qp_type;
	errno = EOPNOTSUPP;
	return NULL;
}

/* EFA_1.1 */
EXPORT int efadv_query_device(void *ctx, void *attr, uint32_t inlen) { (void)ctx; (void)attr; (void)inlen; return EOPNOTSUPP; }
EXPORT void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{
	(void)ctx; (void)attr; (void)efa_attr; (void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT int efadv_query_ah(void *ah, void *attr, uint32_t inlen) { (void)ah; (void)attr; (void)inlen; return EOPNOTSUPP; }

/* EFA_1.2 */
EXPORT void *efadv_create_cq(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{
	(void)ctx; (void)attr; (void)efa_attr; (void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}
/* rdma-core's returns the EFA CQ around any CQ it is given (container_of);
 * no CQ here is an EFA one, so this answers NULL rather than a pointer
 * into memory that is not one. */
EXPORT void *efadv_cq_from_ibv_cq_ex(void *cq) { (void)cq; errno = EOPNOTSUPP; return NULL; }
