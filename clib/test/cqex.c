/*
 * cqex: extended CQs (ibv_create_cq_ex) and the ibv_start_poll API on
 * rnicd, against ibv_poll_cq.
 *
 * The same sequence runs twice on fresh QPs between two rnicd (RC from
 * A to B, UD from A to B), each time on CQs made by ibv_create_cq_ex
 * with every field rnicd's completions carry: SEND, SEND_WITH_IMM,
 * RDMA_WRITE_WITH_IMM, RDMA_READ, a UD datagram, and a WRITE with a bad
 * rkey (REM_ACCESS_ERR, and the receive it flushes). The first run reads
 * every completion through ibv_start_poll/ibv_next_poll/ibv_end_poll and
 * the ibv_wc_read_* functions, the second through plain ibv_poll_cq on
 * ibv_cq_ex_to_cq of the same kind of CQ; each completion's fields must
 * be equal, QP numbers compared by the QP they name. Then: ENOENT on an
 * empty CQ (and the CQ's lock released), what ibv_end_poll and
 * ibv_next_poll consume, completion events through the extended CQ, and
 * the requests rxe refuses.
 *
 *   cqex DEV_A DEV_B    print one line per check, PASS if all hold (exit 0)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vtest.h"

#define QKEY 0x11111111u
#define BUF SIDE_BUF

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static struct ibv_cq_ex *cq_ex(struct ibv_context *ctx, uint64_t wc_flags, struct ibv_comp_channel *ch, void *cookie)
{
	struct ibv_cq_init_attr_ex a = {.cqe = 32, .cq_context = cookie, .channel = ch, .wc_flags = wc_flags};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
	if (!cq)
		die("ibv_create_cq_ex");
	return cq;
}

static struct ibv_qp *qp_make(struct side *s, struct ibv_cq_ex *cq, enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = ibv_cq_ex_to_cq(cq), .qp_type = t,
				     .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static void post_recv(struct ibv_qp *qp, uint64_t wr_id, struct side *s, size_t off, size_t len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1}, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct side *s, size_t off, size_t len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)s->buf + off, .length = len, .lkey = s->mr->lkey};
	struct ibv_send_wr *bad;
	wr->sg_list = &sg;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(qp, wr, &bad))
		die("ibv_post_send");
}

/* rec is one completion, as read. */
struct rec {
	uint64_t wr_id;
	uint32_t status, opcode, vendor_err, byte_len, imm, qp_num, src_qp, wc_flags, slid, sl, dlid_path_bits;
};

#define MAXREC 16

/* run is one pass of the sequence: its QPs and what each CQ gave. */
struct run {
	struct ibv_cq_ex *cqa, *cqb;
	struct ibv_qp *qa, *qb, *ua, *ub;
	struct rec a[MAXREC], b[MAXREC];
	int na, nb;
	int ex; /* read through the ibv_start_poll API */
};

static void rec_ex(struct ibv_cq_ex *cq, struct rec *r)
{
	*r = (struct rec){
		.wr_id = cq->wr_id,
		.status = cq->status,
		.opcode = ibv_wc_read_opcode(cq),
		.vendor_err = ibv_wc_read_vendor_err(cq),
		.byte_len = ibv_wc_read_byte_len(cq),
		.imm = ibv_wc_read_imm_data(cq),
		.qp_num = ibv_wc_read_qp_num(cq),
		.src_qp = ibv_wc_read_src_qp(cq),
		.wc_flags = ibv_wc_read_wc_flags(cq),
		.slid = ibv_wc_read_slid(cq),
		.sl = ibv_wc_read_sl(cq),
		.dlid_path_bits = ibv_wc_read_dlid_path_bits(cq),
	};
}

static void rec_wc(const struct ibv_wc *w, struct rec *r)
{
	*r = (struct rec){
		.wr_id = w->wr_id,
		.status = w->status,
		.opcode = w->opcode,
		.vendor_err = w->vendor_err,
		.byte_len = w->byte_len,
		.imm = w->imm_data,
		.qp_num = w->qp_num,
		.src_qp = w->src_qp,
		.wc_flags = w->wc_flags,
		.slid = w->slid,
		.sl = w->sl,
		.dlid_path_bits = w->dlid_path_bits,
	};
}

/* collect reads n completions from cq into r[*k...], through the
 * extended API (every one that is there between a start and an end) or
 * through ibv_poll_cq. */
