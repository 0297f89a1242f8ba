/*
 * dev.c: the rnicds this library uses and which one an address means.
 *
 * cma.c opens every RDMA device once (ucma_init) and keeps them open
 * while it is loaded; so does this file, through this folder's
 * libibverbs, so that a cm_id's verbs is an ibv_context of that library
 * and the PDs, CQs and QPs the program makes on it live on the control
 * connection the CM requests use. On RoCEv2 a port's GID is its IP
 * address (IPv4-mapped for IPv4), so finding the device of an address is
 * comparing GIDs: what the kernel's rdma_cm gets from the netdev the
 * address is on.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cma.h"

static pthread_once_t devs_once = PTHREAD_ONCE_INIT;
static struct cm_dev devs[MAX_DEVS];
static int ndevs;

static void open_devs(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return;
	for (int i = 0; i < n && ndevs < MAX_DEVS; i++) {
		struct ibv_context *c = ibv_open_device(list[i]);
		if (!c)
			continue; /* a daemon that went away meanwhile */
		struct cm_dev *d = &devs[ndevs];
		struct ibv_port_attr pa;
		struct ibv_device_attr da;
		if (ibv_query_gid(c, 1, 0, &d->gid) || ibv_query_port(c, 1, &pa) || ibv_query_device(c, &da)) {
			ibv_close_device(c);
			continue;
		}
		d->verbs = c;
		d->mtu = pa.active_mtu;
		d->max_resp_res = da.max_qp_rd_atom > 255 ? 255 : da.max_qp_rd_atom;
		d->max_init_depth = da.max_qp_init_rd_atom > 255 ? 255 : da.max_qp_init_rd_atom;
		pthread_mutex_init(&d->pd_mu, NULL);
		ndevs++;
	}
	if (n > MAX_DEVS)
		rnic_log("%d rnicd running: rdma_cm uses the first %d", n, MAX_DEVS);
	ibv_free_device_list(list);
}

/* devs_init opens the devices once; ENODEV if there is none, as
 * rdma_create_event_channel fails without RDMA devices. */
int devs_init(void)
{
	pthread_once(&devs_once, open_devs);
	return ndevs ? 0 : ENODEV;
}

int devs_count(void) { return ndevs; }
struct cm_dev *dev_at(int i) { return &devs[i]; }
int dev_index(struct cm_dev *d) { return (int)(d - devs); }

EXPORT struct ibv_context **rdma_get_devices(int *num_devices)
{
	devs_init();
	struct ibv_context **l = calloc(ndevs + 1, sizeof(*l));
	if (!l) {
		errno = ENOMEM;
		return NULL;
	}
	for (int i = 0; i < ndevs; i++)
		l[i] = devs[i].verbs;
	if (num_devices)
		*num_devices = ndevs;
	return l;
}

EXPORT void rdma_free_devices(struct ibv_context **list) { free(list); }

/* addr_to_gid is the GID that stands for a's IP address. */
void addr_to_gid(const struct sockaddr *a, union ibv_gid *gid)
{
	memset(gid, 0, sizeof(*gid));
	if (a->sa_family == AF_INET) {
		gid->raw[10] = gid->raw[11] = 0xff;
		memcpy(gid->raw + 12, &((const struct sockaddr_in *)a)->sin_addr, 4);
	} else if (a->sa_family == AF_INET6) {
		memcpy(gid->raw, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
	}
}

static int is_v4mapped(const uint8_t g[16])
{
	static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
	return memcmp(g, prefix, 12) == 0;
}

/* gid_to_addr is the socket address of a GID's IP address and a port. */
void gid_to_addr(const uint8_t gid[16], uint16_t port_be, struct sockaddr_storage *out)
{
	memset(out, 0, sizeof(*out));
	if (is_v4mapped(gid)) {
		struct sockaddr_in *s = (struct sockaddr_in *)out;
		s->sin_family = AF_INET;
		s->sin_port = port_be;
		memcpy(&s->sin_addr, gid + 12, 4);
	} else {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)out;
		s->sin6_family = AF_INET6;
		s->sin6_port = port_be;
		memcpy(&s->sin6_addr, gid, 16);
	}
}

socklen_t addr_len(const struct sockaddr *a)
{
	switch (a->sa_family) {
	case AF_INET: return sizeof(struct sockaddr_in);
	case AF_INET6: return sizeof(struct sockaddr_in6);
	default: return 0;
	}
}

/* is_wildcard: no address (0.0.0.0 or ::), or no family at all. */
int is_wildcard(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == INADDR_ANY;
	if (a->sa_family == AF_INET6)
		return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)a)->sin6_addr);
	return a->sa_family == AF_UNSPEC;
}

/* is_loopback: 127.0.0.1, ::1 or ::ffff:127.0.0.1. Only those: the rest
 * of 127/8 is where rnicd on one host put their ports. */
