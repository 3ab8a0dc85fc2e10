/*
 * clavis_narrow.h - a job's advised candidate set, on plain arrays indexed like
 * Slurm's node table (no Slurm types), so that select_clavis.c's choice can be tested
 * and timed on its own (at 20000 nodes: bench/plugin).
 */
#ifndef CLAVIS_NARROW_H
#define CLAVIS_NARROW_H

#include <stddef.h>
#include <stdint.h>

#include "clavis_advice.h"

/* One job test's view of the node table: in[i] 1 if node i is a candidate, and then
 * entry[i] its advice (NULL: none; meaningless for a node that is no candidate). */
typedef struct {
	size_t n;
	const clavis_advice_node_t **entry;
	const unsigned char *in;
} clavis_cands_t;

/*
 * The candidates narrowed for a job: a devil drops the hosts running a devil (and
 * with `strict` also the nodes the advice cannot vouch for: no entry, or a host of
 * unknown contention); a job of min_nodes >= 2 keeps only the rack with the most
 * remaining nodes (the first to reach that count in node order), when it has
 * min_nodes. O(n + racks), no allocation: the racks are counted in the advice's
 * rack_counts, so the caller must hold the advice alone (clavis_advice_hold).
 * OUT out[0..n-1]: 1 for a node kept.
 * RET 1 if `out` is narrower than `in` and has at least min_nodes nodes, 0 if the
 * advice says nothing for this job (then `out` is meaningless).
 */
int clavis_narrow(const clavis_advice_t *adv, const clavis_cands_t *c,
		  uint32_t min_nodes, int devil, int strict, unsigned char *out);

#endif /* CLAVIS_NARROW_H */
