/* runner.h: the evaluation harness's runners over public-API sessions (include/smallkv.h;
 * the few things a cell needs beyond it, from runtime/api/api.h):
 *   policy specs   "name[:mod[:mod...]]", e.g. "h2o", "smallkv:mass:online", parsed into
 *                  a policy spec with a canonical label (the label names the cell);
 *   fidelity       one document, teacher-forced: one exact prefill (a prefill base, see
 *                  api_session_derive) is derived into every cell (each compresses it to its
 *                  policy and budget) and into the full-cache reference; then all step in lock
 *                  step over the rest of the document, batched (smallkv_step_batch), and
 *                  are compared with the reference (the same decode path, so full vs full is
 *                  exact);
 *   generate       the same for one context and many cells: one exact prefill derived into
 *                  every cell, the question fed as decode steps, then greedy decoding of all
 *                  cells together until each stops (stop token / stop callback / max_new);
 *                  with drafts (speculative decoding) each cell alone through smallkv_generate.
 * Cells that cannot be derived (a compressed SLM cache, another observation window, a device
 * other than the CPU) prefill themselves; the cell records say which. */
#ifndef SKV_EVAL_RUN_H
#define SKV_EVAL_RUN_H
#include <stdbool.h>
#include "metrics.h"
#include "runtime/api/api.h"

/* A cell's policy: a spec "name[:opt[=value]]..." (runtime/policies/policy.h: every
 * policy's options by name, short name or bare value, e.g. "smallkv:mass:online:nosal",
 * "h2o:heavy=0.3") parsed with its canonical label, which names the cell in results keys. */
typedef struct {
    char label[128];
    skv_policy_spec spec;
    const int *map;               /* this cell's head mapping [L*H], NULL: the context's */
} skv_eval_pol;

/* Parse spec into *out. defaults (may be NULL): "name=value,..." applied first to the
 * policies that have those options (the others ignore them). -1 + error naming the bad
 * part. */
int skv_eval_pol_parse(const char *spec, const char *defaults, skv_eval_pol *out);
static inline const char *skv_eval_pol_name(const skv_eval_pol *p) { return p->spec.desc->name; }

typedef struct {
    smallkv_pair *pair;           /* the models (api_pair_borrow); the SLM may be absent when no
                                     cell runs one; no profile: the mapping is below */
    const char *device;           /* the cells' device: "cpu" (NULL) or "cuda" (cells there
                                     prefill by themselves: no shared prefill) */
    const int *map;               /* profile map [L*H] or NULL (then smallkv needs :online) */
    int map_depth;                /* the profile's SLM depth (0: none), as the public API uses it */
    bool kv_f16;
    bool budget_prompt;           /* budget base: the prompt length at compression (smallkv.h) */
    bool per_head;                /* selection per attention head (smallkv.h) */
    int T_max;                    /* prefill block (default 256) */
    int batch;                    /* sessions per batched decode step; <= 1: one by one, and
                                     fidelity then times every cell's steps */
} skv_eval_ctx;

/* A session for a policy at a budget (fraction; a policy that keeps everything ignores it)
 * on c's device, drafting up to draft tokens a round (0: none). NULL + error. */
smallkv_session *skv_eval_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx, int draft);

/* The prefill base for cells pols[0..n): run by the first cell policy that needs the SLM
 * (it prepares the SLM, all layers, for the derived cells of its kind), else by full.
 * NULL + error. */
smallkv_session *skv_eval_base(const skv_eval_ctx *c, const skv_eval_pol *const *pols, int n, int max_ctx);
/* A cell's session after the prefill of tokens[0..n_tok): derived from base (may be NULL)
 * when possible (*derived = true), else prefilled by itself. NULL + error. */
smallkv_session *skv_eval_cell_session(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, int max_ctx,
                                       smallkv_session *base, const int *tokens, int n_tok, bool *derived);

/* One fidelity cell: inputs pol/budget; outputs acc, mem (at the last step), seconds. */
typedef struct {
    const skv_eval_pol *pol;
    double budget;
    skv_fid_acc acc;
    skv_session_mem mem;
    double seconds;               /* decode time of this cell (when timed, i.e. c->batch <= 1) */
    bool timed;
    double slm_s;                 /* of seconds, the SLM's part (smallkv) */
    double prefill_s;             /* the shared prefill + this cell's derive (or own prefill) */
    bool shared_prefill;          /* derived from the shared prefill */
    int restores;
    int agree_heads, heads;       /* a policy that maps heads online (SmallKV): LLM heads whose
                                     online map equals c->map (heads = 0 when not applicable) */
    int agree_full;               /* ... equal to map_full (when given) */
} skv_fid_cell;

/* progress(u, done, total): done of total decode steps for this document. */
typedef void (*skv_eval_progress)(void *u, long done, long total);

/* Teacher-forced fidelity of every cell over tokens[0..N): prefill P, then steps over
 * tokens P .. N-2, comparing logits predicting tokens P+1 .. N-1. map_full (may be NULL):
 * the profile's unrestricted map, for the online agreement. -1 + error. */
int skv_eval_fidelity(const skv_eval_ctx *c, const int *tokens, int N, int P, skv_fid_cell *cells, int n_cells,
                      const int *map_full, skv_eval_progress progress, void *u);

typedef bool (*skv_eval_stop)(const char *text, void *u);   /* text generated so far */

typedef struct {
    char *text;                   /* generated text (heap) */
    int n_gen;                    /* tokens generated */
    double prefill_s, decode_s;
    skv_session_mem mem;
    int spec_passes, spec_drafted, spec_accepted;   /* with drafts: LLM verify passes, proposals, accepted */
} skv_gen_out;

typedef struct {
    const skv_eval_pol *pol;      /* in */
    double budget;                /* in */
    skv_gen_out out;              /* out: decode_s is the wall time of all cells together */
    bool shared_prefill;          /* out */
} skv_gen_cell;

/* For every cell: prefill ctx (n_ctx >= 1) once for all, step the question tokens
 * (n_q >= 0), then generate greedily up to max_new tokens; stop(text, u) is asked per cell.
 * -1 + error (no texts left allocated). */
int skv_eval_generate_cells(const skv_eval_ctx *c, skv_gen_cell *cells, int n, const int *ctx, int n_ctx, const int *q,
                            int n_q, int max_new, skv_eval_stop stop, void *u);
/* The same with speculative decoding: the context's SLM drafts up to draft tokens a round
 * (smallkv with its own SLM), smallkv_generate (runtime/api/speculate.c) checks them. Each
 * cell runs alone (its own prefill, no batching, decode_s its own); greedy, so the texts are
 * skv_eval_generate_cells' (the verify pass is exact). -1 + error. */
int skv_eval_generate_draft(const skv_eval_ctx *c, skv_gen_cell *cells, int n, const int *ctx, int n_ctx, const int *q,
                            int n_q, int max_new, skv_eval_stop stop, void *u, int draft);
/* One cell (skv_eval_generate_cells with n = 1). */
int skv_eval_generate(const skv_eval_ctx *c, const skv_eval_pol *p, double budget, const int *ctx, int n_ctx,
                      const int *q, int n_q, int max_new, skv_eval_stop stop, void *u, skv_gen_out *out);

#endif
