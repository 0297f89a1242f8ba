/*
 * libmlx5.so.1 stub. Debian's perftest links libmlx5 for features of
 * ConnectX devices only (DEVX, mkeys, crypto, mlx5dv QPs) and calls them
 * only on an mlx5 device, which an rnicd device is not. The system's
 * libmlx5 cannot load beside this libibverbs (it needs rdma-core's
 * private provider ABI), so this library stands in: every entry point
 * fails with EOPNOTSUPP, as mlx5's own do on a device without the feature.
 */
#include <errno.h>
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT void *mlx5dv_open_device(void *device, void *attr) { (void)device; (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT void *mlx5dv_create_qp(void *ctx, void *attr, void *dv) { (void)ctx; (void)attr; (void)dv; errno = EOPNOTSUPP; return NULL; }
EXPORT void *mlx5dv_qp_ex_from_ibv_qp_ex(void *qp) { (void)qp; errno = EOPNOTSUPP; return NULL; }
EXPORT int mlx5dv_devx_general_cmd(void *ctx, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)ctx; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}
EXPORT void *mlx5dv_create_mkey(void *attr) { (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT int mlx5dv_destroy_mkey(void *mkey) { (void)mkey; return EOPNOTSUPP; }
EXPORT int mlx5dv_crypto_login(void *ctx, void *attr) { (void)ctx; (void)attr; return EOPNOTSUPP; }
EXPORT void *mlx5dv_dek_create(void *ctx, void *attr) { (void)ctx; (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT int mlx5dv_dek_destroy(void *dek) { (void)dek; return EOPNOTSUPP; }
