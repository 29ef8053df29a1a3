/* eval_cfg.h: what the files of `smallkv eval` share (runtime/cli/eval*.c): the run's
 * configuration and loaded state (eval_cfg), and the helpers every task runner uses to key,
 * take and record its units. Internal to the CLI; the harness's library side is eval/. */
#ifndef SKV_CLI_EVAL_CFG_H
#define SKV_CLI_EVAL_CFG_H
#include "eval/longctx.h"
#include "eval/runner.h"
#include "eval/store.h"
#include "runtime/api/api.h"
#include "runtime/format/profile.h"
#include "runtime/model/fingerprint.h"
#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#define MAXL 64

typedef struct {
    const char *task, *llm_path, *slm_path, *profile_path, *out, *data_dir, *kv;
    const char *gemm;              /* NULL until --gemm; then "int8" or "float" (matmul.h modes) */
    const char *device;            /* the cells' device: "cpu" or "cuda" */
    char defaults[512];            /* "name=value,..." policy option defaults from the flags */
    char *pol_specs[MAXL]; int n_pols;
    double budgets[MAXL]; int n_budgets;
    /* a policy's own budgets (`--policies quest@0.165/0.211`): pol_budgets[i] for pols[i] when
     * pol_n_budgets[i] > 0, else the --budgets list */
    double pol_budgets[MAXL][MAXL]; int pol_n_budgets[MAXL];
    char *corpora[MAXL]; int n_corpora;
    int lengths[MAXL]; int n_lengths;
    int depths[MAXL]; int n_depths;
    char *bbh_tasks[MAXL]; int n_bbh;
    int limit, tokens, prefill, max_new, threads, batch;
    int variants;                  /* passkey units per (length, depth) */
    int draft;                     /* generation tasks: speculative decoding with K drafts (0: off) */
    bool chat;                     /* gsm8k, bbh, niah, longbench: the prompt as one user turn of the chat template */
    bool chat_turns;               /* gsm8k, bbh: each few-shot example its own user/assistant turns */
    int niah_kinds[SKV_NIAH_KINDS], n_niah_kinds, needles;   /* niah */
    int pad_to;                    /* gsm8k, bbh: prompt tokens with pg-essays padding (0: none) */
    char *subsets[MAXL]; int n_subsets;   /* longbench */
    int max_length;                /* longbench: middle truncation to this many tokens */
    /* sharding (MPI): rank of size; done: what OUT.json and every shard file held at the start
     * (size > 1; store is then this rank's shard file); pending units seen so far, and their
     * "task|unit|" prefixes in order (the merge's order) */
    int rank, size;
    skv_eval_store *done;
    int n_pending;
    char **order; int n_order, cap_order;
    int before;                    /* records at the start */
    const char *slm_depths, *write_profile;   /* depth task */
    double max_kl_rise;
    /* loaded */
    skv_model *llm, *slm;
    smallkv_pair *pair;            /* the sessions' view of llm and slm (borrowed) */
    skv_profile *prof;
    skv_model_fp fp_llm, fp_slm;
    char prof_sha[65];
    skv_eval_pol pols[MAXL];
    skv_eval_ctx ctx;
    skv_eval_store *store;
    char git[64], command[2048];
    /* progress: work_total is every unit's; work_seen what the units met so far hold (any
     * rank's), work_others what other ranks took of it; work_done includes work_skipped
     * (records that existed at the start), which the ETA's rate leaves out */
    double t_start, work_total, work_done, work_skipped, work_seen, work_others, unit_work;
    const char *unit_name;
} eval_cfg;

/* eval_records.c: argument lists, progress, record keys and records */
int eval_split(const char *s, char **out, int max);   /* comma list into heap strings; -1 past max */
int eval_split_num(const char *s, double *out, int max, double lo, double hi);   /* -1 if out of [lo, hi] */
void eval_git_commit(char *out, size_t n);            /* HEAD (or $SKV_GIT_COMMIT), "-dirty" if code changed */
void eval_show_progress(eval_cfg *c, double unit_frac);
void eval_skip_work(eval_cfg *c, double work);        /* work found done (resumed): counted, not timed */
void eval_fid_progress(void *u, long done, long total);   /* a progress callback; u is the eval_cfg */
bool eval_runs_slm(const skv_eval_pol *p);
void eval_make_key(const eval_cfg *c, const char *unit, const skv_eval_pol *p, double budget, char *key, size_t n);
bool eval_have(const eval_cfg *c, const char *key);
/* the budgets policy p runs at (its own list, else --budgets; a policy that keeps every token:
 * the first only) into *b; returns how many */
int eval_pol_budgets(const eval_cfg *c, const skv_eval_pol *p, const double **b);
/* cells a unit runs for the policies pl[0..npl) */
int eval_n_cells(const eval_cfg *c, const skv_eval_pol *const *pl, int npl);
/* Split a --policies entry "SPEC[@B1/B2...]" in place: the spec stays in s, the budgets go to
 * out; returns how many (0: none given), -1 on a bad list */
int eval_split_pol_budgets(char *s, double *out, int max);
bool eval_take_unit(eval_cfg *c, const char *unit, const skv_eval_pol *const *pl, int npl, double work);
int eval_grid_pols(const eval_cfg *c, const skv_eval_pol **pl);
void eval_add_unit_time(cJSON *r, double seconds, int cells);
cJSON *eval_base_record(const eval_cfg *c, const char *key, const skv_eval_pol *p, double budget, cJSON *unit);
void eval_add_mem(cJSON *r, const skv_session_mem *m);

/* the task runners: 0, or non-zero with the message printed */
int eval_run_depth(eval_cfg *c);                          /* eval_fidelity.c */
int eval_run_fidelity(eval_cfg *c, bool calibration);
int eval_run_passkey(eval_cfg *c);                        /* eval_generate.c */
int eval_run_text_task(eval_cfg *c, int kind);            /* gsm8k, bbh */
int eval_run_niah(eval_cfg *c);
int eval_run_longbench(eval_cfg *c);

/* eval_shards.c: the RESULTS.json.rankK files of a sharded run */
int eval_shard_files(const char *out, char ***names);
void eval_free_names(char **names, int n);
int eval_merge_shards(const char *out, char *const *order, int n_order, int *merged_records);

#endif
