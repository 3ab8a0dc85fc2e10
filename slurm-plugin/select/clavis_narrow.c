/*
 * clavis_narrow.c - a job's advised candidate set (see clavis_narrow.h).
 */
#include "clavis_narrow.h"

#include <stdlib.h>
#include <string.h>

/* Drop the nodes of hosts running a devil; with `strict` also those the advice cannot
 * vouch for. */
static void _drop_hosts(const clavis_cands_t *c, int strict, unsigned char *out)
{
	const clavis_advice_node_t *a;
	size_t i;

	for (i = 0; i < c->n; i++) {
		if (!out[i])
			continue;
		a = c->entry[i];
		if ((a && a->host_has_devil) ||
		    (strict && (!a || a->contention == ADV_UNKNOWN)))
			out[i] = 0;
	}
}

/* Keep only the rack with the most nodes of `out` (a node without advice has no rack
 * and goes): one pass counting per rack id (in the advice's scratch counters), one
 * clearing. RET 1 if kept, 0 if no rack has min_nodes (then `out` is untouched). */
static int _keep_best_rack(const clavis_advice_t *adv, const clavis_cands_t *c,
			   uint32_t min_nodes, unsigned char *out)
{
	size_t i, best = 0, *counts = adv->rack_counts;
	const clavis_advice_node_t *a;
	int found = 0;

	if (!adv->n_racks)
		return 0;
	memset(counts, 0, adv->n_racks * sizeof(*counts));
	for (i = 0; i < c->n; i++) {
		if (!out[i] || !(a = c->entry[i]))
			continue;
		/* a tie keeps the rack that reached the count first */
		if (++counts[a->rack_id] > (found ? counts[best] : 0)) {
			best = a->rack_id;
			found = 1;
		}
	}
	if (!found || counts[best] < min_nodes)
		return 0;
	for (i = 0; i < c->n; i++)
		if (out[i] && (!(a = c->entry[i]) || a->rack_id != best))
			out[i] = 0;
	return 1;
}

int clavis_narrow(const clavis_advice_t *adv, const clavis_cands_t *c,
		  uint32_t min_nodes, int devil, int strict, unsigned char *out)
{
	size_t i, kept = 0, in = 0;
	int narrowed = 0;

	for (i = 0; i < c->n; i++)
		out[i] = c->in[i] ? 1 : 0;
	if (devil) {
		_drop_hosts(c, strict, out);
		narrowed = 1;
	}
	if (min_nodes >= 2)
		narrowed |= _keep_best_rack(adv, c, min_nodes, out);
	for (i = 0; i < c->n; i++) {
		kept += out[i];
		in += c->in[i] ? 1 : 0;
	}
	/* `out` only ever loses nodes, so the same count is the same set */
	if (!narrowed || kept < min_nodes || kept == in)
		return 0;
	return 1;
}
