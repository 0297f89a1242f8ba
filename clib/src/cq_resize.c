/*
 * cq_resize.c: ibv_resize_cq, as rxe's provider does it: the CQ's lock
 * held over the whole request, so that no poll of the program's runs
 * while the ring changes under it.
 *
 * The ring is the daemon's memory (it writes the completions), sized
 * when the CQ was made: rnicd's resize_cq makes a new ring, moves the
 * completions waiting in the old one into it under the device CQ's lock
 * while engines go on completing, keeping the producer and consumer
 * indices and the armed, flags, events and waiting words, and answers
 * with the new ring's memfd. This side maps it, swaps its view (cons
 * stays: the indices are the old ring's) and unmaps the old ring once
 * no poll waits on it. A size below the completions waiting is EINVAL,
 * as on rxe, and leaves the CQ as it was.
 */
#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cq.h"

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct rcq *q = (struct rcq *)cq;
	if (cqe < 1)
		return EINVAL;
	/* Lock order: the channel's (ibv_get_cq_event reads the ring's
	 * events word under it), the CQ's (its polls), the arm's. */
	pthread_mutex_t *mu = cq->channel ? chan_mu(cq->channel) : NULL;
	if (mu)
		pthread_mutex_lock(mu);
	pthread_spin_lock(&q->lock);
	pthread_spin_lock(&q->arm_lock);
	uint8_t b[8];
	struct buf req = {.p = b, .len = 8};
	put32(&req, q->h);
	put32(&req, cqe);
	struct ring_reply r;
	uint8_t *mem;
	size_t memlen;
	int err = create_rings(cq->context, K_RESIZE_CQ, 0, &req, -1, &r, &mem, &memlen, 1, CQE_BYTES, 0);
	if (!err && r.wake_fd >= 0)
		close(r.wake_fd);
	if (!err && (r.send.slots != (uint32_t)cqe || r.max_send_wr != (uint32_t)cqe)) {
		/* The daemon writes into the new ring now: the CQ is lost
		 * either way, and the program told so. */
		rnic_log("resize_cq: rnicd's ring has %u slots, not the %d asked", r.send.slots, cqe);
		munmap(mem, memlen);
		err = EPROTO;
	}
	if (err) {
		pthread_spin_unlock(&q->arm_lock);
		pthread_spin_unlock(&q->lock);
		if (mu)
			pthread_mutex_unlock(mu);
		return err;
	}
	uint8_t *old = q->mem;
	size_t oldlen = q->memlen;
	q->mem = mem;
	q->memlen = memlen;
	q->ring = mem + r.send.off;
	q->slots = r.send.slots;
	cq->cqe = cqe;
	/* A poll that waits for the daemon's wake (wait_cqe) reads the old
	 * ring for up to a millisecond (POLL_WAIT_MS); no other can start
	 * while the lock is held. */
	while (__atomic_load_n(&q->waiters, __ATOMIC_SEQ_CST) != 0)
		sched_yield();
	munmap(old, oldlen);
	pthread_spin_unlock(&q->arm_lock);
	pthread_spin_unlock(&q->lock);
	if (mu)
		pthread_mutex_unlock(mu);
	return 0;
}
