/*
 * clavis_sock.c - one bounded request/reply exchange on the monitor's UNIX socket.
 */
#include "clavis_sock.h"

#include "clavis_msg.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define OK_PREFIX "{\"ok\":true"

static long _now_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) < 0)
		return 0; /* cannot happen with CLOCK_MONOTONIC */
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static clavis_x_t _fail(clavis_xerr_t *err, const char *why, int e)
{
	err->why = why;
	err->err = e;
	return CLAVIS_X_FAILED;
}

/* Wait until `fd` is ready for `events` or the deadline passes.
 * RET 0 ready, -1 with err filled. */
static int _wait(int fd, short events, long deadline, clavis_xerr_t *err)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	long left;
	int rc;

	for (;;) {
		left = deadline - _now_ms();
		if (left <= 0) {
			_fail(err, "timeout", 0);
			return -1;
		}
		rc = poll(&pfd, 1, (int)left);
		if (rc > 0)
			return 0;
		if (rc == 0) {
			_fail(err, "timeout", 0);
			return -1;
		}
		if (errno != EINTR) {
			_fail(err, "poll", errno);
			return -1;
		}
	}
}

static int _connect(const char *path, long deadline, clavis_xerr_t *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t elen = sizeof(int);
	int fd, e = 0;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		_fail(err, "socket path too long", ENAMETOOLONG);
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		_fail(err, "socket", errno);
		return -1;
	}
	if (!connect(fd, (struct sockaddr *)&sun, sizeof(sun)))
		return fd;
	/* a UNIX listener with a full backlog answers EAGAIN: treat it as busy */
	if (errno != EINPROGRESS) {
		_fail(err, errno == EAGAIN ? "monitor busy" : "connect", errno);
		goto fail;
	}
	if (_wait(fd, POLLOUT, deadline, err) < 0)
		goto fail;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) < 0 || e) {
		_fail(err, "connect", e ? e : errno);
		goto fail;
	}
	return fd;
fail:
	(void)close(fd);
	return -1;
}

static int _send_all(int fd, const char *req, size_t len, long deadline,
		     clavis_xerr_t *err)
{
	ssize_t n;

	while (len) {
		n = send(fd, req, len, MSG_NOSIGNAL);
		if (n > 0) {
			req += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN) {
			_fail(err, "send", errno);
			return -1;
		}
		if (_wait(fd, POLLOUT, deadline, err) < 0)
			return -1;
	}
	return 0;
}

/* Read until a newline (or the reply limit). RET bytes read, -1 on failure. */
static ssize_t _recv_line(int fd, char *buf, size_t cap, long deadline,
			  clavis_xerr_t *err)
{
	size_t got = 0;
	ssize_t n;

	while (got < cap - 1) {
		n = recv(fd, buf + got, cap - 1 - got, 0);
		if (n > 0) {
			got += (size_t)n;
			buf[got] = '\0';
			if (memchr(buf, '\n', got))
				return (ssize_t)got;
			continue;
		}
		if (n == 0) {
			_fail(err, got ? "reply not terminated" : "closed without reply",
			      0);
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN) {
			_fail(err, "recv", errno);
			return -1;
		}
		if (_wait(fd, POLLIN, deadline, err) < 0)
			return -1;
	}
	_fail(err, "reply too long", 0);
	return -1;
}

clavis_x_t clavis_exchange(const char *path, const char *req, size_t len,
			   int budget_ms, clavis_xerr_t *err)
{
	long deadline = _now_ms() + budget_ms;
	char *reply;
	ssize_t got;
	clavis_x_t rc;
	int fd;

	memset(err, 0, sizeof(*err));
	if (!(reply = malloc(CLAVIS_MAX_REPLY)))
		return _fail(err, "malloc", errno);
	if ((fd = _connect(path, deadline, err)) < 0) {
		rc = CLAVIS_X_FAILED;
	} else if (_send_all(fd, req, len, deadline, err) < 0 ||
		   (got = _recv_line(fd, reply, CLAVIS_MAX_REPLY, deadline,
				     err)) < 0) {
		rc = CLAVIS_X_FAILED;
	} else if (!strncmp(reply, OK_PREFIX, strlen(OK_PREFIX))) {
		rc = CLAVIS_X_OK;
	} else {
		rc = CLAVIS_X_REFUSED;
		err->why = "refused";
		(void)snprintf(err->reply, sizeof(err->reply), "%.*s",
			       (int)strcspn(reply, "\n"), reply);
	}
	if (fd >= 0)
		(void)close(fd); /* the exchange is over: nothing left to report */
	free(reply);
	return rc;
}
