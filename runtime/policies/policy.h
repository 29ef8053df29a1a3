/* policy.h: the KV-cache policy interface of the compressed runtime (llama2.c spirit: a
 * struct of function pointers, one file per policy in runtime/policies/, one line per policy
 * in the registry, registry.c).
 *
 * A policy is described once (skv_policy_desc): its name, a one-line summary, what it keeps
 * and when to choose it (for users), what it needs and does (capabilities), and its options
 * as a table (name, type, default, range, help). Everything that names a policy option is
 * generated from those tables: the CLI flags (`smallkv generate --heavy 0.3`), the C API's
 * and the evaluation's policy specs ("h2o:heavy=0.3", "smallkv:score=acc:nosal"), their
 * canonical labels, the --help text and the user page docs/policies.md.
 * No code outside this folder compares a policy's name: it asks for capabilities.
 *
 * The session drives a policy instance through these calls:
 *   slm_attach      when the session's companion model (below) has new rows to read: at
 *                   creation, after a fork, and for each row of a speculative verify pass;
 *   before_compress once after each prefill's forward, with every layer's column sums
 *                   (SmallKV: online head matching);
 *   on_prefill      once per layer after each exact prefill, with that prefill's attention
 *                   statistics (accumulated column sums, the last-window sums);
 *   select          per lane (layer, KV head) before every attention over the hot tier: which
 *                   positions the hot tier holds with K+V and which with V only, seeing the
 *                   layer's current query; the session then evicts / restores (kvcache.h);
 *   on_step         per lane after a decode attention: the hot slots' probabilities summed
 *                   over the group's query heads (H2O-style accumulation), and per head when
 *                   the policy asked for them (wants_head_p);
 *   after_step      after each decode step.
 * A policy only chooses positions; storage, budgets and accounting belong to the session and
 * the cache, so every policy is measured the same way. A policy that scores with a small
 * model (SmallKV) only says what it needs (skv_slm_need); the session runs that model
 * (runtime/session/slm_guide.h) over every token before the LLM, forks, derives and reports
 * it, and drafts with it, on every backend alike.
 * Budget: a lane's budget is in cost units (a K+V token costs 1, a V-only token 1/2); a policy
 * must return sets with n_kv + n_v / 2 <= budget (or everything when the budget covers the
 * whole sequence). */
#ifndef SKV_POLICY_H
#define SKV_POLICY_H
#include <stdbool.h>
#include <stddef.h>
#include "kernels/cpu/compensate.h"
#include "runtime/kv/kvcache.h"
#include "runtime/kv/select.h"
#include "runtime/engine/forward.h"

/* ------------------------------------------------------------------ options */

typedef enum { SKV_OPT_INT = 0, SKV_OPT_FLOAT, SKV_OPT_BOOL, SKV_OPT_ENUM } skv_opt_type;

enum {
    SKV_OPT_BARE = 1,          /* in specs an enum value or a true flag may stand alone:
                                  "smallkv:mass" (combine=mass), "smallkv:nosal" */
    SKV_OPT_LABEL_ALWAYS = 2,  /* the canonical label names it even at its default */
    SKV_OPT_HIDDEN = 4,        /* for tests and experiments: not in --help */
    SKV_OPT_LABEL_WITH_PREV = 8,   /* labels name it only while the option before it in the
                                      table is named (a setting that only means something
                                      with that one: smallkv's knorm after slmkv) */
};

/* One option of a policy. Values live in the policy's own options struct (at `off`): int
 * for INT and ENUM (the index into `values`), float for FLOAT, bool for BOOL. */
typedef struct {
    const char *name;          /* canonical: spec "name=value", CLI --name (_ written -) */
    const char *alias;         /* shorter name in specs and labels ("nosal", "depth"), or NULL */
    skv_opt_type type;
    size_t off;                /* offsetof the value in the policy's options struct */
    double def, lo, hi;        /* default and inclusive range (ENUM, BOOL: def only) */
    const char *const *values; /* ENUM: the value names, NULL-terminated */
    unsigned flags;            /* SKV_OPT_* */
    double label_ref;          /* labels name the option when its value differs from this
                                  (equal to def unless an older default is kept for labels:
                                  then a label read back as a spec gives def, not label_ref) */
    const char *help;
} skv_opt_desc;

