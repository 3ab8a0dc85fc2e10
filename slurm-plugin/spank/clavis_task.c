/*
 * clavis_task.c - what a registration says about the tasks: their step's cgroup
 * directories (from /proc/PID/cgroup) and the command's name.
 */
#include "clavis_msg.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CGROUP_MOUNT "/sys/fs/cgroup"

/* Length of the prefix of `path` (a cgroup path of one /proc/PID/cgroup line, `n`
 * bytes) that ends with the step_* component following job_<job_id>; 0 if the path
 * is not inside that job's step. */
static size_t _step_prefix(const char *path, size_t n, uint32_t job_id)
{
	char job[32];
	size_t jn, i = 0, start, end;
	int seen_job = 0;

	jn = (size_t)snprintf(job, sizeof(job), "job_%" PRIu32, job_id);
	while (i < n) {
		while (i < n && path[i] == '/')
			i++;
		start = i;
		while (i < n && path[i] != '/')
			i++;
		end = i;
		if (end == start)
			break;
		if (seen_job)
			return (end - start > 5 && !strncmp(path + start, "step_", 5)) ?
				       end :
				       0;
		seen_job = (end - start == jn && !strncmp(path + start, job, jn));
	}
	return 0;
}

/* The mount directory of one hierarchy ("" for v2), or NULL to skip it. */
static int _hierarchy_dir(const char *ctrl, size_t n, char *dir, size_t size)
{
	if (n == 0) {
		dir[0] = '\0';
		return 0;
	}
	if (n >= 5 && !strncmp(ctrl, "name=", 5)) {
		if (n != strlen("name=systemd") || strncmp(ctrl, "name=systemd", n))
			return -1; /* a named hierarchy Slurm does not use */
		ctrl += 5;
		n -= 5;
	}
	if (n + 2 > size)
		return -1;
	dir[0] = '/';
	memcpy(dir + 1, ctrl, n);
	dir[n + 1] = '\0';
	return 0;
}

static int _seen(char **paths, size_t count, const char *path)
{
	size_t i;

	for (i = 0; i < count; i++)
		if (!strcmp(paths[i], path))
			return 1;
	return 0;
}

/* One line "ID:controllers:path" (without its newline): the step directory it names,
 * malloc'd, or NULL (skipped). `*oom` is set when malloc failed. */
static char *_line_dir(const char *line, size_t n, uint32_t job_id, int *oom)
{
	const char *c1, *c2;
	char dir[256];
	size_t cut, total;
	char *out;

	c1 = memchr(line, ':', n);
	if (!c1)
		return NULL;
	c2 = memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - line));
	if (!c2)
		return NULL;
	if (_hierarchy_dir(c1 + 1, (size_t)(c2 - c1 - 1), dir, sizeof(dir)) < 0)
		return NULL;
	cut = _step_prefix(c2 + 1, n - (size_t)(c2 + 1 - line), job_id);
	if (!cut || c2[1] != '/')
		return NULL;
	total = strlen(CGROUP_MOUNT) + strlen(dir) + cut + 1;
	if (!(out = malloc(total))) {
		*oom = 1;
		return NULL;
	}
	(void)snprintf(out, total, "%s%s%.*s", CGROUP_MOUNT, dir, (int)cut, c2 + 1);
	if (!clavis_cgroup_ok(out)) {
		free(out);
		return NULL;
	}
	return out;
}

int clavis_step_cgroups(const char *text, uint32_t job_id, char **paths,
			size_t max)
{
	const char *line = text, *nl;
	size_t count = 0, n;
	int oom = 0;
	char *dir;

	while (*line && count < max) {
		nl = strchr(line, '\n');
		n = nl ? (size_t)(nl - line) : strlen(line);
		dir = _line_dir(line, n, job_id, &oom);
		if (oom)
			goto fail;
		if (dir && _seen(paths, count, dir))
			free(dir);
		else if (dir)
			paths[count++] = dir;
		if (!nl)
			break;
		line = nl + 1;
	}
	return (int)count;
fail:
	while (count)
		free(paths[--count]);
	return -1;
}

int clavis_command_name(const char *argv0, char *app, size_t size)
{
	const char *base;
	size_t i, n;

	if (!argv0 || size < 2)
		return -1;
	base = strrchr(argv0, '/');
	base = base ? base + 1 : argv0;
	n = strlen(base);
	if (n > CLAVIS_MAX_APP)
		n = CLAVIS_MAX_APP;
	if (n > size - 1)
		n = size - 1;
	if (n == 0)
		return -1;
	for (i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)base[i];

		app[i] = (ch < 0x20 || ch > 0x7e) ? '_' : (char)ch;
	}
	app[n] = '\0';
	return 0;
}
