/*
 * rshostile: an rsocket listener against a peer that does not keep the
 * rsocket protocol, in one C program on two rnicd.
 *
 *   rshostile SERVER_ADDR CLIENT_ADDR PORT
 *
 * An rsocket listens on SERVER_ADDR:PORT, a thread taking its
 * connections with raccept and reading each with rrecv. A client on
 * CLIENT_ADDR, made with rdma_cm and verbs alone, connects to it with
 * connection data no rsocket sends: version 2, a target list of no
 * entries, a buffer half of 2^29 bytes (more than a message's 29-bit
 * length can say); each connect must end in
 * REJECTED, the listener taking no connection. Then one with good
 * connection data, whose first message says it wrote more than the half
 * of the buffer it was offered: that rrecv fails with EPROTO. The
 * listener offers an iomap of one entry (RDMA_IOMAPSIZE 1), which the
 * REP says, right behind its target list: an IOMAP_SGL written there
 * whose immediate names entry 1 fails that rrecv with EPROTO too; one
 * written where entry 1 would lie, past the region the peer may write,
 * fails at the NIC (the client's completion: remote access error) and
 * writes nothing. Then a good
 * one writing "hello" where the REP said: rrecv gives those 5 bytes, so
 * the listener lived through the rest. Each step prints one line; the
 * last is PASS. The library's reasons go to stderr.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "rshostile"
#include "cmtest.h"

static int lfd;
static int results[2]; /* the server thread's rrecv results: a pipe */

/* serve takes two connections, in order, and reports what rrecv gave
 * on each: its return, errno, and up to 16 bytes. */
static void *serve(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++) {
		int s = raccept(lfd, NULL, NULL);
		if (s < 0)
			fail("raccept");
		char buf[16] = {0};
		ssize_t n = rrecv(s, buf, sizeof(buf) - 1, 0);
		char line[64];
		int len = snprintf(line, sizeof(line), "%zd %d %s", n, n < 0 ? errno : 0, n > 0 ? buf : "-");
		if (write(results[1], line, len + 1) < 0)
			fail("write");
		rclose(s);
	}
	return NULL;
}

struct client {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t mem[64];
};

/* conn_data writes version 1 connection data whose target list and
 * buffer are the client's mem (no rsocket will ever read them). */
static void conn_data(struct client *c, uint8_t *p, uint8_t version, uint32_t tcount, uint32_t half)
{
	memset(p, 0, 40);
	p[0] = version;
	uint16_t credits = htobe16(16);
	memcpy(p + 2, &credits, 2);
	uint64_t a = htobe64((uintptr_t)c->mem);
	uint32_t k = htobe32(c->mr->rkey), n = htobe32(tcount), h = htobe32(half);
	memcpy(p + 8, &a, 8);
	memcpy(p + 16, &k, 4);
	memcpy(p + 20, &n, 4);
	memcpy(p + 24, &a, 8);
	memcpy(p + 32, &k, 4);
	memcpy(p + 36, &h, 4);
}

/* dial connects with private data pd (n bytes) and returns the event
 * that ended the connect, REJECTED or ESTABLISHED, acked by the caller. */
static struct rdma_cm_event *dial(struct client *c, const struct sockaddr_in *src, const struct sockaddr_in *dst,
				  const void *pd, uint8_t n)
{
	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	resolve(c->ch, c->id, src, dst);
	c->pd = ibv_alloc_pd(c->id->verbs);
	c->cq = c->pd ? ibv_create_cq(c->id->verbs, 8, NULL, NULL, 0) : NULL;
	c->mr = c->cq ? ibv_reg_mr(c->pd, c->mem, sizeof(c->mem), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!c->mr || rdma_create_qp(c->id, c->pd, &qa))
		fail("the client's QP");
	uint8_t cd[40];
	if (!pd) {
		conn_data(c, cd, 1, 2, 32);
		pd = cd;
		n = sizeof(cd);
	}
	struct rdma_conn_param cp = {.private_data = pd, .private_data_len = n, .retry_count = 7, .rnr_retry_count = 7};
	if (rdma_connect(c->id, &cp))
		fail("rdma_connect");
	struct pollfd p = {.fd = c->ch->fd, .events = POLLIN};
	struct rdma_cm_event *e;
	if (poll(&p, 1, 10000) != 1 || rdma_get_cm_event(c->ch, &e))
		fail("no connect event within 10 s");
	return e;
}