/* ------------------------------------------------------------------ capabilities */

enum {
    SKV_POLICY_KEEPS_ALL = 1,   /* no budget: every token stays hot (the reference) */
    SKV_POLICY_NEEDS_SLM = 2,   /* runs a small model of the same tokenizer beside the LLM */
    SKV_POLICY_COLD_TIER = 4,   /* keeps every K/V in a host cold tier and restores from it */
    SKV_POLICY_GPU = 8,         /* can decode on the CUDA backend (runtime/backend/) */
    SKV_POLICY_QUERY = 16,      /* reads the current query to select */
    SKV_POLICY_MARGINAL = 32,   /* keeps some tokens as V only, with compensated weights */
    SKV_POLICY_PER_HEAD = 64,   /* can select per attention (query) head (skv_policy_env.per_head) */
};

/* The small model's attention rows a policy reads (the session's SLM guide, or rows a unit
 * test attaches): per SLM layer < slm_layers, (slm_heads, stride) floats. */
typedef struct {
    const int *map;            /* [L*H] LLM flat head -> SLM flat head (layer*h + head), or NULL */
    int slm_heads;             /* h: SLM query heads per layer */
    int slm_layers;
    const float *const *colsum;   /* [slm_layers] -> (h, stride): accumulated column sums */
    const float *const *lastrow;  /* ... this step's attention row */
    int stride;
} skv_slm_view;

/* What a policy asks of the session's small model (depth 0: none). */
typedef struct {
    int depth;                 /* SLM layers to run (early stop) */
    double compress;           /* its cache H2O-compressed to this fraction (0 or 1: full) */
    bool as_session;           /* run it as a session even with its full cache (tests) */
    int sinks, reduce;         /* the compressed cache's H2O: sinks, skv_reduce */
    bool draft_colsum;         /* keep the column sums while it drafts (scores that read them) */
    bool rows_only;            /* the policy reads this step's rows only: no column sums are
                                  kept (a full-cache SLM; the view's colsum is NULL) */
    int k_bits, v_bits;        /* 0: its cache in the session's KV type; 8 / 4: keys (values)
                                  as quantised rows (kernels/cpu/kvquant.h; a full cache, CPU
                                  only; both or neither) */
    bool plain_keys;           /* quantised keys stored without their normalisation (an
                                  ablation; kvquant.h) */
} skv_slm_need;

/* What a policy may use besides its options: the models and the head mapping. */
typedef struct {
    const skv_model *llm;
    const skv_model *slm;   /* NULL without a small model */
    const int *map;                /* [L*H] LLM flat head -> SLM flat head, or NULL */
    int map_depth;                 /* SLM layers the mapping's profile chose (0: unknown) */
    int max_ctx, T_max;
    bool kv_f16;
    bool prefill_base;             /* a prefill base (session.h): only prepare the state that
                                      derived sessions copy, never select */
    bool per_head;                 /* selection granularity: each query head keeps its own set
                                      (skv_select_io.head_keep), the lane stores their union;
                                      else one set per KV head */
} skv_policy_env;

typedef struct skv_policy skv_policy;

typedef struct {
    const char *name;
    const char *summary;           /* one line for --help */
    const char *keeps;             /* for users (docs/policies.md): what the hot tier keeps,
                                      one or two sentences */
    const char *choose;            /* ... and when to choose it (from docs/results.md) */
    unsigned caps;                 /* SKV_POLICY_* */
    const skv_opt_desc *opts;      /* its options, in label order */
    int n_opts;
    size_t opts_size;              /* bytes of its options struct (<= SKV_POLICY_OPTS_MAX) */
    /* Fill p->st, the hooks and the per-instance fields below from p->opts and env.
     * -1 + error. */
    int (*init)(skv_policy *p, const skv_policy_env *env);
    /* Whether these options need a head mapping (skv_policy_env.map); NULL: exactly when the
     * policy needs the SLM. */
    bool (*needs_map)(const void *opts);
} skv_policy_desc;

