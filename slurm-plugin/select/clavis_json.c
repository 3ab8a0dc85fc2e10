/*
 * clavis_json.c - a small, bounded JSON reader (recursive descent, depth-limited).
 */
#include "clavis_json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	const char *p, *end, *start;
	const char *why;
	size_t values, max_values; /* parsed so far, and the caller's limit */
} jp_t;

/* a number's text longer than this is refused: the advice's are short (Python's
 * repr of a float is at most 24 characters) */
#define JV_NUM_MAX_LEN 64

static int _value(jp_t *jp, jv_t *out, int depth);

static int _err(jp_t *jp, const char *why)
{
	if (!jp->why)
		jp->why = why;
	return -1;
}

static void _ws(jp_t *jp)
{
	while (jp->p < jp->end && (*jp->p == ' ' || *jp->p == '\t' ||
				   *jp->p == '\n' || *jp->p == '\r'))
		jp->p++;
}

static int _lit(jp_t *jp, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(jp->end - jp->p) < n || memcmp(jp->p, word, n))
		return _err(jp, "invalid literal");
	jp->p += n;
	return 0;
}

static int _hex4(jp_t *jp, unsigned *cp)
{
	int i;

	*cp = 0;
	if (jp->end - jp->p < 4)
		return _err(jp, "short \\u escape");
	for (i = 0; i < 4; i++) {
		char c = *jp->p++;

		*cp <<= 4;
		if (c >= '0' && c <= '9')
			*cp |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			*cp |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			*cp |= (unsigned)(c - 'A' + 10);
		else
			return _err(jp, "bad \\u escape");
	}
	return 0;
}

/* Append code point `cp` as UTF-8 (the caller reserved 4 bytes). */
static size_t _utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int _escape(jp_t *jp, char *o, size_t *k)
{
	unsigned cp, lo;
	char c;

	if (jp->p >= jp->end)
		return _err(jp, "unterminated string");
	c = *jp->p++;
	switch (c) {
	case '"': case '\\': case '/':
		o[(*k)++] = c;
		return 0;
	case 'b': o[(*k)++] = '\b'; return 0;
	case 'f': o[(*k)++] = '\f'; return 0;
	case 'n': o[(*k)++] = '\n'; return 0;
	case 'r': o[(*k)++] = '\r'; return 0;
	case 't': o[(*k)++] = '\t'; return 0;
	case 'u':
		break;
	default:
		return _err(jp, "bad escape");
	}
	if (_hex4(jp, &cp) < 0)
		return -1;
	if (cp >= 0xd800 && cp <= 0xdbff) { /* a surrogate pair */
		if (jp->end - jp->p < 2 || jp->p[0] != '\\' || jp->p[1] != 'u')
			return _err(jp, "lone surrogate");
		jp->p += 2;
		if (_hex4(jp, &lo) < 0)
			return -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return _err(jp, "bad surrogate pair");
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	} else if (cp >= 0xdc00 && cp <= 0xdfff) {
		return _err(jp, "lone surrogate");
	}
	if (cp == 0)
		return _err(jp, "NUL in string");
	*k += _utf8(o + *k, cp);
	return 0;
}

/* The length of the well-formed UTF-8 sequence at `p` (RFC 3629: no overlong form,
 * no surrogate, nothing above U+10FFFF), or 0. `avail` bytes are readable. */
static size_t _utf8_len(const unsigned char *p, size_t avail)
{
	size_t len, i;
	unsigned cp;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		len = 2;
		cp = p[0] & 0x1fu;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		len = 3;
		cp = p[0] & 0x0fu;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		len = 4;
		cp = p[0] & 0x07u;
	} else {
		return 0;
	}
	if (avail < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3fu);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

static int _string(jp_t *jp, char **out)
{
	const char *q;
	char *o;
	size_t k = 0, n;

	jp->p++; /* the opening quote */
	/* the decoded string is never longer than its source */
	for (q = jp->p; q < jp->end && *q != '"'; q++)
		if (*q == '\\')
			q++;
	if (q >= jp->end)
		return _err(jp, "unterminated string");
	if (!(o = malloc((size_t)(q - jp->p) + 4)))
		return _err(jp, "out of memory");
	while (jp->p < jp->end && *jp->p != '"') {
		unsigned char c = (unsigned char)*jp->p;

		if (c < 0x20) {
			free(o);
			return _err(jp, "control character in string");
		}
		if (c == '\\') {
			jp->p++;
			if (_escape(jp, o, &k) < 0) {
				free(o);
				return -1;
			}
			continue;
		}
		/* Python's json, which the contract is checked with, refuses what
		 * is not UTF-8: so does this reader */
		n = _utf8_len((const unsigned char *)jp->p,
			      (size_t)(jp->end - jp->p));
		if (!n) {
			free(o);
			return _err(jp, "invalid UTF-8 in string");
		}
		memcpy(o + k, jp->p, n);
		k += n;
		jp->p += n;
	}
	jp->p++; /* the closing quote */
	o[k] = '\0';
	*out = o;
	return 0;
}

