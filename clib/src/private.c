/*
 * private.c: what librdmacm.so.1 of this folder needs from this library
 * and no program may call (rdma-core's IBVERBS_PRIVATE_* in spirit).
 *
 * rnicd binds a QP to a CM ID only when both belong to one client (one
 * control connection: hostif's cmQPs), so the CM requests of a cm_id
 * must go on the connection of the ibv_context its QP was made on, which
 * only this library holds. And the CM moves a QP behind the program's
 * back (RTS on ESTABLISHED, ERR on DISCONNECTED): the state ibv_post_send
 * checks here must follow.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "qp.h"

/* rnicd_cm_call sends CM request kind k (abi's KindCM*, 20-30) with
 * body req and descriptor fd (-1: none) on ctx's connection; the reply's
 * body after its code goes to rep (at most cap bytes, *replen set), the
 * descriptor it carries to *rfd (-1: none; if rfd is NULL it is closed).
 * It returns 0 or an errno value; a refused request's message is printed. */
EXPORT int rnicd_cm_call(struct ibv_context *ctx, int k, const void *req, size_t reqlen, int fd, int *rfd,
			 void *rep, size_t cap, size_t *replen)
{
	if (k < 20 || k > 30 || reqlen > MAX_MSG - HDR_LEN)
		return EINVAL;
	struct buf b = {.p = (uint8_t *)req, .len = reqlen, .off = reqlen}, r;
	int err = call(ctx, k, &b, fd, &r, rfd);
	if (err)
		return err;
	size_t n = r.len - r.off;
	if (n > cap) {
		if (rfd && *rfd >= 0) {
			close(*rfd);
			*rfd = -1;
		}
		return EPROTO;
	}
	memcpy(rep, r.p + r.off, n);
	*replen = n;
	return 0;
}

/* rnicd_qp_sync reads the QP's state from the daemon into qp->state,
 * under the locks the post calls take. */
EXPORT int rnicd_qp_sync(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	int err = ibv_query_qp(qp, &a, IBV_QP_STATE, &init);
	if (err)
		return err;
	struct rqp *q = to_rqp(qp);
	pthread_spin_lock(&q->slock);
	pthread_spin_lock(&q->rlock);
	qp->state = a.qp_state;
	pthread_spin_unlock(&q->rlock);
	pthread_spin_unlock(&q->slock);
	return 0;
}
