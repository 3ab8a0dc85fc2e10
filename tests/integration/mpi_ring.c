/*
 * mpi_ring.c - a long-running MPI ring for the migrator's testbed test.
 *
 * For ROUNDS rounds rank 0 sends a running total and a buffer of BYTES around the
 * ring; in round r each rank adds (r + 1) * (rank + 1) to the total and checks the
 * buffer is filled with r's byte, so a message lost, duplicated or corrupted while a
 * rank's container moves shows in the result. Rank 0 sleeps PAUSE_MS between rounds
 * (the job lasts about ROUNDS * PAUSE_MS) and appends the round to PROGRESS after each
 * one, so the test sees the ring go on during the move. At the end rank 0 prints
 *   ring=<total> expect=<total> rounds=<n> bad=<n> ok|BAD
 * Usage: mpi_ring ROUNDS BYTES PAUSE_MS PROGRESS
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long expected(long rounds, int size)
{
	/* sum over r of (r + 1), times the sum over ranks of (rank + 1) */
	return (long long)rounds * (rounds + 1) / 2 * ((long long)size * (size + 1) / 2);
}

static long check_fill(const unsigned char *buf, long bytes, unsigned char want)
{
	long i;

	for (i = 0; i < bytes; i++)
		if (buf[i] != want)
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	int rank, size, next, prev;
	long rounds, bytes, pause_ms, r, bad = 0;
	long long total = 0;
	unsigned char *buf;
	struct timespec nap;
	FILE *progress;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	rounds = argc == 5 ? atol(argv[1]) : 0;
	bytes = argc == 5 ? atol(argv[2]) : 0;
	pause_ms = argc == 5 ? atol(argv[3]) : -1;
	if (rounds <= 0 || bytes <= 0 || bytes > (1L << 30) || pause_ms < 0 || size < 2) {
		if (rank == 0)
			fprintf(stderr, "usage: mpi_ring ROUNDS BYTES PAUSE_MS PROGRESS, >= 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	buf = malloc((size_t)bytes);
	if (!buf)
		MPI_Abort(MPI_COMM_WORLD, 3);
	next = (rank + 1) % size;
	prev = (rank + size - 1) % size;
	nap.tv_sec = pause_ms / 1000;
	nap.tv_nsec = (pause_ms % 1000) * 1000000L;

	for (r = 0; r < rounds; r++) {
		unsigned char fill = (unsigned char)(r & 0xff);

		if (rank == 0) {
			memset(buf, fill, (size_t)bytes);
			total += (r + 1);
			MPI_Send(&total, 1, MPI_LONG_LONG, next, 0, MPI_COMM_WORLD);
			MPI_Send(buf, (int)bytes, MPI_BYTE, next, 1, MPI_COMM_WORLD);
			MPI_Recv(&total, 1, MPI_LONG_LONG, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Recv(buf, (int)bytes, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad += check_fill(buf, bytes, fill);
			progress = fopen(argv[4], "a");
			if (progress) {
				fprintf(progress, "%ld\n", r + 1);
				fclose(progress);
			}
			nanosleep(&nap, NULL);
		} else {
			MPI_Recv(&total, 1, MPI_LONG_LONG, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Recv(buf, (int)bytes, MPI_BYTE, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad += check_fill(buf, bytes, fill);
			total += (r + 1) * (rank + 1);
			MPI_Send(&total, 1, MPI_LONG_LONG, next, 0, MPI_COMM_WORLD);
			MPI_Send(buf, (int)bytes, MPI_BYTE, next, 1, MPI_COMM_WORLD);
		}
	}
	/* every rank's count of bad buffers reaches rank 0 */
	{
		long all = 0;

		MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		bad = all;
	}
	if (rank == 0)
		printf("ring=%lld expect=%lld rounds=%ld bad=%ld %s\n", total,
		       expected(rounds, size), rounds, bad,
		       (bad == 0 && total == expected(rounds, size)) ? "ok" : "BAD");
	free(buf);
	MPI_Finalize();
	/* only rank 0 holds the final total and the reduced count */
	return rank == 0 && (bad != 0 || total != expected(rounds, size));
}
