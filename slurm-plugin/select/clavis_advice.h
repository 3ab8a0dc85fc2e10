/*
 * clavis_advice.h - clavisd's advice file (docs/clavisd.md, advice.schema.json v2;
 * v1 files, without applications, are read too) for select_clavis.so: bounded,
 * non-blocking, read again only when the file's identity changes. Independent of
 * Slurm, so the parser can be tested with garbage on its own.
 */
#ifndef CLAVIS_ADVICE_H
#define CLAVIS_ADVICE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define CLAVIS_ADVICE_MAX_BYTES_DEFAULT (4 << 20) /* ~20000 nodes */
#define CLAVIS_ADVICE_MAX_NODES 65536
#define CLAVIS_ADVICE_MAX_APPS 65536
/* valid_s above this is refused (one hour: clavisd writes every few seconds and its
 * default is 180 s), and a `generated` more than CLAVIS_ADVICE_MAX_AHEAD_S ahead of
 * the reader's clock (clock steps between the head node's hosts) is not fresh: so no
 * file, whatever its `generated`, is taken for more than an hour and a minute. The
 * contract's bounds (clavis_contracts/advice.py MAX_VALID_S, MAX_AHEAD_S). */
#define CLAVIS_ADVICE_MAX_VALID_S 3600.0
#define CLAVIS_ADVICE_MAX_AHEAD_S 60.0
/* the application key UID ":" NAME (clavis_contracts/application.py): NAME at most
 * this many bytes, UID at most 10 digits; a buffer of CLAVIS_APP_KEY_SIZE holds any */
#define CLAVIS_APP_NAME_MAX 240
#define CLAVIS_APP_KEY_SIZE (10 + 1 + CLAVIS_APP_NAME_MAX + 1)

typedef enum {
	ADV_UNKNOWN = 0,
	ADV_DEVIL_FREE,
	ADV_OK, /* devils within the host's tolerance */
	ADV_CONTENDED,
} clavis_contention_t;

typedef enum { ADV_CLASS_UNKNOWN = 0, ADV_CLASS_DEVIL, ADV_CLASS_TURTLE } clavis_class_t;

typedef struct {
	char *node;
	char *host;
	char *rack;
	clavis_contention_t contention;
	clavis_class_t node_class;
	int host_has_devil; /* derived: clavis_advice_host_has_devil(host) */
	size_t rack_id; /* derived: the same number for the same rack, < n_racks */
} clavis_advice_node_t;

/* clavisd's remembered class of one application (schema v2) */
typedef struct {
	char *key; /* UID:NAME */
	clavis_class_t app_class; /* devil or turtle */
} clavis_advice_app_t;

typedef struct {
	int version; /* 1 or 2 */
	double generated; /* seconds since the epoch */
	double valid_s;
	size_t n;
	clavis_advice_node_t *nodes; /* sorted by node name */
	size_t n_racks; /* distinct racks of the nodes */
	/* derived: n_racks counters, clavis_narrow's scratch, allocated once per file
	 * rather than per job test; its holder uses the advice alone (the watcher's
	 * mutex, clavis_advice_watch.h) */
	size_t *rack_counts;
	/* derived: the node names' hash index (clavis_advice_index.c) */
	uint32_t *slots;
	size_t n_slots;
	uint64_t seed;
	size_t n_apps;
	clavis_advice_app_t *apps; /* sorted by key; none in a v1 file */
} clavis_advice_t;

/* Parse a document. RET 0, or -1 with a static reason in *why. */
int clavis_advice_parse(const char *text, size_t len, clavis_advice_t *out,
			const char **why);
void clavis_advice_free(clavis_advice_t *adv);

/* RET 1 if the advice is not older than its valid_s at `now` (and not from the
 * future by more than CLAVIS_ADVICE_MAX_AHEAD_S), else 0. */
int clavis_advice_fresh(const clavis_advice_t *adv, double now);

/* Derive host_has_devil, rack_id/n_racks and the name index of a parsed advice
 * (clavis_advice_parse calls it). RET 0, -1 out of memory. */
int clavis_advice_index(clavis_advice_t *adv);

/* The entry of node `name`, or NULL (the hash index: one hash of `name`, as a rule
 * one comparison). */
const clavis_advice_node_t *clavis_advice_find(const clavis_advice_t *adv,
					       const char *name);

/* The entry of node `name`, given `last`, its entry at an earlier job test of the same
 * advice (or NULL): `last` itself while it still names the node (one comparison, no
 * hash), else clavis_advice_find. `last` must belong to `adv`. */
const clavis_advice_node_t *clavis_advice_recall(const clavis_advice_t *adv,
						 const clavis_advice_node_t *last,
						 const char *name);

/* The remembered class of application `key`, or NULL (binary search). */
const clavis_advice_app_t *clavis_advice_find_app(const clavis_advice_t *adv,
						  const char *key);

/*
 * The application key of a job owned by `uid` and named `name` into `buf` (size
 * CLAVIS_APP_KEY_SIZE). RET 0, or -1 when the job has no key (no or empty name, a
 * name longer than CLAVIS_APP_NAME_MAX bytes: never truncated, as in Python).
 */
int clavis_app_key(char *buf, size_t size, unsigned long uid, const char *name);

/* RET 1 if some node of `host` runs a devil or the host is ok/contended. */
int clavis_advice_host_has_devil(const clavis_advice_t *adv, const char *host);

/* Seconds since the epoch from an RFC 3339 date-time with a zone
 * (2026-11-22T19:45:05.25Z, ...+01:00). RET 0, -1 if malformed. */
int clavis_rfc3339(const char *text, double *out);

/*
 * The advice file as one reader follows it (select_clavis.c: its watcher thread,
 * clavis_advice_watch.h): a stat per look; only when the file's identity (device,
 * inode, size, mtime) changed, an open(O_NONBLOCK), fstat, a refusal unless it is a
 * regular file of at most max_bytes, a read and a parse. A refused file is not read
 * again until it changes. Not thread-safe: one reader per struct.
 */
typedef struct {
	const char *path;
	size_t max_bytes;
	/* what the last change was */
	int seen; /* looked at once at least */
	int exists; /* it could be examined: the identity below is its */
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	const char *why; /* static reason the last change gave no advice, or NULL */
	unsigned long reads; /* how many times the file's bytes were read */
} clavis_advice_file_t;

/*
 * Look at the file once. RET 0 unchanged since the last look; 1 changed: then *out is
 * the advice it holds (malloc'd, the caller frees it with clavis_advice_destroy) or
 * NULL, with the reason in f->why.
 */
int clavis_advice_read(clavis_advice_file_t *f, clavis_advice_t **out);

/* Free an advice of clavis_advice_read (NULL is fine). */
void clavis_advice_destroy(clavis_advice_t *adv);

/* RET NULL if `adv` (the last change of `f`, or NULL) is usable at `now`, else the
 * static reason it is not (f->why, or stale). */
const char *clavis_advice_why_not(const clavis_advice_file_t *f,
				  const clavis_advice_t *adv, double now);

#endif /* CLAVIS_ADVICE_H */
