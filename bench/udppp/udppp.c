/*
 * udppp: the kernel's own UDP round trip, the anchor of rnicd's latency
 * figures (bench/run.sh). A client sends a datagram, the server sends it
 * back, n times; the client times each round trip with CLOCK_MONOTONIC.
 * Two ways of waiting, on both ends:
 *   blocking: recv() sleeps in the kernel until the datagram is there;
 *   -busy:    recv(MSG_DONTWAIT) in a loop, never sleeping, as a polling
 *             NIC (and perftest, spinning on its CQ) waits.
 * It prints, as ib_send_lat does, one-way latency: half of each round
 * trip, the minimum, the median (perftest's t_typical) and the 99th
 * percentile, in microseconds.
 *
 *   udppp -s ADDR PORT [-busy]                   server
 *   udppp ADDR PORT [-busy] [-n N] [-size B]     client
 *
 * Built with gcc by bench/run.sh (static, to copy to another machine).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int busy;

/* wait_recv receives one datagram into buf, blocking or spinning. */
static ssize_t wait_recv(int fd, char *buf, size_t len, struct sockaddr_in *from)
{
	socklen_t fl = sizeof(*from);
	for (;;) {
		ssize_t n = recvfrom(fd, buf, len, busy ? MSG_DONTWAIT : 0,
				     (struct sockaddr *)from, from ? &fl : NULL);
		if (n >= 0)
			return n;
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			return -1;
	}
}

static int cmp_u64(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
	return x < y ? -1 : x > y;
}

static unsigned long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static int usage(void)
{
	fprintf(stderr, "usage: udppp -s ADDR PORT [-busy] | udppp ADDR PORT [-busy] [-n N] [-size B] [-warmup N]\n");
	return 2;
}

int main(int argc, char **argv)
{
	int server = 0, n = 20000, size = 2, warm = 1000;
	const char *addr = NULL, *port = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-s"))
			server = 1;
		else if (!strcmp(argv[i], "-busy"))
			busy = 1;
		else if (!strcmp(argv[i], "-n") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-size") && i + 1 < argc)
			size = atoi(argv[++i]);
		else if (!strcmp(argv[i], "-warmup") && i + 1 < argc)
			warm = atoi(argv[++i]);
		else if (!addr)
			addr = argv[i];
		else if (!port)
			port = argv[i];
		else
			return usage();
	}
	if (!addr || !port || n < 1 || size < 1 || size > 65000 || warm < 0)
		return usage();
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)atoi(port))};
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		fprintf(stderr, "udppp: %s is not an IPv4 address\n", addr);
		return 2;
	}
	int fd = socket(AF_INET, SOCK_DGRAM, 0);
	if (fd < 0) {
		perror("udppp: socket");
		return 1;
	}
	char *buf = calloc(1, 65536);
	if (!buf)
		return 1;
	if (server) {
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			perror("udppp: bind");
			return 1;
		}
		for (;;) {
			struct sockaddr_in from;
			ssize_t got = wait_recv(fd, buf, 65536, &from);
			if (got < 0) {
				perror("udppp: recv");
				return 1;
			}
			if (sendto(fd, buf, (size_t)got, 0, (struct sockaddr *)&from, sizeof(from)) < 0) {
				perror("udppp: send");
				return 1;
			}
		}
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("udppp: connect");
		return 1;
	}
	/* A datagram lost (the server not up yet) would hang a blocking
	 * client: it gives up after 5 s instead. */
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	unsigned long long *rtt = calloc((size_t)n, sizeof(*rtt));
	if (!rtt)
		return 1;
	for (int i = -warm; i < n; i++) {
		unsigned long long t0 = now_ns();
		if (send(fd, buf, (size_t)size, 0) < 0) {
			perror("udppp: send");
			return 1;
		}
		if (wait_recv(fd, buf, 65536, NULL) < 0) {
			perror("udppp: recv");
			return 1;
		}
		if (i >= 0)
			rtt[i] = now_ns() - t0;
	}
	qsort(rtt, (size_t)n, sizeof(*rtt), cmp_u64);
	printf("#bytes #iterations t_min[usec] t_median[usec] t_p99[usec] (one way: half the round trip, as ib_send_lat; %s)\n",
	       busy ? "busy-polling" : "blocking");
	printf("%d %d %.2f %.2f %.2f\n", size, n, rtt[0] / 2e3, rtt[n / 2] / 2e3, rtt[(size_t)((n - 1) * 0.99)] / 2e3);
	return 0;
}
