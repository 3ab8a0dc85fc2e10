/*
 * select_clavis.c - select/cons_tres, narrowed by clavisd's advice at job test.
 *
 * Every select call is forwarded to select/cons_tres, loaded through Slurm's plugin
 * API with the symbol table of clavis_slurm_compat.h, checked at init(). Only
 * select_p_job_test in SELECT_MODE_RUN_NOW is changed: with fresh, valid advice a
 * devil job first tries the nodes of devil-free hosts, then those whose host runs no
 * devil (hosts of unknown contention included), and a multi-node job first
 * tries the rack with the most usable nodes. A job is a devil by its hint (sbatch
 * --clavis-class=devil|turtle, which spank_clavis.so puts in the job's SPANK job
 * control environment as CLAVIS_CLASS: an override), else by the class clavisd
 * remembers for its application, the key "UID:NAME" of the job's user id and name
 * (the advice's "apps", schema v2).
 * Whenever the narrowed sets cannot place the job, cons_tres gets the unmodified set:
 * no job waits that stock Slurm would have started. Missing, stale, corrupt or huge
 * advice is logged once per change and leaves every call as cons_tres.
 *
 * The advice file is never read in a job test: in slurmctld a thread of the plugin
 * (clavis_advice_watch.c, started in init(), joined in fini()) looks at it every
 * ADVICE_POLL_MS with a stat, reads a changed one (a non-blocking open of a regular
 * file of at most AdviceMaxBytes), parses and indexes it, and swaps it in under a
 * mutex. A job test takes that mutex and uses the advice in memory: no file I/O and
 * no parsing in the scheduling path. Other programs that load the plugin (slurmd,
 * Slurm's commands) start no thread and read no advice.
 *
 * Configuration, select_clavis.conf beside slurm.conf (optional):
 *   AdvicePath=/run/clavis/advice.json
 *   AdviceMaxBytes=4194304
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/common/slurm_xlator.h"

#include "clavis_slurm_compat.h"

#include "src/common/bitstring.h"
#include "src/common/log.h"
#include "src/common/node_conf.h"
#include "src/common/plugin.h"
#include "src/common/read_config.h"
#include "src/common/run_in_daemon.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"
#include "src/slurmctld/slurmctld.h"

#include "clavis_advice.h"
#include "clavis_advice_watch.h"
#include "clavis_narrow.h"

#define SELECT_PLUGIN_CLAVIS 190 /* unique among select plugin ids (>= 100) */
#define DEFAULT_ADVICE "/run/clavis/advice.json"
#define CONF_FILE "select_clavis.conf"
#define CLASS_ENV "CLAVIS_CLASS="
#define CONF_LINE_MAX 4096 /* a longer line of select_clavis.conf is refused */
/* how often the watcher thread stats the advice file: clavisd writes it every few
 * seconds, and a stat is a few microseconds */
#define ADVICE_POLL_MS 200

const char plugin_name[] = "Clavis advice over cons_tres selection plugin";
const char plugin_type[] = "select/clavis";
const uint32_t plugin_id = SELECT_PLUGIN_CLAVIS;
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

/* cons_tres's ops, its symbol names and our forwarders: all from the version's table */
#define OPS_FIELD(ret, name, params, args) ret(*name) params;
#define OPS_SYM(ret, name, params, args) "select_p_" #name,
#define OPS_NONE(ret, name, params, args)

typedef struct {
	uint32_t *plugin_id;
	CLAVIS_SELECT_OPS(OPS_FIELD, OPS_FIELD)
} clavis_ops_t;

#ifdef CLAVIS_SLURM_OPS_T
_Static_assert(sizeof(clavis_ops_t) == sizeof(CLAVIS_SLURM_OPS_T),
	       "the ops table of clavis_slurm_compat.h does not match Slurm's");
#endif

static const char *cons_syms[] = { "plugin_id",
				   CLAVIS_SELECT_OPS(OPS_SYM, OPS_SYM) };
static clavis_ops_t cons;
static plugin_context_t *cons_ctx;

static char *advice_path;
static size_t advice_max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT;
static clavis_advice_watch_t advice_watch;
/* Each node's advice entry at the last job test, for change `entries_seq` of the
 * advice: kept from one job test to the next, so a node is looked up again only when
 * the advice changed (or the node's name is not its entry's). Guarded by the advice
 * mutex, which every job test holds while it uses them. */
static const clavis_advice_node_t **entries;
static size_t entries_n;
static unsigned long entries_seq;

