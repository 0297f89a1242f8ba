/*
 * mem.c: how the NIC reaches a C program's memory.
 *
 * rnicd's host interface maps the memory of a region (RegMR hands it a
 * memfd sealed against shrinking, which it maps: zero copies, and the
 * pipelines' bounds checks against the region are the only gate). A C
 * program registers ordinary memory: malloc, the stack, mmap. The choice
 * made here is to move the registered pages onto a memfd the library
 * shares with the daemon, in place: their contents are copied into the
 * memfd and the memfd is mapped over them at the same address
 * (MAP_FIXED), so the program sees the same bytes at the same addresses
 * and the daemon maps the same pages.
 *
 * Why not the other way, the daemon reading and writing the program
 * through process_vm_readv/writev: that is one system call per DMA in the
 * daemon (every packet of a WRITE, every READ response), it cannot do an
 * atomic compare-and-swap or fetch-and-add atomically against the
 * program's own stores, and it would change rnic/dma, which every
 * pipeline goes through. The memfd keeps the daemon exactly as it is for
 * Go clients, atomics included, at full speed.
 *
 * One memfd serves the whole process, sized to the user address space
 * and sparse: a page at virtual address A lives at offset A of the
 * memfd. Two regions that share a page (two malloc'd buffers side by
 * side, or the same buffer registered twice) then share its memfd page
 * too, with no bookkeeping of which region brought it. Only the pages a
 * registration covers are moved; a page is moved back to private
 * anonymous memory when the last region covering it is deregistered, and
 * its memfd page is freed (FALLOC_FL_PUNCH_HOLE).
 *
 * What it costs, and where it differs from a kernel driver:
 *  - A page holds more than the region: a malloc'd buffer shares its
 *    first and last page with other data. That data moves with the page
 *    and stays where it is for the program; the daemon maps whole pages
 *    but the region's bounds are byte-exact (rnic/dma), so nothing outside
 *    a registered range is ever read or written by the NIC.
 *  - The move is a copy then a remap, and other threads keep running: a
 *    page holds malloc's own words and other threads' data, and a store
 *    into it between the copy and the remap would be lost (a loaded run
 *    lost malloc's update of a free list: "corrupted unsorted chunks").
 *    So the pages are write-protected for the move, and a thread that
 *    stores into one waits in the library's SIGSEGV handler until the
 *    move is done, then its store goes to the moved page (the fence,
 *    below). What a handler cannot hold is the kernel writing into the
 *    page for another thread's system call (a read() into a buffer on
 *    it) during the move: that call fails with EFAULT. A kernel driver
 *    pins pages instead and has neither cost.
 *  - fork: the memfd pages are MAP_SHARED, so a child would share them
 *    with its parent instead of getting a copy. The child handler of
 *    pthread_atfork gives the child private copies of every moved page,
 *    which is what a kernel with FOLL_PIN fork support does for pinned
 *    pages (ibv_fork_init is not needed, ibv_is_fork_initialized says
 *    IBV_FORK_UNNEEDED).
 *  - Memory that is already a shared mapping cannot be moved without
 *    parting it from the processes it is shared with. System V shared
 *    memory (shmat: UCX's default allocator) is registered in place: the
 *    daemon attaches the same segment, whose size cannot change, so no
 *    truncation can fault its DMA (hostif/shm.go). A shared mapping of
 *    a memfd (hugetlb's too) or MAP_SHARED anonymous memory is
 *    registered in place as well: the daemon maps the same file, one
 *    that cannot shrink under it (share_file). A shared file, POSIX shm
 *    or a memfd made without MFD_ALLOW_SEALING could be truncated under
 *    the daemon's mapping: such a registration fails with EINVAL and
 *    says why.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <ucontext.h>
#include <unistd.h>

#include "rnic.h"

#define SPAN (1ull << 47) /* x86-64 user address space */
#define MEMFD_NAME "rnicd-mr"

