/*
 * mrbounds: the memory rule, seen from a C program on rnicd.
 *
 * It opens two devices (the target's and the sender's: two rnicd), and
 * on the target registers the middle of a malloc'd block, with guard
 * bytes on both sides inside the same pages. The sender, with the
 * region's rkey, then:
 *   1. WRITEs the whole region: it lands, byte for byte;
 *   2. WRITEs one byte just past the region's end: REM_ACCESS_ERR;
 * and the guard bytes around the region must be unchanged throughout.
 *
 *   mrbounds TARGET_DEV SENDER_DEV         run the checks, exit 0 if all hold
 *   mrbounds -hold DEV                     make a QP, CQ, PD and MR, print
 *                                          "ready" and wait to be killed
 *   mrbounds -spin DEV                     print "ready", poll an empty CQ
 *                                          until the poll fails, exit 0
 *   mrbounds -events DEV                   the completion channel's fd: a
 *                                          pipe, blocking until the program
 *                                          sets O_NONBLOCK, which
 *                                          ibv_get_cq_event then honours
 *   mrbounds -shm TARGET_DEV SENDER_DEV    the same checks on System V
 *                                          shared memory, which stays
 *                                          shared: a second attachment
 *                                          sees what the NIC writes, also
 *                                          after the first is detached;
 *                                          a shared file is refused
 */
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "vtest.h"

#define REGION 5000 /* bytes: crosses a page boundary, ends mid-page */
#define GUARD 300

struct end {
	struct ibv_comp_channel *ch; /* NULL: the CQ reports to none */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static void make_end_ch(struct end *e, const char *dev, int with_channel)
{
	e->ctx = open_pd(dev, &e->pd, &e->gid);
	e->ch = NULL;
	if (with_channel && !(e->ch = ibv_create_comp_channel(e->ctx)))
		die("ibv_create_comp_channel");
	if (!(e->cq = ibv_create_cq(e->ctx, 16, NULL, e->ch, 0)))
		die("ibv_create_cq");
	struct ibv_qp_init_attr a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!(e->qp = ibv_create_qp(e->pd, &a)))
		die("ibv_create_qp");
}

/* connect_qp takes e's QP to RTS towards peer's, with remote WRITE
 * access only. */
static void connect_qp(struct end *e, struct end *peer)
{
	qp_connect(e->qp, &(struct qp_path){.dest_qp_num = peer->qp->qp_num, .dgid = peer->gid,
					    .access = IBV_ACCESS_REMOTE_WRITE, .psn = 0x100});
}

/* write posts one signaled WRITE and returns its completion's status. */
static int write_wr(struct end *e, struct ibv_mr *src, size_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src->addr, .length = len, .lkey = src->lkey};
	struct ibv_send_wr wr = {.wr_id = raddr, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(e->qp, &wr, &bad))
		die("ibv_post_send");
	struct ibv_wc wc;
	must(poll_wc(e->cq, &wc, 10), "no completion in 10 s");
	if (wc.wr_id != raddr || wc.opcode != IBV_WC_RDMA_WRITE) {
		fprintf(stderr, "completion wr_id %#llx opcode %d\n", (unsigned long long)wc.wr_id, wc.opcode);
		exit(2);
	}
	return wc.status;
}

/* stack_region registers a buffer on this function's stack (the frames
 * of the library's calls lie just below it, in the same pages), has the
 * sender WRITE the source's bytes into it, and checks them. */
static __attribute__((noinline)) int stack_region(struct end *s, struct end *t, struct ibv_mr *smr)
{
	unsigned char buf[3000];
	memset(buf, 0x33, sizeof(buf));
	struct ibv_mr *mr = ibv_reg_mr(t->pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr of a stack buffer");
	int st = write_wr(s, smr, sizeof(buf), (uintptr_t)buf, mr->rkey);
	int ok = st == IBV_WC_SUCCESS && memcmp(buf, smr->addr, sizeof(buf)) == 0;
	if (ibv_dereg_mr(mr))
		die("ibv_dereg_mr of a stack buffer");
	return ok && memcmp(buf, smr->addr, sizeof(buf)) == 0;
}

/* stack_at calls stack_region pad bytes deeper in the stack. */
static __attribute__((noinline)) int stack_at(int pad, struct end *s, struct end *t, struct ibv_mr *smr)
{
	volatile char deeper[pad + 1];
	deeper[0] = 0;
	return stack_region(s, t, smr) + deeper[0];
}

/* shared_maps counts this process's mappings of the library's memfd. */
static int shared_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4352];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "/memfd:rnicd-mr") != NULL;
	if (f)
		fclose(f);
	return n;
}

