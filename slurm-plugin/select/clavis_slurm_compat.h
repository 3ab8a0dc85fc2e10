/*
 * clavis_slurm_compat.h - every Slurm version difference select_clavis.so knows of.
 *
 * 22.05: the select interface is src/common/select.h, its ops table the one below.
 * 23.02 and later moved it to src/interfaces/select.h and changed the table; they are
 * not ported yet: building against them stops here with a message rather than with a
 * plugin whose forwarders do not match its Slurm.
 */
#ifndef CLAVIS_SLURM_COMPAT_H
#define CLAVIS_SLURM_COMPAT_H

#include "slurm/slurm_version.h"

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0)
#error "select_clavis: Slurm 23.02+ (src/interfaces/select.h) is not ported yet; see slurm-plugin/README.md"
#elif SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22, 5, 0)
#error "select_clavis: Slurm older than 22.05 is not supported"
#endif

#include "src/common/select.h"

/* The symbols of select/cons_tres, in the order of slurm_select_ops_t (22.05). */
#define CLAVIS_SELECT_SYMS                                                     \
	"plugin_id", "select_p_state_save", "select_p_state_restore",          \
		"select_p_job_init", "select_p_node_init",                     \
		"select_p_job_test", "select_p_job_begin",                     \
		"select_p_job_ready", "select_p_job_expand",                   \
		"select_p_job_resized", "select_p_job_signal",                 \
		"select_p_job_fini", "select_p_job_suspend",                   \
		"select_p_job_resume", "select_p_step_pick_nodes",             \
		"select_p_step_start", "select_p_step_finish",                 \
		"select_p_select_nodeinfo_pack",                               \
		"select_p_select_nodeinfo_unpack",                             \
		"select_p_select_nodeinfo_alloc",                              \
		"select_p_select_nodeinfo_free",                               \
		"select_p_select_nodeinfo_set_all",                            \
		"select_p_select_nodeinfo_set",                                \
		"select_p_select_nodeinfo_get",                                \
		"select_p_select_jobinfo_alloc",                               \
		"select_p_select_jobinfo_free",                                \
		"select_p_select_jobinfo_set",                                 \
		"select_p_select_jobinfo_get",                                 \
		"select_p_select_jobinfo_copy",                                \
		"select_p_select_jobinfo_pack",                                \
		"select_p_select_jobinfo_unpack",                              \
		"select_p_select_jobinfo_sprint",                              \
		"select_p_select_jobinfo_xstrdup",                             \
		"select_p_get_info_from_plugin",                               \
		"select_p_update_node_config", "select_p_reconfigure",         \
		"select_p_resv_test"

/* The node table: an array of pointers (holes are NULL) since 22.05. */
#define CLAVIS_NODE(i) (node_record_table_ptr[(i)])

#endif /* CLAVIS_SLURM_COMPAT_H */
