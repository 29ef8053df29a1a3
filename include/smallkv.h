/* smallkv.h: the public C API of smallkv (CPU runtime, compressed KV cache, SmallKV).
 *
 * Three opaque handles:
 *   smallkv_pair     an LLM, optionally an SLM (small model of the same tokenizer) and a
 *                    profile (profiles/FORMAT.md) saying which SLM head stands in for each
 *                    LLM head and how deep the SLM runs; the profile's model fingerprints
 *                    are checked against the loaded models;
 *   smallkv_session  one sequence over the pair: a KV-cache policy at a budget; prefill,
 *                    step, fork (a copy that continues identically, sharing the cold tier),
 *                    generate with a token callback, statistics;
 * Errors: functions that can fail return NULL or -1; smallkv_last_error() then says why
 * (a thread-local message naming the file or the option). Nothing aborts on bad input.
 * Threads: one handle per thread at a time; the pair may be shared by sessions of one
 * thread. Weights are memory-mapped read-only. Link with `pkg-config --cflags --libs smallkv`
 * after `make install` (--static for the archive), or in the tree with build/libsmallkv.a and
 * -fopenmp -lzstd -lcjson -lm. See docs/api.md and examples/generate_pair.c. */
#ifndef SMALLKV_H
#define SMALLKV_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct smallkv_pair smallkv_pair;
typedef struct smallkv_session smallkv_session;

/* The message of the last failure on this thread. */
const char *smallkv_last_error(void);

/* ---- models ---- */

/* Load the LLM (GGUF file or Hugging Face directory) and, when slm_path is not NULL, the
 * SLM. The SLM must share the LLM's vocabulary. NULL + error. */
smallkv_pair *smallkv_pair_load(const char *llm_path, const char *slm_path);
/* Attach a profile; -1 + error when it does not load, or was made for other models (the
 * message says which model and which field differs) or the pair has no SLM. */
int smallkv_pair_load_profile(smallkv_pair *p, const char *profile_path);
void smallkv_pair_free(smallkv_pair *p);

int smallkv_vocab(const smallkv_pair *p);
int smallkv_context_length(const smallkv_pair *p);   /* the LLM's trained context */

/* Tokenise text for the LLM. flags: SMALLKV_TOK_BOS prepends BOS when the model wants
 * one; SMALLKV_TOK_CHAT wraps text as a user turn in the model's chat template (special
 * tokens parsed). Writes up to cap ids; returns the number needed (call with ids NULL,
 * cap 0 to size), -1 + error. */
enum { SMALLKV_TOK_BOS = 1, SMALLKV_TOK_CHAT = 2 };
int smallkv_tokenize(const smallkv_pair *p, const char *text, int flags, int *ids, int cap);
/* The same for a chat turn with an optional system message (NULL: the template's). */
int smallkv_tokenize_chat(const smallkv_pair *p, const char *system, const char *user, int *ids, int cap);
/* Bytes of one token (not NUL-terminated; may be a partial UTF-8 sequence). */
const char *smallkv_token_bytes(const smallkv_pair *p, int id, size_t *len);
int smallkv_is_stop(const smallkv_pair *p, int id);

/* ---- sessions ---- */

typedef struct {
    const char *policy;    /* full, streamingllm, h2o, snapkv, pyramidkv, adakv, ems, smallkv */
    double budget;         /* hot-tier size as a fraction of the sequence, in (0, 1] */
    int max_ctx;           /* longest sequence (0: min(model context, 4096)) */
    int kv_f32;            /* 1: fp32 K/V storage (default fp16) */
    /* policy options (defaults from smallkv_options_default) */
    int sinks;             /* always-kept first tokens (4) */
    int window;            /* SnapKV / EMS observation window (32) */
    int pool;              /* SnapKV max-pool kernel (7) */
    double heavy;          /* H2O heavy-hitter share of the budget (0.5) */
    double ems_gamma;      /* EMS candidate multiple (4) */
    double ems_tau;        /* EMS merge threshold (0.6) */
    const char *reduce;    /* query heads -> KV head: "sum" (default), "mean", "max" */
    /* SmallKV */
    const char *combine;   /* "renorm" (default, measured best), "sum", "mass" */
    const char *mapping;   /* "profile" (default; needs smallkv_pair_load_profile) or "online" */
    const char *split;     /* "fixed" (critical:recent:marginal 2:1:2, default) or "adaptive" */
    double recent;         /* recent share weight of the fixed split (1; critical 2, marginal 2) */
    const char *score;     /* token score from the SLM: "now" (this step's attention row; default,
                            * measured best), "acc" (accumulated over the SLM's history, as the
                            * method describes), "mean" (accumulated / rows seen) */
    int no_saliency;       /* ablation: the LLM's own scores, no restores from the cold tier */
    int no_marginal;       /* ablation: no V-only (marginal) tokens */
    int slm_depth;         /* SLM layers to run (0: the profile's depth) */
    double slm_budget;     /* SLM cache compressed by H2O to this fraction (0 or 1: full) */
} smallkv_options;