#define SKV_POLICY_OPTS_MAX 256

/* A parsed policy spec: the policy and its option values (defaults where not given). Plain
 * data, copied by value. */
typedef struct {
    const skv_policy_desc *desc;
    _Alignas(16) unsigned char opts[SKV_POLICY_OPTS_MAX];
} skv_policy_spec;

/* ------------------------------------------------------------------ registry, specs */

/* The registered policies (registry.c), in a fixed order. */
int skv_policy_count(void);
const skv_policy_desc *skv_policy_at(int i);
/* NULL (no error) for an unknown name. */
const skv_policy_desc *skv_policy_find(const char *name);
/* "full, streamingllm, ..." */
const char *skv_policy_names(void);

/* Parse "name[:opt[=value]]..." (':' or ',' between options; an option given twice keeps
 * the last) into *out with every other option at its default. -1 + error naming the bad
 * part and what is allowed. */
int skv_policy_spec_parse(const char *spec, skv_policy_spec *out);
/* The spec of a policy at its defaults. -1 + error for an unknown name. */
int skv_policy_spec_default(const char *name, skv_policy_spec *out);
/* Set one option by name or alias; value NULL means "true" for a flag (or a bare enum value
 * given as name). -1 + error. */
int skv_policy_spec_set(skv_policy_spec *s, const char *name, const char *value);
/* Canonical label "name:opt:opt=value..." (options in table order, each when it differs
 * from its label reference or is always labelled). */
void skv_policy_spec_label(const skv_policy_spec *s, char *buf, size_t n);
/* The option of any registered policy with this name or alias (first found), or NULL. */
const skv_opt_desc *skv_policy_any_option(const char *name);
/* 0 when some policy has option name and value (NULL: a flag, or a bare enum value given as
 * name) is valid for it, else -1 + error ("unknown combine 'x' (sum, mass, renorm)"). */
int skv_policy_option_check(const char *name, const char *value);
/* Option values by descriptor. */
double skv_opt_get(const skv_policy_spec *s, const skv_opt_desc *d);
/* Whether spec's policy needs a head mapping (see needs_map). */
bool skv_policy_spec_needs_map(const skv_policy_spec *s);
/* Every policy, its capabilities and options as --help text (static storage). */
const char *skv_policy_help(void);
/* The user page docs/policies.md (markdown.c): every policy, what it keeps, its memory
 * tiers, when to choose it, and its options as tables (static storage). NULL + error when
 * the page's example specs no longer parse or it outgrew its buffer. */
const char *skv_policy_markdown(void);

/* ------------------------------------------------------------------ hooks' arguments */

/* What a policy's scoring of a first prefill leaves for the next session derived from the
 * same prefill base (kvzip: its reconstruction scores, the same at every budget), so an
 * evaluation's cells at several budgets score the context once. Kept by the base (freed with
 * it through free); a policy recognises its own by owner. */
typedef struct skv_prefill_memo skv_prefill_memo;
struct skv_prefill_memo {
    const char *owner;    /* the policy that wrote it (its descriptor's name) */
    void (*free)(skv_prefill_memo *m);
};

/* What a policy sees at the end of a prefill, for one layer. */
typedef struct {
    int layer, H, Hkv;
    int n0, n;            /* this prefill covered positions n0 .. n-1 */
    int stride;           /* row stride of colsum / obs */
    const float *colsum;  /* (H, stride): sum over the prefill's rows of A[row][k], k < n */
    const float *obs;     /* (H, stride): sum over the last obs_rows rows, or NULL */
    int obs_rows;
    const skv_kvcache *cache;   /* cold tier holds positions < n (EMS reads K/V) */
    double budget;        /* the session's (mean) lane budget at length n, cost units */
    /* --- kvzip (kvzip.c) --- */
    const int *ids;       /* the token ids of positions n0 .. n-1 (a derived session: the base's) */
    skv_prefill_memo **memo;   /* a derived session: its prefill base's memo slot; else NULL */
} skv_prefill_info;

