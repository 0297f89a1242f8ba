/*
 * asyncforged: ibv_get_async_event from a daemon whose events do not fit
 * the objects they name. The test (tests/clib_asyncforged_test.go) puts a
 * proxy between this program and rnicd that answers its first requests
 * for an event itself: a QP event naming the CQ, CQ_ERR naming the QP,
 * SRQ_LIMIT_REACHED naming the QP, a QP event naming no object (the form
 * of a port event), DEVICE_FATAL naming the QP, then QP_FATAL naming the
 * QP. A daemon's bug must cost the program nothing: only the last is
 * returned (the others would have had ibv_ack_async_event write into the
 * wrong struct, or through a null pointer), and ibv_destroy_qp returns
 * once that one is acknowledged, not waiting for acks of events never
 * returned.
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "vtest.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: asyncforged DEVICE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IONBF, 0); /* every line out before a hang */
	alarm(30); /* a destroy waiting for acks of events never returned */
	struct ibv_context *ctx = open_dev(argv[1]);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		die("ibv_create_srq");
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("ibv_create_qp");

	struct ibv_async_event ev;
	int rc = ibv_get_async_event(ctx, &ev);
	check(rc == 0 && ev.event_type == IBV_EVENT_QP_FATAL && ev.element.qp == qp,
	      "the one event that fits its object: QP_FATAL, element.qp the QP");
	if (rc == 0)
		ibv_ack_async_event(&ev);
	check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp returns: it waits for no event it was never given");
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	errno = 0;
	check(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "nothing more: EAGAIN");
	check(ibv_destroy_srq(srq) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 &&
		      ibv_close_device(ctx) == 0,
	      "every object destroyed");
	return verdict();
}
