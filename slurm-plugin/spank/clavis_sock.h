/*
 * clavis_sock.h - one bounded request/reply exchange on the monitor's UNIX socket.
 */
#ifndef CLAVIS_SOCK_H
#define CLAVIS_SOCK_H

#include <stddef.h>

typedef enum {
	CLAVIS_X_OK = 0, /* reply line starts with {"ok":true */
	CLAVIS_X_REFUSED, /* a reply line, but not ok: the monitor refused */
	CLAVIS_X_FAILED, /* no usable reply: see `why` and `err` */
} clavis_x_t;

#define CLAVIS_LOG_REPLY 160 /* bytes of a refusing reply kept for the log */

/* Why an exchange failed, for the one log line. */
typedef struct {
	const char *why; /* static text: "connect", "timeout", ... */
	int err; /* errno, 0 if none */
	char reply[CLAVIS_LOG_REPLY]; /* start of a refusing reply, for the log */
} clavis_xerr_t;

/*
 * Connect to `path`, send `req` (`len` bytes, one line), read one reply line, close;
 * the whole exchange, connect included, never takes longer than `budget_ms`: the
 * socket is non-blocking and every wait is a poll() on what is left of the budget.
 * RET CLAVIS_X_OK, CLAVIS_X_REFUSED or CLAVIS_X_FAILED (details in *err).
 */
clavis_x_t clavis_exchange(const char *path, const char *req, size_t len,
			   int budget_ms, clavis_xerr_t *err);

#endif /* CLAVIS_SOCK_H */