/* One lane's selection request and answer. */
typedef struct {
    int layer, kvh, lane;
    int n;                /* sequence length, including the token(s) being added */
    int n0;               /* positions >= n0 have never been offered to select before */
    double budget;        /* this lane's budget in cost units (session's budget x lane share) */
    const skv_kvcache *cache;   /* current hot set (positions) */
    const float *q;       /* (H, d): this layer's current query, every query head, rotated (the
                             decode token's; at a prefill's compression the last prompt
                             token's); NULL unless the policy has SKV_POLICY_QUERY */
    int d;                /* head dim of q */
    /* outputs, capacity n each */
    unsigned char *head_keep;   /* per-head granularity only (else NULL): (g, n), the policy sets
                                   1 where query head t keeps position k as K+V (zeroed by the
                                   session); kv_pos is then the union of the heads' sets */
    int *kv_pos; int n_kv;
    int *v_pos;  int n_v;
    /* scratch, capacity n each (skv_select_scored uses itmp and mark) */
    int *itmp; float *ftmp; unsigned char *mark;
} skv_select_io;

/* What a policy holds besides the LLM's cache (SmallKV: its small model), for the
 * session's memory and time report. */
typedef struct {
    size_t model_bytes;   /* weights of the extra model (whole file + decode copies) */
    size_t cache_bytes;   /* its K/V in use */
    size_t score_bytes;   /* attention-score buffers the policy reads */
    size_t hot_meta_bytes;   /* metadata the policy keeps beside the LLM's hot tier to select
                                (Quest: page key bounds); the report counts it as hot bytes */
    double seconds;       /* wall time spent in the extra model so far */
    /* --- kvzip (kvzip_pass.c): its scoring passes, extra forwards over the prefill --- */
    double pass_seconds;  /* wall time of every scoring pass so far */
    size_t pass_peak_bytes;  /* the most transient bytes one pass held */
} skv_policy_mem;

struct skv_policy {
    const skv_policy_desc *desc;
    const char *name;     /* desc->name */
    void *opts;           /* the policy's options struct (a copy of the spec's) */
    int L, H, Hkv;        /* LLM shape */
    void *st;             /* policy state */
    /* what the session must provide; set by init, a policy may change them as it goes */
    bool wants_colsum;    /* prefill column sums for on_prefill / before_compress */
    int obs_rows;         /* rows of the prefill's last-window sums for on_prefill (0: none) */
    bool wants_step;      /* on_step after decode attention */
    bool wants_head_p;    /* ... with per-head probabilities */
    bool uses_cold;       /* restores from the cold tier (else cold is only prefill scratch,
                             released after each prefill: evicted tokens are gone) */
    skv_combine combine;  /* how marginal V-only tokens enter the attention */
    skv_slm_need slm;     /* the small model it scores with (depth 0: none) */
    int (*slm_attach)(skv_policy *p, const skv_slm_view *v);   /* its rows (v->map unused) */
    int (*before_compress)(skv_policy *p, float *const *colsum, int stride, int n0, int n);
    int (*on_prefill)(skv_policy *p, const skv_prefill_info *pi);
    int (*select)(skv_policy *p, skv_select_io *io);
    /* slot_p: (n) summed over the group; head_p: (g, n) per head or NULL */
    void (*on_step)(skv_policy *p, int layer, int kvh, const int *slot_pos, const float *slot_p,
                    const float *head_p, int n_slots);
    int (*after_step)(skv_policy *p, int n);
    /* share of the session budget for a lane (1 = even split; PyramidKV / Ada-KV vary it).
     * NULL = 1. */
    double (*lane_share)(const skv_policy *p, int layer, int kvh, double budget);
    /* marginal weights for a lane: pm (g, n_v) at the V-only slots and the attention mass w
     * (g) on the K+V slots, for query heads kvh*g .. NULL for policies without V-only. */
    void (*marginal)(const skv_policy *p, int layer, int kvh, const int *pos_kv, int n_kv,
                     const int *pos_v, int n_v, float *pm, float *w);
    /* EMS: after the session applied a lane's selection, rewrite the kept slots' K/V and
     * multiplicities with the merged values select planned. NULL for other policies. */
    int (*after_apply)(skv_policy *p, skv_kvcache *c, int layer, int kvh);
    int (*fork)(const skv_policy *src, skv_policy *dst);   /* copy st into dst (dst = *src done) */
    void (*mem)(const skv_policy *p, skv_policy_mem *m);
    /* The LLM head -> SLM head mapping in use ([L*H]), NULL when none (yet). */
    const int *(*head_map)(const skv_policy *p);
    void (*free_state)(skv_policy *p);
};

