/*
 * xrc: XRC (IBTA annex A14) from a C program on rnicd, the parts Debian's
 * ibv_xsrq_pingpong does not show.
 *
 *   xrc TARGET_DEV INITIATOR_DEV
 *
 * On the target: two XRC domains (fd -1: each its own), an XRC SRQ in
 * each, one CQ, and an XRC target QP in the first domain. On the
 * initiator: an XRC send QP made with ibv_create_qp_ex and send ops, so
 * that both ibv_post_send and the ibv_wr_* API post. It checks that
 *   1. the device says IBV_DEVICE_XRC, and the two SRQs have numbers;
 *   2. a SEND with immediate of 3000 bytes (three packets) to the first
 *      SRQ lands in its receive WQE's two SGEs byte for byte, nothing
 *      past them written, and its completion on the SRQ's CQ names the
 *      target QP, with the length, opcode, immediate and wr_id;
 *   3. an RDMA WRITE posted with ibv_wr_set_xrc_srqn lands byte for byte
 *      (its rkey checked against the SRQ's PD), a READ brings it back,
 *      and a FETCH_ADD returns the old value and adds (XRC's READ
 *      responses and atomic ACKs reach the initiator);
 *   4. a domain in use is not closed (EBUSY);
 *   5. a SEND naming the SRQ of the other domain completes with
 *      REM_INV_REQ_ERR, consumes no receive WQE, and the target goes to
 *      ERR;
 * then destroys everything and prints PASS.
 */
#include <fcntl.h>

#include "vtest.h"

static struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	must(poll_wc(cq, &wc, 10), "a completion within 10 s");
	return wc;
}

static struct ibv_xrcd *open_xrcd(struct ibv_context *ctx)
{
	struct ibv_xrcd_init_attr a = {.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
				       .oflags = O_CREAT};
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
	must(x != NULL, "ibv_open_xrcd");
	return x;
}

static struct ibv_srq *xrc_srq(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_xrcd *x, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {.attr = {.max_wr = 4, .max_sge = 2},
					 .comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
						      IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
					 .srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = x, .cq = cq};
	struct ibv_srq *s = ibv_create_srq_ex(ctx, &a);
	must(s != NULL, "ibv_create_srq_ex of an XRC SRQ");
	return s;
}

/* connect moves qp to RTS towards dest on the device whose GID is gid,
 * with the attributes ibv_xsrq_pingpong gives each end: the target's
 * remote access, the initiator's none. */
