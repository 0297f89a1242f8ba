/*
 * misc.c: the small parts of the libibverbs API: names of enums, rate
 * conversions, fork support, and the calls rnicd has no equivalent for,
 * which fail with the errno libibverbs uses for a device without the
 * feature (EOPNOTSUPP) rather than pretend.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "qp.h"
#include "rnic.h"

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory bind operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)s < sizeof(names) / sizeof(names[0]) && names[s])
		return names[s];
	return "unknown";
}

EXPORT const char *ibv_node_type_str(enum ibv_node_type t)
{
	switch (t) {
	case IBV_NODE_CA: return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH: return "InfiniBand switch";
	case IBV_NODE_ROUTER: return "InfiniBand router";
	case IBV_NODE_RNIC: return "iWARP NIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	default: return "unknown";
	}
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_NOP: return "no state change (NOP)";
	case IBV_PORT_DOWN: return "down";
	case IBV_PORT_INIT: return "init";
	case IBV_PORT_ARMED: return "armed";
	case IBV_PORT_ACTIVE: return "active";
	case IBV_PORT_ACTIVE_DEFER: return "active defer";
	default: return "unknown";
	}
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type e)
{
	switch (e) {
	case IBV_EVENT_CQ_ERR: return "CQ error";
	case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
	case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
	case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
	case IBV_EVENT_COMM_EST: return "communication established";
	case IBV_EVENT_SQ_DRAINED: return "send queue drained";
	case IBV_EVENT_PATH_MIG: return "path migrated";
	case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
	case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
	case IBV_EVENT_PORT_ACTIVE: return "port active";
	case IBV_EVENT_PORT_ERR: return "port error";
	case IBV_EVENT_LID_CHANGE: return "LID change";
	case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
	case IBV_EVENT_SM_CHANGE: return "SM change";
	case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
	case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
	case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
	case IBV_EVENT_GID_CHANGE: return "GID table change";
	case IBV_EVENT_WQ_FATAL: return "WQ fatal";
	default: return "unknown";
	}
}

/* Rates: the multiple of 2.5 Gb/s, and Mb/s, of the IBA static rates. */
static const struct {
	enum ibv_rate rate;
	int mult, mbps;
} rates[] = {
	{IBV_RATE_2_5_GBPS, 1, 2500},     {IBV_RATE_5_GBPS, 2, 5000},       {IBV_RATE_10_GBPS, 4, 10000},
	{IBV_RATE_20_GBPS, 8, 20000},     {IBV_RATE_30_GBPS, 12, 30000},    {IBV_RATE_40_GBPS, 16, 40000},
	{IBV_RATE_60_GBPS, 24, 60000},    {IBV_RATE_80_GBPS, 32, 80000},    {IBV_RATE_120_GBPS, 48, 120000},
	{IBV_RATE_14_GBPS, 5, 14062},     {IBV_RATE_56_GBPS, 22, 56250},    {IBV_RATE_112_GBPS, 45, 112500},
	{IBV_RATE_168_GBPS, 67, 168750},  {IBV_RATE_25_GBPS, 10, 25781},    {IBV_RATE_100_GBPS, 40, 103125},
	{IBV_RATE_200_GBPS, 80, 206250},  {IBV_RATE_300_GBPS, 120, 309375}, {IBV_RATE_28_GBPS, 11, 28125},
	{IBV_RATE_50_GBPS, 20, 53125},    {IBV_RATE_400_GBPS, 160, 425000}, {IBV_RATE_600_GBPS, 240, 637500},
};
#define NRATES (int)(sizeof(rates) / sizeof(rates[0]))

EXPORT int ibv_rate_to_mult(enum ibv_rate r)
{
	for (int i = 0; i < NRATES; i++)
		if (rates[i].rate == r)
			return rates[i].mult;
	return -1;
}

