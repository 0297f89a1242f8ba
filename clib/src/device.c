/*
 * device.c: finding rnicd devices and opening them.
 *
 * Stock libibverbs finds devices through netlink and sysfs and opens
 * /dev/infiniband/uverbsN; rnicd has neither. A device here is a running
 * rnicd: its control socket NAME.sock in the directory the rnic tools use
 * (verbs.SocketDir: $RNICD_DIR, else /run/rnicd for root, else
 * $XDG_RUNTIME_DIR/rnicd, else /tmp/rnicd-UID; in a network namespace
 * not pid 1's, or where pid 1's is unreadable, its net-INODE under that). A socket nobody listens
 * on (a killed daemon's) is no device. The attributes are the ones
 * `rnic ibv_devinfo` prints (verbs.QueryDevice, cmd/rnic/ibv.go).
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <endian.h>

#include "rnic.h"

static void socket_dir(char *out, size_t n)
{
	const char *d = getenv("RNICD_DIR");
	struct stat self, host;
	size_t l;
	if (d && *d) {
		snprintf(out, n, "%s", d);
		return;
	}
	if (geteuid() == 0)
		snprintf(out, n, "/run/rnicd");
	else if ((d = getenv("XDG_RUNTIME_DIR")) && *d)
		snprintf(out, n, "%s/rnicd", d);
	else
		snprintf(out, n, "/tmp/rnicd-%u", (unsigned)getuid());
	/* Outside pid 1's network namespace (or where pid 1's cannot be
	 * read), that namespace's own subdirectory, net-INODE
	 * (verbs.SocketDir says why). */
	if (stat("/proc/thread-self/ns/net", &self) == 0 &&
	    (stat("/proc/1/ns/net", &host) != 0 || self.st_ino != host.st_ino || self.st_dev != host.st_dev) &&
	    (l = strlen(out)) < n)
		snprintf(out + l, n - l, "/net-%lu", (unsigned long)self.st_ino);
}

/* Devices are kept for the life of the process, one per name: a device
 * pointer stays valid after ibv_free_device_list, as rdma-core keeps an
 * opened device's, and listing again does not grow the table. */
static pthread_mutex_t devs_mu = PTHREAD_MUTEX_INITIALIZER;
static struct rdev **devs;
static int ndevs;

/* node_guid is verbs.NodeGUID: rxe takes the GUID from the interface's
 * MAC, which every rnicd on lo would share, so it is made from the
 * port's address instead (127.0.0.1 gives 0200:0000:7f00:0001). */
static uint64_t node_guid(const uint8_t gid[16])
{
	static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	uint64_t g = 0;
	if (memcmp(gid, v4, 12) == 0)
		return 0x02ull << 56 | (uint64_t)gid[12] << 24 | gid[13] << 16 | gid[14] << 8 | gid[15];
	for (int i = 8; i < 16; i++)
		g = g << 8 | gid[i];
	return g;
}

/* query_port asks the daemon behind c for its port: name, GID, MTU. */
static int query_port(struct conn *c, uint8_t gid[16], uint32_t *mtu)
{
	static __thread uint8_t rb[MAX_MSG];
	struct buf rep = {.p = rb, .len = sizeof(rb)};
	int rfd;
	int err = conn_call(c, K_QUERY_PORT, NULL, -1, &rep, &rfd);
	if (err)
		return err;
	uint16_t n = get16(&rep);
	rep.off += n;
	uint8_t addr[16];
	getn(&rep, addr, 16);
	getn(&rep, gid, 16);
	*mtu = get32(&rep);
	return rep.bad ? EPROTO : 0;
}

