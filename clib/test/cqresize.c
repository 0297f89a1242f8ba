/*
 * cqresize: ibv_resize_cq on rnicd, as rxe's: a CQ with completions
 * waiting is grown and shrunk and keeps them, in order, field by field;
 * a size below them (or 0) is EINVAL and changes nothing; cqe reports
 * the new size; an arm and the channel's events go with the ring. Then
 * a thread polls a CQ while another posts WRITEs and resizes it again
 * and again: every completion arrives once, in order.
 *
 *   cqresize DEV_A DEV_B    print one line per check, PASS if all hold (exit 0)
 */
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vtest.h"

#define RACE 3000

static struct ibv_qp *qp_make(struct side *s, struct ibv_cq *cq, uint32_t depth)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = depth, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

/* post_write posts a signaled WRITE of id+1 bytes (mod 61) from a to b. */
static void post_write(struct ibv_qp *qp, struct side *a, struct side *b, uint64_t id, uint32_t rkey)
{
	struct ibv_sge sg = {.addr = (uintptr_t)a->buf + id % 64, .length = 1 + id % 61, .lkey = a->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = id, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = (uintptr_t)b->buf, .rkey = rkey}},
			   *bad;
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

/* wc_ok says whether w is WRITE id's completion on qp with status st. */
static int wc_ok(struct ibv_wc *w, uint64_t id, enum ibv_wc_status st, struct ibv_qp *qp)
{
	if (w->wr_id != id || w->status != st || w->qp_num != qp->qp_num)
		return 0;
	return st != IBV_WC_SUCCESS || (w->opcode == IBV_WC_RDMA_WRITE && w->byte_len == 1 + id % 61);
}

/* The race: the poller takes RACE completions in order while the main
 * thread posts (at most 8 ahead of it, so that no CQ size used
 * overruns) and resizes. */
static struct ibv_cq *race_cq;
static struct ibv_qp *race_qp;
static volatile uint32_t polled; /* __atomic */
static int race_bad;

