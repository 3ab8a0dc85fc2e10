/*
 * clavis_advice_test.c - drive the advice reader from the command line, for
 * slurm-plugin/tests (garbage, limits, staleness, the cache).
 *
 *   clavis_advice_test parse FILE NOW        one line per node, then "v2 apps N" and one
 *                                            line per application, or "refused: WHY"
 *   clavis_advice_test load FILE NOW MAX [N] the cached loader N times (default 1):
 *                                            "advice N nodes (read R times)" or "none: WHY"
 *   clavis_advice_test rfc3339 TEXT          seconds since the epoch, or "bad"
 *   clavis_advice_test key UID NAME          the application key, or "none"
 *   clavis_advice_test fuzz FILE N SEED      N seeded random mutants of FILE parsed:
 *                                            "fuzz N accepted A refused R max_us M"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clavis_advice.h"

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
	clavis_advice_cache_t c = { 0 };
	const clavis_advice_t *adv = NULL;
	const char *why = NULL;
	int i, times = argc > 5 ? atoi(argv[5]) : 1, changed, reads = 0;

	c.path = argv[2];
	c.max_bytes = strtoul(argv[4], NULL, 10);
	for (i = 0; i < times; i++) {
		adv = clavis_advice_load(&c, atof(argv[3]), &why, &changed);
		reads += changed;
	}
	if (adv)
		printf("advice %zu nodes (read %d times)\n", adv->n, reads);
	else
		printf("none: %s (read %d times)\n", why, reads);
	clavis_advice_cache_free(&c);
	return 0;
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
