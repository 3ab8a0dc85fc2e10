/*
 * clavis_advice_watch.h - the advice file followed by a thread of its own, so that no
 * job test ever reads or parses it. The thread looks at the file every interval_ms
 * (clavis_advice_read: a stat; a read and a parse only when it changed), then swaps
 * what it got in under the mutex; a job test only holds the mutex while it uses the
 * current advice. A refused, missing or unreadable file leaves no advice (the last
 * good one is dropped, as a job test found it before). Independent of Slurm: the
 * owner hears what happened through a callback (select_clavis.c logs it).
 */
#ifndef CLAVIS_ADVICE_WATCH_H
#define CLAVIS_ADVICE_WATCH_H

#include <pthread.h>

#include "clavis_advice.h"

/* What the watcher tells its owner, from its thread, after a look (never under
 * the mutex). */
typedef struct {
	const clavis_advice_file_t *file; /* the file's identity and last outcome */
	int changed; /* the file changed since the last look, and was handled */
	int report; /* the state changed: usable, or why not (one log line) */
	const clavis_advice_t *adv; /* the advice, when usable now */
	const char *why; /* static reason there is none, when adv is NULL */
} clavis_advice_news_t;

typedef void (*clavis_advice_tell_f)(void *arg, const clavis_advice_news_t *news);

typedef struct {
	/* the watcher thread's own */
	clavis_advice_file_t file;
	unsigned interval_ms;
	clavis_advice_tell_f tell; /* called when changed or report */
	void *arg;
	const char *told_why; /* what was reported last (NULL: usable) */
	int told; /* something was reported */
	/* shared, under lock */
	pthread_mutex_t lock;
	pthread_cond_t wake; /* stop: a CLOCK_MONOTONIC condition */
	clavis_advice_t *cur; /* the current advice, or NULL */
	unsigned long seq; /* changes of the file handled so far */
	int stop;
	/* owner's */
	int ready; /* lock and wake initialised */
	int running; /* the thread was started */
	pthread_t tid;
} clavis_advice_watch_t;

/* Set up `w` to follow `path`, without starting the thread (then every hold finds
 * no advice). RET 0, or an errno value. */
int clavis_advice_watch_init(clavis_advice_watch_t *w, const char *path,
			     size_t max_bytes, unsigned interval_ms,
			     clavis_advice_tell_f tell, void *arg);

/* Start the thread; its first look is at once. RET 0, or an errno value. */
int clavis_advice_watch_start(clavis_advice_watch_t *w);

/* Stop and join the thread (it wakes at once), free the advice and the mutex.
 * Safe after a failed or no init/start. */
void clavis_advice_watch_fini(clavis_advice_watch_t *w);

/*
 * Take the mutex and the current advice, when fresh at `now` (else *adv is NULL);
 * *seq (if not NULL) the number of changes handled. No file I/O. Call
 * clavis_advice_release when done with *adv. RET 0, or an errno value (then the
 * mutex is not held and *adv is NULL).
 */
int clavis_advice_hold(clavis_advice_watch_t *w, double now,
		       const clavis_advice_t **adv, unsigned long *seq);

/* RET 0, or an errno value. */
int clavis_advice_release(clavis_advice_watch_t *w);

#endif /* CLAVIS_ADVICE_WATCH_H */