static void *poller(void *arg)
{
	(void)arg;
	for (uint64_t i = 0; i < RACE;) {
		struct ibv_wc w[4];
		int n = ibv_poll_cq(race_cq, 4, w);
		if (n < 0) {
			race_bad = 1;
			return NULL;
		}
		for (int k = 0; k < n; k++, i++) {
			if (!race_bad && !wc_ok(&w[k], i, IBV_WC_SUCCESS, race_qp)) {
				printf("completion %lu: wr_id %lu status %d opcode %d byte_len %u\n", (unsigned long)i,
				       (unsigned long)w[k].wr_id, w[k].status, w[k].opcode, w[k].byte_len);
				race_bad = 1;
			}
		}
		__atomic_store_n(&polled, (uint32_t)i, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cqresize DEV_A DEV_B\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	pthread_t wd;
	pthread_create(&wd, NULL, wait_watchdog, NULL);
	struct side a, b;
	side_open(&a, argv[1]);
	side_open(&b, argv[2]);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(a.ctx);
	struct ibv_cq *cq = ibv_create_cq(a.ctx, 16, &a, ch, 0);
	struct ibv_cq *cqb = ibv_create_cq(b.ctx, 16, NULL, NULL, 0);
	if (!ch || !cq || !cqb)
		die("ibv_create_cq");
	struct ibv_qp *qa = qp_make(&a, cq, 16), *qb = qp_make(&b, cqb, 16);
	rc_connect(qa, qb, &b.gid);
	rc_connect(qb, qa, &a.gid);

	/* Nine WRITEs, then one to a key B does not have, which completes
	 * in error after them: armed for solicited completions, whose
	 * events include failed ones, the CQ's event says all ten wait. */
	check(ibv_req_notify_cq(cq, 1) == 0, "ibv_req_notify_cq, solicited only");
	for (uint64_t i = 0; i < 10; i++)
		post_write(qa, &a, &b, i, i == 9 ? b.mr->rkey ^ 0x5a5a00 : b.mr->rkey);
	struct ibv_cq *ecq;
	void *ectx;
	check(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq && ectx == &a,
	      "the failed WRITE's event: ten completions wait");
	ibv_ack_cq_events(cq, 1);
	check(ibv_resize_cq(cq, 9) == EINVAL && cq->cqe == 16, "resize to 9 with 10 waiting: EINVAL, cqe still 16");
	check(ibv_resize_cq(cq, 10) == 0 && cq->cqe == 10, "resize to 10: cqe 10");
	struct ibv_wc w[4];
	int n = ibv_poll_cq(cq, 4, w);
	int ok = n == 4;
	for (int i = 0; ok && i < 4; i++)
		ok = wc_ok(&w[i], i, IBV_WC_SUCCESS, qa);
	check(ok, "the first 4 completions after the shrink: wr_id, status, opcode, byte_len, qp_num");
	check(ibv_resize_cq(cq, 300) == 0 && cq->cqe == 300, "grow to 300 with 6 waiting: cqe 300");
	check(ibv_resize_cq(cq, 5) == EINVAL && cq->cqe == 300, "resize to 5 with 6 waiting: EINVAL");
	check(ibv_resize_cq(cq, 6) == 0 && cq->cqe == 6, "shrink to 6: cqe 6");
	ok = 1;
	for (uint64_t i = 4; ok && i < 10; i++)
		ok = poll_wc(cq, w, 10) && wc_ok(w, i, i == 9 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS, qa);
	check(ok, "the other 6, the last REM_ACCESS_ERR, in order");
	check(ibv_poll_cq(cq, 4, w) == 0, "then the CQ is empty");
	check(ibv_resize_cq(cq, 0) == EINVAL && cq->cqe == 6, "resize to 0: EINVAL");
	check(ibv_resize_cq(cq, 1 << 21) == EINVAL && cq->cqe == 6, "resize past the device's max_cqe: EINVAL");

	/* Armed before a resize, the next completion (a WR flushed from
	 * the QP the error took to ERR) is an event. */
	check(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq, then resize to 1");
	check(ibv_resize_cq(cq, 1) == 0 && cq->cqe == 1, "resize to 1: cqe 1");
	post_write(qa, &a, &b, 10, b.mr->rkey);
	check(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq, "the flushed WR's event, through the new ring");
	ibv_ack_cq_events(cq, 1);
	check(poll_wc(cq, w, 10) && wc_ok(w, 10, IBV_WC_WR_FLUSH_ERR, qa), "its completion: WR_FLUSH_ERR");

	/* The race. */
	race_cq = ibv_create_cq(a.ctx, 8, NULL, NULL, 0);
	struct ibv_cq *cqd = ibv_create_cq(b.ctx, 8, NULL, NULL, 0);
	if (!race_cq || !cqd)
		die("ibv_create_cq");
	race_qp = qp_make(&a, race_cq, 8);
	struct ibv_qp *qd = qp_make(&b, cqd, 8);
	rc_connect(race_qp, qd, &b.gid);
	rc_connect(qd, race_qp, &a.gid);
	pthread_t pt;
	pthread_create(&pt, NULL, poller, NULL);
	static const int sizes[] = {8, 9, 200, 8, 64, 17, 4096, 12};
	int resized = 0;
	for (uint64_t i = 0; i < RACE && !race_bad; i++) {
		while (i - __atomic_load_n(&polled, __ATOMIC_SEQ_CST) >= 8 && !race_bad)
			sched_yield();
		post_write(race_qp, &a, &b, i, b.mr->rkey);
		if (i % 7 == 0) {
			int s = sizes[(i / 7) % 8];
			if (ibv_resize_cq(race_cq, s) == 0 && race_cq->cqe == s)
				resized++;
		}
	}
	pthread_join(pt, NULL);
	check(!race_bad, "3000 WRITEs polled by one thread while another resized: each once, in order");
	check(resized == (RACE + 6) / 7, "every resize of the race went through");
	check(ibv_poll_cq(race_cq, 4, w) == 0, "nothing after the 3000");

	check(ibv_destroy_qp(race_qp) == 0 && ibv_destroy_cq(race_cq) == 0, "the resized CQ destroyed");
	check(ibv_destroy_qp(qa) == 0 && ibv_destroy_cq(cq) == 0, "the CQ with a channel destroyed");
	check(ibv_destroy_comp_channel(ch) == 0, "its channel destroyed");
	return verdict();
}
