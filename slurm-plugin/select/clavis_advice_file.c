/*
 * clavis_advice_file.c - the advice file as one reader follows it: a stat per look,
 * a bounded, non-blocking read and a parse only when its identity changed
 * (clavis_advice.h).
 */
#include "clavis_advice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char why_stale[] = "stale (older than its valid_s)";

/* Read the whole (regular, bounded) file behind `fd`. RET malloc'd text or NULL. */
static char *_read_all(int fd, size_t size, const char **why)
{
	char *text = malloc(size + 1);
	size_t got = 0;
	ssize_t n;

	if (!text) {
		*why = "out of memory";
		return NULL;
	}
	while (got < size) {
		n = read(fd, text + got, size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != size) {
		free(text);
		*why = "short read (file changed while read)";
		return NULL;
	}
	text[got] = '\0';
	return text;
}

static int _same_file(const clavis_advice_file_t *f, const struct stat *st)
{
	return f->seen && f->exists && f->dev == st->st_dev &&
	       f->ino == st->st_ino && f->size == st->st_size &&
	       f->mtime.tv_sec == st->st_mtim.tv_sec &&
	       f->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

static void _remember(clavis_advice_file_t *f, const struct stat *st)
{
	f->seen = f->exists = 1;
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->size = st->st_size;
	f->mtime = st->st_mtim;
}

/* Parse `fd`'s `size` bytes into a new advice. RET it, or NULL with *why. */
static clavis_advice_t *_parse_fd(clavis_advice_file_t *f, int fd, size_t size,
				  const char **why)
{
	clavis_advice_t *adv = calloc(1, sizeof(*adv));
	char *text;

	if (!adv) {
		*why = "out of memory";
		return NULL;
	}
	f->reads++;
	if (!(text = _read_all(fd, size, why))) {
		free(adv);
		return NULL;
	}
	if (clavis_advice_parse(text, size, adv, why) < 0) {
		free(adv);
		adv = NULL;
	}
	free(text);
	return adv;
}

/* The file opened (never blocking: a FIFO without a writer opens at once) and
 * checked; the identity recorded is the opened file's (it may have been replaced
 * since the stat). RET the advice or NULL with f->why. */
static clavis_advice_t *_load(clavis_advice_file_t *f, const struct stat *seen)
{
	clavis_advice_t *adv = NULL;
	struct stat st;
	int fd;

	_remember(f, seen);
	fd = open(f->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		f->why = errno == ENOENT ? "missing" : "cannot be opened";
		return NULL;
	}
	if (fstat(fd, &st) < 0) {
		f->why = "cannot be examined";
	} else {
		_remember(f, &st);
		if (!S_ISREG(st.st_mode))
			f->why = "not a regular file";
		else if ((size_t)st.st_size > f->max_bytes)
			f->why = "larger than its size limit";
		else
			adv = _parse_fd(f, fd, (size_t)st.st_size, &f->why);
	}
	if (close(fd) < 0 && adv) {
		clavis_advice_destroy(adv);
		adv = NULL;
		f->why = "cannot be closed";
	}
	if (adv)
		f->why = NULL;
	return adv;
}

int clavis_advice_read(clavis_advice_file_t *f, clavis_advice_t **out)
{
	const char *why;
	struct stat st;

	*out = NULL;
	if (stat(f->path, &st) < 0) {
		why = errno == ENOENT ? "missing" : "cannot be examined";
		if (f->seen && !f->exists && f->why == why)
			return 0;
		f->seen = 1;
		f->exists = 0;
		f->why = why;
		return 1;
	}
	if (_same_file(f, &st))
		return 0;
	*out = _load(f, &st);
	return 1;
}

void clavis_advice_destroy(clavis_advice_t *adv)
{
	if (!adv)
		return;
	clavis_advice_free(adv);
	free(adv);
}

const char *clavis_advice_why_not(const clavis_advice_file_t *f,
				  const clavis_advice_t *adv, double now)
{
	if (!adv)
		return f->why ? f->why : "not read yet";
	return clavis_advice_fresh(adv, now) ? NULL : why_stale;
}
