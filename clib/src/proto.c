/*
 * proto.c: rnicd's control protocol (abi/proto.go), client side.
 *
 * Every message is one SOCK_SEQPACKET datagram: a 16-byte little-endian
 * header (kind, flags, request id, body length, reserved) and the kind's
 * body. A reply echoes the kind and id with FLAG_REPLY and starts with an
 * error code; a refused request's reply carries the daemon's message,
 * which is printed so that a program that fails says why. Doorbells have
 * no reply unless refused: such a reply can arrive before the reply of a
 * later request and is skipped on the way, as the Go client does.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <poll.h>
#include <unistd.h>

#include "rnic.h"

void rnic_log(const char *fmt, ...)
{
	/* One write(2) of the whole line, past stdio: a program that
	 * buffers stderr, or writes its own lines there with write(2)
	 * (qperf), got our prefix, its line, and our message apart. */
	char line[1200];
	va_list ap;
	va_start(ap, fmt);
	int n = snprintf(line, sizeof(line), "%s: ", LOG_NAME);
	int m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	if (n + m > (int)sizeof(line) - 2)
		m = sizeof(line) - 2 - n;
	line[n + m] = '\n';
	fflush(stderr);
	for (size_t off = 0, len = n + m + 1; off < len;) {
		ssize_t w = write(STDERR_FILENO, line + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += w;
	}
}

static uint8_t *room(struct buf *b, size_t n)
{
	if (b->bad || b->off + n > b->len) {
		b->bad = 1;
		return NULL;
	}
	uint8_t *p = b->p + b->off;
	b->off += n;
	return p;
}

void putn(struct buf *b, const void *v, size_t n)
{
	uint8_t *p = room(b, n);
	if (p)
		memcpy(p, v, n);
}

void put8(struct buf *b, uint8_t v) { putn(b, &v, 1); }

/* x86-64 and every other target of Debian's rdma-core that matters here
 * is little-endian, as the protocol is; htole would be a no-op. */
void put16(struct buf *b, uint16_t v) { putn(b, &v, 2); }
void put32(struct buf *b, uint32_t v) { putn(b, &v, 4); }
void put64(struct buf *b, uint64_t v) { putn(b, &v, 8); }

void getn(struct buf *b, void *v, size_t n)
{
	uint8_t *p = room(b, n);
	if (p)
		memcpy(v, p, n);
	else
		memset(v, 0, n);
}

uint8_t get8(struct buf *b) { uint8_t v; getn(b, &v, 1); return v; }
uint16_t get16(struct buf *b) { uint16_t v; getn(b, &v, 2); return v; }
uint32_t get32(struct buf *b) { uint32_t v; getn(b, &v, 4); return v; }
uint64_t get64(struct buf *b) { uint64_t v; getn(b, &v, 8); return v; }

int conn_dial(struct conn *c, const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return errno;
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int err = errno;
		close(c->fd);
		c->fd = -1;
		return err;
	}
	pthread_mutex_init(&c->mu, NULL);
	c->id = 0;
	return 0;
}

void conn_close(struct conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	pthread_mutex_destroy(&c->mu);
}

static void header(uint8_t *h, int kind, uint32_t id, uint32_t len)
{
	struct buf b = {.p = h, .len = HDR_LEN};
	put16(&b, kind);
	put16(&b, 0);
	put32(&b, id);
	put32(&b, len);
	put32(&b, 0);
}

static int send_msg(struct conn *c, int kind, uint32_t id, struct buf *req, int fd)
{
	uint8_t h[HDR_LEN];
	size_t n = req ? req->off : 0;
	header(h, kind, id, n);
	struct iovec iov[2] = {{h, HDR_LEN}, {req ? req->p : NULL, n}};
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = n ? 2 : 1};
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		m.msg_control = ctl.b;
		m.msg_controllen = sizeof(ctl.b);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	while (sendmsg(c->fd, &m, MSG_NOSIGNAL) < 0) {
		if (errno != EINTR)
			return errno;
	}
	return 0;
}

static const char *kind_name(int k)
{
	static const char *names[] = {
		[K_QUERY_PORT] = "query_port", [K_ALLOC_PD] = "alloc_pd", [K_DEALLOC_PD] = "dealloc_pd",
		[K_REG_MR] = "reg_mr", [K_REG_MR_SHM] = "reg_mr", [K_DEREG_MR] = "dereg_mr", [K_CREATE_CHANNEL] = "create_comp_channel",
		[K_DESTROY_CHANNEL] = "destroy_comp_channel", [K_CREATE_CQ] = "create_cq",
		[K_DESTROY_CQ] = "destroy_cq", [K_CREATE_SRQ] = "create_srq", [K_DESTROY_SRQ] = "destroy_srq",
		[K_CREATE_QP] = "create_qp", [K_MODIFY_QP] = "modify_qp", [K_QUERY_QP] = "query_qp",
		[K_DESTROY_QP] = "destroy_qp", [K_DOORBELL] = "doorbell",
		[K_CM_CREATE_CHANNEL] = "rdma_create_event_channel", [K_CM_DESTROY_CHANNEL] = "rdma_destroy_event_channel",
		[K_CM_CREATE_ID] = "rdma_create_id", [K_CM_DESTROY_ID] = "rdma_destroy_id", [K_CM_LISTEN] = "rdma_listen",
		[K_CM_CONNECT] = "rdma_connect", [K_CM_ACCEPT] = "rdma_accept", [K_CM_REJECT] = "rdma_reject",
		[K_CM_DISCONNECT] = "rdma_disconnect", [K_CM_GET_EVENT] = "rdma_get_cm_event",
		[K_ATTACH_MCAST] = "ibv_attach_mcast", [K_DETACH_MCAST] = "ibv_detach_mcast",
		[K_ALLOC_MW] = "ibv_alloc_mw", [K_DEALLOC_MW] = "ibv_dealloc_mw",
		[K_OPEN_ASYNC] = "ibv_open_device",
	};
	if (k > 0 && k < (int)(sizeof(names) / sizeof(names[0])) && names[k])
		return names[k];
	return "request";
}