/* An instance for an LLM of L layers, H query and Hkv KV heads. NULL + error. */
skv_policy *skv_policy_new(const skv_policy_spec *spec, const skv_policy_env *env, int L, int H, int Hkv);
/* The same from a spec string (tests, tools). */
skv_policy *skv_policy_new_str(const char *spec, const skv_policy_env *env, int L, int H, int Hkv);
skv_policy *skv_policy_fork(const skv_policy *p);
void skv_policy_free(skv_policy *p);
static inline bool skv_policy_has(const skv_policy *p, unsigned cap) { return (p->desc->caps & cap) != 0; }

/* ------------------------------------------------------------------ shared building blocks (policy.c) */

/* Option table rows every score-based policy shares (their struct must have these fields). */
extern const char *const skv_reduce_names[];   /* "sum", "mean", "max" */
#define SKV_OPT_SINKS(T) {"sinks", NULL, SKV_OPT_INT, offsetof(T, sinks), 4, 0, 4096, NULL, 0, 4, \
                          "always-kept first tokens (attention sinks)"}
#define SKV_OPT_WINDOW(T) {"window", NULL, SKV_OPT_INT, offsetof(T, window), 32, 1, 4096, NULL, 0, 32, \
                           "observation window: the last prompt queries whose attention ranks the prompt"}
#define SKV_OPT_REDUCE(T) {"reduce", NULL, SKV_OPT_ENUM, offsetof(T, reduce), 0, 0, 0, skv_reduce_names, 0, 0, \
                           "query heads -> KV head scores: sum, mean or max"}

/* Tokens of K+V affordable with a budget: floor(budget), at least 1, at most n. */
int skv_budget_tokens(double budget, int n);
/* Keep what the hot tier holds as K+V (every position before n0) plus every new position
 * (n0 .. n-1): a policy that compresses its prefill once and then appends. */
void skv_select_keep_hot(skv_select_io *io);
/* Keep everything as K+V (positions 0..n-1). */
void skv_select_all(skv_select_io *io);
/* The standard score selection: K+V for sinks + the last `recent` positions + the top
 * `keep - sinks - recent` others by score among candidates (positions already hot as K+V
 * or >= io->n0 when `permanent`, else all). Output sorted by position. */
void skv_select_scored(skv_select_io *io, const float *score, int keep, int recent, bool permanent, int sinks);

/* skv_select_scored's rule (permanent) for one set into out (n_out, capacity n), the
 * positions that may be kept marked in alive (n; a set of one query head: its own earlier
 * set plus the new positions). */
void skv_select_scored_alive(skv_select_io *io, int *out, int *n_out, const float *score, int keep, int recent,
                             const unsigned char *alive, int sinks);

/* H2O accumulation (h2o.c), shared with SmallKV's no-saliency ablation. */
int skv_h2o_accumulate_prefill(skv_lanescore *acc, const skv_policy *p, skv_reduce reduce, const skv_prefill_info *pi);
void skv_h2o_accumulate_step(skv_lanescore *acc, const skv_policy *p, skv_reduce reduce, int layer, int kvh,
                             const int *pos, const float *prob, int n);

#endif