EXPORT enum ibv_rate mult_to_ibv_rate(int mult)
{
	for (int i = 0; i < NRATES; i++)
		if (rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

EXPORT int ibv_rate_to_mbps(enum ibv_rate r)
{
	for (int i = 0; i < NRATES; i++)
		if (rates[i].rate == r)
			return rates[i].mbps;
	return -1;
}

EXPORT enum ibv_rate mbps_to_ibv_rate(int mbps)
{
	for (int i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* Fork: registered pages become private copies in a child (mem.c), so
 * nothing needs initializing. */
EXPORT int ibv_fork_init(void) { return 0; }
EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
EXPORT int ibv_dontfork_range(void *base, size_t size) { (void)base; (void)size; return 0; }
EXPORT int ibv_dofork_range(void *base, size_t size) { (void)base; (void)size; return 0; }

/* Multicast: the daemon attaches a UD QP to the group of gid (for RoCEv2
 * the group's IP address, IPv4-mapped for IPv4) and its port joins the
 * group; lid means nothing on RoCE. Like rdma-core's, these return the
 * errno itself. */
static int mcast(struct ibv_qp *qp, int k, const union ibv_gid *gid, uint16_t lid)
{
	if (!qp || !gid)
		return EINVAL;
	uint8_t b[4 + 16 + 2];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, to_rqp(qp)->h);
	putn(&req, gid->raw, 16);
	put16(&req, lid);
	return call(qp->context, k, &req, -1, &rep, NULL);
}

EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, K_ATTACH_MCAST, gid, lid);
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	return mcast(qp, K_DETACH_MCAST, gid, lid);
}

/* Memory rereg, dma-buf, imports and ECE: not in rnicd. */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access)
{
	(void)mr; (void)flags; (void)pd; (void)addr; (void)len; (void)access;
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd, int access)
{
	(void)pd; (void)off; (void)len; (void)iova; (void)fd; (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

EXPORT struct ibv_context *ibv_import_device(int cmd_fd) { (void)cmd_fd; errno = EOPNOTSUPP; return NULL; }
EXPORT struct ibv_pd *ibv_import_pd(struct ibv_context *c, uint32_t h) { (void)c; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_pd(struct ibv_pd *pd) { (void)pd; }
EXPORT struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h) { (void)pd; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_mr(struct ibv_mr *mr) { (void)mr; }
EXPORT struct ibv_dm *ibv_import_dm(struct ibv_context *c, uint32_t h) { (void)c; (void)h; errno = EOPNOTSUPP; return NULL; }
EXPORT void ibv_unimport_dm(struct ibv_dm *dm) { (void)dm; }
EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp; (void)ece; return EOPNOTSUPP; }
EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) { (void)qp; (void)ece; return EOPNOTSUPP; }

/* rnicd delivers in order: a READ or WRITE's data lands in PSN order. */
EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp; (void)op; (void)flags;
	return 0;
}

EXPORT int ibv_resolve_eth_l2_from_gid(struct ibv_context *c, struct ibv_ah_attr *a, uint8_t eth_mac[6], uint16_t *vid)
{
	(void)c; (void)a; (void)eth_mac; (void)vid;
	return EOPNOTSUPP;
}

/* Providers register themselves with libibverbs; rnicd is not one. */
EXPORT void ibv_register_driver(const char *name, void *init) { (void)name; (void)init; }

/* Historical helpers other rdma-core libraries and Open MPI's openib
 * import. rdma-core's prototype is const char *ibv_get_sysfs_path(void)
 * (driver.h): a caller reads the returned string, so any other prototype
 * hands it garbage (openib faulted at ibv_get_sysfs_path+0x12). As
 * rdma-core's, it answers SYSFS_PATH without its trailing slashes when
 * the caller is not setuid, else "/sys"; the answer is fixed at the
 * first call, as rdma-core's cached one is. */
static pthread_once_t sysfs_once = PTHREAD_ONCE_INIT;
static char sysfs_path[256] = "/sys";

static void sysfs_path_init(void)
{
	const char *env = getuid() == geteuid() ? getenv("SYSFS_PATH") : NULL;
	if (!env || !*env || strlen(env) >= sizeof(sysfs_path))
		return;
	size_t n = strlen(env);
	while (n > 1 && env[n - 1] == '/')
		n--;
	memcpy(sysfs_path, env, n);
	sysfs_path[n] = 0;
}

EXPORT const char *ibv_get_sysfs_path(void)
{
	pthread_once(&sysfs_once, sysfs_path_init);
	return sysfs_path;
}

EXPORT int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size);
	close(fd);
	if (n <= 0 || size == 0)
		return -1;
	if ((size_t)n == size)
		n--;
	buf[n] = 0;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	return n;
}

/* The kernel-structure converters librdmacm links against. librdmacm
 * reaches them only with the kernel's rdma_cm, which an rnicd device does
 * not have: they leave the destination zeroed. */
EXPORT void ibv_copy_ah_attr_from_kern(void *dst, const void *src) { (void)src; memset(dst, 0, sizeof(struct ibv_ah_attr)); }
EXPORT void ibv_copy_qp_attr_from_kern(void *dst, const void *src) { (void)src; memset(dst, 0, sizeof(struct ibv_qp_attr)); }
EXPORT void ibv_copy_path_rec_from_kern(void *dst, const void *src) { (void)dst; (void)src; }
EXPORT void ibv_copy_path_rec_to_kern(void *dst, const void *src) { (void)dst; (void)src; }