static int check_guards(const unsigned char *block, const char *when)
{
	for (int i = 0; i < GUARD; i++) {
		if (block[i] != 0xa5 || block[GUARD + REGION + i] != 0x5a) {
			printf("FAIL: guard byte changed %s (offset %d before or after the region)\n", when, i);
			return 1;
		}
	}
	return 0;
}

static void make_end(struct end *e, const char *dev) { make_end_ch(e, dev, 0); }

/* pair opens the target's and the sender's ends and connects their QPs. */
static void pair(struct end *t, struct end *s, const char *tdev, const char *sdev)
{
	make_end(t, tdev);
	make_end(s, sdev);
	connect_qp(t, s);
	connect_qp(s, t);
}

/* guarded fills block as the checks want it: GUARD bytes of 0xa5, the
 * region's REGION bytes zeroed, GUARD bytes of 0x5a; it returns the
 * region. */
static unsigned char *guarded(unsigned char *block)
{
	memset(block, 0xa5, GUARD);
	memset(block + GUARD, 0, REGION);
	memset(block + GUARD + REGION, 0x5a, GUARD);
	return block + GUARD;
}

/* source registers the sender's REGION bytes, byte i being i * mul + add. */
static struct ibv_mr *source(struct end *s, int mul, int add)
{
	unsigned char *src = malloc(REGION);
	if (!src)
		die("malloc");
	for (int i = 0; i < REGION; i++)
		src[i] = (unsigned char)(i * mul + add);
	struct ibv_mr *smr = ibv_reg_mr(s->pd, src, REGION, IBV_ACCESS_LOCAL_WRITE);
	if (!smr)
		die("ibv_reg_mr of the source");
	return smr;
}

/* events checks the completion channel's fd as libibverbs has it: a
 * blocking descriptor (here the read end of the daemon's wake pipe) until
 * the program sets O_NONBLOCK, then ibv_get_cq_event fails with EAGAIN
 * when there is no event, and takes one when poll says there is. */
