/*
 * mpi_halo.c - the demo's MPI job: ranks in a ring compute for a while, then exchange a
 * 64 KiB halo with both neighbours, for SECONDS seconds. Talks every few milliseconds, so
 * its ranks belong together (the C objective); computes on registers, so it is a turtle.
 * Usage: mpi-halo SECONDS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define HALO 8192 /* doubles: 64 KiB */

int main(int argc, char **argv)
{
	static double out[HALO], in_l[HALO], in_r[HALO];
	int rank, size, left, right, i;
	double seconds, t0, acc = 0;
	long steps = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	seconds = argc > 1 ? atof(argv[1]) : 60.0;
	left = (rank + size - 1) % size;
	right = (rank + 1) % size;
	t0 = MPI_Wtime();
	for (;;) {
		int done;

		for (i = 0; i < 2000000; i++)
			acc = acc * 0.999999 + 1.0;
		for (i = 0; i < HALO; i++)
			out[i] = acc + i;
		MPI_Sendrecv(out, HALO, MPI_DOUBLE, right, 0, in_l, HALO, MPI_DOUBLE, left, 0,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		MPI_Sendrecv(out, HALO, MPI_DOUBLE, left, 1, in_r, HALO, MPI_DOUBLE, right, 1,
			     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		steps++;
		/* rank 0's clock decides for everyone, so all ranks stop at the same step */
		done = rank == 0 && MPI_Wtime() - t0 >= seconds;
		MPI_Bcast(&done, 1, MPI_INT, 0, MPI_COMM_WORLD);
		if (done)
			break;
	}
	if (rank == 0)
		printf("mpi-halo: %d ranks, %ld steps in %.1f s (%.3f)\n", size, steps,
		       MPI_Wtime() - t0, in_l[0] + in_r[0]);
	MPI_Finalize();
	return 0;
}