/* key=value lines of select_clavis.conf; an unknown key is an error (logged). */
static void _read_conf(void)
{
	char *path = get_extra_conf_path(CONF_FILE);
	char line[CONF_LINE_MAX], *val, *end;
	FILE *f;
	long n;

	advice_max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT;
	if (!(f = fopen(path, "r"))) {
		xfree(path);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		if (!strchr(line, '\n') && !feof(f)) {
			error("%s: %s: a line longer than %d bytes; the file is ignored",
			      plugin_type, path, CONF_LINE_MAX - 1);
			xfree(advice_path);
			advice_max_bytes = CLAVIS_ADVICE_MAX_BYTES_DEFAULT;
			break;
		}
		line[strcspn(line, "\r\n")] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		if (!(val = strchr(line, '='))) {
			error("%s: %s: line '%s' ignored", plugin_type, path, line);
			continue;
		}
		*val++ = '\0';
		if (!xstrcasecmp(line, "AdvicePath") && val[0] == '/') {
			xfree(advice_path);
			advice_path = xstrdup(val);
		} else if (!xstrcasecmp(line, "AdviceMaxBytes") &&
			   (n = strtol(val, &end, 10)) > 0 && !*end) {
			advice_max_bytes = (size_t)n;
		} else {
			error("%s: %s: %s=%s ignored", plugin_type, path, line, val);
		}
	}
	if (fclose(f))
		error("%s: %s: close: %m", plugin_type, path);
	xfree(path);
}