/* connected dials with no private data of its own (an rsocket's):
 * the connect must be ESTABLISHED, and the 40 bytes of connection data
 * its REP carries go to rep. */
static void connected(struct client *c, const struct sockaddr_in *src, const struct sockaddr_in *dst, uint8_t *rep,
		      const char *what)
{
	memset(c, 0, sizeof(*c));
	struct rdma_cm_event *e = dial(c, src, dst, NULL, 0);
	if (e->event != RDMA_CM_EVENT_ESTABLISHED || e->param.conn.private_data_len < 40)
		fail(what);
	memcpy(rep, e->param.conn.private_data, 40);
	rdma_ack_cm_event(e);
}

static void hang_up(struct client *c)
{
	rdma_disconnect(c->id);
	rdma_destroy_qp(c->id);
	ibv_dereg_mr(c->mr);
	ibv_destroy_cq(c->cq);
	ibv_dealloc_pd(c->pd);
	rdma_destroy_id(c->id);
	rdma_destroy_event_channel(c->ch);
}

/* write_imm_status writes n bytes of data (none for NULL) to
 * addr/rkey with immediate imm, and returns its completion's status. */
static enum ibv_wc_status write_imm_status(struct client *c, uint64_t addr, uint32_t rkey, const char *data, uint32_t n,
					   uint32_t imm)
{
	if (data)
		memcpy(c->mem, data, n);
	struct ibv_sge sge = {.addr = (uintptr_t)c->mem, .length = n, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.sg_list = data ? &sge : NULL, .num_sge = data ? 1 : 0,
				 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .imm_data = htobe32(imm)}, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(c->id->qp, &wr, &bad))
		fail("ibv_post_send");
	struct ibv_wc wc;
	int got;
	for (int i = 0; (got = ibv_poll_cq(c->cq, 1, &wc)) == 0 && i < 10000; i++)
		usleep(1000);
	if (got != 1)
		fail("the write's completion");
	return wc.status;
}

static void write_imm(struct client *c, uint64_t addr, uint32_t rkey, const char *data, uint32_t n, uint32_t imm)
{
	if (write_imm_status(c, addr, rkey, data, n, imm) != IBV_WC_SUCCESS)
		fail("the write's completion");
}

/* server_said checks the server's rrecv gave want, or or_else if not NULL. */
static void server_said_either(const char *want, const char *or_else)
{
	char line[64];
	ssize_t n = read(results[0], line, sizeof(line));
	if (n <= 0 || (strcmp(line, want) != 0 && (!or_else || strcmp(line, or_else) != 0))) {
		fprintf(stderr, "%s: the server's rrecv gave \"%s\", want \"%s\"\n", PROG, n > 0 ? line : "nothing", want);
		exit(1);
	}
}

static void server_said(const char *want) { server_said_either(want, NULL); }

