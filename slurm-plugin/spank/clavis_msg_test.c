/*
 * clavis_msg_test.c - drive the pure helpers and the socket exchange from the
 * command line, for slurm-plugin/tests (which check the output against the contract).
 *
 *   clavis_msg_test register NODE JOB STEP UID|- APP|- CLASS PID,PID.. [CGROUP_FILE|-
 *                   [JOB_NAME]]
 *   clavis_msg_test deregister NODE JOB STEP
 *   clavis_msg_test cgroups JOB FILE          (one step directory per line)
 *   clavis_msg_test app ARGV0
 *   clavis_msg_test exchange SOCKET BUDGET_MS  (sends a deregister of n1/1/0)
 *
 * Exit 0 with the result on stdout; 3 when the helper refuses (errno on stderr).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clavis_msg.h"
#include "clavis_sock.h"

#define MAX_FILE (1 << 20)

static int _refused(const char *what)
{
	fprintf(stderr, "%s: %s\n", what, strerror(errno));
	return 3;
}

static char *_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text;
	size_t n;

	if (!f)
		return NULL;
	if (!(text = malloc(MAX_FILE + 1))) {
		(void)fclose(f);
		return NULL;
	}
	n = fread(text, 1, MAX_FILE, f);
	text[n] = '\0';
	(void)fclose(f);
	return text;
}

static size_t _pids(char *list, pid_t *out, size_t max)
{
	size_t n = 0;
	char *tok, *save = NULL;

	for (tok = strtok_r(list, ",", &save); tok && n < max;
	     tok = strtok_r(NULL, ",", &save))
		out[n++] = (pid_t)strtol(tok, NULL, 10);
	return n;
}

static int _register(int argc, char **argv)
{
	static pid_t pids[CLAVIS_MAX_PIDS + 2];
	char *cgroups[CLAVIS_MAX_CGROUPS] = { 0 };
	clavis_step_t step = { argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
			       (uint32_t)strtoul(argv[4], NULL, 10) };
	clavis_tasks_t t = { 0 };
	clavis_buf_t buf = { 0 };
	char *text = NULL;
	int n = 0, rc = 0;

	t.uid = strcmp(argv[5], "-") ? strtoll(argv[5], NULL, 10) : -1;
	t.app = strcmp(argv[6], "-") ? argv[6] : NULL;
	t.class_hint = argv[7];
	t.pids = pids;
	t.npids = _pids(argv[8], pids, CLAVIS_MAX_PIDS + 2);
	t.job_name = argc > 10 ? argv[10] : NULL;
	if (argc > 9 && strcmp(argv[9], "-")) {
		if (!(text = _slurp(argv[9])))
			return _refused(argv[9]);
		n = clavis_step_cgroups(text, step.job_id, cgroups,
					CLAVIS_MAX_CGROUPS);
		if (n < 0)
			return _refused("cgroups");
	}
	t.cgroups = cgroups;
	t.ncgroups = (size_t)n;
	if (clavis_build_register(&buf, &step, &t) < 0)
		rc = _refused("register");
	else
		fputs(buf.data, stdout);
	while (n)
		free(cgroups[--n]);
	free(text);
	clavis_buf_free(&buf);
	return rc;
}

static int _deregister(char **argv)
{
	clavis_step_t step = { argv[2], (uint32_t)strtoul(argv[3], NULL, 10),
			       (uint32_t)strtoul(argv[4], NULL, 10) };
	clavis_buf_t buf = { 0 };
	int rc = 0;

	if (clavis_build_deregister(&buf, &step) < 0)
		rc = _refused("deregister");
	else
		fputs(buf.data, stdout);
	clavis_buf_free(&buf);
	return rc;
}

static int _cgroups(char **argv)
{
	char *paths[CLAVIS_MAX_CGROUPS];
	char *text = _slurp(argv[3]);
	int n, i;

	if (!text)
		return _refused(argv[3]);
	n = clavis_step_cgroups(text, (uint32_t)strtoul(argv[2], NULL, 10),
				paths, CLAVIS_MAX_CGROUPS);
	free(text);
	if (n < 0)
		return _refused("cgroups");
	for (i = 0; i < n; i++) {
		printf("%s\n", paths[i]);
		free(paths[i]);
	}
	return 0;
}

static int _exchange(char **argv)
{
	static const char req[] = "{\"schema_version\":2,\"op\":\"deregister\","
				  "\"node\":\"n1\",\"job_id\":1,\"step_id\":0}\n";
	clavis_xerr_t err;
	clavis_x_t rc;

	rc = clavis_exchange(argv[2], req, strlen(req), atoi(argv[3]), &err);
	printf("%s %s %s\n",
	       rc == CLAVIS_X_OK ? "ok" :
	       rc == CLAVIS_X_REFUSED ? "refused" : "failed",
	       err.why ? err.why : "-", err.err ? strerror(err.err) : "-");
	return 0;
}

int main(int argc, char **argv)
{
	char app[CLAVIS_MAX_APP + 1];

	if (argc >= 9 && !strcmp(argv[1], "register"))
		return _register(argc, argv);
	if (argc == 5 && !strcmp(argv[1], "deregister"))
		return _deregister(argv);
	if (argc == 4 && !strcmp(argv[1], "cgroups"))
		return _cgroups(argv);
	if (argc == 3 && !strcmp(argv[1], "app")) {
		if (clavis_command_name(argv[2], app, sizeof(app)) < 0)
			return _refused("app");
		printf("%s\n", app);
		return 0;
	}
	if (argc == 4 && !strcmp(argv[1], "exchange"))
		return _exchange(argv);
	fprintf(stderr, "usage: see the header of clavis_msg_test.c\n");
	return 2;
}
