/*
 * pdmr.c: protection domains and memory regions. A region's memory is
 * made reachable by the daemon first (mem.c), then registered with the
 * memfd and the offset that holds it.
 */
#include <errno.h>
#include <stdlib.h>

#include "rnic.h"

/* --- PD ---------------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct buf rep;
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	int err = call(ctx, K_ALLOC_PD, NULL, -1, &rep, NULL);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = get32(&rep);
	return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	int err = destroy(pd->context, K_DEALLOC_PD, pd->handle);
	if (!err)
		free(pd);
	return err;
}

/* --- MR ---------------------------------------------------------------- */

/* rmr is an MR on its context's list. */
struct rmr {
	struct ibv_mr mr;
	struct rmr *next;
};

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	int fd;
	uint64_t off;
	uint32_t shmid = 0;
	struct rmr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_mr *mr = &m->mr;
	int err = mem_share(addr, len, &fd, &off, &shmid);
	if (err) {
		free(m);
		errno = err;
		return NULL;
	}
	uint8_t b[40];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, pd->handle);
	put32(&req, access & ~IBV_ACCESS_OPTIONAL_RANGE);
	if (fd == MEM_SHM) /* System V shared memory: the daemon attaches it */
		put32(&req, shmid);
	put64(&req, off);
	put64(&req, len);
	put64(&req, iova);
	err = call(pd->context, fd == MEM_SHM ? K_REG_MR_SHM : fd == MEM_MAPPED ? K_REG_MR_MAPPED : K_REG_MR, &req,
		   fd, &rep, NULL);
	mem_sent(fd);
	if (err) {
		mem_unshare(addr, len);
		free(m);
		errno = err;
		return NULL;
	}
	mr->context = pd->context;
	mr->pd = pd;
	mr->addr = addr;
	mr->length = len;
	mr->handle = get32(&rep);
	mr->lkey = get32(&rep);
	mr->rkey = get32(&rep);
	struct rctx *c = to_rctx(pd->context);
	pthread_mutex_lock(&c->mrs_mu);
	m->next = c->mrs;
	c->mrs = m;
	pthread_mutex_unlock(&c->mrs_mu);
	return mr;
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	return reg_mr(pd, addr, len, (uintptr_t)addr, access);
}

#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	return reg_mr(pd, addr, len, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	int err = destroy(mr->context, K_DEREG_MR, mr->handle);
	if (err)
		return err;
	/* The daemon has unmapped the region: its pages may move back. */
	mem_unshare(mr->addr, mr->length);
	struct rctx *c = to_rctx(mr->context);
	pthread_mutex_lock(&c->mrs_mu);
	for (struct rmr **p = &c->mrs; *p; p = &(*p)->next) {
		if (&(*p)->mr == mr) {
			*p = (*p)->next;
			break;
		}
	}
	pthread_mutex_unlock(&c->mrs_mu);
	free(mr);
	return 0;
}

/* mrs_release runs after the context's connection closed: the daemon
 * drops the regions as it tears the client down, and a DMA still on its
 * way lands in the memfd's pages, no longer the program's. */
void mrs_release(struct rctx *c)
{
	pthread_mutex_lock(&c->mrs_mu);
	while (c->mrs) {
		struct rmr *m = c->mrs;
		c->mrs = m->next;
		mem_unshare(m->mr.addr, m->mr.length);
		free(m);
	}
	pthread_mutex_unlock(&c->mrs_mu);
}
