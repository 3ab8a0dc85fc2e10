/*
 * clavis_slurm_compat.h - every Slurm version difference select_clavis.so knows of
 * (22.05: Debian 12; 24.11: Debian 13).
 *
 * Per supported major: where the select interface lives, and one table of its ops in
 * the order Slurm links them (the slurm_select_ops_t of that version), each as
 *   F(return type, symbol suffix after "select_p_", (parameters), (arguments))
 * for a call forwarded to cons_tres as is, and T(...) for job test, which
 * select_clavis.c writes itself. The ops struct, the symbol names and the forwarders
 * are all generated from the one table (select_clavis.c), so a version is one table.
 * Another version stops the build here with a message rather than producing a plugin
 * whose forwarders do not match its Slurm.
 */
#ifndef CLAVIS_SLURM_COMPAT_H
#define CLAVIS_SLURM_COMPAT_H

#include "slurm/slurm_version.h"

#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(22, 5, 0) && \
	SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22, 6, 0)

#include "src/common/select.h"

#define CLAVIS_JOB_TEST_EXTRA_PARAMS bitstr_t *exc_core_bitmap
#define CLAVIS_JOB_TEST_EXTRA_ARGS exc_core_bitmap
typedef List clavis_list_t;
#define CLAVIS_SLURM_OPS_T slurm_select_ops_t

#define CLAVIS_SELECT_OPS(F, T)                                                \
	F(int, state_save, (char *dir_name), (dir_name))                       \
	F(int, state_restore, (char *dir_name), (dir_name))                    \
	F(int, job_init, (List job_list), (job_list))                          \
	F(int, node_init, (void), ())                                          \
	T(int, job_test, (job_record_t *, bitstr_t *, uint32_t, uint32_t,      \
			  uint32_t, uint16_t, List, List *, bitstr_t *), ())   \
	F(int, job_begin, (job_record_t *job_ptr), (job_ptr))                  \
	F(int, job_ready, (job_record_t *job_ptr), (job_ptr))                  \
	F(int, job_expand, (job_record_t *from, job_record_t *to), (from, to)) \
	F(int, job_resized, (job_record_t *job_ptr, node_record_t *node_ptr),  \
	  (job_ptr, node_ptr))                                                 \
	F(int, job_signal, (job_record_t *job_ptr, int sig), (job_ptr, sig))   \
	F(int, job_fini, (job_record_t *job_ptr), (job_ptr))                   \
	F(int, job_suspend, (job_record_t *job_ptr, bool indf),                \
	  (job_ptr, indf))                                                     \
	F(int, job_resume, (job_record_t *job_ptr, bool indf), (job_ptr, indf)) \
	F(bitstr_t *, step_pick_nodes,                                         \
	  (job_record_t *job_ptr, select_jobinfo_t *info, uint32_t count,      \
	   bitstr_t **avail),                                                  \
	  (job_ptr, info, count, avail))                                       \
	F(int, step_start, (step_record_t *step_ptr), (step_ptr))              \
	F(int, step_finish, (step_record_t *step_ptr, bool killing),           \
	  (step_ptr, killing))                                                 \
	F(int, select_nodeinfo_pack,                                           \
	  (select_nodeinfo_t *info, buf_t *buf, uint16_t ver),                 \
	  (info, buf, ver))                                                    \
	F(int, select_nodeinfo_unpack,                                         \
	  (select_nodeinfo_t **info, buf_t *buf, uint16_t ver),                \
	  (info, buf, ver))                                                    \
	F(select_nodeinfo_t *, select_nodeinfo_alloc, (void), ())              \
	F(int, select_nodeinfo_free, (select_nodeinfo_t *info), (info))        \
	F(int, select_nodeinfo_set_all, (void), ())                            \
	F(int, select_nodeinfo_set, (job_record_t *job_ptr), (job_ptr))        \
	F(int, select_nodeinfo_get,                                            \
	  (select_nodeinfo_t *info, enum select_nodedata_type dinfo,           \
	   enum node_states state, void *data),                                \
	  (info, dinfo, state, data))                                          \
	F(select_jobinfo_t *, select_jobinfo_alloc, (void), ())                \
	F(int, select_jobinfo_free, (select_jobinfo_t *info), (info))          \
	F(int, select_jobinfo_set,                                             \
	  (select_jobinfo_t *info, enum select_jobdata_type type, void *data), \
	  (info, type, data))                                                  \
	F(int, select_jobinfo_get,                                             \
	  (select_jobinfo_t *info, enum select_jobdata_type type, void *data), \
	  (info, type, data))                                                  \
	F(select_jobinfo_t *, select_jobinfo_copy, (select_jobinfo_t *info),   \
	  (info))                                                              \
	F(int, select_jobinfo_pack,                                            \
	  (select_jobinfo_t *info, buf_t *buf, uint16_t ver),                  \
	  (info, buf, ver))                                                    \
	F(int, select_jobinfo_unpack,                                          \
	  (select_jobinfo_t **info, buf_t *buf, uint16_t ver),                 \
	  (info, buf, ver))                                                    \
	F(char *, select_jobinfo_sprint,                                       \
	  (select_jobinfo_t *info, char *buf, size_t size, int mode),          \
	  (info, buf, size, mode))                                             \
	F(char *, select_jobinfo_xstrdup, (select_jobinfo_t *info, int mode),  \
	  (info, mode))                                                        \
	F(int, get_info_from_plugin,                                           \
	  (enum select_plugindata_info dinfo, job_record_t *job_ptr,           \
	   void *data),                                                        \
	  (dinfo, job_ptr, data))                                              \
	F(int, update_node_config, (int index), (index))                       \
	F(int, reconfigure, (void), ())                                        \
	F(bitstr_t *, resv_test,                                               \
	  (resv_desc_msg_t *resv, uint32_t count, bitstr_t *avail,             \
	   bitstr_t **core),                                                   \
	  (resv, count, avail, core))

