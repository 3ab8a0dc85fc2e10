/*
 * clavis_msg.c - build registration requests of contract v2 as one JSON line.
 */
#include "clavis_msg.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CGROUP_ROOT "/sys/fs/cgroup/"

static const char *const class_hints[] = { "auto", "devil", "turtle" };

/* Grow the buffer so that `more` bytes fit, never to CLAVIS_MAX_REQUEST or beyond
 * (the newline that ends the line must still fit). */
static int _buf_reserve(clavis_buf_t *buf, size_t more)
{
	size_t want = buf->len + more + 1;
	size_t cap;
	char *data;

	if (want >= CLAVIS_MAX_REQUEST) {
		errno = EMSGSIZE;
		return -1;
	}
	if (want <= buf->cap)
		return 0;
	cap = buf->cap ? buf->cap : 512;
	while (cap < want)
		cap *= 2;
	if (cap > CLAVIS_MAX_REQUEST)
		cap = CLAVIS_MAX_REQUEST;
	data = realloc(buf->data, cap);
	if (!data)
		return -1;
	buf->data = data;
	buf->cap = cap;
	return 0;
}

static int _buf_add(clavis_buf_t *buf, const char *text, size_t n)
{
	if (_buf_reserve(buf, n) < 0)
		return -1;
	memcpy(buf->data + buf->len, text, n);
	buf->len += n;
	buf->data[buf->len] = '\0';
	return 0;
}

static int _buf_str(clavis_buf_t *buf, const char *text)
{
	return _buf_add(buf, text, strlen(text));
}

__attribute__((format(printf, 2, 3))) static int _buf_fmt(clavis_buf_t *buf,
							  const char *fmt, ...)
{
	char small[64];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(small)) {
		errno = EINVAL; /* only numbers are formatted here */
		return -1;
	}
	return _buf_add(buf, small, (size_t)n);
}

/* A JSON string of printable ASCII (the callers check that): only '"' and '\\' need
 * escaping. */
static int _buf_json_str(clavis_buf_t *buf, const char *text)
{
	const char *p;

	if (_buf_add(buf, "\"", 1) < 0)
		return -1;
	for (p = text; *p; p++) {
		if ((*p == '"' || *p == '\\') && _buf_add(buf, "\\", 1) < 0)
			return -1;
		if (_buf_add(buf, p, 1) < 0)
			return -1;
	}
	return _buf_add(buf, "\"", 1);
}

/* A JSON string of any valid UTF-8 (clavis_job_name_ok): '"', '\\' and the control
 * characters are escaped, every other byte is copied. */
static int _buf_json_text(clavis_buf_t *buf, const char *text)
{
	const unsigned char *p;
	char esc[8];

	if (_buf_add(buf, "\"", 1) < 0)
		return -1;
	for (p = (const unsigned char *)text; *p; p++) {
		if (*p < 0x20) {
			(void)snprintf(esc, sizeof(esc), "\\u%04x", *p);
			if (_buf_add(buf, esc, 6) < 0)
				return -1;
			continue;
		}
		if ((*p == '"' || *p == '\\') && _buf_add(buf, "\\", 1) < 0)
			return -1;
		if (_buf_add(buf, (const char *)p, 1) < 0)
			return -1;
	}
	return _buf_add(buf, "\"", 1);
}

