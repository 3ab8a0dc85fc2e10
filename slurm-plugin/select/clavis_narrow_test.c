/*
 * clavis_narrow_test.c - drive the advised narrowing on a node table read from a
 * file, as select_clavis.c's job test does it, for the tests and bench/plugin.
 *
 *   clavis_narrow_test narrow ADVICE NOW NODES MIN DEVIL STRICT
 *       "narrowed K: NODE..." (the nodes kept, in table order) or "nothing: WHY"
 *   clavis_narrow_test time ADVICE NOW NODES MIN DEVIL REPS
 *       1 + REPS job tests of the plugin's own work (the cached advice load, one
 *       lookup per candidate, both narrowed sets): the first, which reads the file,
 *       apart, then the REPS others' wall and CPU time: "first_us F cpu_first_us G
 *       median_us M max_us X cpu_median_us C cpu_max_us Y kept K"
 *
 * NODES: the node table, one name a line; a name prefixed with '!' is in the table
 * but no candidate. The advice is read through the plugin's cache with no size
 * limit beyond CLAVIS_ADVICE_MAX_BYTES_DEFAULT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clavis_advice.h"
#include "clavis_narrow.h"

#define LINE_MAX_LEN 512

typedef struct {
	size_t n;
	char **names;
	unsigned char *in;
} table_t;

static int _read_table(const char *path, table_t *t)
{
	char line[LINE_MAX_LEN], **names;
	unsigned char *in;
	size_t cap = 0;
	FILE *f = fopen(path, "r");

	memset(t, 0, sizeof(*t));
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (!line[0] || !strcmp(line, "!"))
			continue;
		if (t->n == cap) {
			cap = cap ? 2 * cap : 1024;
			if (!(names = realloc(t->names, cap * sizeof(*names)))) {
				(void)fclose(f);
				return -1;
			}
			t->names = names;
			if (!(in = realloc(t->in, cap))) {
				(void)fclose(f);
				return -1;
			}
			t->in = in;
		}
		t->in[t->n] = line[0] != '!';
		if (!(t->names[t->n] = strdup(line + (line[0] == '!'))))
			break;
		t->n++;
	}
	return fclose(f) ? -1 : 0;
}

static void _free_table(table_t *t)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		free(t->names[i]);
	free(t->names);
	free(t->in);
}

/* As select_clavis.c's _cands: one lookup per candidate. */
static void _cands(const clavis_advice_t *adv, const table_t *t,
		   const clavis_advice_node_t **entry, clavis_cands_t *c)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		entry[i] = t->in[i] ? clavis_advice_find(adv, t->names[i]) : NULL;
	c->n = t->n;
	c->entry = entry;
	c->in = t->in;
}

/* Microseconds of `clock` (CLOCK_MONOTONIC: wall; CLOCK_THREAD_CPUTIME_ID: this
 * thread's CPU, which other loads of a shared machine do not inflate). */
