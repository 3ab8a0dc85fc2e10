/*
 * mpi_pingpong.c - cross-node MPI check for the testbed.
 *
 * Ranks pass a token around a ring (each adds its rank: the total is known), then
 * rank 0 and the last rank ping-pong a buffer of known bytes, to push measurable
 * traffic over the inter-rack link. A plain MPI program: the MPI_Finalize hang of
 * MPICH 4.0.2 on the testbed is handled by the testbed's preloaded wrapper
 * (deploy/testbed/mpi/finalize_barrier.c), not here. On success it prints
 *   ring=<sum> expect=<sum> pingpong_bytes=<n> seconds=<t> ok
 * Usage: mpi_pingpong MESSAGE_BYTES ROUNDS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size, token, next, prev, last, i, bad = 0;
	long bytes, rounds, r;
	double t0, seconds = 0.0;
	unsigned char *buf;
	char host[256];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	bytes = argc > 1 ? atol(argv[1]) : 65536;
	rounds = argc > 2 ? atol(argv[2]) : 10;
	if (size < 2 || bytes <= 0 || rounds <= 0) {
		if (rank == 0)
			fprintf(stderr, "need >= 2 ranks and positive BYTES ROUNDS\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}

	gethostname(host, sizeof(host));
	printf("rank %d of %d on %s\n", rank, size, host);
	fflush(stdout);

	/* ring: rank 0 starts with 0, every rank adds its own rank */
	next = (rank + 1) % size;
	prev = (rank + size - 1) % size;
	if (rank == 0) {
		token = 0;
		MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
		MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	} else {
		MPI_Recv(&token, 1, MPI_INT, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		token += rank;
		MPI_Send(&token, 1, MPI_INT, next, 0, MPI_COMM_WORLD);
	}

	buf = malloc((size_t)bytes);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 3);
	last = size - 1;
	t0 = MPI_Wtime();
	for (r = 0; r < rounds && (rank == 0 || rank == last); r++) {
		if (rank == 0) {
			memset(buf, (int)(r & 0xff), (size_t)bytes);
			MPI_Send(buf, (int)bytes, MPI_BYTE, last, 1, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)bytes, MPI_BYTE, last, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			/* the last rank returns every byte incremented by one */
			for (i = 0; i < bytes; i++)
				if (buf[i] != (unsigned char)((r + 1) & 0xff))
					bad = 1;
		} else {
			MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			for (i = 0; i < bytes; i++)
				buf[i]++;
			MPI_Send(buf, (int)bytes, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
		}
	}
	seconds = MPI_Wtime() - t0;
	free(buf);
	if (rank == 0)
		printf("ring=%d expect=%d pingpong_bytes=%ld seconds=%.3f %s\n", token,
		       size * (size - 1) / 2, 2 * bytes * rounds, seconds,
		       (!bad && token == size * (size - 1) / 2) ? "ok" : "BAD");
	MPI_Finalize();
	return bad;
}
