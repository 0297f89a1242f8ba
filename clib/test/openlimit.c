/*
 * openlimit: ibv_open_device on a daemon that refuses the connection.
 *
 * Run against an rnicd started with -client-max-conns 1: this process
 * may hold one control connection. ibv_get_device_list's probe holds one
 * for a moment, so the first open is retried until the daemon saw the
 * probe go; then a second open must fail (NULL, errno ENOMEM), as the
 * kernel's open of a uverbs device fails, and not hand back a context
 * whose every call fails; once the first context is closed an open
 * succeeds again, and the new context works (alloc_pd).
 *
 *   openlimit DEV
 */
#include "vtest.h"

static struct ibv_context *open_retry(struct ibv_device *d)
{
	for (int i = 0; i < 2000; i++) {
		struct ibv_context *c = ibv_open_device(d);
		if (c)
			return c;
		usleep(5000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: openlimit DEV\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *d = find_dev(list, n, argv[1]);
	struct ibv_context *c1 = open_retry(d);
	check(c1 != NULL, "the first context, once the probe's connection went");
	errno = 0;
	struct ibv_context *c2 = ibv_open_device(d);
	check(c2 == NULL && errno == ENOMEM, "a second context past -client-max-conns: NULL, ENOMEM");
	if (c1)
		ibv_close_device(c1);
	struct ibv_context *c3 = open_retry(d);
	struct ibv_pd *pd = c3 ? ibv_alloc_pd(c3) : NULL;
	check(pd != NULL, "after the first closed, an open that works");
	if (pd)
		ibv_dealloc_pd(pd);
	if (c3)
		ibv_close_device(c3);
	ibv_free_device_list(list);
	return verdict();
}
