/*
 * clavis_advice_test.c - drive the advice reader from the command line, for
 * slurm-plugin/tests (garbage, limits, staleness, file identity, the watcher).
 *
 *   clavis_advice_test parse FILE NOW        one line per node, then "v2 apps N" and one
 *                                            line per application, or "refused: WHY"
 *   clavis_advice_test load FILE NOW MAX [N] N looks at the file (default 1), as the
 *                                            watcher thread looks: "advice N nodes (read
 *                                            R times)" or "none: WHY (read R times)"
 *   clavis_advice_test watch FILE MAX SRC... the watcher thread on FILE; each SRC in
 *                                            turn renamed onto FILE ("-": FILE removed),
 *                                            then what a job test holds once the thread
 *                                            handled it; job tests hold and release
 *                                            meanwhile (see _watch)
 *   clavis_advice_test rfc3339 TEXT          seconds since the epoch, or "bad"
 *   clavis_advice_test key UID NAME          the application key, or "none"
 *   clavis_advice_test fuzz FILE N SEED      N seeded random mutants of FILE parsed:
 *                                            "fuzz N accepted A refused R max_us M"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clavis_advice.h"
#include "clavis_advice_watch.h"

#define MAX_FILE (64 << 20)

static const char *const cont[] = { "unknown", "devil-free", "ok", "contended" };
static const char *const cls[] = { "unknown", "devil", "turtle" };

/* The file's bytes in a buffer of exactly their size, no NUL after them: under
 * AddressSanitizer a read past the length is an error. RET NULL on failure. */
static char *_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *big, *text = NULL;
	size_t n;

	if (!f)
		return NULL;
	if ((big = malloc(MAX_FILE))) {
		n = fread(big, 1, MAX_FILE, f);
		if ((text = malloc(n ? n : 1))) {
			memcpy(text, big, n);
			*len = n;
		}
		free(big);
	}
	(void)fclose(f);
	return text;
}

static int _parse(const char *path, double now)
{
	clavis_advice_t adv;
	const char *why = NULL;
	char *text;
	size_t n, i;

	if (!(text = _slurp(path, &n)))
		return 2;
	if (clavis_advice_parse(text, n, &adv, &why) < 0) {
		printf("refused: %s\n", why);
		free(text);
		return 0;
	}
	printf("%s %zu\n", clavis_advice_fresh(&adv, now) ? "fresh" : "stale",
	       adv.n);
	for (i = 0; i < adv.n; i++) {
		/* the flag derived at parse time is what the plugin uses */
		if (adv.nodes[i].host_has_devil !=
			    clavis_advice_host_has_devil(&adv, adv.nodes[i].host) ||
		    clavis_advice_find(&adv, adv.nodes[i].node) != &adv.nodes[i])
			return 4;
		printf("%s %s %s %s %s %d\n", adv.nodes[i].node,
		       adv.nodes[i].host, adv.nodes[i].rack,
		       cont[adv.nodes[i].contention], cls[adv.nodes[i].node_class],
		       adv.nodes[i].host_has_devil);
	}
	printf("v%d apps %zu\n", adv.version, adv.n_apps);
	for (i = 0; i < adv.n_apps; i++) {
		if (clavis_advice_find_app(&adv, adv.apps[i].key) != &adv.apps[i])
			return 4;
		printf("%s %s\n", adv.apps[i].key, cls[adv.apps[i].app_class]);
	}
	clavis_advice_free(&adv);
	free(text);
	return 0;
}

static int _load(char **argv, int argc)
{
	clavis_advice_file_t f = { .path = argv[2] };
	clavis_advice_t *adv = NULL, *got;
	const char *why;
	int i, times = argc > 5 ? atoi(argv[5]) : 1;

	f.max_bytes = strtoul(argv[4], NULL, 10);
	for (i = 0; i < times; i++) {
		if (clavis_advice_read(&f, &got)) {
			clavis_advice_destroy(adv);
			adv = got;
		}
	}
	if (!(why = clavis_advice_why_not(&f, adv, atof(argv[3]))))
		printf("advice %zu nodes (read %lu times)\n", adv->n, f.reads);
	else
		printf("none: %s (read %lu times)\n", why, f.reads);
	clavis_advice_destroy(adv);
	return 0;
}

