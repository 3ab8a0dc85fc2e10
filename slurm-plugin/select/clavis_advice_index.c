/*
 * clavis_advice_index.c - what the plugin derives once per advice file, so that a
 * job test never compares names more than once per node: each host's devil flag,
 * each rack's number, and a hash index of the node names (clavis_advice.h).
 */
#include "clavis_advice.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static int _devil_node(const clavis_advice_node_t *n)
{
	return n->node_class == ADV_CLASS_DEVIL || n->contention == ADV_OK ||
	       n->contention == ADV_CONTENDED;
}

static int _by_host(const void *a, const void *b)
{
	return strcmp((*(clavis_advice_node_t *const *)a)->host,
		      (*(clavis_advice_node_t *const *)b)->host);
}

static int _by_rack(const void *a, const void *b)
{
	return strcmp((*(clavis_advice_node_t *const *)a)->rack,
		      (*(clavis_advice_node_t *const *)b)->rack);
}

/* Pointers to every node, sorted by `cmp`: a group of equal keys is a run.
 * RET a malloc'd array of adv->n (> 0) pointers, or NULL when out of memory. */
static clavis_advice_node_t **_sorted(clavis_advice_t *adv,
				      int (*cmp)(const void *, const void *))
{
	clavis_advice_node_t **by;
	size_t i;

	if (!(by = malloc(adv->n * sizeof(*by))))
		return NULL;
	for (i = 0; i < adv->n; i++)
		by[i] = &adv->nodes[i];
	qsort(by, adv->n, sizeof(*by), cmp);
	return by;
}

/* Set host_has_devil of every node in O(n log n): group the nodes by host. */
static int _mark_devil_hosts(clavis_advice_t *adv)
{
	clavis_advice_node_t **by_host;
	size_t i, j, k;
	int devil;

	if (!adv->n)
		return 0;
	if (!(by_host = _sorted(adv, _by_host)))
		return -1;
	for (i = 0; i < adv->n; i = j) {
		devil = 0;
		for (j = i; j < adv->n && !strcmp(by_host[j]->host, by_host[i]->host);
		     j++)
			devil |= _devil_node(by_host[j]);
		for (k = i; k < j; k++)
			by_host[k]->host_has_devil = devil;
	}
	free(by_host);
	return 0;
}

/* Number the racks (rack_id, n_racks) in O(n log n), so that the plugin counts the
 * nodes per rack in an array, never by comparing rack names per node. */
static int _number_racks(clavis_advice_t *adv)
{
	clavis_advice_node_t **by_rack;
	size_t i;

	if (!adv->n)
		return 0;
	if (!(by_rack = _sorted(adv, _by_rack)))
		return -1;
	for (i = 0; i < adv->n; i++) {
		if (i && strcmp(by_rack[i]->rack, by_rack[i - 1]->rack))
			adv->n_racks++;
		by_rack[i]->rack_id = adv->n_racks;
	}
	adv->n_racks++;
	free(by_rack);
	if (!(adv->rack_counts = calloc(adv->n_racks, sizeof(*adv->rack_counts))))
		return -1;
	return 0;
}


int clavis_advice_host_has_devil(const clavis_advice_t *adv, const char *host)
{
	size_t i;

	for (i = 0; i < adv->n; i++)
		if (!strcmp(adv->nodes[i].host, host) && _devil_node(&adv->nodes[i]))
			return 1;
	return 0;
}

/* A seed nobody who writes the advice can predict, so that no file can be made of
 * names that collide in the index (the index stays O(1) per lookup under any file). */
static uint64_t _seed(void)
{
	struct timespec ts;
	uint64_t seed;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t)sizeof(seed))
		return seed;
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
	       ((uint64_t)getpid() << 16);
}

/* FNV-1a from a seeded basis, then a 64-bit finaliser (murmur3's) to spread the
 * low bits the table uses. */
static uint64_t _hash(uint64_t seed, const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* An open-addressing table of node indexes + 1 (0: empty), at most half full.
 * RET 0, -1 out of memory. */
static int _index_names(clavis_advice_t *adv)
{
	size_t i, at;

	adv->n_slots = 1;
	while (adv->n_slots < 2 * adv->n)
		adv->n_slots <<= 1;
	if (!(adv->slots = calloc(adv->n_slots, sizeof(*adv->slots))))
		return -1;
	adv->seed = _seed();
	for (i = 0; i < adv->n; i++) {
		at = (size_t)_hash(adv->seed, adv->nodes[i].node);
		while (adv->slots[at & (adv->n_slots - 1)])
			at++;
		adv->slots[at & (adv->n_slots - 1)] = (uint32_t)i + 1;
	}
	return 0;
}

int clavis_advice_index(clavis_advice_t *adv)
{
	if (!adv->n)
		return 0;
	if (_mark_devil_hosts(adv) < 0 || _number_racks(adv) < 0 ||
	    _index_names(adv) < 0)
		return -1;
	return 0;
}

const clavis_advice_node_t *clavis_advice_recall(const clavis_advice_t *adv,
						 const clavis_advice_node_t *last,
						 const char *name)
{
	if (last && !strcmp(last->node, name))
		return last;
	return clavis_advice_find(adv, name);
}

const clavis_advice_node_t *clavis_advice_find(const clavis_advice_t *adv,
					       const char *name)
{
	const clavis_advice_node_t *a;
	size_t at;
	uint32_t slot;

	if (!adv->n)
		return NULL;
	at = (size_t)_hash(adv->seed, name);
	while ((slot = adv->slots[at & (adv->n_slots - 1)])) {
		a = &adv->nodes[slot - 1];
		if (!strcmp(a->node, name))
			return a;
		at++;
	}
	return NULL;
}