static double _us(clockid_t clock)
{
	struct timespec ts;

	(void)clock_gettime(clock, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* One job test's work. RET the nodes kept in the best set, 0 if none, -1 on error. */
static long _job_test(clavis_advice_cache_t *cache, double now, const table_t *t,
		      const clavis_advice_node_t **entry, unsigned char *out,
		      uint32_t min_nodes, int devil)
{
	const clavis_advice_t *adv;
	const char *why;
	clavis_cands_t c;
	long kept = 0;
	int changed, strict, rc;
	size_t i;

	if (!(adv = clavis_advice_load(cache, now, &why, &changed)))
		return 0;
	_cands(adv, t, entry, &c);
	for (strict = 0; strict <= devil; strict++) {
		if ((rc = clavis_narrow(adv, &c, min_nodes, devil, strict, out)) < 0)
			return -1;
		for (i = 0, kept = 0; rc && i < t->n; i++)
			kept += out[i];
	}
	return kept;
}

static int _by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int _run(int argc, char **argv, const table_t *t)
{
	clavis_advice_cache_t cache = { .path = argv[2],
					.max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT };
	const clavis_advice_node_t **entry = calloc(t->n + 1, sizeof(*entry));
	unsigned char *out = calloc(t->n + 1, 1);
	uint32_t min_nodes = (uint32_t)strtoul(argv[5], NULL, 10);
	int devil = atoi(argv[6]), reps = atoi(argv[7]), i, rc = 0;
	size_t size = (size_t)(reps > 0 ? reps : 1);
	double *us = calloc(size, sizeof(*us)), *cpu = calloc(size, sizeof(*cpu));
	double t0, c0, first = 0, cpu_first = 0;
	long kept = 0;

	(void)argc;
	if (!entry || !out || !us || !cpu || reps < 1) {
		rc = 2;
		goto done;
	}
	for (i = -1; i < reps; i++) {
		t0 = _us(CLOCK_MONOTONIC);
		c0 = _us(CLOCK_THREAD_CPUTIME_ID);
		kept = _job_test(&cache, atof(argv[3]), t, entry, out, min_nodes,
				 devil);
		c0 = _us(CLOCK_THREAD_CPUTIME_ID) - c0;
		t0 = _us(CLOCK_MONOTONIC) - t0;
		if (i < 0) {
			first = t0;
			cpu_first = c0;
		} else {
			cpu[i] = c0;
			us[i] = t0;
		}
		if (kept < 0) {
			rc = 3;
			goto done;
		}
	}
	qsort(us, size, sizeof(*us), _by_double);
	qsort(cpu, size, sizeof(*cpu), _by_double);
	printf("first_us %.1f cpu_first_us %.1f median_us %.1f max_us %.1f "
	       "cpu_median_us %.1f cpu_max_us %.1f kept %ld\n",
	       first, cpu_first, us[reps / 2], us[reps - 1], cpu[reps / 2],
	       cpu[reps - 1], kept);
done:
	clavis_advice_cache_free(&cache);
	free(entry);
	free(out);
	free(us);
	free(cpu);
	return rc;
}

static int _narrow(char **argv, const table_t *t)
{
	clavis_advice_cache_t cache = { .path = argv[2],
					.max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT };
	const clavis_advice_node_t **entry = calloc(t->n + 1, sizeof(*entry));
	unsigned char *out = calloc(t->n + 1, 1);
	const clavis_advice_t *adv;
	const char *why = NULL;
	clavis_cands_t c;
	int changed, rc = 0;
	size_t i, kept = 0;

	if (!entry || !out) {
		rc = 2;
	} else if (!(adv = clavis_advice_load(&cache, atof(argv[3]), &why,
					      &changed))) {
		printf("nothing: %s\n", why);
	} else {
		_cands(adv, t, entry, &c);
		rc = clavis_narrow(adv, &c, (uint32_t)strtoul(argv[5], NULL, 10),
				   atoi(argv[6]), atoi(argv[7]), out);
		for (i = 0; rc == 1 && i < t->n; i++)
			kept += out[i];
		if (rc == 1)
			printf("narrowed %zu:", kept);
		else if (!rc)
			printf("nothing: not narrower");
		for (i = 0; rc == 1 && i < t->n; i++)
			if (out[i])
				printf(" %s", t->names[i]);
		printf("\n");
		rc = rc < 0 ? 3 : 0;
	}
	clavis_advice_cache_free(&cache);
	free(entry);
	free(out);
	return rc;
}

int main(int argc, char **argv)
{
	table_t t;
	int rc;

	if (argc != 8 ||
	    (strcmp(argv[1], "narrow") && strcmp(argv[1], "time"))) {
		fprintf(stderr, "usage: see the header of clavis_narrow_test.c\n");
		return 2;
	}
	if (_read_table(argv[4], &t) < 0) {
		fprintf(stderr, "clavis_narrow_test: cannot read %s\n", argv[4]);
		_free_table(&t);
		return 2;
	}
	rc = !strcmp(argv[1], "narrow") ? _narrow(argv, &t) : _run(argc, argv, &t);
	_free_table(&t);
	return rc;
}
