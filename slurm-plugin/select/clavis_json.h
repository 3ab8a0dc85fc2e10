/*
 * clavis_json.h - a small, bounded JSON reader for the advice file (RFC 8259 values
 * into a tree), independent of Slurm so it can be tested with garbage on its own.
 */
#ifndef CLAVIS_JSON_H
#define CLAVIS_JSON_H

#include <stddef.h>

#define CLAVIS_JSON_MAX_DEPTH 16

typedef enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_type_t;

typedef struct jv {
	jv_type_t type;
	int boolean;
	double num;
	char *str; /* JV_STR: NUL-terminated; a NUL inside is refused */
	size_t n; /* JV_ARR, JV_OBJ: item count */
	struct jv *items; /* JV_ARR, JV_OBJ */
	char **keys; /* JV_OBJ: one per item */
} jv_t;

/* Parse `len` bytes, refused beyond `max_values` values (each costs a jv_t).
 * RET 0, or -1 with a static reason in *why (and *at, the byte offset). */
int jv_parse(const char *text, size_t len, size_t max_values, jv_t *out,
	     const char **why, size_t *at);
void jv_free(jv_t *v);

/* The member `key` of an object, or NULL. */
const jv_t *jv_get(const jv_t *obj, const char *key);

#endif /* CLAVIS_JSON_H */
