/*
 * mrmove: registering memory while other threads use its pages.
 *
 * clib moves the pages a registration covers onto the memfd it shares
 * with the daemon (mem.c). A page holds more than the region: malloc's
 * own words, another thread's data. This program registers and
 * deregisters 64 bytes of one of two pages, in turn, thousands of
 * times, while two threads keep storing a counter into each page
 * (outside the region) and reading it back: a store that the move lost
 * shows as a counter that went back; a thread that faulted during one
 * page's move and took its signal after the next page's started must
 * be let through too. Then:
 *   - the program's own SIGSEGV handler, installed before the library
 *     installed its own, still gets the program's faults;
 *   - a child whose fault nobody handles still dies of SIGSEGV, both for
 *     a page never registered and for a registered page the program made
 *     read-only itself (the library must not retry such a store forever);
 *   - a hook of the program's own around mmap (UCX patches every
 *     library's mmap so) that stores into the page being moved, from the
 *     moving thread itself, does not hang the registration.
 *
 *   mrmove DEV
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "vtest.h"

#define MOVES 3000
#define REGION_OFF 64
#define REGION_LEN 64
#define COUNTER_OFF 2048

static atomic_int stop;
static atomic_long lost, stores;

/* writer stores 1, 2, 3, ... into one word of the page and checks, before
 * each store, that the word still holds its last store. */
static void *writer(void *arg)
{
	volatile long *w = arg;
	long last = *w;
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		if (*w != last) {
			atomic_fetch_add(&lost, 1);
			last = *w;
		}
		*w = ++last;
		atomic_fetch_add_explicit(&stores, 1, memory_order_relaxed);
	}
	return NULL;
}

/* hook_store, when set, is where this program's mmap, which the library
 * calls through the PLT as any program's hook would take it, stores
 * before it maps. */
static volatile char *volatile hook_store;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (hook_store)
		*hook_store = 1;
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static volatile sig_atomic_t own_faults;
static char *own_page;

static void own_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if ((char *)si->si_addr >= own_page && (char *)si->si_addr < own_page + 4096) {
		own_faults++;
		mprotect(own_page, 4096, PROT_READ | PROT_WRITE);
		return;
	}
	_exit(3);
}

/* crash_child forks a child that opens dev, registers a buffer, and
 * stores into a read-only page: into one it never registered
 * (registered=0), or into the registered page itself after making it
 * read-only; it returns the child's wait status. */
static int crash_child(const char *dev, int registered)
{
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		struct rlimit no = {0, 0};
		setrlimit(RLIMIT_CORE, &no);
		signal(SIGSEGV, SIG_DFL);
		union ibv_gid gid;
		struct ibv_pd *pd;
		open_pd(dev, &pd, &gid);
		char *p = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			_exit(4);
		struct ibv_mr *mr = ibv_reg_mr(pd, p + REGION_OFF, REGION_LEN, IBV_ACCESS_LOCAL_WRITE);
		if (!mr)
			_exit(5);
		char *ro = registered ? p : p + 4096;
		if (mprotect(ro, 4096, PROT_READ))
			_exit(6);
		*(volatile char *)(ro + 100) = 1;
		_exit(0); /* the store went through: wrong */
	}
	int st;
	alarm(60);
	while (waitpid(pid, &st, 0) < 0)
		;
	alarm(0);
	return st;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mrmove DEV\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);

	/* The program's handler first, as a program that has one installs
	 * it at start. */
	own_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (own_page == MAP_FAILED)
		die("mmap");
	struct sigaction sa = {.sa_sigaction = own_handler, .sa_flags = SA_SIGINFO};
	sigaction(SIGSEGV, &sa, NULL);

	union ibv_gid gid;
	struct ibv_pd *pd;
	open_pd(argv[1], &pd, &gid);
	/* Two pages apart (a guard page between), so that each move is a
	 * range of its own. */
	char *pages = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (pages == MAP_FAILED)
		die("mmap");
	mprotect(pages + 4096, 4096, PROT_NONE);
	char *page = pages, *other = pages + 2 * 4096;
	memset(page + REGION_OFF, 0x5a, REGION_LEN);
	memset(other + REGION_OFF, 0x5a, REGION_LEN);

	pthread_t th[2];
	if (pthread_create(&th[0], NULL, writer, page + COUNTER_OFF) ||
	    pthread_create(&th[1], NULL, writer, other + COUNTER_OFF))
		die("pthread_create");
	int refused = 0;
	for (int i = 0; i < MOVES; i++) {
		char *p = i % 2 ? other : page;
		struct ibv_mr *mr = ibv_reg_mr(pd, p + REGION_OFF, REGION_LEN, IBV_ACCESS_LOCAL_WRITE);
		if (!mr) {
			refused++;
			continue;
		}
		if (ibv_dereg_mr(mr))
			refused++;
	}
	atomic_store(&stop, 1);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	check(refused == 0, "3000 registrations and deregistrations of 64 bytes of the writers' pages");
	long n = atomic_load(&lost);
	if (n)
		printf("%ld of %ld stores lost\n", n, atomic_load(&stores));
	check(n == 0 && *(long *)(page + COUNTER_OFF) + *(long *)(other + COUNTER_OFF) == atomic_load(&stores),
	      "the writer threads' stores into the pages: none lost");
	int same = 1;
	for (int i = 0; i < REGION_LEN; i++)
		same &= (unsigned char)page[REGION_OFF + i] == 0x5a && (unsigned char)other[REGION_OFF + i] == 0x5a;
	check(same, "the regions' bytes unchanged");

	pthread_t dog;
	pthread_create(&dog, NULL, wait_watchdog, NULL);
	hook_store = page + COUNTER_OFF + 64;
	struct ibv_mr *hooked = ibv_reg_mr(pd, page + REGION_OFF, REGION_LEN, IBV_ACCESS_LOCAL_WRITE);
	hook_store = NULL;
	check(hooked && !ibv_dereg_mr(hooked), "an mmap hook storing into the page from the moving thread: registered");

	mprotect(own_page, 4096, PROT_READ);
	*(volatile char *)(own_page + 8) = 7;
	check(own_faults == 1 && own_page[8] == 7, "the program's own SIGSEGV handler still takes its faults");

	int st = crash_child(argv[1], 0);
	check(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV, "a store into a read-only page, unhandled: SIGSEGV");
	st = crash_child(argv[1], 1);
	check(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV,
	      "a store into a registered page the program made read-only: SIGSEGV");
	return verdict();
}
