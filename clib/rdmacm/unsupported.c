/*
 * unsupported.c: the rest of Debian's librdmacm.so.1, which rnicd's
 * rdma_cm does not build: each fails with ENOSYS and says so on stderr,
 * so that a program that needs one stops with a reason instead of
 * running on without it. They are here at all because Debian's binaries
 * resolve every symbol they import when they start (rping imports rpoll,
 * rdma_establish and rdma_init_qp_attr for options it may never use).
 */
#include "cma.h"

static int nosys(const char *call, const char *why)
{
	rnic_log("%s is not built on rnicd%s%s", call, why ? ": " : "", why ? why : "");
	return cm_err(ENOSYS);
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
