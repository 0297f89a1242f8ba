/*
 * mrshared: registering memory that is already shared, in place.
 *
 * A program's memfd (made with MFD_ALLOW_SEALING, mapped MAP_SHARED) is
 * registered as it is: the daemon maps the same file, sealed against
 * shrinking so that no truncation can fault it, through a descriptor the
 * library sends, or, when the program closed its own, through
 * /proc/PID/map_files; MAP_SHARED anonymous memory is reached that way
 * too. The sharing stays whole: a second mapping of the same pages, and
 * a fork child in the mapping it inherited and in one of its own, see
 * what the NIC writes, and the NIC reads what the child stored. Nothing
 * outside the registered range is touched: a WRITE one byte past its end
 * fails with REM_ACCESS_ERR, the guard bytes around it unchanged. Memory
 * that could shrink under the daemon is refused with EINVAL: a memfd
 * made without MFD_ALLOW_SEALING, POSIX shm, a shared file.
 *
 *   mrshared TARGET_DEV SENDER_DEV            memfds and shared anonymous
 *                                             memory of ordinary pages
 *   mrshared -hugetlb TARGET_DEV SENDER_DEV   the same of 2 MiB huge pages
 *                                             (MFD_HUGETLB, MAP_HUGETLB),
 *                                             and private hugetlb memory,
 *                                             refused (needs two free huge
 *                                             pages)
 * Each prints one line per check, PASS if all hold (exit 0). The daemon
 * opens map_files with CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE: run as
 * root.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "vtest.h"

#define REGION 5000 /* bytes: crosses a page boundary, ends mid-page */
#define GUARD 300

struct end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	union ibv_gid gid;
};

static void make_end(struct end *e, const char *dev)
{
	e->ctx = open_pd(dev, &e->pd, &e->gid);
	if (!(e->cq = ibv_create_cq(e->ctx, 16, NULL, NULL, 0)))
		die("ibv_create_cq");
	e->qp = NULL;
}

/* connect gives t and s a new pair of connected RC QPs: a WRITE past a
 * region leaves the old pair in the error state. */
static void connect(struct end *t, struct end *s)
{
	struct end *e[2] = {t, s};
	for (int i = 0; i < 2; i++) {
		if (e[i]->qp && ibv_destroy_qp(e[i]->qp))
			die("ibv_destroy_qp");
		struct ibv_qp_init_attr a = {.send_cq = e[i]->cq, .recv_cq = e[i]->cq, .qp_type = IBV_QPT_RC,
					     .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
		if (!(e[i]->qp = ibv_create_qp(e[i]->pd, &a)))
			die("ibv_create_qp");
	}
	rc_connect(t->qp, s->qp, &s->gid);
	rc_connect(s->qp, t->qp, &t->gid);
}

/* rdma posts one signaled WRITE or READ of len bytes between the local
 * buffer of lmr and raddr, and returns its completion's status. */
static int rdma(struct end *e, enum ibv_wr_opcode op, struct ibv_mr *lmr, size_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)lmr->addr, .length = len, .lkey = lmr->lkey};
	struct ibv_send_wr wr = {.wr_id = raddr, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(e->qp, &wr, &bad))
		die("ibv_post_send");
	struct ibv_wc wc;
	if (!poll_wc(e->cq, &wc, 30))
		die("ibv_poll_cq");
	return wc.status;
}

/* mapped_from says whether the mapping over addr is of a file whose name
 * holds name (/proc/self/maps). */
static int mapped_from(const void *addr, const char *name)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4352];
	int found = 0;
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		if (sscanf(line, "%lx-%lx", &a, &b) == 2 && a <= (uintptr_t)addr && (uintptr_t)addr < b)
			found = strstr(line, name) != NULL;
	}
	if (f)
		fclose(f);
	return found;
}

static int guards_hold(const unsigned char *region)
{
	for (int i = 1; i <= GUARD; i++)
		if (region[-i] != 0xAA || region[REGION + i - 1] != 0xAA)
			return 0;
	return 1;
}

/* second_mapping maps the pages of the shared mapping [block,
 * block+size) again: mremap of a shared mapping with old size 0, or, for
 * hugetlb's, which mremap refuses, the file through map_files. */