/* A registered range, page-aligned. */
struct range {
	uintptr_t lo, hi;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int memfd = -1;
static struct range *regs;
static size_t nregs, capregs;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void atfork_prepare(void) { pthread_mutex_lock(&mu); }
static void atfork_parent(void) { pthread_mutex_unlock(&mu); }
static void atfork_child(void);

static void init_once(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static uintptr_t page_down(uintptr_t a) { return a & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1); }
static uintptr_t page_up(uintptr_t a) { return page_down(a + sysconf(_SC_PAGESIZE) - 1); }

/* vma is one line of /proc/self/maps cut to [lo, hi). */
struct vma {
	uintptr_t lo, hi;
	int prot;
	int shared; /* 's' */
	int ours;   /* a mapping of the library's memfd */
	int sysv;   /* an attachment of System V shared memory */
	int anon;   /* MAP_SHARED anonymous memory (shmem or hugetlb, no file) */
	unsigned long ino; /* the file's inode: a System V segment's id */
	unsigned long start, off; /* where the whole mapping starts, and its file offset */
	unsigned dev_major, dev_minor;
	char path[64]; /* the start of the mapped file's name, for messages */
};

/* vmas lists the mappings over [lo, hi) into v (at most max); it returns
 * their count, -1 if part of the range is not mapped, -2 if it spans more
 * than max mappings. */
static int vmas(uintptr_t lo, uintptr_t hi, struct vma *v, int max)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return -1;
	char line[4352];
	int n = 0;
	uintptr_t next = lo;
	while (next < hi && fgets(line, sizeof(line), f)) {
		unsigned long a, b, off = 0, ino = 0;
		unsigned maj = 0, min = 0;
		char perms[8], path[4096] = "";
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu %4095[^\n]", &a, &b, perms, &off, &maj, &min, &ino, path) < 3)
			continue;
		if (b <= next || a >= hi)
			continue;
		if (a > next)
			break; /* a hole */
		if (n == max) {
			fclose(f);
			return -2;
		}
		struct vma *x = &v[n++];
		x->lo = next;
		x->hi = b < hi ? b : hi;
		x->prot = (perms[0] == 'r' ? PROT_READ : 0) | (perms[1] == 'w' ? PROT_WRITE : 0) |
			  (perms[2] == 'x' ? PROT_EXEC : 0);
		x->shared = perms[3] == 's';
		x->ours = strstr(path, "/memfd:" MEMFD_NAME) != NULL;
		x->sysv = x->shared && !strncmp(path, "/SYSV", 5);
		x->anon = x->shared && (!strcmp(path, "/dev/zero (deleted)") || !strcmp(path, "/anon_hugepage (deleted)"));
		x->ino = ino;
		x->start = a;
		x->off = off;
		x->dev_major = maj;
		x->dev_minor = min;
		snprintf(x->path, sizeof(x->path), "%s", path);
		next = x->hi;
	}
	fclose(f);
	return next >= hi ? n : -1;
}

