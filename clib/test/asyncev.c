/*
 * asyncev: the asynchronous events of rnicd's libibverbs, each checked
 * field by field as ibv_get_async_event returns it, on two contexts of
 * one device: the owner's, whose QPs receive, and a sender's, which must
 * get none of the owner's events.
 *
 *   asyncev DEV        COMM_EST, SRQ_LIMIT_REACHED (armed by
 *                      ibv_modify_srq, then disarmed), QP_ACCESS_ERR and
 *                      QP_LAST_WQE_REACHED, QP_REQ_ERR, CQ_ERR; the
 *                      async fd's readiness (poll, epoll), O_NONBLOCK's EAGAIN, a
 *                      destroy that waits for its QP's events to be
 *                      acknowledged; one line per check, PASS if all hold
 *   asyncev -port DEV  print "ready", then one line per event as it
 *                      comes ("port error port 1"), until DEVICE_FATAL
 */
#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "vtest.h"

/* next waits (20 s at most) for ctx's next event, in epoll as UCX waits
 * (its async thread), then takes it. */
static int next(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ee = {.events = EPOLLIN}, got;
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ctx->async_fd, &ee))
		die("epoll");
	int n = epoll_wait(ep, &got, 1, 20000);
	close(ep);
	if (n != 1)
		return 0;
	for (int i = 0; i < 20000; i++) {
		if (ibv_get_async_event(ctx, ev) == 0)
			return 1;
		if (errno != EAGAIN)
			die("ibv_get_async_event");
		usleep(1000);
	}
	return 0;
}

static int none(struct ibv_context *ctx)
{
	struct ibv_async_event ev;
	return ibv_get_async_event(ctx, &ev) < 0 && errno == EAGAIN;
}

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *buf;
	union ibv_gid gid;
};

static void end_init(struct end *e, const char *dev)
{
	e->ctx = open_pd(dev, &e->pd, &e->gid);
	e->buf = calloc(1, 4096);
	e->mr = ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!e->mr)
		die("end_init");
	int fl = fcntl(e->ctx->async_fd, F_GETFL);
	if (fl < 0 || fcntl(e->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
		die("fcntl");
}

static struct ibv_qp *new_qp(struct end *e, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .srq = srq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 8, .max_recv_wr = srq ? 0 : 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(e->pd, &a);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

/* up takes qp to RTR towards peer's QP dqpn, and on to RTS unless rtr. */
static void up(struct ibv_qp *qp, struct end *peer, uint32_t dqpn, int rtr)
{
	qp_connect(qp, &(struct qp_path){.dest_qp_num = dqpn, .dgid = peer->gid,
					 .access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE, .rtr_only = rtr});
}

static void post(struct ibv_qp *qp, struct end *e, enum ibv_wr_opcode op, uint32_t len, uint32_t rkey)
{
	struct ibv_sge sg = {.addr = (uintptr_t)e->buf, .length = len, .lkey = e->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sg, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = (uintptr_t)e->buf;
	wr.wr.rdma.rkey = rkey;
	struct ibv_send_wr *bad;
	if (ibv_post_send(qp, &wr, &bad))
		die("ibv_post_send");
}

static enum ibv_wc_status completion(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	return poll_wc(cq, &wc, 20) ? wc.status : (enum ibv_wc_status)-1;
}

static int post_recvs(struct ibv_srq *srq, struct ibv_qp *qp, struct end *e, int n, uint32_t len)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sg = {.addr = (uintptr_t)e->buf + 64 * i, .length = len, .lkey = e->mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 100 + i, .sg_list = &sg, .num_sge = 1}, *bad;
		if (srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad))
			return -1;
	}
	return 0;
}

struct destroyer {
	struct ibv_qp *qp;
	volatile int done;
};

static void *destroy_qp(void *arg)
{
	struct destroyer *d = arg;
	if (ibv_destroy_qp(d->qp))
		die("ibv_destroy_qp");
	d->done = 1;
	return NULL;
}