static void collect(struct ibv_cq_ex *cq, int ex, struct rec *r, int *k, int n)
{
	int want = *k + n;
	double t0 = now();
	while (*k < want) {
		if (now() - t0 > 30) {
			fprintf(stderr, "collect: %d of %d completions in 30 s\n", *k, want);
			exit(2);
		}
		if (!ex) {
			struct ibv_wc wc;
			int got = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc);
			if (got < 0)
				die("ibv_poll_cq");
			if (got == 1)
				rec_wc(&wc, &r[(*k)++]);
			continue;
		}
		struct ibv_poll_cq_attr pa = {};
		int ret = ibv_start_poll(cq, &pa);
		if (ret == ENOENT)
			continue;
		if (ret)
			die("ibv_start_poll");
		do {
			if (*k == MAXREC) {
				fprintf(stderr, "collect: more than %d completions\n", MAXREC);
				exit(2);
			}
			rec_ex(cq, &r[(*k)++]);
		} while ((ret = ibv_next_poll(cq)) == 0);
		ibv_end_poll(cq);
		if (ret != ENOENT)
			die("ibv_next_poll");
	}
}

static void sequence(struct side *A, struct side *B, struct run *R)
{
	R->cqa = cq_ex(A->ctx, IBV_WC_STANDARD_FLAGS, NULL, NULL);
	R->cqb = cq_ex(B->ctx, IBV_WC_STANDARD_FLAGS, NULL, NULL);
	R->qa = qp_make(A, R->cqa, IBV_QPT_RC);
	R->qb = qp_make(B, R->cqb, IBV_QPT_RC);
	R->ua = qp_make(A, R->cqa, IBV_QPT_UD);
	R->ub = qp_make(B, R->cqb, IBV_QPT_UD);
	rc_connect(R->qa, R->qb, &B->gid);
	rc_connect(R->qb, R->qa, &A->gid);
	ud_ready(R->ua, QKEY);
	ud_ready(R->ub, QKEY);
	struct ibv_send_wr wr;

	/* SEND */
	post_recv(R->qb, 0x101, B, 0, 1024);
	wr = (struct ibv_send_wr){.wr_id = 0x201, .opcode = IBV_WR_SEND};
	post_send(R->qa, &wr, A, 0, 100);
	collect(R->cqa, R->ex, R->a, &R->na, 1);
	collect(R->cqb, R->ex, R->b, &R->nb, 1);
	/* SEND_WITH_IMM */
	post_recv(R->qb, 0x102, B, 0, 1024);
	wr = (struct ibv_send_wr){.wr_id = 0x202, .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(0x12345678)};
	post_send(R->qa, &wr, A, 0, 200);
	collect(R->cqa, R->ex, R->a, &R->na, 1);
	collect(R->cqb, R->ex, R->b, &R->nb, 1);
	/* RDMA_WRITE_WITH_IMM: consumes a receive, which sees no data */
	post_recv(R->qb, 0x103, B, 0, 16);
	wr = (struct ibv_send_wr){.wr_id = 0x203, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .imm_data = htonl(0xa1b2c3d4)};
	wr.wr.rdma.remote_addr = (uintptr_t)B->buf + 1024;
	wr.wr.rdma.rkey = B->mr->rkey;
	post_send(R->qa, &wr, A, 0, 300);
	collect(R->cqa, R->ex, R->a, &R->na, 1);
	collect(R->cqb, R->ex, R->b, &R->nb, 1);
	/* RDMA_READ */
	wr = (struct ibv_send_wr){.wr_id = 0x204, .opcode = IBV_WR_RDMA_READ};
	wr.wr.rdma.remote_addr = (uintptr_t)B->buf + 1024;
	wr.wr.rdma.rkey = B->mr->rkey;
	post_send(R->qa, &wr, A, 2048, 400);
	collect(R->cqa, R->ex, R->a, &R->na, 1);
	/* A UD datagram: the receive has a GRH */
	post_recv(R->ub, 0x105, B, 2048, 40 + 64);
	struct ibv_ah_attr aha = {.is_global = 1, .grh = {.dgid = B->gid, .sgid_index = 1, .hop_limit = 64}, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(A->pd, &aha);
	if (!ah)
		die("ibv_create_ah");
	wr = (struct ibv_send_wr){.wr_id = 0x205, .opcode = IBV_WR_SEND,
				  .wr = {.ud = {.ah = ah, .remote_qpn = R->ub->qp_num, .remote_qkey = QKEY}}};
	post_send(R->ua, &wr, A, 0, 64);
	collect(R->cqa, R->ex, R->a, &R->na, 1);
	collect(R->cqb, R->ex, R->b, &R->nb, 1);
	/* An error: a WRITE with a bad rkey fails with REM_ACCESS_ERR, and
	 * the receive waiting on A's QP is flushed. */
	post_recv(R->qa, 0x106, A, 3072, 16);
	wr = (struct ibv_send_wr){.wr_id = 0x206, .opcode = IBV_WR_RDMA_WRITE};
	wr.wr.rdma.remote_addr = (uintptr_t)B->buf;
	wr.wr.rdma.rkey = B->mr->rkey ^ 0x5a5a00;
	post_send(R->qa, &wr, A, 0, 8);
	collect(R->cqa, R->ex, R->a, &R->na, 2);
}

static int by_wr_id(const void *x, const void *y)
{
	const struct rec *a = x, *b = y;
	return a->wr_id < b->wr_id ? -1 : a->wr_id > b->wr_id;
}

/* role names a QP number by the QP of the run it is, on side B (1) or
 * A (0): both rnicd number their QPs alike. */
static uint32_t role(struct run *R, int onB, uint32_t qpn)
{
	struct ibv_qp *qps[] = {onB ? R->qb : R->qa, onB ? R->ub : R->ua};
	for (uint32_t i = 0; i < 2; i++)
		if (qps[i]->qp_num == qpn)
			return 0x80000000u | (onB << 1) | i;
	return qpn;
}

static int same(int onB, struct run *X, const struct rec *x, struct run *Y, const struct rec *y)
{
	int ok = 1;
#define FIELD(f)                                                                                         \
	if (x->f != y->f) {                                                                              \
		fprintf(stderr, "wr_id 0x%llx: %s 0x%llx through the extended API, 0x%llx from ibv_poll_cq\n", \
			(unsigned long long)x->wr_id, #f, (unsigned long long)x->f, (unsigned long long)y->f);  \
		ok = 0;                                                                                  \
	}
	FIELD(wr_id)
	FIELD(status)
	FIELD(opcode)
	FIELD(vendor_err)
	FIELD(byte_len)
	FIELD(imm)
	FIELD(wc_flags)
	FIELD(slid)
	FIELD(sl)
	FIELD(dlid_path_bits)
#undef FIELD
	if (role(X, onB, x->qp_num) != role(Y, onB, y->qp_num) || role(X, !onB, x->src_qp) != role(Y, !onB, y->src_qp)) {
		fprintf(stderr, "wr_id 0x%llx: qp_num/src_qp %u/%u through the extended API, %u/%u from ibv_poll_cq\n",
			(unsigned long long)x->wr_id, x->qp_num, x->src_qp, y->qp_num, y->src_qp);
		ok = 0;
	}
	return ok;
}

static const struct rec *find(const struct rec *r, int n, uint64_t wr_id)
{
	for (int i = 0; i < n; i++)
		if (r[i].wr_id == wr_id)
			return &r[i];
	static const struct rec none = {.wr_id = ~0ull, .status = ~0u};
	return &none;
}

static void compare(struct side *A, struct side *B)
{
	static struct run ex = {.ex = 1}, plain = {.ex = 0};
	sequence(A, B, &ex);
	sequence(A, B, &plain);
	check(ex.na == 7 && ex.nb == 4 && plain.na == 7 && plain.nb == 4, "both runs: 7 completions on A's CQ, 4 on B's");
	qsort(ex.a, ex.na, sizeof(struct rec), by_wr_id);
	qsort(ex.b, ex.nb, sizeof(struct rec), by_wr_id);
	qsort(plain.a, plain.na, sizeof(struct rec), by_wr_id);
	qsort(plain.b, plain.nb, sizeof(struct rec), by_wr_id);
	static const char *names[] = {"A 0x106 flushed receive", "A 0x201 SEND", "A 0x202 SEND_WITH_IMM",
				      "A 0x203 RDMA_WRITE_WITH_IMM", "A 0x204 RDMA_READ", "A 0x205 UD SEND",
				      "A 0x206 WRITE, bad rkey", "B 0x101 receive", "B 0x102 receive with immediate",
				      "B 0x103 RDMA WRITE immediate", "B 0x105 UD receive"};
	for (int i = 0; i < 11; i++) {
		int onA = i < 7, j = onA ? i : i - 7;
		int n = onA ? ex.na : ex.nb;
		char what[160];
		snprintf(what, sizeof(what), "%s: every ibv_wc_read_* field as ibv_poll_cq reports it", names[i]);
		check(j < n && same(!onA, &ex, onA ? &ex.a[j] : &ex.b[j], &plain, onA ? &plain.a[j] : &plain.b[j]), what);
	}
	/* What the extended run read must also be right in itself. */
	const struct rec *r;
	r = find(ex.a, ex.na, 0x201);
	check(r->status == IBV_WC_SUCCESS && r->opcode == IBV_WC_SEND && role(&ex, 0, r->qp_num) == (0x80000000u | 0),
	      "SEND: SUCCESS, opcode SEND, qp_num");
	r = find(ex.b, ex.nb, 0x101);
	check(r->status == IBV_WC_SUCCESS && r->opcode == IBV_WC_RECV && r->byte_len == 100 && !(r->wc_flags & IBV_WC_WITH_IMM) &&
		      role(&ex, 1, r->qp_num) == (0x80000000u | 2),
	      "receive: opcode RECV, byte_len 100, no immediate, qp_num");
	r = find(ex.b, ex.nb, 0x102);
	check(r->opcode == IBV_WC_RECV && r->byte_len == 200 && (r->wc_flags & IBV_WC_WITH_IMM) && r->imm == htonl(0x12345678),
	      "receive with immediate: byte_len 200, IBV_WC_WITH_IMM, imm_data in network order");
	r = find(ex.b, ex.nb, 0x103);
	check(r->opcode == IBV_WC_RECV_RDMA_WITH_IMM && r->byte_len == 300 && (r->wc_flags & IBV_WC_WITH_IMM) &&
		      r->imm == htonl(0xa1b2c3d4),
	      "RDMA WRITE with immediate: opcode RECV_RDMA_WITH_IMM, byte_len 300, imm_data");
	r = find(ex.a, ex.na, 0x203);
	check(r->status == IBV_WC_SUCCESS && r->opcode == IBV_WC_RDMA_WRITE, "RDMA_WRITE_WITH_IMM: opcode RDMA_WRITE");
	r = find(ex.a, ex.na, 0x204);
	check(r->status == IBV_WC_SUCCESS && r->opcode == IBV_WC_RDMA_READ && r->byte_len == 400 &&
		      memcmp(A->buf + 2048, B->buf + 1024, 400) == 0 && memcmp(B->buf + 1024, A->buf, 300) == 0,
	      "RDMA_READ: opcode RDMA_READ, byte_len 400, the bytes written and read");
	r = find(ex.b, ex.nb, 0x105);
	check(r->opcode == IBV_WC_RECV && r->byte_len == 40 + 64 && (r->wc_flags & IBV_WC_GRH) && r->sl == 2 &&
		      role(&ex, 0, r->src_qp) == (0x80000000u | 1) && role(&ex, 1, r->qp_num) == (0x80000000u | 3) && r->slid == 0 &&
		      r->dlid_path_bits == 0,
	      "UD receive: byte_len 104, IBV_WC_GRH, sl 2 (IPv4), src_qp, qp_num, slid 0, dlid_path_bits 0");
	r = find(ex.a, ex.na, 0x206);
	check(r->status == IBV_WC_REM_ACCESS_ERR && role(&ex, 0, r->qp_num) == (0x80000000u | 0), "bad rkey: REM_ACCESS_ERR");
	r = find(ex.a, ex.na, 0x106);
	check(r->status == IBV_WC_WR_FLUSH_ERR, "the receive after the error: WR_FLUSH_ERR");
}

/* ud_self is a UD QP that sends to itself: its sends complete on the
 * extended CQ under test, its receives on a plain one. */
struct ud_self {
	struct ibv_qp *qp;
	struct ibv_cq *rcq;
	struct ibv_ah *ah;
	struct side *s;
};

static void self_send(struct ud_self *u, uint64_t wr_id)
{
	post_recv(u->qp, wr_id, u->s, 0, 40 + 16);
	struct ibv_send_wr wr = {.wr_id = wr_id, .opcode = IBV_WR_SEND,
				 .wr = {.ud = {.ah = u->ah, .remote_qpn = u->qp->qp_num, .remote_qkey = QKEY}}};
	post_send(u->qp, &wr, u->s, 1024, 16);
}

/* start_wait spins on ibv_start_poll until it stands on a completion. */
static int start_wait(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr pa = {};
	double t0 = now();
	int ret;
	while ((ret = ibv_start_poll(cq, &pa)) == ENOENT && now() - t0 < 30)
		;
	return ret;
}

static int next_wait(struct ibv_cq_ex *cq)
{
	double t0 = now();
	int ret;
	while ((ret = ibv_next_poll(cq)) == ENOENT && now() - t0 < 30)
		;
	return ret;
}

static void pairing(struct side *A)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(A->ctx);
	if (!ch)
		die("ibv_create_comp_channel");
	struct ibv_cq_ex *cq = cq_ex(A->ctx, IBV_WC_EX_WITH_BYTE_LEN, ch, (void *)0xc0ffee);
	struct ud_self u = {.s = A};
	if (!(u.rcq = ibv_create_cq(A->ctx, 16, NULL, NULL, 0)))
		die("ibv_create_cq");
	struct ibv_qp_init_attr qa = {.send_cq = ibv_cq_ex_to_cq(cq), .recv_cq = u.rcq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!(u.qp = ibv_create_qp(A->pd, &qa)))
		die("ibv_create_qp");
	ud_ready(u.qp, QKEY);
	struct ibv_ah_attr aha = {.is_global = 1, .grh = {.dgid = A->gid, .sgid_index = 1, .hop_limit = 64}, .port_num = 1};
	if (!(u.ah = ibv_create_ah(A->pd, &aha)))
		die("ibv_create_ah");

	struct ibv_poll_cq_attr pa = {};
	errno = 0;
	int ret = ibv_start_poll(cq, &pa);
	check(ret == ENOENT && errno == ENOENT, "empty CQ: ibv_start_poll fails with ENOENT");
	struct ibv_wc wc;
	check(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 0, "empty CQ: ibv_poll_cq after the ENOENT returns 0 (lock released)");

	/* Events through the extended CQ. */
	check(ibv_req_notify_cq(ibv_cq_ex_to_cq(cq), 0) == 0, "ibv_req_notify_cq on ibv_cq_ex_to_cq");
	self_send(&u, 1);
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ibv_cq_ex_to_cq(cq) && ev_ctx == (void *)0xc0ffee,
	      "ibv_get_cq_event returns ibv_cq_ex_to_cq and the cq_context");
	ibv_ack_cq_events(ev_cq, 1);
	ret = start_wait(cq);
	check(ret == 0 && cq->wr_id == 1 && cq->status == IBV_WC_SUCCESS && ibv_wc_read_opcode(cq) == IBV_WC_SEND &&
		      ibv_wc_read_byte_len(cq) == 16,
	      "ibv_start_poll stands on the completion: wr_id, status, opcode, byte_len");
	ibv_end_poll(cq);
	check(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 0, "ibv_end_poll consumed it: ibv_poll_cq finds nothing");

	/* next_poll moves over three; its ENOENT leaves the last for end_poll. */
	self_send(&u, 2);
	self_send(&u, 3);
	self_send(&u, 4);
	ret = start_wait(cq);
	int got = ret == 0 && cq->wr_id == 2;
	got = got && next_wait(cq) == 0 && cq->wr_id == 3;
	got = got && next_wait(cq) == 0 && cq->wr_id == 4;
	errno = 0;
	ret = ibv_next_poll(cq);
	got = got && ret == ENOENT && errno == ENOENT && cq->wr_id == 4;
	ibv_end_poll(cq);
	check(got, "ibv_next_poll: the next completion each time, then ENOENT standing on the last");
	check(ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc) == 0, "ibv_end_poll after ibv_next_poll's ENOENT consumed the last");

	/* end_poll consumes exactly the one the poll stands on. */
	self_send(&u, 5);
	self_send(&u, 6);
	ret = start_wait(cq);
	got = ret == 0 && cq->wr_id == 5;
	ibv_end_poll(cq);
	ret = start_wait(cq);
	got = got && ret == 0 && cq->wr_id == 6;
	ibv_end_poll(cq);
	check(got, "ibv_end_poll consumes one: the next ibv_start_poll stands on the next");
	/* And a completion ibv_start_poll did not take is ibv_poll_cq's. */
	self_send(&u, 7);
	double t0 = now();
	int n = 0;
	while ((n = ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc)) == 0 && now() - t0 < 30)
		;
	check(n == 1 && wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS, "ibv_poll_cq takes a completion of the extended CQ");
	errno = 0;
	check(ibv_start_poll(cq, &pa) == ENOENT, "then ibv_start_poll finds it empty");
	for (int i = 0; i < 7;) { /* the receives */
		int k = ibv_poll_cq(u.rcq, 1, &wc);
		if (k < 0)
			die("ibv_poll_cq");
		i += k;
	}

	ibv_destroy_qp(u.qp);
	ibv_destroy_ah(u.ah);
	ibv_destroy_cq(u.rcq);
	check(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq of ibv_cq_ex_to_cq");
	check(ibv_destroy_comp_channel(ch) == 0, "the channel destroyed after its extended CQ");
}