int clavis_job_name_ok(const char *name)
{
	const unsigned char *p;
	unsigned int cp;
	size_t n, i, k, more;

	if (!name || !name[0] || strlen(name) > CLAVIS_MAX_JOB_NAME)
		return 0;
	p = (const unsigned char *)name;
	n = strlen(name);
	for (i = 0; i < n; i += more + 1) {
		if (p[i] < 0x80) {
			more = 0;
			continue;
		}
		if (p[i] >= 0xc2 && p[i] <= 0xdf) {
			more = 1;
			cp = p[i] & 0x1f;
		} else if (p[i] >= 0xe0 && p[i] <= 0xef) {
			more = 2;
			cp = p[i] & 0x0f;
		} else if (p[i] >= 0xf0 && p[i] <= 0xf4) {
			more = 3;
			cp = p[i] & 0x07;
		} else {
			return 0; /* a continuation byte first, C0/C1, F5..FF */
		}
		if (i + more >= n)
			return 0;
		for (k = 1; k <= more; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
		    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
			return 0; /* overlong, surrogate, beyond Unicode */
	}
	return 1;
}

static int _printable(const char *text)
{
	const unsigned char *p;

	for (p = (const unsigned char *)text; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			return 0;
	return 1;
}

int clavis_node_ok(const char *name)
{
	const char *p;
	size_t n;

	if (!name)
		return 0;
	n = strlen(name);
	if (n < 1 || n > CLAVIS_MAX_NODE)
		return 0;
	if (!((name[0] >= 'A' && name[0] <= 'Z') ||
	      (name[0] >= 'a' && name[0] <= 'z') ||
	      (name[0] >= '0' && name[0] <= '9')))
		return 0;
	for (p = name; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
		    *p == ':' || *p == '-')
			continue;
		return 0;
	}
	return 1;
}

int clavis_class_ok(const char *hint)
{
	size_t i;

	if (!hint)
		return 0;
	for (i = 0; i < sizeof(class_hints) / sizeof(class_hints[0]); i++)
		if (!strcmp(hint, class_hints[i]))
			return 1;
	return 0;
}

int clavis_cgroup_ok(const char *path)
{
	const char *p, *part;
	size_t n;

	if (!path || strncmp(path, CGROUP_ROOT, strlen(CGROUP_ROOT)))
		return 0;
	n = strlen(path);
	if (n > CLAVIS_MAX_CGROUP_PATH || !_printable(path))
		return 0;
	/* every component after the leading '/' non-empty and neither "." nor ".." */
	part = path + 1;
	for (p = part;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		n = (size_t)(p - part);
		if (n == 0 || (n == 1 && part[0] == '.') ||
		    (n == 2 && part[0] == '.' && part[1] == '.'))
			return 0;
		if (*p == '\0')
			return 1;
		part = p + 1;
	}
}

static int _step_common(clavis_buf_t *buf, const clavis_step_t *step,
			const char *op)
{
	if (!clavis_node_ok(step->node) || step->job_id == 0) {
		errno = EINVAL;
		return -1;
	}
	buf->len = 0;
	if (_buf_fmt(buf, "{\"schema_version\":%d,\"op\":",
		     CLAVIS_SCHEMA_VERSION) < 0 ||
	    _buf_json_str(buf, op) < 0 || _buf_str(buf, ",\"node\":") < 0 ||
	    _buf_json_str(buf, step->node) < 0 ||
	    _buf_fmt(buf, ",\"job_id\":%" PRIu32 ",\"step_id\":%" PRIu32,
		     step->job_id, step->step_id) < 0)
		return -1;
	return 0;
}

static int _tasks_ok(const clavis_tasks_t *tasks)
{
	size_t i, j;

	if (tasks->npids < 1 || tasks->npids > CLAVIS_MAX_PIDS ||
	    tasks->ncgroups > CLAVIS_MAX_CGROUPS ||
	    !clavis_class_ok(tasks->class_hint) || tasks->uid > UINT32_MAX)
		return 0;
	for (i = 0; i < tasks->npids; i++) {
		if (tasks->pids[i] < 1 || tasks->pids[i] > CLAVIS_PID_MAX)
			return 0;
		for (j = 0; j < i; j++)
			if (tasks->pids[j] == tasks->pids[i])
				return 0;
	}
	for (i = 0; i < tasks->ncgroups; i++)
		if (!clavis_cgroup_ok(tasks->cgroups[i]))
			return 0;
	if (tasks->app &&
	    (!tasks->app[0] || strlen(tasks->app) > CLAVIS_MAX_APP ||
	     !_printable(tasks->app)))
		return 0;
	if (tasks->job_name && !clavis_job_name_ok(tasks->job_name))
		return 0;
	return 1;
}

static int _add_arrays(clavis_buf_t *buf, const clavis_tasks_t *tasks)
{
	size_t i;

	if (_buf_str(buf, ",\"pids\":[") < 0)
		return -1;
	for (i = 0; i < tasks->npids; i++)
		if (_buf_fmt(buf, "%s%ld", i ? "," : "",
			     (long)tasks->pids[i]) < 0)
			return -1;
	if (_buf_str(buf, "],\"cgroups\":[") < 0)
		return -1;
	for (i = 0; i < tasks->ncgroups; i++)
		if ((i && _buf_add(buf, ",", 1) < 0) ||
		    _buf_json_str(buf, tasks->cgroups[i]) < 0)
			return -1;
	return _buf_add(buf, "]", 1);
}

int clavis_build_register(clavis_buf_t *buf, const clavis_step_t *step,
			  const clavis_tasks_t *tasks)
{
	if (!_tasks_ok(tasks)) {
		errno = EINVAL;
		return -1;
	}
	if (_step_common(buf, step, "register") < 0 ||
	    _add_arrays(buf, tasks) < 0)
		return -1;
	if (tasks->uid < 0) {
		if (_buf_str(buf, ",\"uid\":null") < 0)
			return -1;
	} else if (_buf_fmt(buf, ",\"uid\":%" PRId64, tasks->uid) < 0) {
		return -1;
	}
	if (_buf_str(buf, ",\"app\":") < 0 ||
	    (tasks->app ? _buf_json_str(buf, tasks->app) :
			  _buf_str(buf, "null")) < 0)
		return -1;
	if (tasks->job_name && (_buf_str(buf, ",\"job_name\":") < 0 ||
				_buf_json_text(buf, tasks->job_name) < 0))
		return -1;
	if (_buf_str(buf, ",\"class_hint\":") < 0 ||
	    _buf_json_str(buf, tasks->class_hint) < 0 ||
	    _buf_str(buf, "}\n") < 0)
		return -1;
	return 0;
}

int clavis_build_deregister(clavis_buf_t *buf, const clavis_step_t *step)
{
	if (_step_common(buf, step, "deregister") < 0 ||
	    _buf_str(buf, "}\n") < 0)
		return -1;
	return 0;
}

void clavis_buf_free(clavis_buf_t *buf)
{
	free(buf->data);
	buf->data = NULL;
	buf->len = buf->cap = 0;
}