static int _number(jp_t *jp, jv_t *out)
{
	char buf[JV_NUM_MAX_LEN + 1], *end;
	const char *s = jp->p;

	if (jp->p < jp->end && *jp->p == '-')
		jp->p++;
	if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
		return _err(jp, "bad number");
	if (*jp->p == '0') {
		jp->p++;
		/* RFC 8259: no leading zero */
		if (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			return _err(jp, "bad number");
	} else {
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	}
	if (jp->p < jp->end && *jp->p == '.') {
		jp->p++;
		if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
			return _err(jp, "bad number");
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	}
	if (jp->p < jp->end && (*jp->p == 'e' || *jp->p == 'E')) {
		jp->p++;
		if (jp->p < jp->end && (*jp->p == '+' || *jp->p == '-'))
			jp->p++;
		if (jp->p >= jp->end || *jp->p < '0' || *jp->p > '9')
			return _err(jp, "bad number");
		while (jp->p < jp->end && *jp->p >= '0' && *jp->p <= '9')
			jp->p++;
	}
	/* the syntax is checked; strtod reads a NUL-terminated copy, so it never
	 * looks past `len` whatever follows the text in memory */
	if ((size_t)(jp->p - s) >= sizeof(buf))
		return _err(jp, "number too long");
	memcpy(buf, s, (size_t)(jp->p - s));
	buf[jp->p - s] = '\0';
	errno = 0;
	out->num = strtod(buf, &end);
	if (*end || !isfinite(out->num))
		return _err(jp, "bad number");
	out->type = JV_NUM;
	return 0;
}

static int _push(jv_t *v, size_t *cap, int with_keys)
{
	size_t ncap;
	jv_t *items;
	char **keys;

	if (v->n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 8;
	if (!(items = realloc(v->items, ncap * sizeof(*items))))
		return -1;
	v->items = items;
	if (with_keys) {
		if (!(keys = realloc(v->keys, ncap * sizeof(*keys))))
			return -1;
		v->keys = keys;
	}
	*cap = ncap;
	return 0;
}

static int _container(jp_t *jp, jv_t *out, int depth, int obj)
{
	char close = obj ? '}' : ']';
	size_t cap = 0;

	out->type = obj ? JV_OBJ : JV_ARR;
	jp->p++;
	_ws(jp);
	if (jp->p < jp->end && *jp->p == close) {
		jp->p++;
		return 0;
	}
	for (;;) {
		if (_push(out, &cap, obj) < 0)
			return _err(jp, "out of memory");
		memset(&out->items[out->n], 0, sizeof(jv_t));
		if (obj) {
			_ws(jp);
			if (jp->p >= jp->end || *jp->p != '"')
				return _err(jp, "object key expected");
			if (_string(jp, &out->keys[out->n]) < 0)
				return -1;
			_ws(jp);
			if (jp->p >= jp->end || *jp->p != ':') {
				out->n++; /* so the key is freed */
				return _err(jp, "':' expected");
			}
			jp->p++;
		}
		out->n++;
		if (_value(jp, &out->items[out->n - 1], depth + 1) < 0)
			return -1;
		_ws(jp);
		if (jp->p < jp->end && *jp->p == ',') {
			jp->p++;
			continue;
		}
		if (jp->p < jp->end && *jp->p == close) {
			jp->p++;
			return 0;
		}
		return _err(jp, obj ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int _value(jp_t *jp, jv_t *out, int depth)
{
	if (depth > CLAVIS_JSON_MAX_DEPTH)
		return _err(jp, "nested too deep");
	/* the tree costs memory per value: bounded before the schema is looked at */
	if (++jp->values > jp->max_values)
		return _err(jp, "too many values");
	_ws(jp);
	if (jp->p >= jp->end)
		return _err(jp, "value expected");
	switch (*jp->p) {
	case '{':
		return _container(jp, out, depth, 1);
	case '[':
		return _container(jp, out, depth, 0);
	case '"':
		out->type = JV_STR;
		return _string(jp, &out->str);
	case 't':
		out->type = JV_BOOL;
		out->boolean = 1;
		return _lit(jp, "true");
	case 'f':
		out->type = JV_BOOL;
		return _lit(jp, "false");
	case 'n':
		out->type = JV_NULL;
		return _lit(jp, "null");
	default:
		return _number(jp, out);
	}
}

int jv_parse(const char *text, size_t len, size_t max_values, jv_t *out,
	     const char **why, size_t *at)
{
	jp_t jp = { .p = text, .end = text + len, .start = text,
		    .max_values = max_values };

	memset(out, 0, sizeof(*out));
	if (_value(&jp, out, 0) == 0) {
		_ws(&jp);
		if (jp.p == jp.end)
			return 0;
		_err(&jp, "trailing data");
	}
	*why = jp.why;
	*at = (size_t)(jp.p - jp.start);
	jv_free(out);
	return -1;
}

void jv_free(jv_t *v)
{
	size_t i;

	for (i = 0; i < v->n; i++) {
		jv_free(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	memset(v, 0, sizeof(*v));
}

const jv_t *jv_get(const jv_t *obj, const char *key)
{
	size_t i;

	if (obj->type != JV_OBJ)
		return NULL;
	for (i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}
