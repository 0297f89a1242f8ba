/*
 * rsapi: rsockets' calls as a socket program uses them, in one C
 * program on two rnicd through librdmacm's rsockets.
 *
 *   rsapi SERVER_ADDR CLIENT_ADDR PORT
 *
 * A datagram rsocket is refused (ENOSYS); a blocking rconnect to a port
 * nobody listens on fails with ECONNREFUSED; a non-blocking one to a
 * listener returns EINPROGRESS, then rpoll says POLLOUT and SO_ERROR is
 * 0; each end's rgetsockname and rgetpeername give the addresses and the
 * listener's port. Then, blocking, both ends send 4 MiB and receive the
 * other's 4 MiB at once, from two threads each, every byte checked;
 * MSG_PEEK sees bytes that the next rrecv takes again; a zero-length
 * rrecv returns 0 at once; iomap: RDMA_IOMAPSIZE rounds as rdma-core,
 * the server riomaps 4 KiB at offset 4096 for the client to write (a
 * PROT_READ riomap is EINVAL, one more than the client's iomap of one
 * entry ENOMEM), the client's riowrite at an offset in no mapping is
 * EINVAL, one past the mapping's end writes the bytes within it, one
 * of the whole mapping lands every byte (checked by the server once the
 * client's rsend says so), and riounmap takes only what riomap gave;
 * the client's rshutdown(SHUT_WR) is the
 * server's end of stream, while the server still writes to the client;
 * rselect sees the client readable; the server's rclose is the client's
 * end of stream; the client, shut for writing, gets ECONNRESET from
 * rsend. Each step prints one line; the last is PASS.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <unistd.h>

#define PROG "rsapi"
#include "cmtest.h"

#define BULK (4 << 20)

static void expect(int ok, const char *what)
{
	if (!ok)
		fail(what);
}

/* A direction of the bulk transfer: one thread sends, one receives. */
struct bulk {
	int s;
	uint8_t seed;
	int ok;
};

static uint8_t pattern(uint8_t seed, size_t i) { return (uint8_t)(seed + i * 7 + (i >> 12)); }

static void *bulk_send(void *arg)
{
	struct bulk *b = arg;
	static __thread uint8_t buf[100000];
	for (size_t off = 0; off < BULK;) {
		size_t n = BULK - off < sizeof(buf) ? BULK - off : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(b->seed, off + i);
		ssize_t r = rsend(b->s, buf, n, 0);
		if (r <= 0)
			return NULL;
		off += r;
		/* A short send leaves the rest for the next, from the same
		 * offset: the pattern is made again there. */
	}
	b->ok = 1;
	return NULL;
}

static void *bulk_recv(void *arg)
{
	struct bulk *b = arg;
	static __thread uint8_t buf[77777];
	for (size_t off = 0; off < BULK;) {
		ssize_t r = rrecv(b->s, buf, BULK - off < sizeof(buf) ? BULK - off : sizeof(buf), 0);
		if (r <= 0)
			return NULL;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern(b->seed, off + i))
				return NULL;
		off += r;
	}
	b->ok = 1;
	return NULL;
}

/* duplex sends seed_out's bytes on s and takes seed_in's, at once. */
static int duplex(int s, uint8_t seed_out, uint8_t seed_in)
{
	struct bulk out = {s, seed_out, 0}, in = {s, seed_in, 0};
	pthread_t a, b;
	if (pthread_create(&a, NULL, bulk_send, &out) || pthread_create(&b, NULL, bulk_recv, &in))
		fail("pthread_create");
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return out.ok && in.ok;
}

static struct sockaddr_in srv, cli;
static int lfd;
static int step[2]; /* the server thread's go-ahead: a pipe */

static void wait_step(void)
{
	char c;
	if (read(step[0], &c, 1) != 1)
		fail("read step");
}

