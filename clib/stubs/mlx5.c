/*
 * libmlx5.so.1 stub. Debian's perftest and UCX (libuct_ib.so) link
 * libmlx5 for features of ConnectX devices only (DEVX, mkeys, crypto,
 * mlx5dv QPs and CQs) and call them only on an mlx5 device, which an
 * rnicd device is not. The system's libmlx5 cannot load beside this
 * libibverbs (it needs rdma-core's private provider ABI), so this
 * library stands in with every symbol those programs import (a missing
 * one or a missing version fails the whole program at load: UCX 1.13
 * needs 22 of them, versions MLX5_1.1 to MLX5_1.11) and answers each as
 * rdma-core's mlx5 does for a context that is not an mlx5 one:
 * mlx5dv_is_supported is false, calls returning a pointer set errno to
 * EOPNOTSUPP and return NULL, calls returning int return EOPNOTSUPP, and
 * calls on objects this library never made (it makes none) do nothing.
 * UCX takes "not supported" as its cue to use plain verbs (rc_verbs,
 * ud_verbs) instead of its mlx5 transports.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

/* MLX5_1.0 */
EXPORT int mlx5dv_query_device(void *ctx, void *attrs) { (void)ctx; (void)attrs; return EOPNOTSUPP; }

/* mlx5dv_init_obj exists at MLX5_1.0 and MLX5_1.2 (the default) in
 * rdma-core; both answer the same here. */
EXPORT int mlx5dv_init_obj_1_2(void *obj, uint64_t obj_type) { (void)obj; (void)obj_type; return EOPNOTSUPP; }
EXPORT int mlx5dv_init_obj_1_0(void *obj, uint64_t obj_type) { (void)obj; (void)obj_type; return EOPNOTSUPP; }
__asm__(".symver mlx5dv_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");
__asm__(".symver mlx5dv_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");

/* MLX5_1.1 */
EXPORT void *mlx5dv_create_cq(void *ctx, void *cq_attr, void *mlx5_attr)
{
	(void)ctx; (void)cq_attr; (void)mlx5_attr;
	errno = EOPNOTSUPP;
	return NULL;
}

/* MLX5_1.2 */
EXPORT int mlx5dv_set_context_attr(void *ctx, int type, void *attr) { (void)ctx; (void)type; (void)attr; return EOPNOTSUPP; }

/* MLX5_1.3 */
EXPORT void *mlx5dv_create_qp(void *ctx, void *attr, void *dv) { (void)ctx; (void)attr; (void)dv; errno = EOPNOTSUPP; return NULL; }
EXPORT void *mlx5dv_create_wq(void *ctx, void *attr, void *dv) { (void)ctx; (void)attr; (void)dv; errno = EOPNOTSUPP; return NULL; }

/* MLX5_1.7 */
EXPORT void *mlx5dv_open_device(void *device, void *attr) { (void)device; (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT void *mlx5dv_devx_alloc_uar(void *ctx, uint32_t flags) { (void)ctx; (void)flags; errno = EOPNOTSUPP; return NULL; }
EXPORT void mlx5dv_devx_free_uar(void *uar) { (void)uar; }
EXPORT int mlx5dv_devx_general_cmd(void *ctx, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)ctx; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}
EXPORT void *mlx5dv_devx_obj_create(void *ctx, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)ctx; (void)in; (void)inlen; (void)out; (void)outlen;
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT int mlx5dv_devx_obj_query(void *obj, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)obj; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}
EXPORT int mlx5dv_devx_obj_modify(void *obj, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)obj; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}
EXPORT int mlx5dv_devx_obj_destroy(void *obj) { (void)obj; return EOPNOTSUPP; }
EXPORT int mlx5dv_devx_query_eqn(void *ctx, uint32_t vector, uint32_t *eqn) { (void)ctx; (void)vector; (void)eqn; return EOPNOTSUPP; }
EXPORT void *mlx5dv_devx_umem_reg(void *ctx, void *addr, size_t size, uint32_t access)
{
	(void)ctx; (void)addr; (void)size; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
EXPORT int mlx5dv_devx_umem_dereg(void *umem) { (void)umem; return EOPNOTSUPP; }

/* MLX5_1.8 */
EXPORT bool mlx5dv_is_supported(void *device) { (void)device; return false; }
EXPORT int mlx5dv_devx_qp_query(void *qp, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)qp; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}
EXPORT int mlx5dv_devx_qp_modify(void *qp, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)qp; (void)in; (void)inlen; (void)out; (void)outlen;
	return EOPNOTSUPP;
}

/* MLX5_1.10 */
EXPORT void *mlx5dv_create_mkey(void *attr) { (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT int mlx5dv_destroy_mkey(void *mkey) { (void)mkey; return EOPNOTSUPP; }
EXPORT void *mlx5dv_qp_ex_from_ibv_qp_ex(void *qp) { (void)qp; errno = EOPNOTSUPP; return NULL; }

/* MLX5_1.11 */
EXPORT void *mlx5dv_devx_create_event_channel(void *ctx, int flags) { (void)ctx; (void)flags; errno = EOPNOTSUPP; return NULL; }
EXPORT void mlx5dv_devx_destroy_event_channel(void *ch) { (void)ch; }
EXPORT int mlx5dv_devx_subscribe_devx_event(void *ch, void *obj, uint16_t events_sz, uint16_t events_num[], uint64_t cookie)
{
	(void)ch; (void)obj; (void)events_sz; (void)events_num; (void)cookie;
	return EOPNOTSUPP;
}
EXPORT int mlx5dv_devx_subscribe_devx_event_fd(void *ch, int fd, void *obj, uint16_t event_num)
{
	(void)ch; (void)fd; (void)obj; (void)event_num;
	return EOPNOTSUPP;
}
/* rdma-core returns -1 with errno set; no channel can exist here. */
EXPORT ssize_t mlx5dv_devx_get_event(void *ch, void *event_data, size_t len)
{
	(void)ch; (void)event_data; (void)len;
	errno = EOPNOTSUPP;
	return -1;
}

/* MLX5_1.21 */
EXPORT int mlx5dv_crypto_login(void *ctx, void *attr) { (void)ctx; (void)attr; return EOPNOTSUPP; }
EXPORT void *mlx5dv_dek_create(void *ctx, void *attr) { (void)ctx; (void)attr; errno = EOPNOTSUPP; return NULL; }
EXPORT int mlx5dv_dek_destroy(void *dek) { (void)dek; return EOPNOTSUPP; }
