/*
 * clavis_narrow_test.c - drive the advised narrowing on a node table read from a
 * file, as select_clavis.c's job test does it, for the tests and bench/plugin.
 *
 *   clavis_narrow_test narrow ADVICE NOW NODES MIN DEVIL STRICT
 *       "narrowed K: NODE..." (the nodes kept, in table order) or "nothing: WHY"
 *   clavis_narrow_test time ADVICE NOW NODES MIN DEVIL REPS [CHANGES]
 *       job tests of the plugin's own work (the advice held from the watcher
 *       thread, one lookup per candidate, both narrowed sets) while the thread
 *       follows the file, which changes CHANGES times (default 3: its mtime set
 *       anew, so the thread reads and parses it again): during each reload the job
 *       tests go on (timed too), the first to see the new advice is timed apart,
 *       then REPS more. "first_us F cpu_first_us G" (the worst first job test after
 *       a change) "median_us M max_us X cpu_median_us C cpu_p99_us P cpu_max_us Y"
 *       (every job test, the first ones included) "kept K tests T changes N"
 *
 * NODES: the node table, one name a line; a name prefixed with '!' is in the table
 * but no candidate. The advice is read as the plugin reads it, with no size limit
 * beyond CLAVIS_ADVICE_MAX_BYTES_DEFAULT.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>

#include "clavis_advice.h"
#include "clavis_advice_watch.h"
#include "clavis_narrow.h"

#define LINE_MAX_LEN 512
#define POLL_MS 5 /* the watcher's interval here: changes are seen soon */
#define WAIT_S 120 /* at most this long for the thread to handle a change */
#define MAX_TESTS 1000000 /* job tests timed in one run at most */

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

/* As select_clavis.c's _cands: each candidate's entry of the last job test (the
 * caller clears `entry` when the advice changed), else a lookup. */
