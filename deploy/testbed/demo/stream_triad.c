/*
 * stream_triad.c - the demo's memory-streaming job: STREAM's triad a = b + s*c over
 * three arrays far larger than any last-level cache, repeated for SECONDS seconds, so
 * nearly every load misses the cache (a "devil", thesis §5.4). Built as `stream-triad`:
 * the testbed's emulated miss counters read programs named stream* as devils
 * (deploy/testbed/ctb/misses.py), as a PMU would read this loop.
 * Usage: stream-triad SECONDS [MIB_PER_ARRAY]
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 60.0;
	size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 64;
	size_t n = mib * 1024 * 1024 / sizeof(double), i;
	double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double));
	double *c = malloc(n * sizeof(double)), t0 = now(), sum = 0;
	long passes = 0;

	if (!a || !b || !c || seconds <= 0 || n == 0) {
		fprintf(stderr, "stream-triad: bad arguments or out of memory\n");
		return 2;
	}
	for (i = 0; i < n; i++) {
		b[i] = 1.0;
		c[i] = 2.0;
	}
	while (now() - t0 < seconds) {
		for (i = 0; i < n; i++)
			a[i] = b[i] + 3.0 * c[i];
		sum += a[passes % n];
		passes++;
	}
	printf("stream-triad: %ld passes of %zu MiB x 3 in %.1f s (check %.1f)\n", passes,
	       mib, now() - t0, sum);
	return 0;
}