static double _now(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
		return (double)time(NULL);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * From the watcher thread, after a look at the advice file: one info line per change
 * of state (usable, or why not); with DebugFlags=SelectType one line per change of
 * the file naming its identity, logged once job tests see what it gave (the tests
 * wait for it).
 */
static void _told(void *arg, const clavis_advice_news_t *news)
{
	const clavis_advice_file_t *f = news->file;

	if (news->report && news->adv)
		info("%s: advice %s: %zu nodes", plugin_type, advice_path,
		     news->adv->n);
	else if (news->report)
		info("%s: advice %s %s: placing as cons_tres", plugin_type,
		     advice_path, news->why);
	if (!news->changed)
		return;
	if (f->exists)
		log_flag(SELECT_TYPE, "%s: file %s changed (inode %ju, %jd bytes, mtime %jd.%09ld): %s",
			 plugin_type, advice_path, (uintmax_t)f->ino,
			 (intmax_t)f->size, (intmax_t)f->mtime.tv_sec,
			 f->mtime.tv_nsec, f->why ? f->why : "parsed");
	else
		log_flag(SELECT_TYPE, "%s: file %s changed: %s", plugin_type,
			 advice_path, f->why);
}

/* The user's hint: CLAVIS_CLASS=devil|turtle in the job's SPANK job environment. */
static clavis_class_t _job_hint(job_record_t *job_ptr)
{
	uint32_t i;

	for (i = 0; i < job_ptr->spank_job_env_size; i++) {
		if (!xstrcmp(job_ptr->spank_job_env[i], CLASS_ENV "devil"))
			return ADV_CLASS_DEVIL;
		if (!xstrcmp(job_ptr->spank_job_env[i], CLASS_ENV "turtle"))
			return ADV_CLASS_TURTLE;
	}
	return ADV_CLASS_UNKNOWN;
}

/* RET 1 if the job is treated as a devil: by its hint when it has one, else by the
 * class the advice remembers for its application (user id and job name). */
static int _job_is_devil(const clavis_advice_t *adv, job_record_t *job_ptr,
			 clavis_class_t hint)
{
	char key[CLAVIS_APP_KEY_SIZE];
	const clavis_advice_app_t *app;

	if (hint != ADV_CLASS_UNKNOWN)
		return hint == ADV_CLASS_DEVIL;
	if (clavis_app_key(key, sizeof(key), job_ptr->user_id, job_ptr->name) < 0)
		return 0;
	if (!(app = clavis_advice_find_app(adv, key)))
		return 0;
	log_flag(SELECT_TYPE, "%s: %pJ: application %s remembered as %s",
		 plugin_type, job_ptr, key,
		 app->app_class == ADV_CLASS_DEVIL ? "devil" : "turtle");
	return app->app_class == ADV_CLASS_DEVIL;
}

/* The advice entry of every candidate node, shared by both narrowed sets: the one
 * of the last job test while the advice is the same change `seq` (a comparison of
 * the name), else a lookup. The caller xfree()s c->in (c->entry is `entries`). */
static void _cands(const clavis_advice_t *adv, unsigned long seq,
		   bitstr_t *bitmap, clavis_cands_t *c)
{
	unsigned char *in;
	int i;

	c->n = (size_t)node_record_count;
	if (!entries || entries_n != c->n || entries_seq != seq) {
		xfree(entries);
		entries = xcalloc(c->n + 1, sizeof(*entries));
		entries_n = c->n;
		entries_seq = seq;
	}
	in = xcalloc(c->n + 1, sizeof(*in));
	for (i = 0; i < node_record_count; i++) {
		if (!bit_test(bitmap, i))
			continue;
		in[i] = 1;
		entries[i] = CLAVIS_NODE(i) ?
			clavis_advice_recall(adv, entries[i], CLAVIS_NODE(i)->name) :
			NULL;
	}
	c->entry = entries;
	c->in = in;
}

/*
 * `bitmap` narrowed for a job (clavis_narrow): a devil drops the hosts running a
 * devil (and with `strict` also the hosts the advice cannot vouch for), a multi-node
 * job keeps the best rack. RET the set, or NULL if it is not narrower or too small.
 */
static bitstr_t *_narrowed(const clavis_advice_t *adv, const clavis_cands_t *c,
			   bitstr_t *bitmap, uint32_t min_nodes, int devil,
			   int strict)
{
	unsigned char *out = xcalloc(c->n + 1, sizeof(*out));
	bitstr_t *bm = NULL;
	size_t i;

	if (clavis_narrow(adv, c, min_nodes, devil, strict, out)) {
		bm = bit_copy(bitmap);
		for (i = 0; i < c->n; i++)
			if (c->in[i] && !out[i])
				bit_clear(bm, (bitoff_t)i);
	}
	xfree(out);
	return bm;
}

/*
 * The advised candidate sets for a job, best first, into sets[0..1] (NULL when the
 * advice says nothing for it: then the caller uses the unmodified set). A devil job
 * first tries the devil-free hosts, then every host running no devil (hosts of unknown
 * contention included: the advice fails open there). Called with the advice held.
 */
static void _advised_by(const clavis_advice_t *adv, unsigned long seq,
			job_record_t *job_ptr, bitstr_t *bitmap,
			uint32_t min_nodes, clavis_class_t hint,
			bitstr_t *sets[2])
{
	clavis_cands_t c;
	int devil;

	devil = _job_is_devil(adv, job_ptr, hint);
	if (!devil && min_nodes < 2)
		return;
	_cands(adv, seq, bitmap, &c);
	sets[1] = _narrowed(adv, &c, bitmap, min_nodes, devil, 0);
	if (devil)
		sets[0] = _narrowed(adv, &c, bitmap, min_nodes, devil, 1);
	if (sets[0] && sets[1] && bit_equal(sets[0], sets[1]))
		FREE_NULL_BITMAP(sets[0]);
	xfree(c.in);
}

/* As _advised_by, holding the watcher's current advice (memory only: the file is
 * the watcher thread's) for as long as the sets take. */
static void _advised(job_record_t *job_ptr, bitstr_t *bitmap,
		     uint32_t min_nodes, bitstr_t *sets[2])
{
	clavis_class_t hint = _job_hint(job_ptr);
	const clavis_advice_t *adv;
	unsigned long seq;
	int rc;

	sets[0] = sets[1] = NULL;
	/* the advice has nothing to say about a turtle-hinted single-node job */
	if (hint == ADV_CLASS_TURTLE && min_nodes < 2)
		return;
	if ((rc = clavis_advice_hold(&advice_watch, _now(), &adv, &seq))) {
		error("%s: %pJ: advice not held: %s: placing as cons_tres",
		      plugin_type, job_ptr, slurm_strerror(rc));
		return;
	}
	if (adv)
		_advised_by(adv, seq, job_ptr, bitmap, min_nodes, hint, sets);
	if ((rc = clavis_advice_release(&advice_watch)))
		error("%s: %pJ: advice not released: %s", plugin_type, job_ptr,
		      slurm_strerror(rc));
}

/*
 * The advice watcher: set up in every process (job test holds it), its thread
 * started only in slurmctld. A failure is logged and leaves no advice: the plugin
 * then places as cons_tres (fail open), it does not stop slurmctld.
 */
static void _watch_start(void)
{
	int rc;

	rc = clavis_advice_watch_init(&advice_watch, advice_path,
				      advice_max_bytes, ADVICE_POLL_MS, _told,
				      NULL);
	if (!rc && running_in_slurmctld())
		rc = clavis_advice_watch_start(&advice_watch);
	if (rc)
		error("%s: advice watcher not started: %s: placing as cons_tres",
		      plugin_type, slurm_strerror(rc));
}

/* Required plugin symbols */

/* RET SLURM_SUCCESS, or SLURM_ERROR when select/cons_tres cannot be loaded. */
extern int init(void)
{
	if (sizeof(cons_syms) != sizeof(cons)) {
		error("%s: symbol table does not match slurm_select_ops_t of Slurm %s",
		      plugin_type, SLURM_VERSION_STRING);
		return SLURM_ERROR;
	}
	cons_ctx = plugin_context_create("select", "select/cons_tres",
					 (void **)&cons, cons_syms,
					 sizeof(cons_syms));
	if (!cons_ctx) {
		error("%s: cannot load select/cons_tres", plugin_type);
		return SLURM_ERROR;
	}
	_read_conf();
	if (!advice_path)
		advice_path = xstrdup(DEFAULT_ADVICE);
	_watch_start();
	verbose("%s loaded (advice %s, at most %zu bytes)", plugin_type,
		advice_path, advice_max_bytes);
	return SLURM_SUCCESS;
}

extern int fini(void)
{
	int rc = SLURM_SUCCESS;

	/* the thread first: it logs with advice_path */
	clavis_advice_watch_fini(&advice_watch);
	xfree(entries);
	entries_n = 0;
	if (cons_ctx)
		rc = plugin_context_destroy(cons_ctx);
	cons_ctx = NULL;
	xfree(advice_path);
	return rc;
}

/* The select API: every call but job test goes to cons_tres as is. */
#define FORWARD(ret, name, params, args)        \
	extern ret select_p_##name params;      \
	extern ret select_p_##name params       \
	{                                       \
		return cons.name args;          \
	}
CLAVIS_SELECT_OPS(FORWARD, OPS_NONE)

/*
 * IN/OUT job_ptr, bitmap (usable nodes in, chosen nodes out), IN the rest: as
 * cons_tres. In RUN_NOW mode without preemption and without required nodes, first
 * the advised subsets, best first, then (if they fail) the unmodified set.
 * RET cons_tres's answer for the set it finally got.
 */
extern int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap,
			     uint32_t min_nodes, uint32_t max_nodes,
			     uint32_t req_nodes, uint16_t mode,
			     clavis_list_t preemptee_candidates,
			     clavis_list_t *preemptee_job_list,
			     CLAVIS_JOB_TEST_EXTRA_PARAMS);