static void _cands(const clavis_advice_t *adv, const table_t *t,
		   const clavis_advice_node_t **entry, clavis_cands_t *c)
{
	size_t i;

	for (i = 0; i < t->n; i++)
		if (t->in[i])
			entry[i] = clavis_advice_recall(adv, entry[i],
							t->names[i]);
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

/* The timings of one run. */
typedef struct {
	double *us, *cpu; /* every job test */
	size_t n, cap;
	double first, cpu_first; /* the worst first job test after a change */
	long kept;
	unsigned long seq; /* the advice change `entry` is of */
} timings_t;

/* One job test's work, timed into `tm`. RET 1 if it saw change `want` (or a later
 * one), 0 if not yet, -1 on error. */
static int _job_test(clavis_advice_watch_t *w, double now, const table_t *t,
		     const clavis_advice_node_t **entry, unsigned char *out,
		     uint32_t min_nodes, int devil, unsigned long want,
		     timings_t *tm)
{
	double t0 = _us(CLOCK_MONOTONIC), c0 = _us(CLOCK_THREAD_CPUTIME_ID);
	const clavis_advice_t *adv;
	unsigned long seq;
	clavis_cands_t c;
	int strict, rc;
	size_t i;

	if (tm->n == tm->cap || clavis_advice_hold(w, now, &adv, &seq))
		return -1;
	if (seq != tm->seq) { /* another advice: the entries kept are not its */
		memset(entry, 0, t->n * sizeof(*entry));
		tm->seq = seq;
	}
	if (adv) {
		_cands(adv, t, entry, &c);
		for (strict = 0; strict <= devil; strict++) {
			rc = clavis_narrow(adv, &c, min_nodes, devil, strict, out);
			for (i = 0, tm->kept = 0; rc && i < t->n; i++)
				tm->kept += out[i];
		}
	}
	if (clavis_advice_release(w))
		return -1;
	/* before the thread's first look there is nothing to time */
	if (seq) {
		tm->cpu[tm->n] = _us(CLOCK_THREAD_CPUTIME_ID) - c0;
		tm->us[tm->n] = _us(CLOCK_MONOTONIC) - t0;
		tm->n++;
	}
	return seq >= want;
}

static int _by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Job tests until one sees change `want` (timed apart as a first), then `reps`
 * more. RET 0, or -1 on error or after WAIT_S. */
static int _round(clavis_advice_watch_t *w, double now, const table_t *t,
		  const clavis_advice_node_t **entry, unsigned char *out,
		  uint32_t min_nodes, int devil, unsigned long want, int reps,
		  timings_t *tm)
{
	double until = _us(CLOCK_MONOTONIC) + WAIT_S * 1e6;
	int rc, i;

	const struct timespec pause = { 0, 1000000 };

	/* a job test a millisecond while the thread reloads: slurmctld's pace, not a
	 * busy loop that would take the thread's core */
	while (!(rc = _job_test(w, now, t, entry, out, min_nodes, devil, want,
				tm))) {
		if (_us(CLOCK_MONOTONIC) > until)
			return -1;
		(void)nanosleep(&pause, NULL);
	}
	if (rc < 0)
		return -1;
	if (tm->us[tm->n - 1] > tm->first)
		tm->first = tm->us[tm->n - 1];
	if (tm->cpu[tm->n - 1] > tm->cpu_first)
		tm->cpu_first = tm->cpu[tm->n - 1];
	for (i = 0; i < reps; i++)
		if (_job_test(w, now, t, entry, out, min_nodes, devil, 0, tm) < 0)
			return -1;
	return 0;
}

/* The file's mtime set to its original one plus k seconds. RET 0 or -1. */
static int _touch(const char *path, const struct stat *st, long k)
{
	struct timespec times[2] = { { 0, UTIME_OMIT }, st->st_mtim };

	times[1].tv_sec += k;
	return utimensat(AT_FDCWD, path, times, 0);
}

static int _run(int argc, char **argv, const table_t *t)
{
	const clavis_advice_node_t **entry = calloc(t->n + 1, sizeof(*entry));
	unsigned char *out = calloc(t->n + 1, 1);
	uint32_t min_nodes = (uint32_t)strtoul(argv[5], NULL, 10);
	int devil = atoi(argv[6]), reps = atoi(argv[7]), rc = 0;
	long changes = argc > 8 ? atol(argv[8]) : 3, k;
	timings_t tm = { .cap = MAX_TESTS };
	clavis_advice_watch_t w;
	struct stat st;

	tm.us = calloc(tm.cap, sizeof(*tm.us));
	tm.cpu = calloc(tm.cap, sizeof(*tm.cpu));
	if (!entry || !out || !tm.us || !tm.cpu || reps < 1 || changes < 1 ||
	    stat(argv[2], &st) < 0 ||
	    clavis_advice_watch_init(&w, argv[2],
				     CLAVIS_ADVICE_MAX_BYTES_DEFAULT, POLL_MS,
				     NULL, NULL)) {
		rc = 2;
		goto done;
	}
	if (clavis_advice_watch_start(&w))
		rc = 2;
	/* change k is the thread's k-th: its first look, then each new mtime (set
	 * k seconds on: a file system's clock may not tick between two changes) */
	for (k = 1; !rc && k <= changes; k++) {
		if (k > 1 && _touch(argv[2], &st, k) < 0)
			rc = 2;
		else if (_round(&w, atof(argv[3]), t, entry, out, min_nodes,
				devil, (unsigned long)k, reps, &tm) < 0)
			rc = 3;
	}
	clavis_advice_watch_fini(&w);
	if (rc)
		goto done;
	qsort(tm.us, tm.n, sizeof(*tm.us), _by_double);
	qsort(tm.cpu, tm.n, sizeof(*tm.cpu), _by_double);
	printf("first_us %.1f cpu_first_us %.1f median_us %.1f max_us %.1f "
	       "cpu_median_us %.1f cpu_p99_us %.1f cpu_max_us %.1f kept %ld "
	       "tests %zu changes %ld\n",
	       tm.first, tm.cpu_first, tm.us[tm.n / 2], tm.us[tm.n - 1],
	       tm.cpu[tm.n / 2], tm.cpu[tm.n * 99 / 100], tm.cpu[tm.n - 1],
	       tm.kept, tm.n, changes);
done:
	free(entry);
	free(out);
	free(tm.us);
	free(tm.cpu);
	return rc;
}

/* The narrowed set of `adv` (usable) for argv's job: "narrowed K: NODE..." or
 * "nothing: not narrower". */
static void _print_narrowed(const clavis_advice_t *adv, char **argv,
			    const table_t *t, const clavis_advice_node_t **entry,
			    unsigned char *out)
{
	clavis_cands_t c;
	size_t i, kept = 0;

	_cands(adv, t, entry, &c);
	if (!clavis_narrow(adv, &c, (uint32_t)strtoul(argv[5], NULL, 10),
			   atoi(argv[6]), atoi(argv[7]), out)) {
		printf("nothing: not narrower\n");
		return;
	}
	for (i = 0; i < t->n; i++)
		kept += out[i];
	printf("narrowed %zu:", kept);
	for (i = 0; i < t->n; i++)
		if (out[i])
			printf(" %s", t->names[i]);
	printf("\n");
}

static int _narrow(char **argv, const table_t *t)
{
	clavis_advice_file_t f = { .path = argv[2],
				   .max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT };
	const clavis_advice_node_t **entry = calloc(t->n + 1, sizeof(*entry));
	unsigned char *out = calloc(t->n + 1, 1);
	clavis_advice_t *adv = NULL;
	const char *why;
	int rc = 0;

	if (!entry || !out) {
		rc = 2;
	} else {
		/* the first look at a file is a change: the advice or a reason */
		(void)clavis_advice_read(&f, &adv);
		if ((why = clavis_advice_why_not(&f, adv, atof(argv[3]))))
			printf("nothing: %s\n", why);
		else
			_print_narrowed(adv, argv, t, entry, out);
	}
	clavis_advice_destroy(adv);
	free(entry);
	free(out);
	return rc;
}

int main(int argc, char **argv)
{
	table_t t;
	int rc;

	if (argc < 8 || argc > 9 || (argc == 9 && strcmp(argv[1], "time")) ||
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
