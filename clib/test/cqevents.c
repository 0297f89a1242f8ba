/*
 * cqevents: a completion channel whose fd the program makes
 * non-blocking, as UCX does (uct_ib_iface_pre_arm reads events until
 * EAGAIN): ibv_get_cq_event must fail with EAGAIN when no event waits,
 * and the fd must be readable exactly while one does, as rdma-core's
 * (the kernel's completion event file) is.
 *
 * A UD QP sends one datagram to itself through a CQ on the channel; the
 * receive's completion and GRH are checked too.
 *
 * On a blocking channel, a signal interrupts the wait as it interrupts
 * libibverbs' read of its event file: EINTR when the handler has no
 * SA_RESTART (qperf ends its timed tests so), and the wait goes on to
 * the event when it has.
 *
 *   cqevents DEV    print one line per check, PASS if all hold (exit 0)
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include "vtest.h"

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* alarm_in sends SIGALRM in ms milliseconds, with a handler that has
 * SA_RESTART or not. */
static void alarm_in(int ms, int restart)
{
	struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = restart ? SA_RESTART : 0};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	struct itimerval it = {.it_value = {.tv_sec = 0, .tv_usec = ms * 1000}};
	setitimer(ITIMER_REAL, &it, NULL);
}

struct later {
	struct ibv_qp *qp;
	struct ibv_send_wr *wr;
};

/* send_later posts its WR after 300 ms, well after the alarm. */
static void *send_later(void *arg)
{
	struct later *l = arg;
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, NULL);
	struct ibv_send_wr *bad;
	if (ibv_post_send(l->qp, l->wr, &bad))
		die("ibv_post_send");
	return NULL;
}