extern int select_p_job_test(job_record_t *job_ptr, bitstr_t *bitmap,
			     uint32_t min_nodes, uint32_t max_nodes,
			     uint32_t req_nodes, uint16_t mode,
			     clavis_list_t preemptee_candidates,
			     clavis_list_t *preemptee_job_list,
			     CLAVIS_JOB_TEST_EXTRA_PARAMS)
{
	bitstr_t *sets[2] = { NULL, NULL };
	int i, rc = SLURM_ERROR;

	if ((mode & SELECT_MODE_BASE) == SELECT_MODE_RUN_NOW &&
	    !preemptee_candidates && job_ptr->details &&
	    !job_ptr->details->req_node_bitmap)
		_advised(job_ptr, bitmap, min_nodes, sets);
	for (i = 0; i < 2; i++) {
		if (!sets[i] || rc == SLURM_SUCCESS)
			continue;
		rc = cons.job_test(job_ptr, sets[i], min_nodes, max_nodes,
				   req_nodes, mode, preemptee_candidates,
				   preemptee_job_list,
				   CLAVIS_JOB_TEST_EXTRA_ARGS);
		if (rc == SLURM_SUCCESS) {
			log_flag(SELECT_TYPE, "%s: %pJ placed on advised nodes%s",
				 plugin_type, job_ptr,
				 i == 0 ? " (devil-free hosts)" : "");
			bit_copybits(bitmap, sets[i]);
		} else {
			log_flag(SELECT_TYPE, "%s: %pJ: advised nodes%s cannot take it now",
				 plugin_type, job_ptr,
				 i == 0 ? " (devil-free hosts)" : "");
		}
	}
	FREE_NULL_BITMAP(sets[0]);
	FREE_NULL_BITMAP(sets[1]);
	if (rc == SLURM_SUCCESS)
		return rc;
	return cons.job_test(job_ptr, bitmap, min_nodes, max_nodes, req_nodes,
			     mode, preemptee_candidates, preemptee_job_list,
			     CLAVIS_JOB_TEST_EXTRA_ARGS);
}
