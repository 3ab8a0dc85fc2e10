/*
 * finalize_barrier.c - MPI_Finalize wrapper preloaded into testbed jobs: an
 * exchange between every pair of ranks, a PMI barrier, then MPICH's PMPI_Finalize.
 *
 * Debian 12's MPICH 4.0.2 (ch4:ucx) closes every UCX endpoint in MPI_Finalize and
 * only then enters its PMI barrier. Closing flushes the endpoint, and on UCX's tcp
 * transport a flush of an endpoint that sent anything sends a zero-length put and
 * waits for the peer's acknowledgement, which the peer only sends while it
 * progresses UCX. Two ways a job hung there, after printing its results:
 * - A rank whose own flushes were acknowledged by a peer that was still progressing
 *   (e.g. in the MPI_Barrier before MPI_Finalize) went into the blocking PMI barrier
 *   with that peer's put unread in its socket; the peer waited for ever.
 * - A rank that never sent to a peer had nothing to flush towards it, left at once
 *   and sat in the PMI barrier, while the peer's flush (or its endpoint's first
 *   connection) needed an answer from it.
 * MPICH releases after 4.0.2 do the PMI barrier first. This wrapper first makes
 * every pair of ranks exchange a message (so both ends of every endpoint have a
 * flush to do, and each waits for the other), then does a PMI barrier (so no rank
 * progresses UCX again before it has sent its own flushes): on the one TCP
 * connection of a pair each rank then reads its peer's put before the
 * acknowledgement of its own, and acknowledges it before it can leave.
 *
 * The barrier is PMI-1 on the descriptor MPICH's own PMI client uses (PMI_FD, set
 * by hydra's proxies and by Slurm's mpi/pmi2 plugin, which also speaks PMI-1).
 * Without PMI_FD (a singleton) or when CLAVIS_NO_FINALIZE_BARRIER is set it only
 * calls PMPI_Finalize. MPI functions are found at run time and the wrapper is not
 * linked with libmpich, so it can be preloaded into any process: those that never
 * call MPI_Finalize are untouched. mpi.h is included for types and constants.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BARRIER_IN "cmd=barrier_in\n"
#define BARRIER_OUT "cmd=barrier_out"

typedef int (*finalize_fn)(void);
typedef int (*size_fn)(MPI_Comm, int *);
typedef int (*alltoall_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype,
			   MPI_Comm);

/* write all of buf; 0 on success */
static int _write_all(int fd, const char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* read one reply line byte by byte (never past it: the rest belongs to MPICH) */
static int _read_line(int fd, char *buf, size_t size)
{
	size_t got = 0;
	ssize_t n;

	while (got + 1 < size) {
		n = read(fd, buf + got, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		if (buf[got++] == '\n')
			break;
	}
	buf[got] = '\0';
	return 0;
}

/* PMI-1 barrier on fd; 0 when every rank of the job has entered it */
static int _pmi_barrier(int fd)
{
	char reply[256];

	if (_write_all(fd, BARRIER_IN, strlen(BARRIER_IN)) != 0)
		return -1;
	if (_read_line(fd, reply, sizeof(reply)) != 0)
		return -1;
	return strncmp(reply, BARRIER_OUT, strlen(BARRIER_OUT)) == 0 ? 0 : -1;
}

/* one int from every rank to every rank over MPI_COMM_WORLD; 0 on success */
static int _exchange(void)
{
	size_fn comm_size = (size_fn)dlsym(RTLD_NEXT, "PMPI_Comm_size");
	alltoall_fn alltoall = (alltoall_fn)dlsym(RTLD_NEXT, "PMPI_Alltoall");
	int size = 0, rc = -1;
	int *out, *in;

	if (comm_size == NULL || alltoall == NULL)
		return -1;
	if (comm_size(MPI_COMM_WORLD, &size) != MPI_SUCCESS || size < 1)
		return -1;
	out = calloc((size_t)size, sizeof(int));
	in = calloc((size_t)size, sizeof(int));
	if (out != NULL && in != NULL &&
	    alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD) == MPI_SUCCESS)
		rc = 0;
	free(out);
	free(in);
	return rc;
}

int MPI_Finalize(void)
{
	finalize_fn real = (finalize_fn)dlsym(RTLD_NEXT, "PMPI_Finalize");
	const char *fd = getenv("PMI_FD");
	char *end = NULL;
	long n;

	if (real == NULL) {
		fprintf(stderr, "finalize_barrier: PMPI_Finalize not found: %s\n", dlerror());
		return MPI_ERR_OTHER;
	}
	if (fd == NULL || getenv("CLAVIS_NO_FINALIZE_BARRIER") != NULL)
		return real();
	n = strtol(fd, &end, 10);
	if (end == fd || *end != '\0' || n < 0)
		return real();
	if (_exchange() != 0)
		fprintf(stderr, "finalize_barrier: exchange between ranks failed\n");
	if (_pmi_barrier((int)n) != 0)
		fprintf(stderr, "finalize_barrier: PMI barrier on fd %ld failed; "
				"MPICH's MPI_Finalize may hang\n", n);
	return real();
}