void smallkv_options_default(smallkv_options *o);

/* NULL + error (unknown policy, budget outside (0, 1], smallkv without an SLM, or
 * without a profile unless mapping is "online", bad option value). */
smallkv_session *smallkv_session_new(smallkv_pair *p, const smallkv_options *o);
void smallkv_session_free(smallkv_session *s);

/* Append n prompt tokens (exact attention, then the policy compresses the cache).
 * -1 + error (empty, longer than max_ctx, token out of range). */
int smallkv_prefill(smallkv_session *s, const int *ids, int n);
/* One decode token appended (a prompt can also enter token by token this way). */
int smallkv_step(smallkv_session *s, int token);
/* One token for each of n sessions of the same pair, decoded together (the weights are
 * read once per step for all of them). -1 + error naming the entry. */
int smallkv_step_batch(smallkv_session **ss, const int *tokens, int n);
/* Logits (vocab) after the last prefill / step; NULL before any. */
const float *smallkv_logits(const smallkv_session *s);
int smallkv_length(const smallkv_session *s);       /* tokens in the sequence */
/* A copy that continues identically (the cold tier shared copy-on-write). NULL + error. */
smallkv_session *smallkv_fork(const smallkv_session *s);

/* Greedy generation from the current logits: up to max_tokens tokens, each appended with
 * smallkv_step after cb saw it. cb(id, bytes, len, user) returning nonzero stops early;
 * a stop token (end of turn / text) ends generation without being passed to cb.
 * Returns the number of tokens generated, -1 + error. */
/* The next token from the current logits: greedy at temperature 0, else a sample of
 * softmax(logits / temperature) drawn with *rng (any nonzero seed; updated). The first
 * call after a request start records TTFT. -1 + error before any logits. */
int smallkv_sample(smallkv_session *s, float temperature, unsigned long long *rng);
typedef int (*smallkv_token_cb)(int id, const char *bytes, size_t len, void *user);
int smallkv_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user);

typedef struct {
    /* memory, bytes */
    size_t hot_bytes;        /* LLM hot tier in use (the budgeted part) */
    size_t cold_bytes;       /* LLM cold tier (SmallKV keeps every K/V here for restores) */
    size_t slm_weight_bytes; /* SLM weights (0 without an SLM) */
    size_t slm_cache_bytes;  /* SLM K/V cache in use */
    size_t slm_score_bytes;  /* SLM attention-score buffers SmallKV reads (column sums, last rows) */
    size_t full_bytes;       /* what the uncompressed LLM cache would take at this length */
    double hot_tokens;       /* tokens held hot per (layer, KV head) lane, mean over lanes
                                (a V-only token counts 1/2) */
    int length;              /* tokens in the sequence */
    /* speed (this session, forks start at zero) */
    int prefill_tokens, decode_tokens;
    double prefill_seconds, decode_seconds;
    double prefill_tps, decode_tps;  /* tokens per second (0 when nothing ran) */
    double ttft;             /* seconds from the request start (the last smallkv_prefill,
                                smallkv_fork or smallkv_stats_reset) to the first token
                                smallkv_generate produced after it, 0 if none */
    double tpot;             /* seconds per decode step */
    int restores;            /* rows promoted from the cold tier (SmallKV) */
} smallkv_stats;

void smallkv_get_stats(const smallkv_session *s, smallkv_stats *st);
/* Zero the speed counters and start a new request clock (for TTFT), e.g. when a question
 * arrives as decode steps over an already compressed context. */
void smallkv_stats_reset(smallkv_session *s);

#ifdef __cplusplus
}
#endif
#endif