/* What the watcher told (its thread), and how many changes: _watch waits on it. */
static pthread_mutex_t told_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t told_cond = PTHREAD_COND_INITIALIZER;
static unsigned long told_changes;

static void _told(void *arg, const clavis_advice_news_t *news)
{
	(void)arg;
	if (pthread_mutex_lock(&told_lock))
		abort();
	if (news->report && news->adv)
		printf("told: advice %zu nodes\n", news->adv->n);
	else if (news->report)
		printf("told: %s\n", news->why);
	told_changes += (unsigned long)news->changed;
	if (pthread_cond_broadcast(&told_cond) ||
	    pthread_mutex_unlock(&told_lock))
		abort();
}

/* Put SRC in place of FILE as a writer would (rename), or remove FILE ("-"). */
static int _put(const char *src, const char *file)
{
	char tmp[4096];
	FILE *in, *out;
	size_t n;
	int rc = 0;

	if (!strcmp(src, "-"))
		return unlink(file) ? -1 : 0;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", file) >= (int)sizeof(tmp))
		return -1;
	if (!(in = fopen(src, "rb")))
		return -1;
	if (!(out = fopen(tmp, "wb"))) {
		(void)fclose(in);
		return -1;
	}
	while ((n = fread(tmp, 1, sizeof(tmp), in)) > 0)
		if (fwrite(tmp, 1, n, out) != n)
			rc = -1;
	if (fclose(in) || fclose(out) || rc)
		return -1;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp", file) >= (int)sizeof(tmp))
		return -1;
	return rename(tmp, file) ? -1 : 0;
}

/* Until the watcher told its `want`th change: job tests hold and release the
 * advice meanwhile (each a look at every node), as slurmctld's would while the
 * thread parses. RET 0, or -1 after 60 s or on an error. */
static int _wait_told(clavis_advice_watch_t *w, unsigned long want)
{
	const clavis_advice_t *adv;
	time_t until = time(NULL) + 60;
	unsigned long done;
	size_t i;

	for (;;) {
		if (pthread_mutex_lock(&told_lock))
			return -1;
		done = told_changes;
		if (pthread_mutex_unlock(&told_lock))
			return -1;
		if (done >= want)
			return 0;
		if (time(NULL) > until)
			return -1;
		if (clavis_advice_hold(w, (double)time(NULL), &adv, NULL))
			return -1;
		for (i = 0; adv && i < adv->n; i++)
			if (clavis_advice_find(adv, adv->nodes[i].node) !=
			    &adv->nodes[i])
				abort();
		if (clavis_advice_release(w))
			return -1;
	}
}

static int _watch(int argc, char **argv)
{
	clavis_advice_watch_t w;
	const clavis_advice_t *adv;
	unsigned long seq;
	int i, rc;

	if (clavis_advice_watch_init(&w, argv[2], strtoul(argv[3], NULL, 10), 5,
				     _told, NULL) ||
	    clavis_advice_watch_start(&w))
		return 2;
	/* the thread's first look is a change (a file, or none): then one per SRC */
	rc = _wait_told(&w, 1) ? 3 : 0;
	for (i = 4; i < argc && !rc; i++) {
		if (_put(argv[i], argv[2]) || _wait_told(&w, (unsigned long)i - 2) ||
		    clavis_advice_hold(&w, (double)time(NULL), &adv, &seq)) {
			rc = 3;
			break;
		}
		if (pthread_mutex_lock(&told_lock))
			abort();
		if (adv)
			printf("held %s: advice %zu nodes (change %lu)\n", argv[i],
			       adv->n, seq);
		else
			printf("held %s: none (change %lu)\n", argv[i], seq);
		if (pthread_mutex_unlock(&told_lock) || clavis_advice_release(&w))
			rc = 3;
	}
	clavis_advice_watch_fini(&w);
	return rc;
}