static unsigned char *second_mapping(unsigned char *block, size_t size)
{
	unsigned char *v = mremap(block, 0, size, MREMAP_MAYMOVE);
	if (v != MAP_FAILED)
		return v;
	char p[64];
	snprintf(p, sizeof(p), "/proc/self/map_files/%lx-%lx", (unsigned long)block, (unsigned long)block + size);
	int fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return MAP_FAILED;
	v = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return v;
}

enum kind {
	MEMFD,        /* a memfd whose descriptor the program holds */
	MEMFD_CLOSED, /* a memfd whose descriptor it closed once mapped */
	ANON,         /* MAP_SHARED anonymous memory */
};

/* in_place registers REGION bytes at offset off of size bytes of shared
 * memory of the kind k (a memfd made with flags) and runs the checks on
 * it. */
static void in_place(struct end *t, struct end *s, enum kind k, unsigned flags, size_t size, size_t off,
		     const char *what)
{
	char line[160];
	int mfd = -1;
	unsigned char *block;
	connect(t, s);
	if (k == ANON) {
		block = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | flags, -1, 0);
	} else {
		mfd = memfd_create("mrshared", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
		if (mfd < 0 || ftruncate(mfd, size) < 0)
			die("memfd");
		block = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
		if (k == MEMFD_CLOSED) {
			close(mfd);
			mfd = -1;
		}
	}
	if (block == MAP_FAILED)
		die("mmap the shared memory");
	const char *name = k == ANON ? (flags ? "/anon_hugepage" : "/dev/zero") : "/memfd:mrshared";
	unsigned char *region = block + off;
	memset(region - GUARD, 0xAA, REGION + 2 * GUARD);
	struct ibv_mr *mr = ibv_reg_mr(t->pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
								    IBV_ACCESS_REMOTE_READ);
	snprintf(line, sizeof(line), "%s: registered", what);
	check(mr != NULL, line);
	if (!mr)
		die("ibv_reg_mr");
	snprintf(line, sizeof(line), "%s: registered in place (still the program's shared memory)", what);
	check(mapped_from(region, name), line);
	if (k == MEMFD_CLOSED) {
		/* The program's own way back to the file it closed. */
		char p[64];
		snprintf(p, sizeof(p), "/proc/self/map_files/%lx-%lx", (unsigned long)block, (unsigned long)block + size);
		mfd = open(p, O_RDWR | O_CLOEXEC);
	}
	if (k != ANON) {
		int seals = fcntl(mfd, F_GET_SEALS);
		errno = 0;
		int shrink = ftruncate(mfd, 0);
		int shrink_err = errno;
		snprintf(line, sizeof(line), "%s: sealed against shrinking alone (ftruncate down: EPERM; up: ok)", what);
		check(seals == F_SEAL_SHRINK && shrink == -1 && shrink_err == EPERM && ftruncate(mfd, size * 2) == 0, line);
	}
	/* A second mapping of the same pages, which anonymous memory can
	 * have too. */
	unsigned char *view = second_mapping(block, size);
	if (view == MAP_FAILED)
		die("a second mapping");

	/* The sender's buffer is private memory, moved onto the library's
	 * memfd as usual. */
	unsigned char *src = malloc(REGION), *back = malloc(REGION);
	for (int i = 0; i < REGION; i++)
		src[i] = (unsigned char)(i * 31 + 7);
	struct ibv_mr *smr = ibv_reg_mr(s->pd, src, REGION, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *bmr = ibv_reg_mr(s->pd, back, REGION, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !bmr)
		die("ibv_reg_mr of the sender's buffers");

	int p2c[2], c2p[2];
	if (pipe(p2c) || pipe(c2p))
		die("pipe");
	pid_t child = fork();
	if (child < 0)
		die("fork");
	if (child == 0) {
		/* The child waits for the NIC's WRITE, looks in its inherited
		 * mapping and in a mapping of its own, and stores a byte. */
		char go, ok = 1;
		if (read(p2c[0], &go, 1) != 1)
			_exit(2);
		unsigned char *mine = second_mapping(block, size);
		ok = mine != MAP_FAILED && memcmp(region, src, REGION) == 0 && memcmp(mine + off, src, REGION) == 0;
		region[0] = 0x5c;
		if (write(c2p[1], &ok, 1) != 1)
			_exit(2);
		_exit(0);
	}
	int st = rdma(s, IBV_WR_RDMA_WRITE, smr, REGION, (uintptr_t)region, mr->rkey);
	snprintf(line, sizeof(line), "%s: WRITE of the whole region lands, in both of its mappings", what);
	check(st == IBV_WC_SUCCESS && memcmp(region, src, REGION) == 0 && memcmp(view + off, src, REGION) == 0, line);
	char ok = 0;
	if (write(p2c[1], "g", 1) != 1 || read(c2p[0], &ok, 1) != 1)
		die("the child");
	int status;
	waitpid(child, &status, 0);
	snprintf(line, sizeof(line), "%s: a fork child sees it, in the mapping it inherited and in one of its own", what);
	check(ok == 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, line);
	snprintf(line, sizeof(line), "%s: the child's store reaches the parent (the mapping is still shared)", what);
	check(region[0] == 0x5c, line);
	st = rdma(s, IBV_WR_RDMA_READ, bmr, REGION, (uintptr_t)region, mr->rkey);
	snprintf(line, sizeof(line), "%s: READ of the region gives the child's store and the NIC's bytes", what);
	check(st == IBV_WC_SUCCESS && back[0] == 0x5c && memcmp(back + 1, src + 1, REGION - 1) == 0, line);
	st = rdma(s, IBV_WR_RDMA_WRITE, smr, 1, (uintptr_t)region + REGION, mr->rkey);
	snprintf(line, sizeof(line), "%s: WRITE one byte past the end: REM_ACCESS_ERR, guards unchanged", what);
	check(st == IBV_WC_REM_ACCESS_ERR && guards_hold(region), line);
	snprintf(line, sizeof(line), "%s: deregistered, it stays the program's shared memory with its bytes", what);
	check(ibv_dereg_mr(mr) == 0 && mapped_from(region, name) && region[0] == 0x5c &&
		      memcmp(region + 1, src + 1, REGION - 1) == 0,
	      line);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(bmr);
	free(src);
	free(back);
	munmap(view, size);
	munmap(block, size);
	if (mfd >= 0)
		close(mfd);
	close(p2c[0]);
	close(p2c[1]);
	close(c2p[0]);
	close(c2p[1]);
}

/* refused registers one page at p and says whether it failed with EINVAL. */
static int refused(struct end *t, void *p)
{
	if (p == MAP_FAILED)
		die("mmap");
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(t->pd, p, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		ibv_dereg_mr(mr);
		return 0;
	}
	return errno == EINVAL;
}

static void refusals(struct end *t)
{
	int fd = memfd_create("unsealable", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, 8192))
		die("memfd");
	check(refused(t, mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) && ftruncate(fd, 4096) == 0,
	      "a memfd made without MFD_ALLOW_SEALING: EINVAL, and it can still shrink");
	close(fd);
	char name[64];
	snprintf(name, sizeof(name), "/mrshared-%d", (int)getpid());
	fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 || ftruncate(fd, 8192))
		die("shm_open");
	shm_unlink(name);
	check(refused(t, mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)), "POSIX shm: EINVAL");
	close(fd);
	char path[] = "/tmp/mrshared-XXXXXX";
	fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, 8192))
		die("a file");
	unlink(path);
	check(refused(t, mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)), "a shared file: EINVAL");
	close(fd);
}