int is_loopback(const struct sockaddr *a)
{
	if (a->sa_family == AF_INET)
		return ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) == INADDR_LOOPBACK;
	if (a->sa_family == AF_INET6) {
		const struct in6_addr *v6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
		return IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr32[3] == htonl(INADDR_LOOPBACK));
	}
	return 0;
}

/* dev_owning is the rnicd whose port holds address a, or NULL. */
struct cm_dev *dev_owning(const struct sockaddr *a)
{
	union ibv_gid g;
	addr_to_gid(a, &g);
	for (int i = 0; i < ndevs; i++)
		if (!memcmp(devs[i].gid.raw, g.raw, 16))
			return &devs[i];
	return NULL;
}

static int common_prefix(const uint8_t *a, const uint8_t *b)
{
	for (int i = 0; i < 128; i++)
		if (((a[i / 8] >> (7 - i % 8)) & 1) != ((b[i / 8] >> (7 - i % 8)) & 1))
			return i;
	return 128;
}

/* kernel_source asks the routing table which address a datagram to dst
 * would leave from: connecting a UDP socket routes it and binds its
 * source, sending nothing (ip route get, without netlink). */
static int kernel_source(const struct sockaddr *dst, union ibv_gid *src)
{
	struct sockaddr_storage to, from;
	socklen_t len;
	memset(&to, 0, sizeof(to));
	if (dst->sa_family == AF_INET) {
		len = sizeof(struct sockaddr_in);
		memcpy(&to, dst, len);
		((struct sockaddr_in *)&to)->sin_port = htons(4791);
	} else if (dst->sa_family == AF_INET6) {
		len = sizeof(struct sockaddr_in6);
		memcpy(&to, dst, len);
		((struct sockaddr_in6 *)&to)->sin6_port = htons(4791);
	} else {
		return -1;
	}
	int fd = socket(dst->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	socklen_t flen = sizeof(from);
	int err = connect(fd, (struct sockaddr *)&to, len) || getsockname(fd, (struct sockaddr *)&from, &flen);
	close(fd);
	if (err)
		return -1;
	addr_to_gid((struct sockaddr *)&from, src);
	return 0;
}

/* dev_route is the rnicd a connection to dst leaves from, as the kernel's
 * rdma_resolve_addr picks it for an unbound ID (addr4_resolve, then
 * cma_acquire_dev_by_src_ip): the one that holds dst (a loopback route),
 * else the one that holds the source address the routing table gives
 * for dst, which on a subnet of several addresses is the primary one,
 * not the closest. Where no rnicd holds that source (no route, or
 * 127.0.0.1 for a loopback peer no daemon holds), the one whose address
 * shares the longest prefix with dst stands in, where Linux would
 * refuse. */
struct cm_dev *dev_route(const struct sockaddr *dst)
{
	union ibv_gid g, src;
	addr_to_gid(dst, &g);
	for (int i = 0; i < ndevs; i++)
		if (!memcmp(devs[i].gid.raw, g.raw, 16))
			return &devs[i];
	if (!kernel_source(dst, &src))
		for (int i = 0; i < ndevs; i++)
			if (!memcmp(devs[i].gid.raw, src.raw, 16))
				return &devs[i];
	struct cm_dev *best = &devs[0];
	int best_len = -1;
	for (int i = 0; i < ndevs; i++) {
		int n = common_prefix(devs[i].gid.raw, g.raw);
		if (n > best_len) {
			best = &devs[i];
			best_len = n;
		}
	}
	return best;
}

/* cm_call sends CM request k with body req (and fd, if >= 0) to d's
 * rnicd; the reply's body goes to rep, read from its start. */
int cm_call(struct cm_dev *d, int k, struct buf *req, int fd, struct buf *rep)
{
	size_t n = 0;
	int err = rnicd_cm_call(d->verbs, k, req->p, req->off, fd, NULL, rep->p, rep->len, &n);
	rep->len = err ? 0 : n;
	rep->off = 0;
	rep->bad = 0;
	return err;
}

/* cm_call_rfd is cm_call for a reply that carries a descriptor (*rfd). */
int cm_call_rfd(struct cm_dev *d, int k, struct buf *req, struct buf *rep, int *rfd)
{
	size_t n = 0;
	*rfd = -1;
	int err = rnicd_cm_call(d->verbs, k, req->p, req->off, -1, rfd, rep->p, rep->len, &n);
	rep->len = err ? 0 : n;
	rep->off = 0;
	rep->bad = 0;
	return err;
}

/* cm_destroy_id destroys CM ID h in d's rnicd (rdma_destroy_id's
 * request; a connect request's ID so destroyed is rejected). */
void cm_destroy_id(struct cm_dev *d, uint32_t h)
{
	uint8_t b[4], r[16];
	struct buf req = {.p = b, .len = 4}, rep = {.p = r, .len = sizeof(r)};
	put32(&req, h);
	cm_call(d, K_CM_DESTROY_ID, &req, -1, &rep);
}
