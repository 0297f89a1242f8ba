/*
 * dvstubs: what the libmlx5 and libefa stand-ins and the historical
 * libibverbs helpers answer a program about an rnicd device. UCX,
 * libfabric and perftest call these on every device they open and take
 * "not this device" as their cue to use plain verbs; a wrong answer (or
 * a prototype that is not rdma-core's) crashes or misleads them.
 *
 *   dvstubs DEV     print one line per check, PASS if all hold (exit 0)
 */
#include <infiniband/efadv.h>
#include <infiniband/mlx5dv.h>

#include "vtest.h"

/* Not in Debian's installed headers (rdma-core's driver.h has it). */
const char *ibv_get_sysfs_path(void);

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: dvstubs DEV\n");
		return 2;
	}
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *dev = find_dev(list, n, argv[1]);
	check(!mlx5dv_is_supported(dev), "mlx5dv_is_supported is false");
	errno = 0;
	check(!mlx5dv_open_device(dev, NULL) && errno == EOPNOTSUPP, "mlx5dv_open_device: NULL, EOPNOTSUPP");

	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	struct mlx5dv_context mattr = {0};
	check(mlx5dv_query_device(ctx, &mattr) == EOPNOTSUPP, "mlx5dv_query_device: EOPNOTSUPP");
	struct ibv_cq_init_attr_ex cqa = {.cqe = 4};
	errno = 0;
	check(!mlx5dv_create_cq(ctx, &cqa, NULL) && errno == EOPNOTSUPP, "mlx5dv_create_cq: NULL, EOPNOTSUPP");
	errno = 0;
	check(!mlx5dv_devx_alloc_uar(ctx, 0) && errno == EOPNOTSUPP, "mlx5dv_devx_alloc_uar: NULL, EOPNOTSUPP");
	uint32_t in[4] = {0}, out[4] = {0};
	check(mlx5dv_devx_general_cmd(ctx, in, sizeof(in), out, sizeof(out)) == EOPNOTSUPP,
	      "mlx5dv_devx_general_cmd: EOPNOTSUPP");
	errno = 0;
	check(!mlx5dv_devx_create_event_channel(ctx, 0) && errno == EOPNOTSUPP,
	      "mlx5dv_devx_create_event_channel: NULL, EOPNOTSUPP");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!pd || !cq)
		die("ibv_alloc_pd/ibv_create_cq");
	struct mlx5dv_obj obj = {.cq = {.in = cq, .out = &(struct mlx5dv_cq){0}}};
	check(mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ) == EOPNOTSUPP, "mlx5dv_init_obj: EOPNOTSUPP");

	struct efadv_device_attr eattr = {0};
	check(efadv_query_device(ctx, &eattr, sizeof(eattr)) == EOPNOTSUPP, "efadv_query_device: EOPNOTSUPP");
	errno = 0;
	check(!efadv_create_cq(ctx, &cqa, &(struct efadv_cq_init_attr){0}, sizeof(struct efadv_cq_init_attr)) &&
		      errno == EOPNOTSUPP,
	      "efadv_create_cq: NULL, EOPNOTSUPP");

	const char *sysfs = ibv_get_sysfs_path();
	const char *want = getenv("DVSTUBS_SYSFS");
	check(sysfs && strcmp(sysfs, want ? want : "/sys") == 0, "ibv_get_sysfs_path");

	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return verdict();
}
