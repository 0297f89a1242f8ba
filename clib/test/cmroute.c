/*
 * cmroute: which rnicd an unbound rdma_cm ID leaves from.
 *
 *   cmroute DST_ADDR
 *
 * rdma_resolve_addr with no source address, as rping's and riostream's
 * clients call it; the ID takes the device the kernel's rdma_cm would
 * give it. Prints one line: "DEVICE LOCAL_ADDR" (the device's name and
 * rdma_get_local_addr's address).
 */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "cmroute"
#include "cmtest.h"

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cmroute DST_ADDR\n");
		return 2;
	}
	struct sockaddr_in dst;
	addr(argv[1], 7471, &dst);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch)
		fail("rdma_create_event_channel");
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		fail("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		fail("rdma_resolve_addr");
	rdma_ack_cm_event(next(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	struct sockaddr *local = rdma_get_local_addr(id);
	char s[INET6_ADDRSTRLEN] = "?";
	if (local->sa_family == AF_INET)
		inet_ntop(AF_INET, &((struct sockaddr_in *)local)->sin_addr, s, sizeof(s));
	else if (local->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((struct sockaddr_in6 *)local)->sin6_addr, s, sizeof(s));
	printf("%s %s\n", id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)", s);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return 0;
}