/* errno values of the reply codes (abi.Code). */
static int code_errno(uint32_t code)
{
	switch (code) {
	case CODE_INVALID: return EINVAL;
	case CODE_NO_HANDLE: return ENOENT;
	case CODE_MALFORMED: return EPROTO;
	case CODE_UNKNOWN: return ENOSYS;
	case CODE_BUSY: return EBUSY;
	case CODE_LIMIT: return ENOMEM; /* over a limit of the client or the daemon */
	default: return EIO;
	}
}

/* reply_error reports a refused request's reply: the daemon's message
 * goes to stderr, its code becomes an errno value. A destroy of an
 * object still in use is the exception: it fails with EBUSY and says
 * nothing, as the kernel's does (qperf deallocates its PD before its MR
 * and goes on; rdma-core prints nothing there). */
static int reply_error(int kind, struct buf *rep, uint32_t code)
{
	uint16_t n = get16(rep);
	char msg[1025];
	if (n > 1024)
		n = 1024;
	getn(rep, msg, n);
	msg[rep->bad ? 0 : n] = 0;
	if (code != 5)
		rnic_log("rnicd refused %s: %s", kind_name(kind), msg);
	return code_errno(code);
}

/* close_fds closes the n descriptors of rfd a reply brought, and sets
 * them to -1. */
static void close_fds(int *rfd, int n)
{
	for (int i = 0; i < n; i++) {
		if (rfd[i] >= 0)
			close(rfd[i]);
		rfd[i] = -1;
	}
}

/* read_msg reads one reply: its header into kind/id and its body into
 * rep; the first nrfd descriptors it carries go to rfd[0..nrfd), -1
 * where it carries fewer; the rest are closed. */
static int read_msg(struct conn *c, struct buf *rep, int *kind, uint32_t *id, int *rfd, int nrfd)
{
	uint8_t h[HDR_LEN];
	struct iovec iov[2] = {{h, HDR_LEN}, {rep->p, rep->len}};
	union {
		struct cmsghdr c;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
	ssize_t n;
	while ((n = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC)) < 0) {
		if (errno != EINTR)
			return errno;
	}
	int got = 0;
	for (int i = 0; i < nrfd; i++)
		rfd[i] = -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (int i = 0; i < nfd; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got < nrfd)
				rfd[got++] = fd;
			else
				close(fd);
		}
	}
	if (n == 0) {
		rnic_log("rnicd hung up");
		return ENODEV;
	}
	if (n < HDR_LEN || (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		close_fds(rfd, nrfd);
		return EPROTO;
	}
	struct buf hb = {.p = h, .len = HDR_LEN};
	*kind = get16(&hb);
	uint16_t flags = get16(&hb);
	*id = get32(&hb);
	uint32_t len = get32(&hb);
	if (!(flags & FLAG_REPLY) || len != (size_t)n - HDR_LEN) {
		close_fds(rfd, nrfd);
		return EPROTO;
	}
	rep->off = 0;
	rep->len = len;
	rep->bad = 0;
	return 0;
}

int conn_call(struct conn *c, int k, struct buf *req, int fd, struct buf *rep, int *rfd)
{
	return conn_call_fds(c, k, req, fd, rep, rfd, 1);
}

int conn_call_fds(struct conn *c, int k, struct buf *req, int fd, struct buf *rep, int *rfd, int nrfd)
{
	pthread_mutex_lock(&c->mu);
	uint32_t id = __atomic_add_fetch(&c->id, 1, __ATOMIC_RELAXED);
	int err = send_msg(c, k, id, req, fd);
	size_t cap = rep->len;
	while (!err) {
		int kind = 0;
		uint32_t rid = 0;
		rep->len = cap;
		err = read_msg(c, rep, &kind, &rid, rfd, nrfd);
		if (err)
			break;
		uint32_t code = get32(rep);
		if (rid != id) {
			/* A refused doorbell: its QP went to ERR, which its
			 * completions say; the message helps whoever debugs. */
			close_fds(rfd, nrfd);
			if (code != 0)
				reply_error(kind, rep, code);
			continue;
		}
		if (code != 0) {
			close_fds(rfd, nrfd);
			err = reply_error(k, rep, code);
		}
		break;
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

/* conn_doorbell tells the daemon a ring's producer index moved. It takes
 * no lock: a datagram is sent whole, and the id only has to be unique. */
int conn_doorbell(struct conn *c, uint32_t h, uint8_t queue)
{
	uint8_t body[5];
	struct buf b = {.p = body, .len = sizeof(body)};
	put32(&b, h);
	put8(&b, queue);
	uint32_t id = __atomic_add_fetch(&c->id, 1, __ATOMIC_RELAXED);
	return send_msg(c, K_DOORBELL, id, &b, -1);
}

/* conn_hung_up says whether the daemon closed the connection (it exited
 * or was killed): the device's fatal error. */
int conn_hung_up(struct conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}