static int events(const char *dev)
{
	struct end a, b;
	make_end_ch(&a, dev, 1);
	make_end(&b, dev);
	connect_qp(&a, &b);
	connect_qp(&b, &a);
	struct stat st;
	int fl = fcntl(a.ch->fd, F_GETFL);
	must(fstat(a.ch->fd, &st) == 0 && S_ISFIFO(st.st_mode), "the channel's fd is a pipe");
	must(fl >= 0 && !(fl & O_NONBLOCK), "the channel's fd is blocking by default");
	must(fcntl(a.ch->fd, F_SETFL, fl | O_NONBLOCK) == 0, "set O_NONBLOCK");
	struct ibv_cq *cq;
	void *cctx;
	errno = 0;
	must(ibv_get_cq_event(a.ch, &cq, &cctx) == -1 && errno == EAGAIN, "no event: EAGAIN");
	printf("no event, O_NONBLOCK: EAGAIN\n");
	char *src = malloc(64), *dst = malloc(64);
	struct ibv_mr *smr = ibv_reg_mr(a.pd, src, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(b.pd, dst, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	must(smr && dmr, "ibv_reg_mr");
	must(ibv_req_notify_cq(a.cq, 0) == 0, "ibv_req_notify_cq");
	must(write_wr(&a, smr, 64, (uintptr_t)dst, dmr->rkey) == IBV_WC_SUCCESS, "the WRITE");
	struct pollfd p = {.fd = a.ch->fd, .events = POLLIN};
	must(poll(&p, 1, 10000) == 1, "the channel's fd readable after a completion on the armed CQ");
	must(ibv_get_cq_event(a.ch, &cq, &cctx) == 0 && cq == a.cq, "ibv_get_cq_event takes the CQ's event");
	ibv_ack_cq_events(cq, 1);
	errno = 0;
	must(ibv_get_cq_event(a.ch, &cq, &cctx) == -1 && errno == EAGAIN, "taken: EAGAIN again");
	printf("an armed CQ's completion: the fd readable, one event, then EAGAIN\nPASS\n");
	return 0;
}

static __attribute__((noreturn)) int hold(const char *dev)
{
	struct end e;
	make_end(&e, dev);
	char *buf = malloc(REGION);
	if (!ibv_reg_mr(e.pd, buf, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		die("ibv_reg_mr");
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* spin polls an empty CQ until the poll fails (its daemon was killed). */
static int spin(const char *dev)
{
	struct end e;
	make_end(&e, dev);
	printf("ready\n");
	fflush(stdout);
	struct ibv_wc wc;
	int n;
	while ((n = ibv_poll_cq(e.cq, 1, &wc)) == 0)
		;
	printf("ibv_poll_cq: %d\n", n);
	return n < 0 ? 0 : 1;
}


/* shm: the region is in a System V segment, attached twice. */
static int shm(const char *tdev, const char *sdev)
{
	struct end t, s;
	pair(&t, &s, tdev, sdev);
	int id = shmget(IPC_PRIVATE, 3 * 4096, IPC_CREAT | 0600);
	if (id < 0)
		die("shmget");
	unsigned char *block = shmat(id, NULL, 0), *other = shmat(id, NULL, 0);
	shmctl(id, IPC_RMID, NULL); /* it goes with its last attachment */
	if (block == (void *)-1 || other == (void *)-1)
		die("shmat");
	unsigned char *region = guarded(block);
	struct ibv_mr *mr = ibv_reg_mr(t.pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr of System V shared memory");
	struct ibv_mr *smr = source(&s, 11, 3);
	unsigned char *src = smr->addr;
	int st = write_wr(&s, smr, REGION, (uintptr_t)region, mr->rkey);
	if (st != IBV_WC_SUCCESS || memcmp(region, src, REGION) || memcmp(other + GUARD, src, REGION) ||
	    check_guards(block, "by a WRITE inside the region")) {
		printf("FAIL: WRITE into System V shared memory: %s\n", ibv_wc_status_str(st));
		return 1;
	}
	printf("shm: WRITE of %d bytes: %s, data checked in both attachments\n", REGION, ibv_wc_status_str(st));
	/* The program detaches the registered attachment: the region stays
	 * the NIC's to write, and the other attachment sees it. */
	if (shmdt(block))
		die("shmdt");
	for (int i = 0; i < REGION; i++)
		src[i] ^= 0xff;
	st = write_wr(&s, smr, REGION, (uintptr_t)region, mr->rkey);
	if (st != IBV_WC_SUCCESS || memcmp(other + GUARD, src, REGION) || check_guards(other, "after the detach")) {
		printf("FAIL: shm: WRITE after the program detached: %s\n", ibv_wc_status_str(st));
		return 1;
	}
	printf("shm: detached by the program, a WRITE still lands in the segment\n");
	st = write_wr(&s, smr, 1, (uintptr_t)region + REGION, mr->rkey);
	if (st != IBV_WC_REM_ACCESS_ERR || check_guards(other, "by a WRITE past the end") ||
	    memcmp(other + GUARD, src, REGION)) {
		printf("FAIL: shm: WRITE one byte past the end: %s, want remote access error\n", ibv_wc_status_str(st));
		return 1;
	}
	printf("shm: WRITE one byte past the end: %s, guards unchanged\n", ibv_wc_status_str(st));
	if (ibv_dereg_mr(mr))
		die("ibv_dereg_mr");

	/* A shared mapping of a file could be truncated under the daemon:
	 * refused. */
	char path[] = "/tmp/mrbounds-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, 4096))
		die("a file");
	unlink(path);
	void *file = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (file == MAP_FAILED)
		die("mmap");
	errno = 0;
	if (ibv_reg_mr(t.pd, file, 4096, IBV_ACCESS_LOCAL_WRITE) || errno != EINVAL) {
		printf("FAIL: a shared file mapping was registered (errno %d)\n", errno);
		return 1;
	}
	printf("shm: a shared file mapping: EINVAL\nPASS\n");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "-shm") == 0)
		return shm(argv[2], argv[3]);
	if (argc == 3 && strcmp(argv[1], "-hold") == 0)
		return hold(argv[2]);
	if (argc == 3 && strcmp(argv[1], "-spin") == 0)
		return spin(argv[2]);
	if (argc == 3 && strcmp(argv[1], "-events") == 0)
		return events(argv[2]);
	if (argc != 3) {
		fprintf(stderr, "usage: mrbounds TARGET_DEV SENDER_DEV | mrbounds -hold|-spin|-events DEV\n");
		return 2;
	}
	struct end t, s;
	pair(&t, &s, argv[1], argv[2]);

	/* The region is the middle of a malloc'd block: the guards share
	 * its first and last page. */
	unsigned char *block = malloc(GUARD + REGION + GUARD);
	unsigned char *region = guarded(block);
	struct ibv_mr *mr = ibv_reg_mr(t.pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr of malloc'd memory");
	if (mr->addr != region || mr->length != REGION) {
		printf("FAIL: MR addr %p length %zu, want %p %d\n", mr->addr, mr->length, (void *)region, REGION);
		return 1;
	}
	/* The program still owns its memory as before, guards included. */
	if (check_guards(block, "by ibv_reg_mr"))
		return 1;

	struct ibv_mr *smr = source(&s, 7, 1);
	unsigned char *src = smr->addr;

	int st = write_wr(&s, smr, REGION, (uintptr_t)region, mr->rkey);
	if (st != IBV_WC_SUCCESS) {
		printf("FAIL: WRITE of the whole region: %s\n", ibv_wc_status_str(st));
		return 1;
	}
	if (memcmp(region, src, REGION) != 0) {
		printf("FAIL: the region does not hold what was written\n");
		return 1;
	}
	if (check_guards(block, "by a WRITE inside the region"))
		return 1;
	printf("WRITE of %d bytes inside the region: %s, data checked\n", REGION, ibv_wc_status_str(st));

	st = write_wr(&s, smr, 1, (uintptr_t)region + REGION, mr->rkey);
	if (st != IBV_WC_REM_ACCESS_ERR) {
		printf("FAIL: WRITE one byte past the end: %s, want remote access error\n", ibv_wc_status_str(st));
		return 1;
	}
	if (check_guards(block, "by a WRITE past the end") || memcmp(region, src, REGION) != 0)
		return 1;
	printf("WRITE one byte past the end: %s, guards unchanged\n", ibv_wc_status_str(st));

	/* fork: the child gets its own copy of the registered pages, as
	 * with a kernel driver; its stores do not reach the parent, and the
	 * NIC's still do. */
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		int same = memcmp(region, src, REGION) == 0 && !check_guards(block, "in the child");
		memset(block, 0xee, GUARD + REGION + GUARD);
		_exit(same ? 0 : 1);
	}
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("FAIL: the child did not see the parent's memory (status %#x)\n", status);
		return 1;
	}
	if (check_guards(block, "by the child") || memcmp(region, src, REGION) != 0) {
		printf("FAIL: the child's stores reached the parent\n");
		return 1;
	}
	/* The QP moved to ERR with the access error: a new pair of QPs
	 * carries the WRITE after the fork. */
	struct end t2 = t, s2 = s;
	struct ibv_qp_init_attr qa = {.send_cq = t.cq, .recv_cq = t.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	if (!(t2.qp = ibv_create_qp(t.pd, &qa)))
		die("ibv_create_qp");
	qa.send_cq = qa.recv_cq = s.cq;
	if (!(s2.qp = ibv_create_qp(s.pd, &qa)))
		die("ibv_create_qp");
	connect_qp(&t2, &s2);
	connect_qp(&s2, &t2);
	for (int i = 0; i < REGION; i++)
		src[i] = (unsigned char)(i * 13 + 5);
	st = write_wr(&s2, smr, REGION, (uintptr_t)region, mr->rkey);
	if (st != IBV_WC_SUCCESS || memcmp(region, src, REGION) != 0 || check_guards(block, "after fork")) {
		printf("FAIL: WRITE after fork: %s\n", ibv_wc_status_str(st));
		return 1;
	}
	printf("after fork: the child had its own copy, a WRITE still lands in the parent\n");

	/* The ibv_wr_* API: two WRITEs in one batch, one from an SGE, one
	 * inline, published by ibv_wr_complete. */
	struct ibv_qp_init_attr_ex xa = {.send_cq = s.cq, .recv_cq = s.cq, .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						 .max_recv_sge = 1, .max_inline_data = 64},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = s.pd,
					 .send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE};
	struct end s3 = s, t3 = t;
	if (!(s3.qp = ibv_create_qp_ex(s.ctx, &xa)))
		die("ibv_create_qp_ex");
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(s3.qp);
	qa.send_cq = qa.recv_cq = t.cq;
	if (!qx || !(t3.qp = ibv_create_qp(t.pd, &qa)))
		die("ibv_qp_to_qp_ex");
	if (ibv_qp_to_qp_ex(t3.qp) != NULL) {
		printf("FAIL: ibv_qp_to_qp_ex of a QP made by ibv_create_qp is not NULL\n");
		return 1;
	}
	connect_qp(&t3, &s3);
	connect_qp(&s3, &t3);
	unsigned char inl[16];
	memset(inl, 0x77, sizeof(inl));
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)region + 100);
	ibv_wr_set_sge(qx, smr->lkey, (uintptr_t)src, 200);
	qx->wr_id = 2;
	ibv_wr_rdma_write(qx, mr->rkey, (uintptr_t)region + 1000);
	ibv_wr_set_inline_data(qx, inl, sizeof(inl));
	memset(inl, 0, sizeof(inl)); /* the setter copied it */
	if (ibv_wr_complete(qx))
		die("ibv_wr_complete");
	struct ibv_wc wcs[2];
	int got = 0;
	time_t deadline = time(NULL) + 10;
	while (got < 2 && time(NULL) <= deadline)
		got += ibv_poll_cq(s.cq, 2 - got, wcs + got);
	unsigned char want[REGION];
	memcpy(want, src, REGION);
	memcpy(want + 100, src, 200);
	memset(want + 1000, 0x77, 16);
	if (got != 2 || wcs[0].wr_id != 1 || wcs[1].wr_id != 2 || wcs[0].status || wcs[1].status ||
	    memcmp(region, want, REGION) != 0 || check_guards(block, "by the ibv_wr_* WRITEs")) {
		printf("FAIL: ibv_wr_* WRITEs: %d completions\n", got);
		return 1;
	}
	xa.send_ops_flags = IBV_QP_EX_WITH_TSO;
	if (ibv_create_qp_ex(s.ctx, &xa) != NULL || errno != EOPNOTSUPP) {
		printf("FAIL: a QP with TSO sends was created\n");
		return 1;
	}
	printf("ibv_wr_* API: an SGE WRITE and an inline WRITE in one batch landed\n");

	/* At 16 depths, so that the buffer starts at many offsets in its
	 * page and the library's frames below it share its pages. */
	for (int k = 0; k < 16; k++) {
		if (!stack_at(k * 257, &s3, &t3, smr)) {
			printf("FAIL: WRITE into a buffer on the stack (depth %d)\n", k * 257);
			return 1;
		}
	}
	printf("a buffer on the stack: the WRITE landed and the frames below it survived\n");

	/* A local SGE one byte longer than the sender's own region: the NIC
	 * refuses to read it (LOC_PROT_ERR) and sends nothing. */
	st = write_wr(&s3, smr, REGION + 1, (uintptr_t)region, mr->rkey);
	if (st != IBV_WC_LOC_PROT_ERR || memcmp(region, want, REGION) != 0 || check_guards(block, "by a refused WRITE")) {
		printf("FAIL: WRITE from one byte past the source region: %s\n", ibv_wc_status_str(st));
		return 1;
	}
	printf("WRITE from one byte past the source region: %s, nothing sent\n", ibv_wc_status_str(st));

	/* Deregistration gives the pages back as ordinary memory. */
	if (ibv_dereg_mr(mr))
		die("ibv_dereg_mr");
	if (check_guards(block, "by ibv_dereg_mr") || memcmp(region, want, REGION) != 0) {
		printf("FAIL: ibv_dereg_mr changed the region's bytes\n");
		return 1;
	}
	/* ... and writable as before. */
	region[0] ^= 1;
	block[0] ^= 1;
	region[0] ^= 1;
	block[0] ^= 1;

	/* A region the program never deregisters goes back to private
	 * memory when its context closes: no mapping of the shared memfd
	 * is left, and the bytes are the program's as before. */
	memcpy(want, region, REGION);
	struct ibv_context *c2 = open_dev(argv[1]);
	struct ibv_pd *pd2 = ibv_alloc_pd(c2);
	if (!pd2 || !ibv_reg_mr(pd2, region, REGION, IBV_ACCESS_LOCAL_WRITE))
		die("ibv_reg_mr on a second context");
	if (!shared_maps()) {
		printf("FAIL: a registered region is not on the shared memfd\n");
		return 1;
	}
	ibv_close_device(t.ctx); /* its MR was deregistered above */
	ibv_close_device(s.ctx); /* the source MR, left registered */
	ibv_close_device(c2);
	if (memcmp(region, want, REGION) != 0 || check_guards(block, "by ibv_close_device")) {
		printf("FAIL: ibv_close_device changed the bytes of a region\n");
		return 1;
	}
	if (shared_maps()) {
		printf("FAIL: after ibv_close_device, %d mappings of the shared memfd are left\n", shared_maps());
		return 1;
	}
	printf("ibv_close_device gave the pages of a region left registered back\n");
	printf("PASS\n");
	return 0;
}
