/*
 * clavis_advice_watch.c - the advice file followed by a thread of its own; job
 * tests only take the mutex and read the current advice (clavis_advice_watch.h).
 */
#include "clavis_advice_watch.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static const char why_stopped[] = "not followed (the watcher thread failed)";

static double _now(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		return (double)time(NULL);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* `ms` from now on CLOCK_MONOTONIC (the clock of `wake`). RET 0, or an errno. */
static int _deadline(struct timespec *at, unsigned ms)
{
	if (clock_gettime(CLOCK_MONOTONIC, at) < 0)
		return errno;
	at->tv_sec += (time_t)(ms / 1000);
	at->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (at->tv_nsec >= 1000000000L) {
		at->tv_sec++;
		at->tv_nsec -= 1000000000L;
	}
	return 0;
}

/* Put `adv` (or NULL) in place of the current advice, *old the one it replaces (to
 * be freed outside the mutex). RET 0; 1 if the mutex could not be released (the
 * thread must end); -1 if it could not be taken (nothing changed). */
static int _swap(clavis_advice_watch_t *w, clavis_advice_t *adv, int changed,
		 clavis_advice_t **old)
{
	*old = NULL;
	if (pthread_mutex_lock(&w->lock))
		return -1;
	*old = w->cur;
	w->cur = adv;
	w->seq += (unsigned long)changed;
	return pthread_mutex_unlock(&w->lock) ? 1 : 0;
}

/* Tell the owner about a look: after a change, and when the state changed (usable
 * after none, or another reason for none; a new usable file replacing a usable one,
 * as clavisd's every publication does, is no change of state). w->cur is read
 * without the mutex: only this thread writes it. */
static void _tell(clavis_advice_watch_t *w, int changed, const char *why)
{
	clavis_advice_news_t news = { .file = &w->file, .changed = changed };

	news.adv = why ? NULL : w->cur;
	news.why = why;
	news.report = !w->told || why != w->told_why;
	if (news.report) {
		w->told = 1;
		w->told_why = why;
	}
	if ((changed || news.report) && w->tell)
		w->tell(w->arg, &news);
}

/* One look at the file. RET 0, or -1 if the thread must end. */
static int _look(clavis_advice_watch_t *w)
{
	clavis_advice_t *adv = NULL, *old = NULL;
	int changed = clavis_advice_read(&w->file, &adv), rc = 0;

	if (changed) {
		rc = _swap(w, adv, 1, &old);
		if (rc < 0)
			clavis_advice_destroy(adv);
		clavis_advice_destroy(old);
	}
	if (rc)
		return -1;
	_tell(w, changed, clavis_advice_why_not(&w->file, w->cur, _now()));
	return 0;
}

/* Sleep interval_ms, or less when told to stop. RET 0 to look again, 1 stopped,
 * -1 failed. */
static int _sleep(clavis_advice_watch_t *w)
{
	struct timespec at;
	int rc, stop;

	if (_deadline(&at, w->interval_ms) || pthread_mutex_lock(&w->lock))
		return -1;
	rc = 0;
	while (!w->stop && !rc)
		rc = pthread_cond_timedwait(&w->wake, &w->lock, &at);
	stop = w->stop ? 1 : (rc && rc != ETIMEDOUT) ? -1 : 0;
	if (pthread_mutex_unlock(&w->lock))
		stop = -1;
	return stop;
}

static void *_watch(void *arg)
{
	clavis_advice_watch_t *w = arg;
	clavis_advice_t *old;
	int rc;

	do {
		rc = _look(w);
		if (!rc)
			rc = _sleep(w);
	} while (!rc);
	if (rc > 0)
		return NULL;
	/* failed, not stopped: leave no advice that nobody follows any more */
	if (_swap(w, NULL, 0, &old) >= 0)
		clavis_advice_destroy(old);
	_tell(w, 0, why_stopped);
	return NULL;
}

int clavis_advice_watch_init(clavis_advice_watch_t *w, const char *path,
			     size_t max_bytes, unsigned interval_ms,
			     clavis_advice_tell_f tell, void *arg)
{
	pthread_condattr_t attr;
	int rc;

	memset(w, 0, sizeof(*w));
	w->file.path = path;
	w->file.max_bytes = max_bytes;
	w->interval_ms = interval_ms;
	w->tell = tell;
	w->arg = arg;
	if ((rc = pthread_condattr_init(&attr)))
		return rc;
	if (!(rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC)) &&
	    !(rc = pthread_cond_init(&w->wake, &attr))) {
		if ((rc = pthread_mutex_init(&w->lock, NULL)))
			(void)pthread_cond_destroy(&w->wake);
		else
			w->ready = 1;
	}
	(void)pthread_condattr_destroy(&attr);
	return rc;
}

int clavis_advice_watch_start(clavis_advice_watch_t *w)
{
	int rc;

	if (!w->ready || w->running)
		return EINVAL;
	if ((rc = pthread_create(&w->tid, NULL, _watch, w)))
		return rc;
	w->running = 1;
	return 0;
}

void clavis_advice_watch_fini(clavis_advice_watch_t *w)
{
	if (!w->ready)
		return;
	if (w->running && !pthread_mutex_lock(&w->lock)) {
		w->stop = 1;
		(void)pthread_cond_signal(&w->wake);
		(void)pthread_mutex_unlock(&w->lock);
		(void)pthread_join(w->tid, NULL);
	}
	w->running = 0;
	clavis_advice_destroy(w->cur);
	w->cur = NULL;
	(void)pthread_cond_destroy(&w->wake);
	(void)pthread_mutex_destroy(&w->lock);
	w->ready = 0;
}

int clavis_advice_hold(clavis_advice_watch_t *w, double now,
		       const clavis_advice_t **adv, unsigned long *seq)
{
	int rc;

	*adv = NULL;
	if (!w->ready)
		return EINVAL;
	if ((rc = pthread_mutex_lock(&w->lock)))
		return rc;
	if (w->cur && clavis_advice_fresh(w->cur, now))
		*adv = w->cur;
	if (seq)
		*seq = w->seq;
	return 0;
}

int clavis_advice_release(clavis_advice_watch_t *w)
{
	return pthread_mutex_unlock(&w->lock);
}