static void refusals(struct side *A)
{
	static const struct {
		uint64_t flag;
		const char *name;
	} no[] = {
		{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, "COMPLETION_TIMESTAMP"},
		{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK, "COMPLETION_TIMESTAMP_WALLCLOCK"},
		{IBV_WC_EX_WITH_CVLAN, "CVLAN"},
		{IBV_WC_EX_WITH_FLOW_TAG, "FLOW_TAG"},
		{IBV_WC_EX_WITH_TM_INFO, "TM_INFO"},
	};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
		struct ibv_cq_init_attr_ex a = {.cqe = 8, .wc_flags = IBV_WC_STANDARD_FLAGS | no[i].flag};
		errno = 0;
		struct ibv_cq_ex *cq = ibv_create_cq_ex(A->ctx, &a);
		char what[120];
		snprintf(what, sizeof(what), "wc_flags with IBV_WC_EX_WITH_%s: EOPNOTSUPP", no[i].name);
		check(!cq && errno == EOPNOTSUPP, what);
	}
	struct ibv_cq_init_attr_ex a = {.cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN};
	errno = 0;
	check(!ibv_create_cq_ex(A->ctx, &a) && errno == EOPNOTSUPP, "IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: EOPNOTSUPP (as rxe)");
	a = (struct ibv_cq_init_attr_ex){.cqe = 8, .comp_mask = 1u << 7};
	errno = 0;
	check(!ibv_create_cq_ex(A->ctx, &a) && errno == EOPNOTSUPP, "an unknown comp_mask bit: EOPNOTSUPP");
	a = (struct ibv_cq_init_attr_ex){.cqe = 0};
	errno = 0;
	check(!ibv_create_cq_ex(A->ctx, &a) && errno == EINVAL, "cqe 0: EINVAL");
	a = (struct ibv_cq_init_attr_ex){.cqe = 8, .comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS,
					 .flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(A->ctx, &a);
	/* rxe sets the readers of the fields asked for only. */
	check(cq && cq->read_opcode && cq->read_vendor_err && cq->read_wc_flags && !cq->read_byte_len && !cq->read_imm_data &&
		      !cq->read_qp_num && !cq->read_src_qp && !cq->read_slid && !cq->read_sl && !cq->read_dlid_path_bits &&
		      !cq->read_completion_ts && !cq->read_cvlan && !cq->read_flow_tag && !cq->read_tm_info &&
		      !cq->read_completion_wallclock_ns,
	      "SINGLE_THREADED, wc_flags 0: made, with the opcode, vendor_err and wc_flags readers only");
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	struct ibv_device_attr_ex dx;
	check(ibv_query_device_ex(A->ctx, NULL, &dx) == 0 && dx.completion_timestamp_mask == 0 && dx.hca_core_clock == 0,
	      "ibv_query_device_ex: no completion timestamp (mask 0), as rxe");
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cqex DEV_A DEV_B\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_t wd;
	pthread_create(&wd, NULL, wait_watchdog, NULL); /* a poll lock left held would hang ibv_poll_cq */
	struct side A, B;
	side_open(&A, argv[1]);
	side_open(&B, argv[2]);
	for (int i = 0; i < BUF; i++) {
		A.buf[i] = (char)(i * 13 + 5);
		B.buf[i] = (char)(i * 7 + 1);
	}
	compare(&A, &B);
	pairing(&A);
	refusals(&A);
	return verdict();
}
