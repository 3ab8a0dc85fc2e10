/*
 * clavis_advice_file.c - the advice file behind its cache: a bounded, non-blocking
 * read, parsed again only when the file's identity changes (clavis_advice.h).
 */
#include "clavis_advice.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

static int _same_file(const clavis_advice_cache_t *c, const struct stat *st)
{
	return c->have && c->dev == st->st_dev && c->ino == st->st_ino &&
	       c->size == st->st_size &&
	       c->mtime.tv_sec == st->st_mtim.tv_sec &&
	       c->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Read and parse into the cache; the cache records the outcome either way. */
static void _reload(clavis_advice_cache_t *c, int fd, const struct stat *st)
{
	char *text;

	clavis_advice_free(&c->adv);
	c->have = 1;
	c->ok = 0;
	c->dev = st->st_dev;
	c->ino = st->st_ino;
	c->size = st->st_size;
	c->mtime = st->st_mtim;
	if (!(text = _read_all(fd, (size_t)st->st_size, &c->why)))
		return;
	c->ok = !clavis_advice_parse(text, (size_t)st->st_size, &c->adv,
				     &c->why);
	free(text);
}

const clavis_advice_t *clavis_advice_load(clavis_advice_cache_t *c, double now,
					  const char **why, int *changed)
{
	struct stat st;
	int fd;

	*changed = 0;
	fd = open(c->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0) {
		*why = errno == ENOENT ? "missing" : "cannot be opened";
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		(void)close(fd);
		*why = "not a regular file";
		return NULL;
	}
	if ((size_t)st.st_size > c->max_bytes) {
		(void)close(fd);
		*why = "larger than its size limit";
		return NULL;
	}
	if (!_same_file(c, &st)) {
		_reload(c, fd, &st);
		*changed = 1;
	}
	(void)close(fd);
	if (!c->ok) {
		*why = c->why;
		return NULL;
	}
	if (!clavis_advice_fresh(&c->adv, now)) {
		*why = "stale (older than its valid_s)";
		return NULL;
	}
	return &c->adv;
}

void clavis_advice_cache_free(clavis_advice_cache_t *c)
{
	clavis_advice_free(&c->adv);
	c->have = c->ok = 0;
}