static void connect(struct ibv_qp *qp, int target, uint32_t dest, union ibv_gid gid)
{
	qp_connect(qp, &(struct qp_path){.dest_qp_num = dest, .dgid = gid, .psn = 0x200,
					 .access = target ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
								    IBV_ACCESS_REMOTE_ATOMIC : 0});
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: xrc TARGET_DEV INITIATOR_DEV\n");
		return 2;
	}
	/* The target. */
	struct ibv_context *tc = open_dev(argv[1]);
	struct ibv_device_attr da;
	must(!ibv_query_device(tc, &da) && (da.device_cap_flags & IBV_DEVICE_XRC), "IBV_DEVICE_XRC");
	struct ibv_pd *tpd = ibv_alloc_pd(tc);
	must(tpd != NULL, "ibv_alloc_pd");
	enum { N = 8192, MSG = 3000, SGE0 = 1000 };
	unsigned char *tbuf = malloc(N);
	memset(tbuf, 0xa5, N);
	struct ibv_mr *tmr = ibv_reg_mr(tpd, tbuf, N, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						  IBV_ACCESS_REMOTE_ATOMIC);
	must(tmr != NULL, "ibv_reg_mr");
	struct ibv_cq *tcq = ibv_create_cq(tc, 8, NULL, NULL, 0);
	must(tcq != NULL, "ibv_create_cq");
	struct ibv_xrcd *x1 = open_xrcd(tc), *x2 = open_xrcd(tc);
	struct ibv_srq *s1 = xrc_srq(tc, tpd, x1, tcq), *s2 = xrc_srq(tc, tpd, x2, tcq);
	uint32_t n1 = 0, n2 = 0;
	must(!ibv_get_srq_num(s1, &n1) && !ibv_get_srq_num(s2, &n2) && n1 && n2 && n1 != n2, "two SRQ numbers");
	struct ibv_qp_init_attr_ex ta = {.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = x1};
	struct ibv_qp *tgt = ibv_create_qp_ex(tc, &ta);
	must(tgt != NULL, "ibv_create_qp_ex of an XRC_RECV QP");
	union ibv_gid tgid, igid;
	must(!ibv_query_gid(tc, 1, 1, &tgid), "ibv_query_gid");
	printf("device_cap_flags has XRC; SRQ numbers %s\n", n1 != n2 ? "differ" : "clash");

	/* The initiator. */
	struct ibv_context *ic = open_dev(argv[2]);
	struct ibv_pd *ipd = ibv_alloc_pd(ic);
	must(ipd != NULL, "ibv_alloc_pd");
	unsigned char *ibuf = malloc(N);
	for (int i = 0; i < N; i++)
		ibuf[i] = (unsigned char)(i * 7 + 3);
	struct ibv_mr *imr = ibv_reg_mr(ipd, ibuf, N, IBV_ACCESS_LOCAL_WRITE);
	must(imr != NULL, "ibv_reg_mr");
	struct ibv_cq *icq = ibv_create_cq(ic, 8, NULL, NULL, 0);
	must(icq != NULL, "ibv_create_cq");
	struct ibv_qp_init_attr_ex ia = {.qp_type = IBV_QPT_XRC_SEND, .send_cq = icq,
					 .cap = {.max_send_wr = 8, .max_send_sge = 1},
					 .comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = ipd,
					 .send_ops_flags = IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE};
	struct ibv_qp *ini = ibv_create_qp_ex(ic, &ia);
	must(ini != NULL, "ibv_create_qp_ex of an XRC_SEND QP");
	must(!ibv_query_gid(ic, 1, 1, &igid), "ibv_query_gid");
	connect(tgt, 1, ini->qp_num, igid);
	connect(ini, 0, tgt->qp_num, tgid);

	/* 2. A SEND with immediate into two SGEs of the first SRQ. */
	struct ibv_sge rs[2] = {{(uintptr_t)tbuf, SGE0, tmr->lkey}, {(uintptr_t)tbuf + 4096, 4096, tmr->lkey}};
	struct ibv_recv_wr rwr = {.wr_id = 0x5151, .sg_list = rs, .num_sge = 2}, *rbad;
	must(!ibv_post_srq_recv(s1, &rwr, &rbad), "ibv_post_srq_recv");
	must(!ibv_post_srq_recv(s2, &rwr, &rbad), "ibv_post_srq_recv");
	struct ibv_sge ss = {(uintptr_t)ibuf, MSG, imr->lkey};
	struct ibv_send_wr swr = {.wr_id = 0x77, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(0xfeedf00d)}, *sbad;
	swr.qp_type.xrc.remote_srqn = n1;
	must(!ibv_post_send(ini, &swr, &sbad), "ibv_post_send");
	struct ibv_wc wc = poll_one(icq);
	must(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x77 && wc.opcode == IBV_WC_SEND, "the SEND's completion");
	wc = poll_one(tcq);
	must(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x5151 && wc.opcode == IBV_WC_RECV && wc.byte_len == MSG &&
		      wc.qp_num == tgt->qp_num && (wc.wc_flags & IBV_WC_WITH_IMM) && be32toh(wc.imm_data) == 0xfeedf00d,
	      "the receive's completion: the target QP, length, immediate, wr_id");
	must(!memcmp(tbuf, ibuf, SGE0) && !memcmp(tbuf + 4096, ibuf + SGE0, MSG - SGE0), "the message, byte for byte");
	for (int i = SGE0; i < 4096; i++)
		must(tbuf[i] == 0xa5, "nothing written between the SGEs");
	for (int i = 4096 + MSG - SGE0; i < N; i++)
		must(tbuf[i] == 0xa5, "nothing written past the message");
	printf("SEND of %d bytes to SRQ 1: landed in its two SGEs, completion on its CQ names the target QP\n", MSG);

	/* 3. A WRITE through the ibv_wr_* API, to the region of SRQ 1's PD. */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	must(qx != NULL, "ibv_qp_to_qp_ex");
	ibv_wr_start(qx);
	qx->wr_id = 0x78;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, tmr->rkey, (uintptr_t)tbuf + 1024);
	ibv_wr_set_xrc_srqn(qx, n1);
	ibv_wr_set_sge(qx, imr->lkey, (uintptr_t)ibuf + 100, 2000);
	must(!ibv_wr_complete(qx), "ibv_wr_complete");
	wc = poll_one(icq);
	must(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x78 && wc.opcode == IBV_WC_RDMA_WRITE, "the WRITE's completion");
	must(!memcmp(tbuf + 1024, ibuf + 100, 2000), "the WRITE, byte for byte");
	printf("WRITE with ibv_wr_set_xrc_srqn: landed\n");

	/* The READ of those bytes back, and a FETCH_ADD, each naming SRQ 1. */
	struct ibv_sge rds = {(uintptr_t)ibuf + 4096, 2000, imr->lkey};
	struct ibv_send_wr rd = {.wr_id = 0x7a, .sg_list = &rds, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				 .send_flags = IBV_SEND_SIGNALED};
	rd.wr.rdma.remote_addr = (uintptr_t)tbuf + 1024;
	rd.wr.rdma.rkey = tmr->rkey;
	rd.qp_type.xrc.remote_srqn = n1;
	memset(ibuf + 4096, 0, 2000);
	must(!ibv_post_send(ini, &rd, &sbad), "ibv_post_send of a READ");
	wc = poll_one(icq);
	must(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x7a && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 2000,
	      "the READ's completion");
	must(!memcmp(ibuf + 4096, ibuf + 100, 2000), "the READ, byte for byte");
	uint64_t *target = (uint64_t *)(tbuf + 8000);
	*target = 40;
	struct ibv_sge fas = {(uintptr_t)ibuf + 7000, 8, imr->lkey};
	struct ibv_send_wr fa = {.wr_id = 0x7b, .sg_list = &fas, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED};
	fa.wr.atomic.remote_addr = (uintptr_t)target;
	fa.wr.atomic.rkey = tmr->rkey;
	fa.wr.atomic.compare_add = 2;
	fa.qp_type.xrc.remote_srqn = n1;
	must(!ibv_post_send(ini, &fa, &sbad), "ibv_post_send of a FETCH_ADD");
	wc = poll_one(icq);
	uint64_t old;
	memcpy(&old, ibuf + 7000, 8);
	must(wc.status == IBV_WC_SUCCESS && wc.wr_id == 0x7b && wc.opcode == IBV_WC_FETCH_ADD && old == 40 && *target == 42,
	      "the FETCH_ADD: 40 returned, 42 left");
	printf("READ back and FETCH_ADD: done\n");

	/* 4. A domain in use stays. */
	must(ibv_close_xrcd(x1) == EBUSY, "ibv_close_xrcd of a domain in use: EBUSY");
	printf("close of a domain in use: EBUSY\n");

	/* 5. A SEND naming the SRQ of the other domain. */
	swr.wr_id = 0x79;
	swr.qp_type.xrc.remote_srqn = n2;
	must(!ibv_post_send(ini, &swr, &sbad), "ibv_post_send");
	wc = poll_one(icq);
	must(wc.wr_id == 0x79 && wc.status == IBV_WC_REM_INV_REQ_ERR, "REM_INV_REQ_ERR for another domain's SRQ");
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	must(!ibv_query_qp(tgt, &qa, IBV_QP_STATE, &qia) && qa.qp_state == IBV_QPS_ERR, "the target in ERR");
	must(ibv_poll_cq(tcq, 1, &wc) == 0, "no receive consumed");
	printf("SEND to another domain's SRQ: remote invalid request error, target in ERR, no receive taken\n");

	must(!ibv_destroy_qp(ini) && !ibv_destroy_qp(tgt), "ibv_destroy_qp");
	must(!ibv_destroy_srq(s1) && !ibv_destroy_srq(s2), "ibv_destroy_srq");
	must(!ibv_close_xrcd(x1) && !ibv_close_xrcd(x2), "ibv_close_xrcd");
	must(!ibv_destroy_cq(tcq) && !ibv_destroy_cq(icq), "ibv_destroy_cq");
	must(!ibv_dereg_mr(tmr) && !ibv_dereg_mr(imr), "ibv_dereg_mr");
	must(!ibv_dealloc_pd(tpd) && !ibv_dealloc_pd(ipd), "ibv_dealloc_pd");
	must(!ibv_close_device(tc) && !ibv_close_device(ic), "ibv_close_device");
	printf("PASS\n");
	return 0;
}
