/*
 * cq.h: the CQ as cq.c (create, ibv_poll_cq, events) and cq_ex.c (the
 * extended CQ and its ibv_start_poll API) both see it.
 */
#ifndef CQ_H
#define CQ_H

#include "rnic.h"

/* rcq is a CQ and its ring. An extended CQ is the same object: struct
 * ibv_cq_ex begins with struct ibv_cq's fields (ibv_cq_ex_to_cq is a
 * cast), so ibv_poll_cq, ibv_req_notify_cq, ibv_get_cq_event and
 * ibv_destroy_cq take either. */
struct rcq {
	union {
		struct ibv_cq cq;
		struct ibv_cq_ex cqx;
	};
	uint32_t h;
	uint8_t *mem, *ring;
	size_t memlen;
	uint32_t slots;
	pthread_spinlock_t lock;
	uint32_t cons; /* under lock */
	uint32_t empty; /* polls in a row that found nothing, under lock */
	uint32_t seen; /* events taken by ibv_get_cq_event, under the channel's mu */
	int wake; /* the read end of the CQ's wake pipe (non-blocking), or -1 */
	uint32_t waits; /* empty polls left to wait in rather than yield (atomic) */
	/* yield_due's state (cq.c), atomic: empty polls since its last look
	 * at the thread's involuntary switches, one empty poll in yevery
	 * yields (0: every one), the switches it saw then. */
	uint32_t ypolls, yevery;
	long ynivcsw;
	/* ibv_resize_cq (cq_resize.c) swaps mem, ring, slots and cqe under
	 * lock, arm_lock and the channel's mu, and unmaps the old ring once
	 * no poll waits on it: waiters counts the polls in wait_cqe, which
	 * reads the ring without the lock (atomic, taken under lock). The
	 * arm has a lock of its own because a program may arm the CQ between
	 * ibv_start_poll and ibv_end_poll, which hold lock. */
	uint32_t waiters;
	pthread_spinlock_t arm_lock;
	struct rcq *next;
	/* cq_ex.c: the CQE ibv_start_poll or ibv_next_poll stands on (slot
	 * cons), as ibv_poll_cq would return it; under lock, which is held
	 * from a successful ibv_start_poll to ibv_end_poll, as rxe's. */
	struct ibv_wc cur;
};

/* cq_new makes a CQ of at least cqe entries reporting to channel (or to
 * none); NULL with errno set on failure. */
struct rcq *cq_new(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel);

/* cqe_read decodes the CQE in slot idx of q's ring into w, exactly as
 * ibv_poll_cq returns it. */
void cqe_read(struct rcq *q, uint32_t idx, struct ibv_wc *w);

/* poll_none ends a poll that found the ring empty: called with q's lock
 * held, it releases it, gives the core away as a spinning poll must, and
 * returns -1 with a message on stderr when completions were lost (the
 * ring overran) or the daemon hung up, else 0. */
int poll_none(struct rcq *q);

/* chan_mu is the lock of a completion channel's list of CQs, which
 * ibv_get_cq_event holds while it reads their rings' events words. */
pthread_mutex_t *chan_mu(struct ibv_comp_channel *ch);

#endif