static int port_watch(const char *dev)
{
	struct ibv_context *ctx = open_dev(dev);
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		struct ibv_async_event ev;
		if (ibv_get_async_event(ctx, &ev))
			die("ibv_get_async_event");
		printf("%s port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
		fflush(stdout);
		ibv_ack_async_event(&ev);
		if (ev.event_type == IBV_EVENT_DEVICE_FATAL)
			return 0;
	}
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "-port") == 0)
		return port_watch(argv[2]);
	if (argc != 2) {
		fprintf(stderr, "usage: asyncev [-port] DEV\n");
		return 2;
	}
	struct end o, s; /* the owner, the sender */
	end_init(&o, argv[1]);
	end_init(&s, argv[1]);
	check(none(o.ctx) && !readable(o.ctx->async_fd, 0), "no event yet: the fd not readable, O_NONBLOCK: EAGAIN");

	struct ibv_cq *ocq = ibv_create_cq(o.ctx, 16, NULL, NULL, 0), *scq = ibv_create_cq(s.ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 8, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(o.pd, &sa);
	if (!ocq || !scq || !srq)
		die("create");
	struct ibv_srq_attr lim = {.srq_limit = 3}, q;
	check(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0 && ibv_query_srq(srq, &q) == 0 && q.srq_limit == 3 &&
		      q.max_wr == 8 && q.max_sge == 1,
	      "ibv_modify_srq IBV_SRQ_LIMIT 3: query_srq reads 8 WRs, 1 SGE, limit 3");
	struct ibv_srq_attr big = {.srq_limit = 9, .max_wr = 16};
	check(ibv_modify_srq(srq, &big, IBV_SRQ_LIMIT) == EINVAL && ibv_modify_srq(srq, &big, IBV_SRQ_MAX_WR) == EINVAL,
	      "a limit above max_wr, or a resize: EINVAL");

	/* COMM_EST and the SRQ limit: the owner's QP in RTR on the SRQ. */
	struct ibv_qp *oqp = new_qp(&o, ocq, srq), *sqp = new_qp(&s, scq, NULL);
	if (post_recvs(srq, NULL, &o, 4, 64))
		die("ibv_post_srq_recv");
	up(oqp, &s, sqp->qp_num, 1);
	up(sqp, &o, oqp->qp_num, 0);
	post(sqp, &s, IBV_WR_SEND, 8, 0);
	check(completion(scq) == IBV_WC_SUCCESS, "a SEND to the QP in RTR: success");
	struct ibv_async_event ev;
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_COMM_EST && ev.element.qp == oqp,
	      "COMM_EST, element.qp the receiving QP");
	ibv_ack_async_event(&ev);
	check(none(o.ctx), "3 WQEs left, limit 3: no SRQ_LIMIT_REACHED yet");
	post(sqp, &s, IBV_WR_SEND, 8, 0);
	check(completion(scq) == IBV_WC_SUCCESS, "a second SEND: success");
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq,
	      "2 WQEs left: SRQ_LIMIT_REACHED, element.srq the SRQ");
	ibv_ack_async_event(&ev);
	check(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0, "the limit fired once: query_srq reads 0");

	/* An access error at the responder of an SRQ's QP. */
	post(sqp, &s, IBV_WR_RDMA_WRITE, 8, o.mr->rkey ^ 0x5a5a00);
	check(completion(scq) == IBV_WC_REM_ACCESS_ERR, "a WRITE with a bad rkey: REM_ACCESS_ERR at the sender");
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == oqp,
	      "QP_ACCESS_ERR, element.qp the receiving QP");
	ibv_ack_async_event(&ev);
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == oqp,
	      "QP_LAST_WQE_REACHED, element.qp the SRQ's QP");
	/* Not acknowledged yet: ibv_destroy_qp waits for it. */
	struct destroyer d = {.qp = oqp};
	pthread_t th;
	pthread_create(&th, NULL, destroy_qp, &d);
	usleep(200 * 1000);
	int waited = !d.done;
	ibv_ack_async_event(&ev);
	pthread_join(th, NULL);
	check(waited && d.done, "ibv_destroy_qp waited for the event's ibv_ack_async_event");
	check(none(o.ctx) && none(s.ctx), "nothing more, and nothing for the sender, whose error its completion told");

	/* An invalid request: a SEND longer than the receive buffer. */
	struct ibv_qp *rqp = new_qp(&o, ocq, NULL), *sqp2 = new_qp(&s, scq, NULL);
	up(rqp, &s, sqp2->qp_num, 0);
	if (post_recvs(NULL, rqp, &o, 1, 4))
		die("ibv_post_recv");
	up(sqp2, &o, rqp->qp_num, 0);
	post(sqp2, &s, IBV_WR_SEND, 64, 0);
	check(completion(scq) == IBV_WC_REM_INV_REQ_ERR, "a SEND of 64 bytes into 4: REM_INV_REQ_ERR at the sender");
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_QP_REQ_ERR && ev.element.qp == rqp,
	      "QP_REQ_ERR, element.qp the receiving QP");
	ibv_ack_async_event(&ev);
	check(none(o.ctx), "no LAST_WQE_REACHED for a QP without an SRQ");

	/* CQ overflow: four signaled WRITEs of a QP to itself into a CQ of 2. */
	struct ibv_cq *small = ibv_create_cq(o.ctx, 2, NULL, NULL, 0);
	if (!small)
		die("ibv_create_cq");
	struct ibv_qp *lqp = new_qp(&o, small, NULL);
	up(lqp, &o, lqp->qp_num, 0);
	for (int i = 0; i < 4; i++)
		post(lqp, &o, IBV_WR_RDMA_WRITE, 8, o.mr->rkey);
	check(next(o.ctx, &ev) && ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == small,
	      "CQ_ERR, element.cq the CQ that overflowed");
	ibv_ack_async_event(&ev);
	usleep(100 * 1000);
	check(none(o.ctx), "CQ_ERR once");

	ibv_destroy_qp(lqp);
	ibv_destroy_qp(rqp);
	ibv_destroy_qp(sqp);
	ibv_destroy_qp(sqp2);
	ibv_destroy_cq(small);
	check(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(ocq) == 0 && ibv_destroy_cq(scq) == 0, "every object destroyed");
	ibv_close_device(o.ctx);
	ibv_close_device(s.ctx);
	return verdict();
}
