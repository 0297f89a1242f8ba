/*
 * connectgate.so: an LD_PRELOAD for tests that run a program against
 * rnicd's librdmacm while its peer's listener may not exist yet.
 * rdma_connect first connects to the unix socket named by
 * RNICD_CONNECT_GATE, waits until the test writes one byte to it (the
 * test writes it once the peer listens), then calls the real
 * rdma_connect. Debian's perftest -R needs it: its client sends the REQ
 * of the test's QPs as soon as a handshake ends, its server listens for
 * them only after that handshake, and the REJ (reason 8) that a lost
 * race brings makes perftest 4.5-0.17's retry crash (fixed upstream in
 * 2025, on rxe as here). Without RNICD_CONNECT_GATE it only forwards.
 */
#include <dlfcn.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int wait_gate(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path)) {
		fprintf(stderr, "connectgate: %s: path too long\n", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "connectgate: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char b;
	ssize_t n;
	do
		n = read(fd, &b, 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n != 1) {
		fprintf(stderr, "connectgate: %s: closed without a go\n", path);
		return -1;
	}
	return 0;
}

__attribute__((visibility("default"))) int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	int (*real)(struct rdma_cm_id *, struct rdma_conn_param *) =
		(int (*)(struct rdma_cm_id *, struct rdma_conn_param *))dlsym(RTLD_NEXT, "rdma_connect");
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	const char *gate = getenv("RNICD_CONNECT_GATE");
	if (gate && wait_gate(gate) < 0) {
		errno = ECONNABORTED;
		return -1;
	}
	return real(id, param);
}