static int open_memfd(void)
{
	if (memfd >= 0)
		return 0;
	int fd = memfd_create(MEMFD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return errno;
	/* rnicd maps only memfds it knows cannot shrink under it; the span
	 * never changes size, so it is sealed at it. */
	if (ftruncate(fd, SPAN) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int err = errno;
		close(fd);
		return err;
	}
	memfd = fd;
	return 0;
}

#define MAXV 64

/*
 * The fence: while a range moves (onto the memfd or off it), its pages
 * are read-only, and the library's SIGSEGV handler holds a thread that
 * stores into one until the move is done; returning from the handler
 * runs the store again, into the moved page. Every other fault goes to
 * the handler the program had (or to the default action, a core dump).
 *
 * gen is odd while a move runs (and is its futex word); lo and hi are
 * the range of the move. A thread can fault during a move and take its
 * signal only after the move ended, even after later moves of other
 * ranges (the kernel may schedule between the fault and the signal's
 * delivery: a whole time slice on a loaded machine): a fault in any of
 * the last FENCE_RECENT moves' ranges is retried, its page writable
 * again. A store into such a page that the program itself made
 * read-only afterwards would be retried forever, so only `spare`
 * retries are granted after each move before faults there go to the
 * program's handler too.
 *
 * The handler stays installed once the first move put it there: a
 * thread may take a signal from a move that ended, and a handler taken
 * away by then would leave it the default action. A program that
 * installs its own handler later gets it back for the next move, the
 * program's kept behind it.
 *
 * A thread whose own stack lies in the moving pages (a program that
 * registers a buffer on another thread's stack while that thread runs)
 * cannot take the signal unless it has an alternate signal stack: the
 * kernel has nowhere to write the signal's frame.
 */
#define FENCE_SPARE 4096
#define FENCE_RECENT 64
static struct {
	atomic_uint gen;
	atomic_uintptr_t lo, hi;
	atomic_int spare;
	atomic_int tid, prot; /* the moving thread, the range's protection */
	unsigned moves;       /* under mu: the next entry of recent */
	struct {
		atomic_uintptr_t lo, hi;
	} recent[FENCE_RECENT];
} fence;

/* fence_recent says whether a is in one of the last moves' ranges. */
static int fence_recent(uintptr_t a)
{
	for (int i = 0; i < FENCE_RECENT; i++)
		if (a >= atomic_load(&fence.recent[i].lo) && a < atomic_load(&fence.recent[i].hi))
			return 1;
	return 0;
}
static struct sigaction prev_segv;

static void fence_handler(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	unsigned g = atomic_load(&fence.gen);
	if (si->si_code == SEGV_ACCERR && a >= atomic_load(&fence.lo) && a < atomic_load(&fence.hi)) {
		if ((g & 1) && atomic_load(&fence.tid) == (int)syscall(SYS_gettid)) {
			/* The mover itself stores into the range: a hook of
			 * the program's around mmap (UCX's memory events
			 * patch every library's mmap) wrote into the page.
			 * Waiting would wait for itself; the range is made
			 * writable again, and such a store can be lost as
			 * it could before the fence. */
			int saved = errno;
			mprotect((void *)atomic_load(&fence.lo), atomic_load(&fence.hi) - atomic_load(&fence.lo),
				 atomic_load(&fence.prot));
			errno = saved;
			return;
		}
		if (g & 1) {
			int saved = errno;
			while (atomic_load(&fence.gen) == g)
				syscall(SYS_futex, &fence.gen, FUTEX_WAIT_PRIVATE, g, NULL, NULL, 0);
			errno = saved;
			return;
		}
	}
	if (si->si_code == SEGV_ACCERR && fence_recent(a) && atomic_fetch_sub(&fence.spare, 1) > 0)
		return;
	/* Not the fence's: as if the library had no handler. */
	if (prev_segv.sa_flags & SA_SIGINFO) {
		prev_segv.sa_sigaction(sig, si, uc);
	} else if (prev_segv.sa_handler == SIG_DFL || prev_segv.sa_handler == SIG_IGN) {
		/* The store runs again and faults with the default action,
		 * which dumps core at the faulting instruction. */
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigaction(SIGSEGV, &dfl, NULL);
	} else {
		prev_segv.sa_handler(sig);
	}
}

/* fence_install puts the handler in place if it is not; mu is held. */
static int fence_install(void)
{
	struct sigaction cur;
	if (sigaction(SIGSEGV, NULL, &cur) < 0)
		return errno;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fence_handler)
		return 0;
	struct sigaction sa = {.sa_sigaction = fence_handler, .sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART};
	sigemptyset(&sa.sa_mask);
	prev_segv = cur;
	if (sigaction(SIGSEGV, &sa, NULL) < 0)
		return errno;
	return 0;
}

/* fence_up write-protects [lo, hi) (of protection prot) for a move. */
static int fence_up(uintptr_t lo, uintptr_t hi, int prot)
{
	/* hi first: a handler reading the entry meanwhile matches nothing. */
	unsigned i = fence.moves++ % FENCE_RECENT;
	atomic_store(&fence.recent[i].hi, 0);
	atomic_store(&fence.recent[i].lo, lo);
	atomic_store(&fence.recent[i].hi, hi);
	atomic_store(&fence.lo, lo);
	atomic_store(&fence.hi, hi);
	atomic_store(&fence.prot, prot);
	atomic_store(&fence.tid, (int)syscall(SYS_gettid));
	atomic_fetch_add(&fence.gen, 1);
	if ((prot & PROT_WRITE) && mprotect((void *)lo, hi - lo, prot & ~PROT_WRITE) < 0)
		return errno;
	return 0;
}