struct rdev *rdev_query(const char *name, const char *sock)
{
	struct conn c;
	if (conn_dial(&c, sock))
		return NULL;
	uint8_t gid[16];
	uint32_t mtu;
	int err = query_port(&c, gid, &mtu);
	conn_close(&c);
	if (err)
		return NULL;
	pthread_mutex_lock(&devs_mu);
	struct rdev *d = NULL;
	for (int i = 0; i < ndevs; i++)
		if (strcmp(devs[i]->dev.name, name) == 0)
			d = devs[i];
	if (!d) {
		struct rdev **nd = realloc(devs, (ndevs + 1) * sizeof(*devs));
		d = calloc(1, sizeof(*d));
		if (!nd || !d) {
			free(d);
			if (nd)
				devs = nd;
			pthread_mutex_unlock(&devs_mu);
			return NULL;
		}
		devs = nd;
		devs[ndevs++] = d;
		snprintf(d->dev.name, sizeof(d->dev.name), "%s", name);
		snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "rnicd-%s", name);
		d->dev.node_type = IBV_NODE_CA;
		d->dev.transport_type = IBV_TRANSPORT_IB; /* RoCE devices say IB */
	}
	snprintf(d->sock, sizeof(d->sock), "%s", sock);
	/* No sysfs behind it: a program reading files there finds none. */
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "%s", sock);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s", sock);
	memcpy(d->gid, gid, 16);
	d->mtu = mtu;
	d->guid = node_guid(gid);
	pthread_mutex_unlock(&devs_mu);
	return d;
}

static void fill_ops(struct rctx *c);

static int by_name(const void *a, const void *b)
{
	return strcmp((*(struct rdev *const *)a)->dev.name, (*(struct rdev *const *)b)->dev.name);
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
	char dir[4096];
	socket_dir(dir, sizeof(dir));
	struct rdev **list = calloc(1, sizeof(*list));
	int n = 0;
	DIR *dp = opendir(dir);
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	struct dirent *e;
	while (dp && (e = readdir(dp))) {
		size_t l = strlen(e->d_name);
		if (l <= 5 || strcmp(e->d_name + l - 5, ".sock") != 0 || l - 5 >= IBV_SYSFS_NAME_MAX)
			continue;
		char name[IBV_SYSFS_NAME_MAX], sock[sizeof(dir) + 256];
		snprintf(name, sizeof(name), "%.*s", (int)(l - 5), e->d_name);
		snprintf(sock, sizeof(sock), "%s/%s", dir, e->d_name);
		struct stat st;
		if (stat(sock, &st) || !S_ISSOCK(st.st_mode) || strlen(sock) >= 108)
			continue;
		struct rdev *d = rdev_query(name, sock); /* NULL: stale socket */
		if (!d)
			continue;
		struct rdev **nl = realloc(list, (n + 2) * sizeof(*list));
		if (!nl)
			break;
		list = nl;
		list[n++] = d;
		list[n] = NULL;
	}
	if (dp)
		closedir(dp);
	if (n == 0)
		rnic_log("no rnicd running: no live control socket in %s ($RNICD_DIR sets the directory); "
			 "start one with `rnicd -d rnic0`",
			 dir);
	qsort(list, n, sizeof(*list), by_name);
	if (num)
		*num = n;
	return (struct ibv_device **)list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *d)
{
	return htobe64(((struct rdev *)d)->guid);
}

