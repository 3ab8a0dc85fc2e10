/*
 * clavis_advice.c - read and check clavisd's advice file (schema v2, and v1).
 */
#include "clavis_advice.h"

#include "clavis_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 128
/* The most JSON values a valid document has: the header's few, per node an object
 * and its 5 strings, per application an object and its 3 values. A 4 MiB file of
 * anything else would build a tree of ~100 MB in slurmctld before being refused. */
#define MAX_VALUES \
	(16 + 6 * (size_t)CLAVIS_ADVICE_MAX_NODES + 4 * (size_t)CLAVIS_ADVICE_MAX_APPS)

static int _name_ok(const char *s)
{
	size_t n = strlen(s), i;

	if (n < 1 || n > NAME_MAX_LEN)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			    (c >= '0' && c <= '9');

		if (!alnum && (i == 0 || (c != '.' && c != '_' && c != ':' &&
					  c != '-')))
			return 0;
	}
	return 1;
}

static int _digits(const char *s, int n, int *out)
{
	int i, v = 0;

	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

int clavis_rfc3339(const char *t, double *out)
{
	int Y, M, D, h, m, s, zh = 0, zm = 0, sign = 0;
	double frac = 0, scale = 0.1;
	struct tm tm = { 0 };
	time_t secs;

	if (strlen(t) < 20 || _digits(t, 4, &Y) || t[4] != '-' ||
	    _digits(t + 5, 2, &M) || t[7] != '-' || _digits(t + 8, 2, &D) ||
	    (t[10] != 'T' && t[10] != 't' && t[10] != ' ') ||
	    _digits(t + 11, 2, &h) || t[13] != ':' || _digits(t + 14, 2, &m) ||
	    t[16] != ':' || _digits(t + 17, 2, &s))
		return -1;
	t += 19;
	if (*t == '.') {
		if (t[1] < '0' || t[1] > '9')
			return -1;
		for (t++; *t >= '0' && *t <= '9'; t++, scale /= 10)
			frac += (*t - '0') * scale;
	}
	if (*t == 'Z' || *t == 'z') {
		t++;
	} else if (*t == '+' || *t == '-') {
		sign = *t == '-' ? -1 : 1;
		if (_digits(t + 1, 2, &zh) || t[3] != ':' ||
		    _digits(t + 4, 2, &zm) || zh > 23 || zm > 59)
			return -1;
		t += 6;
	} else {
		return -1; /* a zone is required */
	}
	if (*t || M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 ||
	    s > 60 || Y < 1970)
		return -1;
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = s;
	secs = timegm(&tm);
	if (secs == (time_t)-1)
		return -1;
	*out = (double)secs + frac - sign * (zh * 3600.0 + zm * 60.0);
	return 0;
}

static const char *_str(const jv_t *obj, const char *key)
{
	const jv_t *v = jv_get(obj, key);

	return (v && v->type == JV_STR) ? v->str : NULL;
}

static int _enum(const char *s, const char *const *names, int count)
{
	int i;

	for (i = 0; s && i < count; i++)
		if (!strcmp(s, names[i]))
			return i;
	return -1;
}

/* Only the schema's keys, each once. */
static int _keys_ok(const jv_t *obj, const char *const *keys, size_t count)
{
	size_t i, j;

	for (i = 0; i < obj->n; i++) {
		if (_enum(obj->keys[i], keys, (int)count) < 0)
			return 0;
		for (j = 0; j < i; j++)
			if (!strcmp(obj->keys[i], obj->keys[j]))
				return 0;
	}
	return 1;
}

static int _node(const jv_t *v, clavis_advice_node_t *out, const char **why)
{
	static const char *const keys[] = { "node", "host", "rack",
					    "contention", "node_class" };
	static const char *const cont[] = { "unknown", "devil-free", "ok",
					    "contended" };
	static const char *const cls[] = { "unknown", "devil", "turtle" };
	const char *node = _str(v, "node"), *host = _str(v, "host");
	const char *rack = _str(v, "rack");
	int c, k;

	if (v->type != JV_OBJ || !_keys_ok(v, keys, 5)) {
		*why = "a node entry is not an object of the schema's keys";
		return -1;
	}
	if (!node || !host || !rack || !_name_ok(node) || !_name_ok(host) ||
	    !_name_ok(rack)) {
		*why = "a node entry has a missing or invalid node/host/rack";
		return -1;
	}
	c = _enum(_str(v, "contention"), cont, 4);
	k = _enum(_str(v, "node_class"), cls, 3);
	if (c < 0 || k < 0) {
		*why = "a node entry has an invalid contention or node_class";
		return -1;
	}
	out->node = strdup(node);
	out->host = strdup(host);
	out->rack = strdup(rack);
	out->contention = (clavis_contention_t)c;
	out->node_class = (clavis_class_t)k;
	if (!out->node || !out->host || !out->rack) {
		*why = "out of memory";
		return -1;
	}
	return 0;
}

/* An application key as clavis_contracts/application.py makes it: a decimal uid
 * (no sign, no leading zero, at most UINT32_MAX), ':', a name of 1 to
 * CLAVIS_APP_NAME_MAX bytes. */
static int _app_key_ok(const char *s)
{
	unsigned long long uid = 0;
	size_t i, len;

	for (i = 0; s[i] >= '0' && s[i] <= '9'; i++) {
		if (i == 10)
			return 0;
		uid = uid * 10 + (unsigned long long)(s[i] - '0');
	}
	if (!i || s[i] != ':' || (s[0] == '0' && i > 1) || uid > 4294967295ULL)
		return 0;
	len = strlen(s + i + 1);
	return len >= 1 && len <= CLAVIS_APP_NAME_MAX;
}

static int _app(const jv_t *v, clavis_advice_app_t *out, const char **why)
{
	static const char *const keys[] = { "app", "app_class", "jobs_seen" };
	static const char *const cls[] = { "devil", "turtle" };
	const char *key = _str(v, "app");
	const jv_t *seen = jv_get(v, "jobs_seen");
	int k;

	if (v->type != JV_OBJ || !_keys_ok(v, keys, 3)) {
		*why = "an apps entry is not an object of the schema's keys";
		return -1;
	}
	if (!key || !_app_key_ok(key)) {
		*why = "an apps entry has a missing or invalid application key";
		return -1;
	}
	k = _enum(_str(v, "app_class"), cls, 2);
	if (k < 0 || !seen || seen->type != JV_NUM || !(seen->num >= 1)) {
		*why = "an apps entry has an invalid app_class or jobs_seen";
		return -1;
	}
	out->app_class = k == 0 ? ADV_CLASS_DEVIL : ADV_CLASS_TURTLE;
	if (!(out->key = strdup(key))) {
		*why = "out of memory";
		return -1;
	}
	return 0;
}

static int _by_key(const void *a, const void *b)
{
	return strcmp(((const clavis_advice_app_t *)a)->key,
		      ((const clavis_advice_app_t *)b)->key);
}

static int _by_name(const void *a, const void *b)
{
	return strcmp(((const clavis_advice_node_t *)a)->node,
		      ((const clavis_advice_node_t *)b)->node);
}

static int _header(const jv_t *doc, clavis_advice_t *out, const char **why)
{
	static const char *const keys[] = { "schema_version", "kind", "generated",
					    "valid_s", "nodes", "apps" };
	const jv_t *ver = jv_get(doc, "schema_version");
	const jv_t *valid = jv_get(doc, "valid_s");
	const char *kind = _str(doc, "kind"), *gen = _str(doc, "generated");

	if (doc->type != JV_OBJ || !_keys_ok(doc, keys, 6)) {
		*why = "not an object of the schema's keys";
		return -1;
	}
	/* absent: the contract's default, the current version */
	if (ver && (ver->type != JV_NUM || (ver->num != 1 && ver->num != 2))) {
		*why = "schema_version is not 1 or 2";
		return -1;
	}
	out->version = ver ? (int)ver->num : 2;
	if (out->version == 1 && jv_get(doc, "apps")) {
		*why = "apps needs schema_version 2";
		return -1;
	}
	if (jv_get(doc, "kind") && (!kind || strcmp(kind, "clavis.advice"))) {
		*why = "kind is not clavis.advice";
		return -1;
	}
	if (!gen || clavis_rfc3339(gen, &out->generated) < 0) {
		*why = "generated is missing or not an RFC 3339 time with a zone";
		return -1;
	}
	/* written so that NaN fails too */
	if (!valid || valid->type != JV_NUM || !(valid->num > 0) ||
	    !(valid->num <= CLAVIS_ADVICE_MAX_VALID_S)) {
		*why = "valid_s is missing, not positive or over 3600 s";
		return -1;
	}
	out->valid_s = valid->num;
	return 0;
}

/* The optional list of applications (v2), sorted by key. RET 0 or -1. */
static int _apps(const jv_t *apps, clavis_advice_t *out, const char **why)
{
	size_t i;

	if (!apps)
		return 0;
	if (apps->type != JV_ARR || apps->n > CLAVIS_ADVICE_MAX_APPS) {
		*why = "apps is not a list, or too long";
		return -1;
	}
	if (apps->n && !(out->apps = calloc(apps->n, sizeof(*out->apps)))) {
		*why = "out of memory";
		return -1;
	}
	for (i = 0; i < apps->n; i++, out->n_apps++)
		if (_app(&apps->items[i], &out->apps[i], why) < 0) {
			out->n_apps++; /* free what was duplicated */
			return -1;
		}
	if (out->n_apps)
		qsort(out->apps, out->n_apps, sizeof(*out->apps), _by_key);
	for (i = 1; i < out->n_apps; i++)
		if (!strcmp(out->apps[i - 1].key, out->apps[i].key)) {
			*why = "an application is listed twice";
			return -1;
		}
	return 0;
}

int clavis_advice_parse(const char *text, size_t len, clavis_advice_t *out,
			const char **why)
{
	const jv_t *nodes;
	size_t i, at;
	jv_t doc;

	memset(out, 0, sizeof(*out));
	if (jv_parse(text, len, MAX_VALUES, &doc, why, &at) < 0)
		return -1;
	if (_header(&doc, out, why) < 0)
		goto fail;
	nodes = jv_get(&doc, "nodes");
	if (!nodes || nodes->type != JV_ARR ||
	    nodes->n > CLAVIS_ADVICE_MAX_NODES) {
		*why = "nodes is missing, not a list, or too long";
		goto fail;
	}
	if (nodes->n && !(out->nodes = calloc(nodes->n, sizeof(*out->nodes)))) {
		*why = "out of memory";
		goto fail;
	}
	for (i = 0; i < nodes->n; i++, out->n++)
		if (_node(&nodes->items[i], &out->nodes[i], why) < 0) {
			out->n++; /* free what was duplicated */
			goto fail;
		}
	if (out->n) /* qsort's base must not be NULL, even for no items */
		qsort(out->nodes, out->n, sizeof(*out->nodes), _by_name);
	for (i = 1; i < out->n; i++)
		if (!strcmp(out->nodes[i - 1].node, out->nodes[i].node)) {
			*why = "a node is listed twice";
			goto fail;
		}
	if (clavis_advice_index(out) < 0) {
		*why = "out of memory";
		goto fail;
	}
	if (_apps(jv_get(&doc, "apps"), out, why) < 0)
		goto fail;
	jv_free(&doc);
	return 0;
fail:
	jv_free(&doc);
	clavis_advice_free(out);
	return -1;
}

void clavis_advice_free(clavis_advice_t *adv)
{
	size_t i;

	for (i = 0; i < adv->n; i++) {
		free(adv->nodes[i].node);
		free(adv->nodes[i].host);
		free(adv->nodes[i].rack);
	}
	free(adv->nodes);
	free(adv->slots);
	free(adv->rack_counts);
	for (i = 0; i < adv->n_apps; i++)
		free(adv->apps[i].key);
	free(adv->apps);
	memset(adv, 0, sizeof(*adv));
}

int clavis_advice_fresh(const clavis_advice_t *adv, double now)
{
	double age = now - adv->generated;

	return age <= adv->valid_s && age >= -CLAVIS_ADVICE_MAX_AHEAD_S;
}

const clavis_advice_app_t *clavis_advice_find_app(const clavis_advice_t *adv,
						  const char *key)
{
	clavis_advice_app_t probe = { .key = (char *)key };

	if (!adv->n_apps)
		return NULL;
	return bsearch(&probe, adv->apps, adv->n_apps, sizeof(*adv->apps),
		       _by_key);
}

int clavis_app_key(char *buf, size_t size, unsigned long uid, const char *name)
{
	size_t len;
	int n;

	if (!name || uid > 4294967295UL)
		return -1;
	len = strlen(name);
	if (len < 1 || len > CLAVIS_APP_NAME_MAX)
		return -1;
	n = snprintf(buf, size, "%lu:%s", uid, name);
	if (n < 0 || (size_t)n >= size)
		return -1;
	return 0;
}