static void *server(void *arg)
{
	(void)arg;
	int s = raccept(lfd, NULL, NULL);
	expect(s >= 0, "raccept");
	struct sockaddr_in peer;
	socklen_t len = sizeof(peer);
	expect(!rgetpeername(s, (struct sockaddr *)&peer, &len) && len == sizeof(peer) &&
		       peer.sin_addr.s_addr == cli.sin_addr.s_addr,
	       "the server's rgetpeername");
	expect(duplex(s, 11, 22), "the server's 4 MiB each way");
	expect(rsend(s, "peek!", 5, 0) == 5, "rsend peek!");
	/* iomap, once the client took peek! */
	wait_step();
	static uint8_t target[8192];
	errno = 0;
	expect(riomap(s, target, 4096, PROT_READ, 0, 0) == -1 && errno == EINVAL, "riomap PROT_READ not EINVAL");
	expect(riomap(s, target, 4096, PROT_WRITE, 0, 4096) == 4096, "the server's riomap");
	errno = 0;
	expect(riomap(s, target + 4096, 4096, PROT_WRITE, 0, -1) == -1 && errno == ENOMEM,
	       "a riomap past the client's iomap of 1 entry not ENOMEM");
	/* The mapping goes to the client before these bytes. */
	expect(rsend(s, "m", 1, 0) == 1, "rsend m");
	char d;
	expect(rrecv(s, &d, 1, MSG_WAITALL) == 1 && d == 'd', "the client's d after its riowrites");
	for (size_t i = 0; i < 4096; i++)
		expect(target[i] == pattern(33, i), "the bytes riowrite wrote");
	for (size_t i = 4096; i < sizeof(target); i++)
		expect(target[i] == 0, "a byte past the mapping written");
	errno = 0;
	expect(riounmap(s, target, 4095) == -1 && errno == EINVAL, "riounmap of what riomap did not map not EINVAL");
	expect(!riounmap(s, target, 4096), "riounmap");
	/* The client's SHUT_WR: the end of the stream here. */
	char buf[8];
	expect(rrecv(s, buf, sizeof(buf), 0) == 0, "the server's rrecv after the client's SHUT_WR");
	expect(rsend(s, "after", 5, 0) == 5, "the server's rsend after the client's SHUT_WR");
	wait_step();
	rclose(s);
	return NULL;
}