/* fence_down lets the threads held at the fence go. */
static void fence_down(void)
{
	atomic_store(&fence.spare, FENCE_SPARE);
	atomic_fetch_add(&fence.gen, 1);
	syscall(SYS_futex, &fence.gen, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/*
 * The move itself (copy the pages, then map the copy over them) must see
 * no store into the pages in between, or the store is lost. The calling
 * thread's own stack is such a store: a program may register a buffer
 * on its stack, and this code's frames and return addresses lie just
 * below it, often in the same page (a stack buffer crashed the first
 * version). So the copy and the remap run on a stack of their own
 * (swapcontext): the caller's stack is frozen from before the copy until
 * after the remap. What runs there makes system calls and memcpy only;
 * /proc/self/maps is read before (its FILE is on the heap, which a
 * malloc'd region shares pages with).
 */
static struct {
	int out, keep, n, err;
	struct vma v[MAXV];
} job;
static ucontext_t job_caller, job_ctx;
static void *job_stack;
#define JOB_STACK (64 << 10)

/* job_in copies the pages into the memfd and maps the memfd over them,
 * behind the fence. */
static void job_in(struct vma *v)
{
	size_t len = v->hi - v->lo;
	if ((job.err = fence_up(v->lo, v->hi, v->prot)) != 0) {
		fence_down();
		return;
	}
	for (size_t done = 0; done < len;) {
		ssize_t w = pwrite(memfd, (void *)(v->lo + done), len - done, v->lo + done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			job.err = w < 0 ? errno : EIO;
			break;
		}
		done += w;
	}
	if (!job.err && mmap((void *)v->lo, len, v->prot, MAP_SHARED | MAP_FIXED, memfd, v->lo) == MAP_FAILED)
		job.err = errno;
	if (job.err)
		mprotect((void *)v->lo, len, v->prot);
	fence_down();
}

/* job_out copies the pages into new private memory and moves that over
 * them in one step (mremap), behind the fence: no store falls between
 * the copy and the swap, and none is overwritten by a copy back. */
static void job_out(struct vma *v)
{
	size_t len = v->hi - v->lo;
	void *tmp = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return; /* it stays shared: still the same memory for the program */
	if (fence_up(v->lo, v->hi, v->prot) != 0) {
		fence_down();
		munmap(tmp, len);
		return;
	}
	memcpy(tmp, (void *)v->lo, len);
	if ((v->prot == (PROT_READ | PROT_WRITE) || mprotect(tmp, len, v->prot) == 0) &&
	    mremap(tmp, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)v->lo) != MAP_FAILED) {
		fence_down();
		return;
	}
	mprotect((void *)v->lo, len, v->prot);
	fence_down();
	munmap(tmp, len);
}

static void job_run(void)
{
	for (int i = 0; i < job.n && !job.err; i++) {
		if (job.out && job.v[i].ours)
			job_out(&job.v[i]);
		else if (!job.out)
			job_in(&job.v[i]);
	}
}

/* run_job runs job_run on the job's stack; mu is held. */
static int run_job(void)
{
	if (!job_stack) {
		void *st = mmap(NULL, JOB_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (st == MAP_FAILED)
			return errno;
		job_stack = st;
	}
	job.err = 0;
	if (getcontext(&job_ctx) < 0)
		return errno;
	job_ctx.uc_stack.ss_sp = job_stack;
	job_ctx.uc_stack.ss_size = JOB_STACK;
	job_ctx.uc_link = &job_caller;
	makecontext(&job_ctx, job_run, 0);
	if (swapcontext(&job_caller, &job_ctx) < 0)
		return errno;
	return job.err;
}

/* move_in moves [lo, hi), not yet on the memfd, onto it. */
static int move_in(uintptr_t lo, uintptr_t hi)
{
	int n = vmas(lo, hi, job.v, MAXV);
	if (n == -2) {
		rnic_log("reg_mr: [%#lx, %#lx) spans more than %d mappings", (unsigned long)lo, (unsigned long)hi, MAXV);
		return EINVAL;
	}
	if (n < 0) {
		rnic_log("reg_mr: [%#lx, %#lx) is not all mapped memory", (unsigned long)lo, (unsigned long)hi);
		return EFAULT;
	}
	for (int i = 0; i < n; i++) {
		struct vma *v = &job.v[i];
		if (v->shared && !v->ours) {
			rnic_log("reg_mr: [%#lx, %#lx) is a shared mapping (a file, POSIX shm or memfd); rnicd can register "
				 "private memory (malloc, stack, anonymous or private mmap) and System V shared memory "
				 "(shmat) only",
				 (unsigned long)v->lo, (unsigned long)v->hi);
			return EINVAL;
		}
		if (!(v->prot & PROT_READ)) {
			rnic_log("reg_mr: [%#lx, %#lx) is not readable", (unsigned long)v->lo, (unsigned long)v->hi);
			return EFAULT;
		}
		/* Huge pages cannot be moved onto the memfd's ordinary ones
		 * (its pages would be mapped into the middle of a huge one). */
		if (!strcmp(v->path, "/anon_hugepage (deleted)")) {
			rnic_log("reg_mr: [%#lx, %#lx) is private hugetlb memory (MAP_HUGETLB), which rnicd cannot "
				 "register yet: map a memfd made with MFD_HUGETLB and MFD_ALLOW_SEALING MAP_SHARED instead",
				 (unsigned long)v->lo, (unsigned long)v->hi);
			return EINVAL;
		}
	}
	job.out = 0;
	job.n = n;
	return run_job();
}

/* move_out gives [lo, hi) back to private anonymous memory with the same
 * contents, where it is still the memfd's; keep says whether the memfd's
 * pages stay (the child after fork shares them with its parent). */
static void move_out(uintptr_t lo, uintptr_t hi, int keep)
{
	int n = vmas(lo, hi, job.v, MAXV);
	/* n < 0: the program unmapped some of it; what is left is found
	 * piece by piece. */
	for (uintptr_t at = lo; n < 0 && at < hi; at += sysconf(_SC_PAGESIZE)) {
		job.n = vmas(at, at + sysconf(_SC_PAGESIZE), job.v, 1);
		job.out = 1;
		if (job.n > 0)
			run_job();
	}
	if (n > 0) {
		job.n = n;
		job.out = 1;
		run_job();
	}
	if (!keep)
		fallocate(memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, lo, hi - lo);
}

/* gaps calls fn on every part of [lo, hi) no registered range covers. */
static int gaps(uintptr_t lo, uintptr_t hi, int (*fn)(uintptr_t, uintptr_t))
{
	uintptr_t at = lo;
	while (at < hi) {
		/* The registered range covering at, if any, moves at past it;
		 * else the gap runs to the next range's start. */
		uintptr_t end = hi;
		int covered = 0;
		for (size_t i = 0; i < nregs; i++) {
			if (regs[i].lo <= at && at < regs[i].hi) {
				covered = 1;
				if (regs[i].hi > at)
					end = regs[i].hi < hi ? regs[i].hi : hi;
				break;
			}
			if (regs[i].lo > at && regs[i].lo < end)
				end = regs[i].lo;
		}
		if (!covered) {
			int err = fn(at, end);
			if (err)
				return err;
		}
		at = end;
	}
	return 0;
}

static int out_and_free(uintptr_t lo, uintptr_t hi)
{
	move_out(lo, hi, 0);
	return 0;
}

/*
 * share_file is mem_share for memory of one shared mapping (the
 * program's memfd, hugetlb's too, or MAP_SHARED anonymous memory): the
 * daemon maps the same file, so the sharing stays whole (a fork child,
 * another process mapping the memfd, see what the NIC writes). A file
 * the program holds open goes to the daemon as a descriptor of its own,
 * opened again through the program's (/proc/self/fd); the daemon maps it
 * only if it cannot shrink under it, sealing a memfd made with
 * MFD_ALLOW_SEALING against shrinking (hostif's sealShrink). Memory with
 * no descriptor to send (shared anonymous memory has none, and a memfd
 * may have been closed once mapped) is MEM_MAPPED: the daemon opens the
 * mapping itself through /proc/PID/map_files, which needs a privilege
 * (CAP_CHECKPOINT_RESTORE) the program need not have.
 */
static int share_file(const struct vma *v, uintptr_t addr, int *fd, uint64_t *off)
{
	*off = addr;
	if (v->anon) {
		*fd = MEM_MAPPED;
		return 0;
	}
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return errno;
	int got = -1;
	for (struct dirent *e; got < 0 && (e = readdir(d));) {
		char p[sizeof("/proc/self/fd/") + sizeof(e->d_name)];
		struct stat st;
		snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d) || stat(p, &st) < 0)
			continue;
		if (st.st_ino == v->ino && major(st.st_dev) == v->dev_major && minor(st.st_dev) == v->dev_minor)
			got = open(p, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	if (got < 0) {
		*fd = MEM_MAPPED;
		return 0;
	}
	/* What the daemon would refuse is refused here, saying why: a file
	 * that is not a memfd (no seals at all), or one that can take no
	 * more seals and is not sealed against shrinking. */
	int seals = fcntl(got, F_GET_SEALS);
	if (seals < 0 || (!(seals & F_SEAL_SHRINK) && (seals & F_SEAL_SEAL))) {
		rnic_log("reg_mr: [%#lx, %#lx) is a shared mapping of %s, which %s: it could be truncated under the "
			 "NIC; rnicd registers shared memory of a memfd made with MFD_ALLOW_SEALING, or System V shm",
			 (unsigned long)v->lo, (unsigned long)v->hi, v->path,
			 seals < 0 ? "is not a memfd" : "cannot be sealed against shrinking");
		close(got);
		return EINVAL;
	}
	*fd = got;
	*off = v->off + (addr - v->start);
	return 0;
}

void mem_sent(int fd)
{
	if (fd >= 0 && fd != memfd)
		close(fd);
}

/* mem_share makes [addr, addr+len) reachable by the daemon: *fd and *off
 * are the memfd and the offset of addr in it; or, for memory of one
 * System V shared memory attachment, *fd is -1 and *shmid the segment,
 * which the daemon attaches itself (hostif/shm.go): moving shared
 * pages onto the memfd would part them from the other processes that
 * share them; or, for memory of one shared mapping, *fd is a descriptor
 * of its file or MEM_MAPPED, *off the file offset or the address
 * (share_file). The caller gives *fd to mem_sent once it was sent. */
int mem_share(void *addr, size_t len, int *fd, uint64_t *off, uint32_t *shmid)
{
	pthread_once(&once, init_once);
	uintptr_t lo = page_down((uintptr_t)addr), hi = page_up((uintptr_t)addr + len);
	if (len == 0 || hi < lo || hi > SPAN)
		return EINVAL;
	struct vma v;
	int nv = vmas(lo, hi, &v, 1);
	if (nv == 1 && v.sysv) {
		*fd = MEM_SHM;
		*off = (uintptr_t)addr;
		*shmid = (uint32_t)v.ino;
		return 0;
	}
	if (nv == 1 && v.shared && !v.ours)
		return share_file(&v, (uintptr_t)addr, fd, off);
	pthread_mutex_lock(&mu);
	int err = open_memfd();
	if (!err)
		err = fence_install();
	if (!err && nregs == capregs) {
		size_t c = capregs ? 2 * capregs : 16;
		struct range *r = realloc(regs, c * sizeof(*r));
		if (r) {
			regs = r;
			capregs = c;
		} else {
			err = ENOMEM;
		}
	}
	if (!err)
		err = gaps(lo, hi, move_in);
	if (err) {
		/* Pages moved before the failure go back. */
		gaps(lo, hi, out_and_free);
	} else {
		regs[nregs++] = (struct range){lo, hi};
		*fd = memfd;
		*off = (uintptr_t)addr;
	}
	pthread_mutex_unlock(&mu);
	return err;
}

/* mem_unshare is mem_share's undo, once the daemon dropped the region. */
void mem_unshare(void *addr, size_t len)
{
	uintptr_t lo = page_down((uintptr_t)addr), hi = page_up((uintptr_t)addr + len);
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < nregs; i++) {
		if (regs[i].lo == lo && regs[i].hi == hi) {
			regs[i] = regs[--nregs];
			gaps(lo, hi, out_and_free);
			break;
		}
	}
	pthread_mutex_unlock(&mu);
}

/* atfork_child runs in the child, single-threaded, with mu held: every
 * moved page becomes a private copy, and the child has no regions (its
 * parent's connections are not its own). */
static void atfork_child(void)
{
	for (size_t i = 0; i < nregs; i++)
		move_out(regs[i].lo, regs[i].hi, 1);
	nregs = 0;
	if (memfd >= 0)
		close(memfd);
	memfd = -1;
	pthread_mutex_unlock(&mu);
}