int main(int argc, char **argv)
{
	struct sockaddr_in srv, cli;
	server_client(argc, argv, &srv, &cli);
	lfd = rsocket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	if (lfd < 0 || rsetsockopt(lfd, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof(one)) ||
	    rbind(lfd, (struct sockaddr *)&srv, sizeof(srv)) || rlisten(lfd, 4))
		fail("rsocket, rbind, rlisten");
	if (pipe(results))
		fail("pipe");
	pthread_t th;
	if (pthread_create(&th, NULL, serve, NULL))
		fail("pthread_create");
	printf("rsocket listening on %s:%s\n", argv[1], argv[3]);

	struct client c;
	uint8_t bad[40];
	struct {
		const char *name;
		uint8_t version, len;
		uint32_t tcount, half;
	} rejects[] = {
		{"version 2", 2, 40, 2, 32},
		{"a target list of no entries", 1, 40, 0, 32},
		{"a buffer half of 2^29 bytes", 1, 40, 2, 1u << 29},
	};
	for (size_t i = 0; i < sizeof(rejects) / sizeof(rejects[0]); i++) {
		memset(&c, 0, sizeof(c));
		struct rdma_cm_event *e;
		memset(bad, 0, sizeof(bad));
		bad[0] = rejects[i].version;
		uint32_t tc = htobe32(rejects[i].tcount), h = htobe32(rejects[i].half);
		memcpy(bad + 20, &tc, 4);
		memcpy(bad + 36, &h, 4);
		e = dial(&c, &cli, &srv, bad, rejects[i].len);
		if (e->event != RDMA_CM_EVENT_REJECTED) {
			fprintf(stderr, "%s: %s: %s, want REJECTED\n", PROG, rejects[i].name, rdma_event_str(e->event));
			return 1;
		}
		rdma_ack_cm_event(e);
		hang_up(&c);
		printf("%s: REJECTED\n", rejects[i].name);
	}

	/* Good connection data, then a message claiming 1 MiB, past the
	 * 64 KiB half of the default 128 KiB buffer the REP offered. */
	uint8_t rep[40];
	connected(&c, &cli, &srv, rep, "the good connect was not ESTABLISHED with connection data");
	uint64_t a;
	uint32_t k, half;
	memcpy(&a, rep + 24, 8);
	memcpy(&k, rep + 32, 4);
	memcpy(&half, rep + 36, 4);
	printf("connected: the REP offers a half of %u bytes\n", be32toh(half));
	write_imm(&c, be64toh(a), be32toh(k), NULL, 0, 0u << 29 | (1u << 20));
	server_said("-1 71 -");
	printf("1 MiB claimed: rrecv failed with EPROTO\n");
	hang_up(&c);

	/* The iomap: one entry, behind the target list (its address + 16 *
	 * its 2 entries), under its key. */
	static const char entry[24] = "an iomap entry, 24 bytes";
	for (int past = 0; past < 2; past++) {
		connected(&c, &cli, &srv, rep, "the iomap connect was not ESTABLISHED with connection data");
		if (!(rep[1] & 2) || rep[7] != 1)
			fail("the REP offers no iomap of 1 entry");
		memcpy(&a, rep + 8, 8);
		memcpy(&k, rep + 16, 4);
		uint64_t iomap = be64toh(a) + 2 * 16;
		if (!past) {
			write_imm(&c, iomap, be32toh(k), entry, 24, 6u << 29 | 1);
			server_said("-1 71 -");
			printf("IOMAP_SGL naming entry 1 of 1: rrecv failed with EPROTO\n");
		} else {
			enum ibv_wc_status st = write_imm_status(&c, iomap + 24, be32toh(k), entry, 24, 6u << 29 | 1);
			if (st != IBV_WC_REM_ACCESS_ERR) {
				fprintf(stderr, "%s: a write past the iomap: %s, want remote access error\n", PROG,
					ibv_wc_status_str(st));
				return 1;
			}
			hang_up(&c);
			/* The server's QP went to the error state with the
			 * write: its next post fails (EIO), unless the
			 * client's DREQ came first (the end of the stream). */
			server_said_either("-1 5 -", "0 0 -");
			printf("IOMAP_SGL past the iomap: remote access error; the server's rrecv failed\n");
			continue;
		}
		hang_up(&c);
	}

	/* A message as an rsocket sends it: the listener still takes
	 * connections and reads them. */
	connected(&c, &cli, &srv, rep, "the last connect was not ESTABLISHED with connection data");
	memcpy(&a, rep + 24, 8);
	memcpy(&k, rep + 32, 4);
	write_imm(&c, be64toh(a), be32toh(k), "hello", 5, 0u << 29 | 5);
	server_said("5 0 hello");
	printf("5 bytes written: rrecv gave hello\n");
	hang_up(&c);

	pthread_join(th, NULL);
	rclose(lfd);
	printf("PASS\n");
	return 0;
}