EXPORT int ibv_get_device_index(struct ibv_device *d)
{
	pthread_mutex_lock(&devs_mu);
	int idx = -1;
	for (int i = 0; i < ndevs; i++)
		if (&devs[i]->dev == d)
			idx = i;
	pthread_mutex_unlock(&devs_mu);
	return idx;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	struct rdev *d = (struct rdev *)device;
	struct rctx *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	int err = conn_dial(&c->conn, d->sock);
	if (err) {
		rnic_log("open %s: connect to %s: %s (is its rnicd running?)", d->dev.name, d->sock, strerror(err));
		free(c);
		errno = err;
		return NULL;
	}
	c->dev = d;
	pthread_mutex_init(&c->mrs_mu, NULL);
	struct ibv_context *ctx = &c->vctx.context;
	ctx->device = device;
	ctx->cmd_fd = c->conn.fd;
	int aerr;
	ctx->async_fd = async_open(ctx, &aerr);
	/* The daemon answers a connection over the client's or its own
	 * limits with the limit's error to its first request (open_async,
	 * refused above, on stderr) and closes it. The kernel fails the
	 * open of a uverbs device then, and so does this one, not every
	 * call after it: a second request tells a closed connection from a
	 * refused queue on a live one. */
	struct buf rep;
	int perr = aerr == ENOMEM ? call(ctx, K_QUERY_PORT, NULL, -1, &rep, NULL) : 0;
	if (perr == ENODEV || perr == EPIPE || perr == ECONNRESET) {
		rnic_log("open %s: rnicd refused the connection", d->dev.name);
		if (ctx->async_fd >= 0)
			close(ctx->async_fd);
		async_close(ctx);
		conn_close(&c->conn);
		pthread_mutex_destroy(&c->mrs_mu);
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	if (aerr == ENOMEM)
		rnic_log("%s: no asynchronous events on this context but DEVICE_FATAL", d->dev.name);
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	c->vctx.sz = sizeof(c->vctx);
	fill_ops(c);
	return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct rctx *c = to_rctx(ctx);
	/* The hang-up makes the daemon destroy everything this context made. */
	conn_close(&c->conn);
	mrs_release(c);
	pthread_mutex_destroy(&c->mrs_mu);
	if (ctx->async_fd >= 0)
		close(ctx->async_fd);
	async_close(ctx);
	free(c);
	return 0;
}

enum ibv_mtu mtu_enum(uint32_t bytes)
{
	switch (bytes) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	default: return IBV_MTU_4096;
	}
}

/* The limits are the NIC's (rnic/qpmgr, rnic.MaxCQE); the values the NIC
 * has no notion of are 0, as on a device without the feature. */
EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a)
{
	struct rdev *d = to_rctx(ctx)->dev;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "0.1");
	a->node_guid = htobe64(d->guid);
	a->sys_image_guid = htobe64(d->guid);
	a->max_mr_size = 1ull << 40;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = 0xffffff; /* rxe's: no vendor */
	a->max_qp = 1 << 16;
	a->max_qp_wr = 16384;
	a->max_sge = 32;
	a->max_sge_rd = 32;
	a->max_cq = 1 << 16;
	a->max_cqe = 1 << 20;
	a->max_mr = 1 << 16;
	a->max_pd = 1 << 16;
	/* Memory windows, type 1 and 2B, as rxe (rnic.MaxMW; mw.c). */
	a->max_mw = 1 << 16;
	a->device_cap_flags = IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
	a->max_qp_rd_atom = 128;
	a->max_res_rd_atom = 128 << 16;
	a->max_qp_init_rd_atom = 128;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = 1 << 16;
	/* Multicast: the daemon's bounds (rnic.MaxMcastGroups, rxe's
	 * max_mcast_qp_attach). */
	a->max_mcast_grp = 64;
	a->max_mcast_qp_attach = 56;
	a->max_total_mcast_qp_attach = 64 * 56;
	a->max_srq = 1 << 16;
	a->device_cap_flags |= IBV_DEVICE_XRC; /* xrc.c */
	a->max_srq_wr = 16384;
	a->max_srq_sge = 32;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
	return 0;
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
			   struct ibv_device_attr_ex *a, size_t size)
{
	(void)in;
	if (size < sizeof(a->orig_attr))
		return EINVAL;
	memset(a, 0, size);
	ibv_query_device(ctx, &a->orig_attr);
	return 0;
}

