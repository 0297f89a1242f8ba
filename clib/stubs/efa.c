/*
 * libefa.so.1 stub, for the same reason as libmlx5's (mlx5.c): perftest
 * asks efadv about an EFA device only; on any other it answers
 * EOPNOTSUPP, as libefa does for a device that is not EFA.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT int efadv_query_device(void *ctx, void *attr, uint32_t inlen) { (void)ctx; (void)attr; (void)inlen; return EOPNOTSUPP; }
EXPORT void *efadv_create_qp_ex(void *ctx, void *attr, void *efa_attr, uint32_t inlen)
{
	(void)ctx; (void)attr; (void)efa_attr; (void)inlen;
	errno = EOPNOTSUPP;
	return NULL;
}