/* xorshift64: a fixed, seeded sequence, so a failing case can be replayed */
static unsigned long long _rand(unsigned long long *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* Tokens a hostile writer would try, spliced in at random places. */
static const char *const tokens[] = {
	"NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1e-999", "0.0",
	"-0", "[[[[[[[[[[[[[[[[[[[[", "]]]]", "{{{{", "}}", "null", "true", "{}",
	"[]", "\"\"", "\"\\ud800\"", "\"\\u0000\"", "\xff", "\xc0\xaf",
	"\xed\xa0\x80", "\xf4\x90\x80\x80", "\"nodes\"", "\"valid_s\"",
	"\"apps\"", ",", ":", "\"", "\\", "99999999999999999999999999999",
	"1.7976931348623157e308",
};

/* Change `t` (len bytes, room for cap) in place by one random edit. RET new len. */
static size_t _mutate(char *t, size_t len, size_t cap, unsigned long long *x)
{
	size_t at = len ? _rand(x) % len : 0, n, tl;
	const char *tok;

	switch (_rand(x) % 6) {
	case 0: /* a random byte */
		if (len)
			t[at] = (char)_rand(x);
		return len;
	case 1: /* truncate */
		return at;
	case 2: /* delete a run */
		n = _rand(x) % 64;
		n = n > len - at ? len - at : n;
		memmove(t + at, t + at + n, len - at - n);
		return len - n;
	case 3: /* duplicate a run (duplicate nodes, keys, ...) */
		n = _rand(x) % 512;
		n = n > len - at ? len - at : n;
		n = n > cap - len ? cap - len : n;
		memmove(t + at + n, t + at, len - at);
		return len + n;
	default: /* splice a token */
		tok = tokens[_rand(x) % (sizeof(tokens) / sizeof(*tokens))];
		tl = strlen(tok);
		if (tl > cap - len)
			return len;
		memmove(t + at + tl, t + at, len - at);
		memcpy(t + at, tok, tl);
		return len + tl;
	}
}

/* N mutants of the file, each parsed from a buffer of exactly its size:
 * "fuzz N accepted A refused R max_us M". */
static int _fuzz(const char *path, long cases, unsigned long long seed)
{
	size_t len, cap, n;
	char *orig, *work, *exact;
	unsigned long long x = seed | 1;
	long i, accepted = 0, edits;
	double worst = 0, t0, us;
	clavis_advice_t adv;
	struct timespec ts;
	const char *why;

	if (!(orig = _slurp(path, &len)))
		return 2;
	cap = 2 * len + 4096;
	if (!(work = malloc(cap))) {
		free(orig);
		return 2;
	}
	for (i = 0; i < cases; i++) {
		memcpy(work, orig, len);
		n = len;
		for (edits = 1 + (long)(_rand(&x) % 8); edits > 0; edits--)
			n = _mutate(work, n, cap, &x);
		if (!(exact = malloc(n ? n : 1)))
			break;
		memcpy(exact, work, n);
		(void)clock_gettime(CLOCK_MONOTONIC, &ts);
		t0 = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
		if (!clavis_advice_parse(exact, n, &adv, &why)) {
			accepted++;
			clavis_advice_free(&adv);
		}
		(void)clock_gettime(CLOCK_MONOTONIC, &ts);
		us = (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3 - t0;
		worst = us > worst ? us : worst;
		free(exact);
	}
	free(work);
	free(orig);
	printf("fuzz %ld accepted %ld refused %ld max_us %.0f\n", i, accepted,
	       i - accepted, worst);
	return i == cases ? 0 : 2;
}

static int _key(const char *uid, const char *name)
{
	char key[CLAVIS_APP_KEY_SIZE];

	if (clavis_app_key(key, sizeof(key), strtoul(uid, NULL, 10), name) < 0)
		printf("none\n");
	else
		printf("%s\n", key);
	return 0;
}

int main(int argc, char **argv)
{
	double t;

	if (argc == 4 && !strcmp(argv[1], "parse"))
		return _parse(argv[2], atof(argv[3]));
	if (argc >= 5 && !strcmp(argv[1], "load"))
		return _load(argv, argc);
	if (argc == 5 && !strcmp(argv[1], "fuzz"))
		return _fuzz(argv[2], atol(argv[3]), strtoull(argv[4], NULL, 10));
	if (argc >= 5 && !strcmp(argv[1], "watch"))
		return _watch(argc, argv);
	if (argc == 4 && !strcmp(argv[1], "key"))
		return _key(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "rfc3339")) {
		if (clavis_rfc3339(argv[2], &t) < 0)
			printf("bad\n");
		else
			printf("%.6f\n", t);
		return 0;
	}
	fprintf(stderr, "usage: see the header of clavis_advice_test.c\n");
	return 2;
}