static void port_attr(struct rdev *d, struct ibv_port_attr *p)
{
	memset(p, 0, sizeof(*p));
	p->state = IBV_PORT_ACTIVE;
	p->max_mtu = IBV_MTU_4096;
	p->active_mtu = mtu_enum(d->mtu);
	/* rxe lays an IPv4 address out as a RoCE v1 GID at index 0 and a v2
	 * one at 1, and users pass -g 1 / -x 1 out of habit; rnicd speaks v2
	 * only, so both indexes hold the port's GID (verbs.QueryPort). */
	p->gid_tbl_len = 2;
	p->port_cap_flags = 0x00010000; /* IB_PORT_CM_SUP, as rxe */
	p->max_msg_sz = 1u << 31;
	p->pkey_tbl_len = 1;
	p->max_vl_num = 1;
	p->active_width = 2;  /* 4X */
	p->active_speed = 8;  /* 10.0 Gbps */
	p->phys_state = 5;    /* LinkUp */
	p->link_layer = IBV_LINK_LAYER_ETHERNET;
}

/* port_active asks the daemon for the port's state (abi.PortReply). */
static int port_active(struct rctx *c)
{
	struct buf rep;
	if (call(&c->vctx.context, K_QUERY_PORT, NULL, -1, &rep, NULL))
		return 0;
	rep.off += get16(&rep) + 16 + 16 + 4; /* name, address, GID, MTU */
	uint8_t state = get8(&rep);
	return rep.bad || state == PORT_ACTIVE;
}

static int query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *out, size_t len)
{
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr p;
	port_attr(to_rctx(ctx)->dev, &p);
	if (!port_active(to_rctx(ctx))) {
		/* As rxe's port while its netdev's link is down (or its
		 * daemon gone): DOWN, and phys_state DISABLED. */
		p.state = IBV_PORT_DOWN;
		p.phys_state = 3;
	}
	memcpy(out, &p, len < sizeof(p) ? len : sizeof(p));
	return 0;
}

/* ibv_query_port is the header's fallback for contexts without the
 * extended op; this one has it, but old binaries call this symbol with
 * the older, shorter structure: fill up to link_layer only. */
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *out)
{
	return query_port_ex(ctx, port, (struct ibv_port_attr *)out, offsetof(struct ibv_port_attr, link_layer) + 1);
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (port != 1 || index < 0 || index > 1)
		return -1;
	memcpy(gid->raw, to_rctx(ctx)->dev->gid, 16);
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
			     struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
	(void)flags;
	if (port != 1 || index > 1 || size < sizeof(*e))
		return EINVAL;
	memset(e, 0, size);
	memcpy(e->gid.raw, to_rctx(ctx)->dev->gid, 16);
	e->gid_index = index;
	e->port_num = 1;
	e->gid_type = IBV_GID_TYPE_ROCE_V2;
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *e, size_t max,
				    uint32_t flags, size_t size)
{
	ssize_t n = 0;
	if (size < sizeof(*e))
		return -EINVAL;
	for (uint32_t i = 0; i < 2 && (size_t)n < max; i++, n++)
		_ibv_query_gid_ex(ctx, 1, i, (struct ibv_gid_entry *)((char *)e + n * size), flags, size);
	return n;
}

/* ibv_query_gid_type answers in sysfs's numbering: 0 is "IB/RoCE v1",
 * 1 is "RoCE v2" (rdma-core's driver.h). */
EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, unsigned int *type)
{
	(void)ctx;
	if (port != 1 || index > 1)
		return -1;
	*type = 1;
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return -1;
	*pkey = htobe16(0xffff);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	(void)ctx;
	if (port == 1 && (be16toh(pkey) & 0x7fff) == 0x7fff)
		return 0;
	return -1;
}


/* fill_ops points the context at this library's data path and the
 * extended verbs it has. */
static void fill_ops(struct rctx *c)
{
	struct ibv_context_ops *o = &c->vctx.context.ops;
	o->poll_cq = poll_cq;
	o->req_notify_cq = req_notify_cq;
	o->post_send = post_send;
	o->post_recv = post_recv;
	o->post_srq_recv = post_srq_recv;
	fill_mw_ops(o);
	c->vctx.query_port = query_port_ex;
	c->vctx.query_device_ex = query_device_ex;
	c->vctx.create_qp_ex = create_qp_ex;
	c->vctx.create_cq_ex = create_cq_ex;
	fill_xrc_ops(&c->vctx);
}
