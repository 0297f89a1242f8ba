/*
 * mpipingpong: an MPI program for two ranks, built with Open MPI's mpicc
 * by the tests (not by this folder's Makefile: Open MPI is optional).
 * Rank 0 sends 64 KiB 100 times, rank 1 adds one to every byte and sends
 * it back, and rank 0 checks every byte; then both ranks allreduce four
 * longs. Each rank prints what it saw; the tests compare it by value.
 */
#include <mpi.h>
#include <stdio.h>

enum { LEN = 1 << 16, ROUNDS = 100 };

static unsigned char buf[LEN];

static unsigned char pattern(int round, int i) { return (unsigned char)(round * 7 + i * 13); }

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		fprintf(stderr, "mpipingpong: want 2 ranks, have %d\n", size);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	long bad = 0;
	for (int r = 0; r < ROUNDS; r++) {
		if (rank == 0) {
			for (int i = 0; i < LEN; i++)
				buf[i] = pattern(r, i);
			MPI_Send(buf, LEN, MPI_BYTE, 1, r, MPI_COMM_WORLD);
			MPI_Recv(buf, LEN, MPI_BYTE, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < LEN; i++)
				bad += buf[i] != (unsigned char)(pattern(r, i) + 1);
		} else {
			MPI_Recv(buf, LEN, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (int i = 0; i < LEN; i++) {
				bad += buf[i] != pattern(r, i);
				buf[i]++;
			}
			MPI_Send(buf, LEN, MPI_BYTE, 0, r, MPI_COMM_WORLD);
		}
	}
	long in[4] = {rank + 1, 10L * (rank + 1), 100, -rank}, out[4];
	MPI_Allreduce(in, out, 4, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	printf("rank %d: %d round trips of %d bytes, %ld bad bytes; allreduce %ld %ld %ld %ld\n", rank, ROUNDS, LEN, bad,
	       out[0], out[1], out[2], out[3]);
	MPI_Finalize();
	return 0;
}