int main(int argc, char **argv)
{
	server_client(argc, argv, &srv, &cli);

	errno = 0;
	expect(rsocket(AF_INET, SOCK_DGRAM, 0) == -1 && errno == ENOSYS, "a datagram rsocket not refused with ENOSYS");
	printf("SOCK_DGRAM: ENOSYS\n");

	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	expect(c >= 0 && !rbind(c, (struct sockaddr *)&cli, sizeof(cli)), "the client's rsocket, rbind");
	/* What a byte of connection data can say: 1-128, then multiples
	 * of 256 up to 32512. */
	int sizes[][2] = {{1, 1}, {128, 128}, {300, 256}, {1000, 768}, {100000, 32512}, {-1, 0}};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int v = -2;
		socklen_t vl = sizeof(v);
		expect(!rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &sizes[i][0], sizeof(int)) &&
			       !rgetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &v, &vl) && v == sizes[i][1],
		       "RDMA_IOMAPSIZE's rounding");
	}
	errno = 0;
	expect(rconnect(c, (struct sockaddr *)&srv, sizeof(srv)) == -1 && errno == ECONNREFUSED,
	       "a connect to a port nobody listens on not refused");
	rclose(c);
	printf("nobody listening: ECONNREFUSED\n");

	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	expect(lfd >= 0 && !rsetsockopt(lfd, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) &&
		       !rbind(lfd, (struct sockaddr *)&srv, sizeof(srv)) && !rlisten(lfd, 1),
	       "the listener");
	struct sockaddr_in name;
	socklen_t len = sizeof(name);
	expect(!rgetsockname(lfd, (struct sockaddr *)&name, &len) && name.sin_port == srv.sin_port &&
		       name.sin_addr.s_addr == srv.sin_addr.s_addr,
	       "the listener's rgetsockname");
	if (pipe(step))
		fail("pipe");
	pthread_t th;
	if (pthread_create(&th, NULL, server, NULL))
		fail("pthread_create");

	c = rsocket(AF_INET, SOCK_STREAM, 0);
	expect(c >= 0 && !rbind(c, (struct sockaddr *)&cli, sizeof(cli)) &&
		       !rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)),
	       "the client's rsocket, rbind");
	expect(!rfcntl(c, F_SETFL, O_NONBLOCK) && (rfcntl(c, F_GETFL) & O_NONBLOCK), "rfcntl O_NONBLOCK");
	errno = 0;
	expect(rconnect(c, (struct sockaddr *)&srv, sizeof(srv)) == -1 && errno == EINPROGRESS,
	       "a non-blocking rconnect did not say EINPROGRESS");
	struct pollfd p = {.fd = c, .events = POLLOUT};
	expect(rpoll(&p, 1, 10000) == 1 && p.revents == POLLOUT, "rpoll POLLOUT after the connect");
	int err = -1;
	len = sizeof(err);
	expect(!rgetsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) && err == 0, "SO_ERROR 0");
	len = sizeof(name);
	expect(!rgetpeername(c, (struct sockaddr *)&name, &len) && name.sin_port == srv.sin_port &&
		       name.sin_addr.s_addr == srv.sin_addr.s_addr,
	       "the client's rgetpeername");
	len = sizeof(name);
	expect(!rgetsockname(c, (struct sockaddr *)&name, &len) && name.sin_addr.s_addr == cli.sin_addr.s_addr,
	       "the client's rgetsockname");
	printf("non-blocking connect: EINPROGRESS, POLLOUT, SO_ERROR 0, the names\n");

	expect(!rfcntl(c, F_SETFL, 0), "rfcntl blocking");
	expect(duplex(c, 22, 11), "the client's 4 MiB each way");
	printf("4 MiB each way at once, two threads a side: verified\n");

	char buf[16] = {0};
	expect(rrecv(c, buf, 5, MSG_PEEK | MSG_WAITALL) == 5 && !memcmp(buf, "peek!", 5), "MSG_PEEK");
	memset(buf, 0, sizeof(buf));
	expect(rrecv(c, buf, sizeof(buf), 0) == 5 && !memcmp(buf, "peek!", 5), "the rrecv after MSG_PEEK");
	expect(rrecv(c, buf, 0, 0) == 0, "a zero-length rrecv");
	printf("MSG_PEEK, then the same 5 bytes; a zero-length rrecv: 0\n");

	if (write(step[1], "x", 1) != 1)
		fail("write step");
	expect(rrecv(c, buf, 1, MSG_WAITALL) == 1 && buf[0] == 'm', "the server's m after its riomap");
	static uint8_t data[4096];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = pattern(33, i);
	errno = 0;
	expect(riowrite(c, data, 100, 0, 0) == (size_t)-1 && errno == EINVAL, "a riowrite at offset 0 not EINVAL");
	expect(riowrite(c, data + 4046, 100, 8142, 0) == 50, "a riowrite past the mapping's end not 50 bytes");
	expect(riowrite(c, data, 4096, 4096, 0) == 4096, "riowrite 4 KiB");
	expect(rsend(c, "d", 1, 0) == 1, "rsend d");
	printf("iomap: RDMA_IOMAPSIZE rounded; riomap PROT_READ: EINVAL, past the peer's iomap: ENOMEM; "
	       "riowrite in no mapping: EINVAL, past its end: 50 of 100, 4 KiB: verified; riounmap\n");

	expect(!rshutdown(c, SHUT_WR), "rshutdown SHUT_WR");
	fd_set r;
	FD_ZERO(&r);
	FD_SET(c, &r);
	struct timeval tv = {.tv_sec = 10};
	expect(rselect(c + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(c, &r), "rselect readable");
	memset(buf, 0, sizeof(buf));
	expect(rrecv(c, buf, 5, MSG_WAITALL) == 5 && !memcmp(buf, "after", 5), "the server's bytes after SHUT_WR");
	printf("SHUT_WR: the server's end of stream; its bytes after it arrive\n");
	if (write(step[1], "x", 1) != 1)
		fail("write step");
	pthread_join(th, NULL);
	expect(rrecv(c, buf, sizeof(buf), 0) == 0, "the end of stream at the server's rclose");
	errno = 0;
	expect(rsend(c, "x", 1, 0) == -1 && errno == ECONNRESET, "rsend after SHUT_WR: ECONNRESET");
	printf("the server's rclose: end of stream; rsend: ECONNRESET\n");
	rclose(c);
	rclose(lfd);
	printf("PASS\n");
	return 0;
}
