/*
 * mw: memory windows, type 1 and type 2, seen from a C program on rnicd.
 *
 *   mw TARGET_DEV SENDER_DEV   run the checks, print one line each and
 *                              PASS, exit 0 if all hold
 *
 * On the target, one region with MW_BIND covers a malloc'd block: guard
 * bytes, the window's 5000 bytes, guard bytes. A window is bound to the
 * middle part only, and the sender WRITEs and READs through the
 * window's rkey. The guards are inside the region but outside the
 * window: an access that reaches them through the window's rkey must
 * fail with REM_ACCESS_ERR and leave them as they were. A failed access
 * or bind moves the QPs to ERR (IBTA), so each check that fails one
 * gets a new pair of QPs.
 */
#include <errno.h>
#include <time.h>

#include "vtest.h"

#define WIN 5000  /* the window's bytes */
#define GUARD 300 /* region bytes on each side of the window */

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx; /* the target's: the ibv_wr_* API */
	union ibv_gid gid;
};

static void open_end(struct end *e, const char *dev)
{
	e->ctx = open_pd(dev, &e->pd, &e->gid);
	if (!(e->cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0)))
		die("ibv_create_cq");
}

/* make_qp makes e's QP: with the ibv_wr_* API and its bind and local
 * invalidate (as a program asks for them), on the target. */
static void make_qp(struct end *e, int ex)
{
	struct ibv_qp_init_attr_ex a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC, .pd = e->pd,
					.cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
					.comp_mask = IBV_QP_INIT_ATTR_PD};
	if (ex) {
		a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
	}
	if (!(e->qp = ibv_create_qp_ex(e->ctx, &a)))
		die("ibv_create_qp_ex");
	e->qpx = ex ? ibv_qp_to_qp_ex(e->qp) : NULL;
	if (ex && !e->qpx)
		die("ibv_qp_to_qp_ex");
}

/* fresh gives the target and the sender a new pair of connected QPs. */
static void fresh(struct end *t, struct end *s)
{
	if (t->qp && ibv_destroy_qp(t->qp))
		die("ibv_destroy_qp");
	if (s->qp && ibv_destroy_qp(s->qp))
		die("ibv_destroy_qp");
	make_qp(t, 1);
	make_qp(s, 0);
	rc_connect(t->qp, s->qp, &s->gid);
	rc_connect(s->qp, t->qp, &t->gid);
}

/* wait_wc polls e's CQ for one completion. */
static struct ibv_wc wait_wc(struct end *e)
{
	struct ibv_wc wc;
	must(poll_wc(e->cq, &wc, 10), "no completion in 10 s");
	return wc;
}

/* expect checks a completion field by field. */
static void expect(struct ibv_wc wc, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t len,
		   struct ibv_qp *qp, const char *what)
{
	if (wc.wr_id != wr_id || wc.status != st || (st == IBV_WC_SUCCESS && (wc.opcode != op || wc.byte_len != len)) ||
	    wc.qp_num != qp->qp_num) {
		printf("FAIL: %s: completion wr_id %llu status %s opcode %d byte_len %u qp %#x, want wr_id %llu "
		       "status %s opcode %d byte_len %u qp %#x\n",
		       what, (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), wc.opcode, wc.byte_len,
		       wc.qp_num, (unsigned long long)wr_id, ibv_wc_status_str(st), op, len, qp->qp_num);
		exit(1);
	}
}

/* rdma posts one signaled WRITE or READ from the sender and returns its
 * completion's status. */
static int rdma(struct end *s, enum ibv_wr_opcode op, struct ibv_mr *local, size_t off, size_t len, uint64_t raddr,
		uint32_t rkey)
{
	static uint64_t id = 1000;
	struct ibv_sge sge = {.addr = (uintptr_t)local->addr + off, .length = len, .lkey = local->lkey};
	struct ibv_send_wr wr = {.wr_id = ++id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(s->qp, &wr, &bad))
		die("ibv_post_send");
	struct ibv_wc wc = wait_wc(s);
	expect(wc, id, wc.status, op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE, len, s->qp, "the sender's WR");
	return wc.status;
}

static unsigned char *block; /* the target's: GUARD, WIN, GUARD */
static unsigned char guard_image[2 * GUARD + WIN];

static int guards_kept(void)
{
	return memcmp(block, guard_image, GUARD) == 0 &&
	       memcmp(block + GUARD + WIN, guard_image + GUARD + WIN, GUARD) == 0;
}