/* watchdog ends the program if a wait that must end does not. */
static void *watchdog(void *arg)
{
	(void)arg;
	sleep(20);
	printf("a wait that a signal ends did not end: WRONG\nFAIL\n");
	fflush(stdout);
	_exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cqevents DEV\n");
		return 2;
	}
	struct ibv_context *ctx = open_dev(argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!pd || !ch)
		die("ibv_alloc_pd/ibv_create_comp_channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 8, (void *)0x5eed, ch, 0);
	if (!cq)
		die("ibv_create_cq");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("ibv_create_qp");
	ud_ready(qp, 0x11111111);

	/* As rdma-core's, the fd starts blocking; the program sets O_NONBLOCK. */
	int fl = fcntl(ch->fd, F_GETFL);
	check(fl >= 0 && !(fl & O_NONBLOCK), "the channel fd starts blocking");
	if (fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl");
	if (ibv_req_notify_cq(cq, 0))
		die("ibv_req_notify_cq");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	errno = 0;
	check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "no event: ibv_get_cq_event fails with EAGAIN");
	check(!readable(ch->fd, 0), "no event: the fd is not readable");

	static char buf[40 + 64], msg[64] = "cqevents";
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(pd, msg, sizeof(msg), 0);
	if (!mr || !smr)
		die("ibv_reg_mr");
	struct ibv_sge rs = {.addr = (uintptr_t)buf, .length = sizeof(buf), .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rs, .num_sge = 1}, *brwr;
	if (ibv_post_recv(qp, &rwr, &brwr))
		die("ibv_post_recv");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid");
	struct ibv_ah_attr aha = {.is_global = 1, .grh = {.dgid = gid, .sgid_index = 0, .hop_limit = 64}, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(pd, &aha);
	if (!ah)
		die("ibv_create_ah");
	struct ibv_sge ss = {.addr = (uintptr_t)msg, .length = sizeof(msg), .lkey = smr->lkey};
	struct ibv_send_wr swr = {.wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				  .wr = {.ud = {.ah = ah, .remote_qpn = qp->qp_num, .remote_qkey = 0x11111111}}}, *bswr;
	if (ibv_post_send(qp, &swr, &bswr))
		die("ibv_post_send");

	check(readable(ch->fd, 10000), "a completion: the fd is readable");
	int got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(got == 0 && ev_cq == cq && ev_ctx == (void *)0x5eed, "a completion: ibv_get_cq_event returns its CQ");
	ibv_ack_cq_events(cq, 1);
	/* One arm, one event: the second completion finds the CQ disarmed. */
	struct ibv_wc wc[2];
	int k = 0;
	for (int tries = 0; k < 2 && tries < 1000000; tries++) {
		int r = ibv_poll_cq(cq, 2 - k, wc + k);
		if (r < 0)
			die("ibv_poll_cq");
		k += r;
	}
	check(k == 2, "both completions polled");
	/* The receive as rxe and a ConnectX report a RoCEv2 datagram over
	 * IPv4: a GRH flag, the IPv4 header in the second 20 bytes of the
	 * buffer, sl the L3 type (2: IPv4) that UCX 1.13 reads. */
	struct ibv_wc *rw = k == 2 && wc[0].opcode == IBV_WC_RECV ? &wc[0] : &wc[1];
	check(rw->opcode == IBV_WC_RECV && rw->status == IBV_WC_SUCCESS && rw->byte_len == 40 + sizeof(msg) &&
		      (rw->wc_flags & IBV_WC_GRH) && rw->sl == 2 && rw->src_qp == qp->qp_num,
	      "UD receive: GRH flag, sl 2 (IPv4), byte_len, src_qp");
	check((uint8_t)buf[20] == 0x45 && memcmp(buf + 36, gid.raw + 12, 4) == 0 && memcmp(buf + 32, gid.raw + 12, 4) == 0 &&
		      memcmp(buf + 40, msg, sizeof(msg)) == 0,
	      "UD receive: IPv4 header at byte 20, addresses, payload at 40");
	errno = 0;
	check(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, "event taken: ibv_get_cq_event fails with EAGAIN");
	check(!readable(ch->fd, 0), "event taken: the fd is not readable");

	/* A blocking channel again, and SIGALRM while ibv_get_cq_event
	 * waits: without SA_RESTART the call fails with EINTR; with it, the
	 * wait goes on to the event of a send posted after the signal. */
	if (fcntl(ch->fd, F_SETFL, fl & ~O_NONBLOCK) < 0 || ibv_req_notify_cq(cq, 0))
		die("fcntl/ibv_req_notify_cq");
	pthread_t wd;
	if (pthread_create(&wd, NULL, watchdog, NULL))
		die("pthread_create");
	alarms = 0;
	alarm_in(50, 0);
	errno = 0;
	got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	check(got == -1 && errno == EINTR && alarms == 1, "blocking, a signal without SA_RESTART: EINTR");
	if (ibv_post_recv(qp, &rwr, &brwr))
		die("ibv_post_recv");
	struct later l = {qp, &swr};
	pthread_t th;
	if (pthread_create(&th, NULL, send_later, &l))
		die("pthread_create");
	alarm_in(50, 1);
	got = ibv_get_cq_event(ch, &ev_cq, &ev_ctx);
	pthread_join(th, NULL);
	check(got == 0 && ev_cq == cq && alarms == 2, "blocking, a signal with SA_RESTART: the wait goes on to the event");
	if (got == 0)
		ibv_ack_cq_events(cq, 1);
	pthread_cancel(wd);
	pthread_join(wd, NULL);
	for (int tries = 0, k2 = 0; k2 < 2 && tries < 1000000; tries++) {
		int r = ibv_poll_cq(cq, 2 - k2, wc);
		if (r < 0)
			die("ibv_poll_cq");
		k2 += r;
	}

	/* Queues of 0 WRs, as rxe and mlx5 allow (qperf's bandwidth tests
	 * ask for them): the QP is made, reports 0, and posting to the empty
	 * side fails with ENOMEM as to a full queue. */
	struct ibv_qp_init_attr za = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 0, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *norecv = ibv_create_qp(pd, &za);
	za.qp_type = IBV_QPT_UD; /* it must reach RTS to post a send */
	za.cap = (struct ibv_qp_cap){.max_send_wr = 0, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1};
	struct ibv_qp *nosend = ibv_create_qp(pd, &za);
	check(norecv && nosend, "QPs of 0 receive WRs and of 0 send WRs: created");
	if (norecv && nosend) {
		struct ibv_qp_attr qa2;
		struct ibv_qp_init_attr qi;
		int q1 = ibv_query_qp(norecv, &qa2, IBV_QP_CAP, &qi) == 0 && qi.cap.max_recv_wr == 0 && qi.cap.max_send_wr >= 4;
		int q2 = ibv_query_qp(nosend, &qa2, IBV_QP_CAP, &qi) == 0 && qi.cap.max_send_wr == 0 && qi.cap.max_recv_wr >= 4;
		check(q1 && q2, "QPs of 0 WRs: ibv_query_qp reports 0");
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1};
		int m = ibv_modify_qp(norecv, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
		a.qkey = 0x11111111;
		m |= ibv_modify_qp(nosend, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR};
		m |= ibv_modify_qp(nosend, &a, IBV_QP_STATE);
		a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .sq_psn = 0};
		m |= ibv_modify_qp(nosend, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
		struct ibv_recv_wr *bz = NULL;
		struct ibv_send_wr *bs = NULL;
		int r1 = ibv_post_recv(norecv, &rwr, &bz), r2 = ibv_post_send(nosend, &swr, &bs);
		check(!m && r1 == ENOMEM && bz == &rwr && r2 == ENOMEM && bs == &swr, "QPs of 0 WRs: posting fails with ENOMEM");
		ibv_destroy_qp(norecv);
		ibv_destroy_qp(nosend);
	}

	ibv_destroy_qp(qp);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(smr);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return verdict();
}
