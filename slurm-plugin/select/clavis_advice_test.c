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
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clavis_advice.h"

#define MAX_FILE (64 << 20)

static const char *const cont[] = { "unknown", "devil-free", "ok", "contended" };
static const char *const cls[] = { "unknown", "devil", "turtle" };

static int _parse(const char *path, double now)
{
	clavis_advice_t adv;
	const char *why = NULL;
	FILE *f = fopen(path, "rb");
	char *text;
	size_t n, i;

	if (!f || !(text = malloc(MAX_FILE)))
		return 2;
	n = fread(text, 1, MAX_FILE, f);
	(void)fclose(f);
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
		    clavis_advice_host_has_devil(&adv, adv.nodes[i].host))
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
