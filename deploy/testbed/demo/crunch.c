/*
 * crunch.c - the demo's compute-bound job: integer arithmetic on a few registers for
 * SECONDS seconds, touching almost no memory (a "turtle", thesis §5.4).
 * Usage: crunch SECONDS
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 60.0;
	time_t end = time(NULL) + (time_t)(seconds + 0.5);
	unsigned long x = 88172645463325252UL, rounds = 0;
	int i;

	if (seconds <= 0) {
		fprintf(stderr, "crunch: SECONDS must be > 0\n");
		return 2;
	}
	while (time(NULL) < end) {
		/* xorshift: a dependent chain the compiler cannot fold away */
		for (i = 0; i < 1000000; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		rounds++;
	}
	printf("crunch: %lu rounds (%lx)\n", rounds, x);
	return 0;
}
