/*
 * pdmr.c: protection domains and memory regions. A region's memory is
 * made reachable by the daemon first (mem.c), then registered with the
 * memfd and the offset that holds it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access)
{
	int fd;
	uint64_t off;
	struct ibv_mr *mr = calloc(1, sizeof(*mr));
	if (!mr) {
		errno = ENOMEM;
		return NULL;
	}
	int err = mem_share(addr, len, &fd, &off);
	if (err) {
		free(mr);
		errno = err;
		return NULL;
	}
	uint8_t b[32];
	struct buf req = {.p = b, .len = sizeof(b)}, rep;
	put32(&req, pd->handle);
	put32(&req, access & ~IBV_ACCESS_OPTIONAL_RANGE);
	put64(&req, off);
	put64(&req, len);
	put64(&req, iova);
	err = call(pd->context, K_REG_MR, &req, fd, &rep, NULL);
	if (err) {
		mem_unshare(addr, len);
		free(mr);
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
	free(mr);
	return 0;
}