int main(int argc, char **argv)
{
	int huge = argc == 4 && strcmp(argv[1], "-hugetlb") == 0;
	if (argc != 3 && !huge) {
		fprintf(stderr, "usage: mrshared [-hugetlb] TARGET_DEV SENDER_DEV\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct end t, s;
	make_end(&t, argv[argc - 2]);
	make_end(&s, argv[argc - 1]);
	if (huge) {
		/* Across no huge page boundary: one 2 MiB page, the region
		 * in its middle. */
		in_place(&t, &s, MEMFD, MFD_HUGETLB, 2 << 20, (1 << 20) + 100, "hugetlb memfd");
		in_place(&t, &s, ANON, MAP_HUGETLB, 2 << 20, (1 << 20) + 100, "shared anonymous hugetlb memory");
		check(refused(&t, mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0)),
		      "private hugetlb memory: EINVAL");
	} else {
		in_place(&t, &s, MEMFD, 0, 4 * 4096, 4096 + 100, "memfd");
		in_place(&t, &s, MEMFD_CLOSED, 0, 4 * 4096, 4096 + 100, "memfd, its descriptor closed");
		in_place(&t, &s, ANON, 0, 4 * 4096, 4096 + 100, "shared anonymous memory");
		refusals(&t);
	}
	return verdict();
}
