/*
 * spank_clavis.c - register each job step's tasks with the host's clavis-monitor.
 *
 * In slurmstepd (remote context) the step's task pids are collected as the tasks are
 * forked; once all local tasks exist, one `register` request (contract v2,
 * docs/monitor.md) goes to the monitor's UNIX socket, and a `deregister` when the
 * step ends. The user option --clavis-class=auto|devil|turtle passes a class hint.
 *
 * The plugin never fails or delays a job because of the monitor: every exchange has
 * one time budget (default 200 ms, connect included), a failure is logged once and
 * the step carries on unregistered; after a failure the step does not try again.
 *
 * plugstack.conf:  optional /usr/lib/clavis/spank_clavis.so [socket=PATH] [timeout_ms=N]
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <slurm/spank.h>

#include "clavis_msg.h"
#include "clavis_sock.h"

SPANK_PLUGIN(clavis, 1);

#define PLUGIN "spank: clavis"
#define DEFAULT_SOCKET "/run/clavis/monitor.sock"
#define DEFAULT_BUDGET_MS 200
#define MAX_BUDGET_MS 1000 /* the contract's recommended client ceiling */
#define MAX_PROC_CGROUP 65536 /* bytes of /proc/PID/cgroup read */

static int _class_cb(int val, const char *optarg, int remote);

static struct spank_option class_option = {
	"clavis-class", "auto|devil|turtle",
	"Clavis placement hint: devil (memory-intensive), turtle (not), "
	"or auto (measure; the default)",
	1, 0, _class_cb
};

/* plugstack.conf arguments */
static const char *socket_path = DEFAULT_SOCKET;
static int budget_ms = DEFAULT_BUDGET_MS;

/* this step (one slurmstepd per step) */
static const char *class_hint = "auto";
static pid_t *pids;
static size_t npids, want_pids;
static int registered; /* the monitor accepted the step: deregister at exit */
static int gave_up; /* the monitor failed once: leave it alone for this step */

static int _parse_budget(const char *text)
{
	char *end;
	long ms;

	errno = 0;
	ms = strtol(text, &end, 10);
	if (errno || end == text || *end || ms < 1 || ms > MAX_BUDGET_MS)
		return -1;
	return (int)ms;
}

/* Arguments from plugstack.conf; a bad one is logged and ignored (the defaults
 * stay): a typo there must not stop every job of the cluster. */
static void _parse_args(int ac, char **av)
{
	int i, ms;

	for (i = 0; i < ac; i++) {
		if (!strncmp(av[i], "socket=", 7) && av[i][7] == '/') {
			socket_path = av[i] + 7;
		} else if (!strncmp(av[i], "timeout_ms=", 11) &&
			   (ms = _parse_budget(av[i] + 11)) > 0) {
			budget_ms = ms;
		} else {
			slurm_error("%s: plugstack.conf argument '%s' ignored "
				    "(socket=/ABS/PATH, timeout_ms=1..%d)",
				    PLUGIN, av[i], MAX_BUDGET_MS);
		}
	}
}

/* --clavis-class: refused at submission (local/allocator context); in slurmstepd a
 * bad value (only possible by editing the environment) falls back to auto. */
static int _class_cb(int val, const char *optarg, int remote)
{
	static const char *const hints[] = { "auto", "devil", "turtle" };
	size_t i;

	(void)val;
	for (i = 0; optarg && i < sizeof(hints) / sizeof(hints[0]); i++) {
		if (!strcmp(optarg, hints[i])) {
			class_hint = hints[i];
			return 0;
		}
	}
	if (remote) {
		slurm_info("%s: --clavis-class='%s' is not auto, devil or turtle; "
			   "using auto",
			   PLUGIN, optarg ? optarg : "");
		class_hint = "auto";
		return 0;
	}
	slurm_error("%s: invalid --clavis-class='%s': must be auto, devil or "
		    "turtle",
		    PLUGIN, optarg ? optarg : "");
	return -1;
}