/* post_bind posts a type 2 bind through ibv_post_send. */
static int post_bind(struct end *t, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, uint64_t addr, uint64_t len,
		     unsigned access)
{
	struct ibv_send_wr wr = {.wr_id = 77, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = addr, .length = len, .mw_access_flags = access};
	return ibv_post_send(t->qp, &wr, &bad);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: mw TARGET_DEV SENDER_DEV\n");
		return 2;
	}
	struct end t = {0}, s = {0};
	open_end(&t, argv[1]);
	open_end(&s, argv[2]);

	struct ibv_device_attr da;
	must(ibv_query_device(t.ctx, &da) == 0, "ibv_query_device");
	must(da.max_mw == 1 << 16 && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
		      (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
	      "max_mw and the window capability flags");
	printf("ibv_query_device: max_mw %d, MEM_WINDOW and MEM_WINDOW_TYPE_2B\n", da.max_mw);

	block = malloc(sizeof(guard_image));
	for (size_t i = 0; i < sizeof(guard_image); i++)
		guard_image[i] = (unsigned char)(i * 13 + 1);
	memcpy(block, guard_image, sizeof(guard_image));
	unsigned char *win = block + GUARD;
	unsigned rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(t.pd, block, sizeof(guard_image), IBV_ACCESS_LOCAL_WRITE | rw | IBV_ACCESS_MW_BIND);
	must(mr != NULL, "ibv_reg_mr with MW_BIND");
	unsigned char *src = malloc(2 * WIN);
	for (int i = 0; i < 2 * WIN; i++)
		src[i] = (unsigned char)(i * 7 + 5);
	struct ibv_mr *smr = ibv_reg_mr(s.pd, src, 2 * WIN, IBV_ACCESS_LOCAL_WRITE);
	must(smr != NULL, "ibv_reg_mr of the source");
	fresh(&t, &s);

	/* Type 1: ibv_bind_mw posts the bind and gives the window its next
	 * rkey at once. */
	struct ibv_mw *mw1 = ibv_alloc_mw(t.pd, IBV_MW_TYPE_1);
	must(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == t.pd, "ibv_alloc_mw type 1");
	uint32_t old = mw1->rkey;
	struct ibv_mw_bind b1 = {.wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = mr, .addr = (uintptr_t)win, .length = WIN, .mw_access_flags = rw}};
	must(ibv_bind_mw(t.qp, mw1, &b1) == 0, "ibv_bind_mw");
	must(mw1->rkey == ibv_inc_rkey(old) && mw1->rkey != mr->rkey, "the window's rkey after the bind");
	expect(wait_wc(&t), 11, IBV_WC_SUCCESS, IBV_WC_BIND_MW, 0, t.qp, "type 1 bind");
	must(rdma(&s, IBV_WR_RDMA_WRITE, smr, 0, WIN, (uintptr_t)win, mw1->rkey) == IBV_WC_SUCCESS, "WRITE through the window");
	must(memcmp(win, src, WIN) == 0 && guards_kept(), "the WRITE's bytes");
	must(rdma(&s, IBV_WR_RDMA_READ, smr, WIN, WIN, (uintptr_t)win, mw1->rkey) == IBV_WC_SUCCESS, "READ through the window");
	must(memcmp(src + WIN, win, WIN) == 0, "the READ's bytes");
	printf("type 1: ibv_bind_mw, a WRITE and a READ of %d bytes through the window: success, data checked\n", WIN);
	memcpy(guard_image + GUARD, win, WIN);

	/* One byte past the window and one before it: inside the region,
	 * outside the window. */
	int st = rdma(&s, IBV_WR_RDMA_WRITE, smr, 0, 16, (uintptr_t)win + WIN - 15, mw1->rkey);
	must(st == IBV_WC_REM_ACCESS_ERR && guards_kept() && memcmp(win, guard_image + GUARD, WIN) == 0,
	      "a WRITE one byte past the window");
	fresh(&t, &s);
	st = rdma(&s, IBV_WR_RDMA_READ, smr, 0, 16, (uintptr_t)win - 1, mw1->rkey);
	must(st == IBV_WC_REM_ACCESS_ERR, "a READ one byte before the window");
	printf("type 1: a WRITE one byte past the window and a READ one byte before it: remote access error, guards unchanged\n");
	fresh(&t, &s);

	/* The region cannot go while a window is bound to it. */
	errno = 0;
	must(ibv_dereg_mr(mr) == EINVAL, "ibv_dereg_mr of a region with a window bound");
	/* A type 1 window cannot be invalidated: LOCAL_INV fails. */
	struct ibv_send_wr inv = {.wr_id = 12, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED}, *bad;
	inv.invalidate_rkey = mw1->rkey;
	must(ibv_post_send(t.qp, &inv, &bad) == 0, "post LOCAL_INV");
	expect(wait_wc(&t), 12, IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOCAL_INV, 0, t.qp, "LOCAL_INV of a type 1 window");
	must(ibv_dealloc_mw(mw1) == 0, "ibv_dealloc_mw");
	printf("ibv_dereg_mr with a window bound: EINVAL; LOCAL_INV of a type 1 window: local QP operation error\n");
	fresh(&t, &s);

	/* Type 2: bound by a WR with ibv_inc_rkey's key, zero-based;
	 * invalidated by the sender's SEND_WITH_INV. */
	struct ibv_mw *mw2 = ibv_alloc_mw(t.pd, IBV_MW_TYPE_2);
	must(mw2 && mw2->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
	uint32_t k2 = ibv_inc_rkey(mw2->rkey);
	must(post_bind(&t, mw2, k2, mr, (uintptr_t)win, WIN, rw | IBV_ACCESS_ZERO_BASED) == 0, "post BIND_MW");
	expect(wait_wc(&t), 77, IBV_WC_SUCCESS, IBV_WC_BIND_MW, 0, t.qp, "type 2 bind");
	mw2->rkey = k2; /* the application keeps the window's rkey */
	for (int i = 0; i < WIN; i++)
		src[i] ^= 0x3c;
	must(rdma(&s, IBV_WR_RDMA_WRITE, smr, 0, WIN - 100, 100, k2) == IBV_WC_SUCCESS, "zero-based WRITE");
	must(memcmp(win + 100, src, WIN - 100) == 0 && memcmp(win, guard_image + GUARD, 100) == 0 && guards_kept(),
	      "the zero-based WRITE's bytes");
	memcpy(guard_image + GUARD, win, WIN);
	char rbuf[64];
	struct ibv_mr *rmr = ibv_reg_mr(t.pd, rbuf, sizeof(rbuf), IBV_ACCESS_LOCAL_WRITE);
	must(rmr != NULL, "ibv_reg_mr of the receive buffer");
	struct ibv_sge rsge = {.addr = (uintptr_t)rbuf, .length = sizeof(rbuf), .lkey = rmr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 21, .sg_list = &rsge, .num_sge = 1}, *rbad;
	must(ibv_post_recv(t.qp, &rwr, &rbad) == 0, "ibv_post_recv");
	struct ibv_sge ssge = {.addr = (uintptr_t)src, .length = 8, .lkey = smr->lkey};
	struct ibv_send_wr swr = {.wr_id = 22, .sg_list = &ssge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .send_flags = IBV_SEND_SIGNALED};
	swr.invalidate_rkey = k2;
	must(ibv_post_send(s.qp, &swr, &bad) == 0, "post SEND_WITH_INV");
	expect(wait_wc(&s), 22, IBV_WC_SUCCESS, IBV_WC_SEND, 8, s.qp, "SEND_WITH_INV");
	struct ibv_wc wc = wait_wc(&t);
	expect(wc, 21, IBV_WC_SUCCESS, IBV_WC_RECV, 8, t.qp, "the receive of SEND_WITH_INV");
	must((wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == k2, "the receive names the invalidated rkey");
	st = rdma(&s, IBV_WR_RDMA_WRITE, smr, 0, 16, 0, k2);
	must(st == IBV_WC_REM_ACCESS_ERR && guards_kept() && memcmp(win, guard_image + GUARD, WIN) == 0,
	      "a WRITE after the remote invalidation");
	printf("type 2: BIND_MW zero-based, a WRITE landed; SEND_WITH_INV invalidated it (IBV_WC_WITH_INV), "
	       "then a WRITE: remote access error, bytes unchanged\n");
	fresh(&t, &s);

	/* Bound again with the ibv_wr_* API, read, invalidated locally. */
	uint32_t k3 = ibv_inc_rkey(k2);
	ibv_wr_start(t.qpx);
	t.qpx->wr_id = 31;
	t.qpx->wr_flags = IBV_SEND_SIGNALED;
	struct ibv_mw_bind_info bi = {.mr = mr, .addr = (uintptr_t)win + 1000, .length = 64,
				      .mw_access_flags = IBV_ACCESS_REMOTE_READ};
	ibv_wr_bind_mw(t.qpx, mw2, k3, &bi);
	must(ibv_wr_complete(t.qpx) == 0, "ibv_wr_complete of the bind");
	expect(wait_wc(&t), 31, IBV_WC_SUCCESS, IBV_WC_BIND_MW, 0, t.qp, "ibv_wr_bind_mw");
	mw2->rkey = k3;
	must(rdma(&s, IBV_WR_RDMA_READ, smr, 0, 64, (uintptr_t)win + 1000, k3) == IBV_WC_SUCCESS &&
		      memcmp(src, win + 1000, 64) == 0,
	      "a READ through the rebound window");
	ibv_wr_start(t.qpx);
	t.qpx->wr_id = 32;
	t.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(t.qpx, k3);
	must(ibv_wr_complete(t.qpx) == 0, "ibv_wr_complete of the local invalidate");
	expect(wait_wc(&t), 32, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV, 0, t.qp, "ibv_wr_local_inv");
	st = rdma(&s, IBV_WR_RDMA_READ, smr, 0, 64, (uintptr_t)win + 1000, k3);
	must(st == IBV_WC_REM_ACCESS_ERR, "a READ after the local invalidation");
	printf("type 2: ibv_wr_bind_mw, a READ landed; ibv_wr_local_inv, then a READ: remote access error\n");
	fresh(&t, &s);

	/* Binds the NIC refuses: a region without MW_BIND, a window of
	 * another PD, another client's region. */
	struct ibv_mr *nobind = ibv_reg_mr(t.pd, block, sizeof(guard_image), IBV_ACCESS_LOCAL_WRITE | rw);
	must(nobind != NULL, "ibv_reg_mr without MW_BIND");
	struct ibv_mw *mw3 = ibv_alloc_mw(t.pd, IBV_MW_TYPE_1);
	must(mw3 != NULL, "ibv_alloc_mw");
	struct ibv_mw_bind b3 = {.wr_id = 41, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = nobind, .addr = (uintptr_t)win, .length = 64, .mw_access_flags = rw}};
	must(ibv_bind_mw(t.qp, mw3, &b3) == 0, "ibv_bind_mw to a region without MW_BIND posts");
	expect(wait_wc(&t), 41, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, 0, t.qp, "a bind to a region without MW_BIND");
	fresh(&t, &s);
	struct ibv_pd *pd2 = ibv_alloc_pd(t.ctx);
	must(pd2 != NULL, "ibv_alloc_pd");
	struct ibv_mw *mw4 = ibv_alloc_mw(pd2, IBV_MW_TYPE_2);
	must(mw4 != NULL, "ibv_alloc_mw in another PD");
	must(post_bind(&t, mw4, ibv_inc_rkey(mw4->rkey), mr, (uintptr_t)win, 64, rw) == 0, "post BIND_MW");
	expect(wait_wc(&t), 77, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, 0, t.qp, "a bind of another PD's window");
	fresh(&t, &s);
	struct end other = {0};
	open_end(&other, argv[1]); /* another client of the target's daemon */
	struct ibv_mr *omr = ibv_reg_mr(other.pd, block, sizeof(guard_image), IBV_ACCESS_LOCAL_WRITE | rw | IBV_ACCESS_MW_BIND);
	must(omr != NULL, "the other client's ibv_reg_mr");
	struct ibv_mw *mw5 = ibv_alloc_mw(t.pd, IBV_MW_TYPE_2);
	must(mw5 != NULL, "ibv_alloc_mw");
	must(post_bind(&t, mw5, ibv_inc_rkey(mw5->rkey), omr, (uintptr_t)win, 64, rw) == 0, "post BIND_MW");
	expect(wait_wc(&t), 77, IBV_WC_MW_BIND_ERR, IBV_WC_BIND_MW, 0, t.qp, "a bind to another client's region");
	errno = 0;
	must(ibv_bind_mw(t.qp, mw3, &(struct ibv_mw_bind){.bind_info = {.mr = omr, .addr = (uintptr_t)win, .length = 64}}) ==
		      EPERM,
	      "ibv_bind_mw to a region of another PD");
	printf("binds to a region without MW_BIND, of another PD's window and to another client's region: "
	       "memory bind error; ibv_bind_mw to another PD's region: EPERM\n");

	must(ibv_dealloc_mw(mw2) == 0 && ibv_dealloc_mw(mw3) == 0 && ibv_dealloc_mw(mw4) == 0 && ibv_dealloc_mw(mw5) == 0,
	      "ibv_dealloc_mw");
	must(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(nobind) == 0, "ibv_dereg_mr after the windows went");
	printf("PASS\n");
	return 0;
}