#elif SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0) && \
	SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(24, 12, 0)

/* 24.11: the interface moved (23.02); list_t; job test takes the reservation's
 * excluded TRES and will-run data; job_signal, jobinfo_sprint/xstrdup,
 * update_node_config and resv_test are gone; the ops struct is private to
 * src/interfaces/select.c, so there is nothing to assert the table against. */
#include "src/interfaces/select.h"

#define CLAVIS_JOB_TEST_EXTRA_PARAMS \
	resv_exc_t *resv_exc_ptr, will_run_data_t *will_run_ptr
#define CLAVIS_JOB_TEST_EXTRA_ARGS resv_exc_ptr, will_run_ptr
typedef list_t *clavis_list_t;

#define CLAVIS_SELECT_OPS(F, T)                                                \
	F(int, state_save, (char *dir_name), (dir_name))                       \
	F(int, state_restore, (char *dir_name), (dir_name))                    \
	F(int, job_init, (list_t *job_list), (job_list))                       \
	F(int, node_init, (void), ())                                          \
	T(int, job_test, (job_record_t *, bitstr_t *, uint32_t, uint32_t,      \
			  uint32_t, uint16_t, list_t *, list_t **,             \
			  resv_exc_t *, will_run_data_t *), ())                \
	F(int, job_begin, (job_record_t *job_ptr), (job_ptr))                  \
	F(int, job_ready, (job_record_t *job_ptr), (job_ptr))                  \
	F(int, job_expand, (job_record_t *from, job_record_t *to), (from, to)) \
	F(int, job_resized, (job_record_t *job_ptr, node_record_t *node_ptr),  \
	  (job_ptr, node_ptr))                                                 \
	F(int, job_fini, (job_record_t *job_ptr), (job_ptr))                   \
	F(int, job_suspend, (job_record_t *job_ptr, bool indf),                \
	  (job_ptr, indf))                                                     \
	F(int, job_resume, (job_record_t *job_ptr, bool indf), (job_ptr, indf)) \
	F(bitstr_t *, step_pick_nodes,                                         \
	  (job_record_t *job_ptr, select_jobinfo_t *info, uint32_t count,      \
	   bitstr_t **avail),                                                  \
	  (job_ptr, info, count, avail))                                       \
	F(int, step_start, (step_record_t *step_ptr), (step_ptr))              \
	F(int, step_finish, (step_record_t *step_ptr, bool killing),           \
	  (step_ptr, killing))                                                 \
	F(int, select_nodeinfo_pack,                                           \
	  (select_nodeinfo_t *info, buf_t *buf, uint16_t ver),                 \
	  (info, buf, ver))                                                    \
	F(int, select_nodeinfo_unpack,                                         \
	  (select_nodeinfo_t **info, buf_t *buf, uint16_t ver),                \
	  (info, buf, ver))                                                    \
	F(select_nodeinfo_t *, select_nodeinfo_alloc, (void), ())              \
	F(int, select_nodeinfo_free, (select_nodeinfo_t *info), (info))        \
	F(int, select_nodeinfo_set_all, (void), ())                            \
	F(int, select_nodeinfo_set, (job_record_t *job_ptr), (job_ptr))        \
	F(int, select_nodeinfo_get,                                            \
	  (select_nodeinfo_t *info, enum select_nodedata_type dinfo,           \
	   enum node_states state, void *data),                                \
	  (info, dinfo, state, data))                                          \
	F(select_jobinfo_t *, select_jobinfo_alloc, (void), ())                \
	F(int, select_jobinfo_free, (select_jobinfo_t *info), (info))          \
	F(int, select_jobinfo_set,                                             \
	  (select_jobinfo_t *info, enum select_jobdata_type type, void *data), \
	  (info, type, data))                                                  \
	F(int, select_jobinfo_get,                                             \
	  (select_jobinfo_t *info, enum select_jobdata_type type, void *data), \
	  (info, type, data))                                                  \
	F(select_jobinfo_t *, select_jobinfo_copy, (select_jobinfo_t *info),   \
	  (info))                                                              \
	F(int, select_jobinfo_pack,                                            \
	  (select_jobinfo_t *info, buf_t *buf, uint16_t ver),                  \
	  (info, buf, ver))                                                    \
	F(int, select_jobinfo_unpack,                                          \
	  (select_jobinfo_t **info, buf_t *buf, uint16_t ver),                 \
	  (info, buf, ver))                                                    \
	F(int, get_info_from_plugin,                                           \
	  (enum select_plugindata_info dinfo, job_record_t *job_ptr,           \
	   void *data),                                                        \
	  (dinfo, job_ptr, data))                                              \
	F(int, reconfigure, (void), ())

#else
#error "select_clavis: only Slurm 22.05 and 24.11 are ported (see slurm-plugin/README.md, 'Building for another Slurm version')"
#endif

/* The node table: an array of pointers (holes are NULL) since 22.05. */
#define CLAVIS_NODE(i) (node_record_table_ptr[(i)])

#endif /* CLAVIS_SLURM_COMPAT_H */