static int _get_u32(spank_t sp, spank_item_t item, uint32_t *out)
{
	spank_err_t rc = spank_get_item(sp, item, out);

	if (rc != ESPANK_SUCCESS) {
		slurm_error("%s: spank_get_item(%d): %s", PLUGIN, (int)item,
			    spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* The step's identity; the node name is SLURMD_NODENAME, which slurmstepd sets in
 * its own environment (and in the tasks'). RET 0, or -1 (logged). */
static int _step_identity(spank_t sp, clavis_step_t *step, char *node,
			  size_t size)
{
	const char *env = getenv("SLURMD_NODENAME");

	if (_get_u32(sp, S_JOB_ID, &step->job_id) < 0 ||
	    _get_u32(sp, S_JOB_STEPID, &step->step_id) < 0)
		return -1;
	if (env && strlen(env) < size) {
		memcpy(node, env, strlen(env) + 1);
	} else if (spank_getenv(sp, "SLURMD_NODENAME", node, (int)size) !=
		   ESPANK_SUCCESS) {
		slurm_error("%s: JobId=%u: SLURMD_NODENAME not set", PLUGIN,
			    step->job_id);
		return -1;
	}
	if (!clavis_node_ok(node)) {
		slurm_error("%s: JobId=%u: node name '%s' is not a contract name",
			    PLUGIN, step->job_id, node);
		return -1;
	}
	step->node = node;
	return 0;
}

/* The contents of /proc/PID/cgroup, NUL-terminated, malloc'd; NULL if unreadable. */
static char *_read_proc_cgroup(pid_t pid)
{
	char path[64];
	char *text;
	ssize_t n;
	size_t got = 0;
	int fd;

	(void)snprintf(path, sizeof(path), "/proc/%ld/cgroup", (long)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	if (!(text = malloc(MAX_PROC_CGROUP))) {
		(void)close(fd);
		return NULL;
	}
	while (got < MAX_PROC_CGROUP - 1) {
		n = read(fd, text + got, MAX_PROC_CGROUP - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	text[got] = '\0';
	(void)close(fd);
	return text;
}

/* The step's cgroup directories, from the first task. RET count (0 if none). */
static size_t _step_cgroups(uint32_t job_id, char **paths)
{
	char *text = _read_proc_cgroup(pids[0]);
	int n;

	if (!text)
		return 0;
	n = clavis_step_cgroups(text, job_id, paths, CLAVIS_MAX_CGROUPS);
	free(text);
	return n > 0 ? (size_t)n : 0;
}

/* The command's name: basename of the step's command (slurmstepd's copy of the
 * script, "slurm_script", for the batch step). RET app, or NULL if there is none. */
static const char *_command(spank_t sp, char *app, size_t size)
{
	char **argv = NULL;
	int argc = 0;

	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS ||
	    argc < 1 || !argv || clavis_command_name(argv[0], app, size) < 0)
		return NULL;
	return app;
}

/*
 * The job name (SLURM_JOB_NAME of the job's environment), from which, with the uid,
 * the monitor makes the application key that select_clavis also computes from
 * slurmctld's job record (clavis_contracts.application). OUT *unusable: 1 when the
 * job has a name that cannot be sent (too long, not UTF-8): then no command name
 * either, so the monitor makes no key rather than one select_clavis never matches.
 * RET name, or NULL.
 */
static const char *_job_name(spank_t sp, char *name, size_t size, int *unusable)
{
	spank_err_t rc = spank_getenv(sp, "SLURM_JOB_NAME", name, (int)size);

	*unusable = 0;
	if (rc == ESPANK_ENV_NOEXIST)
		return NULL;
	if (rc != ESPANK_SUCCESS || !clavis_job_name_ok(name)) {
		*unusable = 1;
		return NULL;
	}
	return name;
}

/* Send one request; log once if the monitor does not take it. RET 0 if accepted. */
static int _send(const clavis_step_t *step, const clavis_buf_t *req,
		 const char *op)
{
	clavis_xerr_t err;
	clavis_x_t rc;

	rc = clavis_exchange(socket_path, req->data, req->len, budget_ms, &err);
	if (rc == CLAVIS_X_OK) {
		slurm_debug("%s: JobId=%u StepId=%u node=%s: %s accepted", PLUGIN,
			    step->job_id, step->step_id, step->node, op);
		return 0;
	}
	gave_up = 1;
	if (rc == CLAVIS_X_REFUSED)
		slurm_info("%s: JobId=%u StepId=%u node=%s: monitor refused %s: %s",
			   PLUGIN, step->job_id, step->step_id, step->node, op,
			   err.reply);
	else
		slurm_info("%s: JobId=%u StepId=%u node=%s: %s not sent to %s "
			   "(%s%s%s, budget %d ms); the step runs unregistered",
			   PLUGIN, step->job_id, step->step_id, step->node, op,
			   socket_path, err.why, err.err ? ": " : "",
			   err.err ? strerror(err.err) : "", budget_ms);
	return -1;
}

static void _register(spank_t sp)
{
	char node[CLAVIS_MAX_NODE + 1], app_buf[CLAVIS_MAX_APP + 1];
	char name_buf[CLAVIS_MAX_JOB_NAME + 2];
	char *cgroups[CLAVIS_MAX_CGROUPS];
	int unusable;
	clavis_step_t step = { 0 };
	clavis_tasks_t tasks = { 0 };
	clavis_buf_t req = { 0 };
	uint32_t uid;

	if (_step_identity(sp, &step, node, sizeof(node)) < 0)
		return;
	tasks.pids = pids;
	tasks.npids = npids;
	tasks.cgroups = cgroups;
	tasks.ncgroups = _step_cgroups(step.job_id, cgroups);
	tasks.uid = (spank_get_item(sp, S_JOB_UID, &uid) == ESPANK_SUCCESS) ?
			    (int64_t)uid :
			    -1;
	tasks.job_name = _job_name(sp, name_buf, sizeof(name_buf), &unusable);
	tasks.app = unusable ? NULL : _command(sp, app_buf, sizeof(app_buf));
	tasks.class_hint = class_hint;
	if (clavis_build_register(&req, &step, &tasks) < 0)
		slurm_error("%s: JobId=%u StepId=%u: register not built: %m",
			    PLUGIN, step.job_id, step.step_id);
	else if (!_send(&step, &req, "register"))
		registered = 1;
	while (tasks.ncgroups)
		free(cgroups[--tasks.ncgroups]);
	clavis_buf_free(&req);
}

static void _deregister(spank_t sp)
{
	char node[CLAVIS_MAX_NODE + 1];
	clavis_step_t step = { 0 };
	clavis_buf_t req = { 0 };

	if (_step_identity(sp, &step, node, sizeof(node)) < 0)
		return;
	if (clavis_build_deregister(&req, &step) < 0)
		slurm_error("%s: JobId=%u StepId=%u: deregister not built: %m",
			    PLUGIN, step.job_id, step.step_id);
	else
		(void)_send(&step, &req, "deregister"); /* logged there */
	clavis_buf_free(&req);
}

/* Room for every local task's pid, once per step. RET 0, -1 (logged). */
static int _pids_alloc(spank_t sp)
{
	uint32_t count;

	if (_get_u32(sp, S_JOB_LOCAL_TASK_COUNT, &count) < 0)
		return -1;
	if (count < 1 || count > CLAVIS_MAX_PIDS) {
		slurm_info("%s: %u local tasks: not registered (1..%d)", PLUGIN,
			   count, CLAVIS_MAX_PIDS);
		return -1;
	}
	if (!(pids = calloc(count, sizeof(*pids)))) {
		slurm_error("%s: calloc: %m", PLUGIN);
		return -1;
	}
	want_pids = count;
	return 0;
}

/*
 * Called in every context; registers --clavis-class where options exist.
 * RET 0 always: nothing here may stop a job.
 */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	spank_err_t rc;

	_parse_args(ac, av);
	if (ctx != S_CTX_LOCAL && ctx != S_CTX_REMOTE && ctx != S_CTX_ALLOCATOR)
		return 0;
	rc = spank_option_register(sp, &class_option);
	if (rc != ESPANK_SUCCESS)
		slurm_error("%s: --clavis-class not registered: %s", PLUGIN,
			    spank_strerror(rc));
	return 0;
}

/*
 * sbatch/salloc/srun, after the options: a devil or turtle hint goes into the job
 * control environment as CLAVIS_CLASS, which slurmctld keeps with the job
 * (job_ptr->spank_job_env) for select_clavis.so. RET 0 always.
 */
int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	spank_err_t rc;

	(void)ac;
	(void)av;
	if ((ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR) ||
	    !strcmp(class_hint, "auto"))
		return 0;
	rc = spank_job_control_setenv(sp, "CLAVIS_CLASS", class_hint, 1);
	if (rc != ESPANK_SUCCESS)
		slurm_error("%s: CLAVIS_CLASS not set for the scheduler: %s",
			    PLUGIN, spank_strerror(rc));
	return 0;
}

/*
 * slurmstepd, after each task's fork (before any task execs): collect its pid; when
 * all local tasks exist, register them. RET 0 always.
 */
int slurm_spank_task_post_fork(spank_t sp, int ac, char **av)
{
	pid_t pid;

	(void)ac;
	(void)av;
	if (spank_remote(sp) != 1 || gave_up)
		return 0;
	if (!pids && _pids_alloc(sp) < 0) {
		gave_up = 1;
		return 0;
	}
	if (spank_get_item(sp, S_TASK_PID, &pid) != ESPANK_SUCCESS ||
	    npids >= want_pids) {
		gave_up = 1;
		return 0;
	}
	pids[npids++] = pid;
	if (npids == want_pids)
		_register(sp);
	return 0;
}

/*
 * The step ends: deregister it if the monitor took the registration. RET 0 always.
 */
int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (spank_remote(sp) == 1 && registered && !gave_up)
		_deregister(sp);
	free(pids);
	pids = NULL;
	npids = want_pids = 0;
	return 0;
}
