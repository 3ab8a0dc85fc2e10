/*
 * clavis_msg.h - registration requests of contract v2 (docs/monitor.md) as JSON lines.
 *
 * Pure code: no Slurm, no sockets. The builders write into a growing buffer that is
 * never allowed past the contract's request limit, so a step with too many pids or
 * cgroups is refused here rather than by the monitor.
 */
#ifndef CLAVIS_MSG_H
#define CLAVIS_MSG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define CLAVIS_SCHEMA_VERSION 2
#define CLAVIS_MAX_REQUEST 65536 /* one request line, newline included */
#define CLAVIS_MAX_REPLY 4096 /* one reply line, newline included */
#define CLAVIS_MAX_PIDS 4096
#define CLAVIS_MAX_CGROUPS 32
#define CLAVIS_MAX_NODE 128
#define CLAVIS_MAX_APP 256
#define CLAVIS_MAX_JOB_NAME 1024 /* bytes; the contract's limit is 1024 characters */
#define CLAVIS_MAX_CGROUP_PATH 4096
#define CLAVIS_PID_MAX 4194304

/* A request line under construction; `len` never reaches CLAVIS_MAX_REQUEST. */
typedef struct {
	char *data;
	size_t len;
	size_t cap;
} clavis_buf_t;

/* One step's identity: what both requests carry. */
typedef struct {
	const char *node;
	uint32_t job_id;
	uint32_t step_id;
} clavis_step_t;

/* What a register request adds to the identity. */
typedef struct {
	const pid_t *pids;
	size_t npids;
	char *const *cgroups; /* already checked with clavis_cgroup_ok() */
	size_t ncgroups;
	int64_t uid; /* < 0: unknown (null) */
	const char *app; /* the command's name; NULL: unknown */
	const char *job_name; /* SLURM_JOB_NAME, passes clavis_job_name_ok(); NULL: absent */
	const char *class_hint; /* "auto", "devil" or "turtle" */
} clavis_tasks_t;

void clavis_buf_free(clavis_buf_t *buf);

/* RET 0 on success, -1 with errno set (EINVAL: a field is out of the contract's range,
 * EMSGSIZE: the line would exceed CLAVIS_MAX_REQUEST, ENOMEM). */
int clavis_build_register(clavis_buf_t *buf, const clavis_step_t *step,
			  const clavis_tasks_t *tasks);
int clavis_build_deregister(clavis_buf_t *buf, const clavis_step_t *step);

/* RET 1 if `name` is a valid node name of the contract, else 0. */
int clavis_node_ok(const char *name);

/* RET 1 if `name` is 1..CLAVIS_MAX_JOB_NAME bytes of valid UTF-8 (RFC 3629: no
 * overlong forms, no surrogates), else 0: what the monitor's JSON parser accepts. */
int clavis_job_name_ok(const char *name);

/* RET 1 if `hint` is one of auto, devil, turtle, else 0. */
int clavis_class_ok(const char *hint);

/* RET 1 if `path` is an absolute, normalised cgroup directory under /sys/fs/cgroup/ of
 * printable ASCII and at most CLAVIS_MAX_CGROUP_PATH bytes, else 0. */
int clavis_cgroup_ok(const char *path);

/*
 * From the text of /proc/PID/cgroup, the directories of the job step `job_id` (the
 * path cut after the `step_*` component that follows `job_<id>`), one per hierarchy,
 * as /sys/fs/cgroup/... paths that pass clavis_cgroup_ok(). Lines of other cgroups are
 * skipped. IN text: NUL-terminated file contents. OUT paths: malloc'd strings, at most
 * `max`. RET the number of paths stored, -1 on ENOMEM.
 */
int clavis_step_cgroups(const char *text, uint32_t job_id, char **paths, size_t max);

/* The command's name from a command path: its basename, non-printable bytes
 * replaced by '_', cut to CLAVIS_MAX_APP bytes (the registration's `app`, the
 * application key's fallback when a step has no job name). OUT app: at least
 * CLAVIS_MAX_APP + 1 bytes. RET 0, or -1 when nothing usable is left (empty
 * basename). */
int clavis_command_name(const char *argv0, char *app, size_t size);

#endif /* CLAVIS_MSG_H */
