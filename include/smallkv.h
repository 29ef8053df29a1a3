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
#include <stdio.h>

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
/* A whole conversation in the model's chat template, ending with the assistant turn's
 * header (ready to generate the reply). Roles "system", "user", "assistant"; a family
 * whose template always has a system turn (Qwen2.5, SmolLM2) gets its default one when
 * msgs[0] is not a system message. Same return as smallkv_tokenize; -1 + error (no
 * messages, unknown role, NULL content, a template we do not know). */
typedef struct { const char *role; const char *content; } smallkv_message;
int smallkv_tokenize_messages(const smallkv_pair *p, const smallkv_message *msgs, int n, int *ids, int cap);
/* Bytes of one token (not NUL-terminated; may be a partial UTF-8 sequence). */
const char *smallkv_token_bytes(const smallkv_pair *p, int id, size_t *len);
int smallkv_is_stop(const smallkv_pair *p, int id);

/* ---- sessions ---- */

/* One policy option set by name on top of smallkv_options.policy (see policy_opts). */
typedef struct { const char *name; const char *value; } smallkv_policy_opt;

typedef struct {
    const char *policy;    /* a policy spec "name[:option=value...]" (':' or ','), e.g. "h2o",
                              "h2o:heavy=0.3", "smallkv:score=acc:nosal"; default "full".
                              smallkv_policies_help() lists every policy and its options */
    const smallkv_policy_opt *policy_opts;   /* n_policy_opts options set on top of policy's
                              spec, in order (a later one wins): name as in the spec or a CLI
                              flag ('-' and '_' alike, short names too), value NULL for an on/off
                              flag. Programs pass their option flags here rather than writing
                              them into a spec string */
    int n_policy_opts;
    int policy_opts_lenient; /* 1: an option the policy does not have is skipped (flags shared by
                              all policies, as the CLI's); 0: it is an error */
    double budget;         /* hot-tier size as a fraction of the sequence, in (0, 1] */
    int per_head;          /* 1: selection per attention (query) head, each head its own set and
                              the hot tier the union per KV head (h2o and smallkv; the CPU only);
                              0 (the default): one set per KV head */
    int budget_prompt;     /* 1: the budget is a fraction of the prompt length at the first
                              compression, fixed from then on (H2O's generation code); 0 (the
                              default): of the current length at every step */
    int max_ctx;           /* longest sequence (0: min(model context, 4096)) */
    int kv_f32;            /* 1: fp32 K/V storage (default fp16) */
    const char *device;    /* "cpu" (default) or "cuda" (a build with make CUDA=1 and a GPU):
                              with cuda the whole sequence runs on the GPU for the full cache;
                              a compressed policy prefills on the CPU and decodes on the GPU */
    int draft;             /* speculative decoding in smallkv_generate: the pair's SLM drafts up
                              to this many tokens and the LLM checks them in one pass; greedy,
                              the tokens are those of plain greedy decoding, exactly (sampled:
                              see temperature). 0: off.
                              Needs an SLM and the CPU. With policy smallkv the SLM that picks
                              the hot set drafts in that same pass (a profile's mapping, its
                              full cache); online matching and slm_budget < 1 are refused */
    int draft_adapt;       /* 1: draft is the most a round drafts; each round drafts 2 more after
                              every draft was accepted, 1 fewer after a rejection (at least 1) */
    int draft_vocab;       /* the SLM drafts from the logits of token ids < draft_vocab only
                              (rounded up to a multiple of 8; 0, the default: every token). Its
                              LM head then reads that share of its rows: byte-level BPE ids
                              follow merge order, so a prefix holds the frequent tokens (for
                              Qwen2.5, ids < 32768 are 96 % of code and math tokens, 91 % of
                              wikitext). Output unchanged; only acceptance and speed move */
    float temperature;     /* smallkv_generate: 0 (default) greedy; > 0 samples softmax(logits /
                              temperature). With draft the SLM samples its proposals at the same
                              temperature and speculative sampling's accept / resample rule keeps
                              the output distributed as the LLM's own samples */
    unsigned long long seed; /* the sampler's seed (0: a fixed one); forks continue the stream */
} smallkv_options;

void smallkv_options_default(smallkv_options *o);

/* NULL + error (unknown policy or option, bad option value, budget outside (0, 1], a policy
 * that runs the SLM without one, or without a profile unless its mapping is "online", a
 * device this build or machine lacks). */
smallkv_session *smallkv_session_new(smallkv_pair *p, const smallkv_options *o);

/* ---- policies ---- */

/* "full, streamingllm, h2o, ..." */
const char *smallkv_policy_list(void);
/* Every policy with a one-line summary, what it needs, and its options (name, values,
 * default, help), as text for a --help. */
const char *smallkv_policies_help(void);
/* The same as a markdown page for users (docs/policies.md is its output): every policy,
 * what it keeps, its memory tiers, when to choose it, and a table of its options. NULL +
 * error in the unlikely case the page cannot be built. */
const char *smallkv_policies_markdown(void);
/* What a policy spec needs, checked without models: 0 and *needs (may be NULL) set from
 * SMALLKV_NEEDS_*, or -1 + error (unknown policy or option, bad value). */
enum { SMALLKV_NEEDS_SLM = 1, SMALLKV_NEEDS_PROFILE = 2, SMALLKV_NO_BUDGET = 4, SMALLKV_NO_GPU = 8 };
int smallkv_policy_check(const char *spec, unsigned *needs);
/* The same for whole options, checked without models: the policy spec with policy_opts
 * applied, and the budget. 0 and *needs (may be NULL) set; *skipped (may be NULL) gets bit i
 * set for each policy_opts entry i < 64 that a lenient check skipped; *label (may be NULL)
 * the canonical label of the result ("h2o:heavy=0.3", static storage until the next call).
 * -1 + error (unknown policy, option or value, budget outside (0, 1]). */
int smallkv_options_check(const smallkv_options *o, unsigned *needs, unsigned long long *skipped, const char **label);
/* For programs that turn their own flags into a spec: 1 when some policy has an option
 * called name ('-' and '_' alike; its short name also counts), with *takes_value 0 for an
 * on/off flag and 1 otherwise; 0 when none has. */
int smallkv_policy_option(const char *name, int *takes_value);
/* Then: -1 + error when value (NULL for a flag) is not valid for that option or the policy
 * spec is unknown; else 1 when spec's policy has the option, 0 when it has not. */
int smallkv_policy_option_check(const char *spec, const char *name, const char *value);
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

/* Generation from the current logits (greedy, or sampled at the options' temperature): up to
 * max_tokens tokens, each appended with smallkv_step after cb saw it, but the last one (the one
 * at max_tokens or the one cb stopped at: the sequence ends with the token before it, and a
 * caller who continues steps it). cb(id, bytes, len, user) returning nonzero stops early;
 * a stop token (end of turn / text) ends generation without being passed to cb.
 * Returns the number of tokens generated, -1 + error. */
/* The next token from the current logits: greedy at temperature 0, else a sample of
 * softmax(logits / temperature) drawn with *rng (any nonzero seed; updated). The first
 * call after a request start records TTFT. -1 + error before any logits. */
int smallkv_sample(smallkv_session *s, float temperature, unsigned long long *rng);
typedef int (*smallkv_token_cb)(int id, const char *bytes, size_t len, void *user);
int smallkv_generate(smallkv_session *s, int max_tokens, smallkv_token_cb cb, void *user);
/* smallkv_generate for n sessions of one LLM together (n <= 64), each from its own logits to
 * its own stop, max_tokens or callback stop; cb(seq, id, bytes, len, user) names the sequence
 * (0 .. n-1); produced[i]: the tokens sequence i generated. Without drafts every step is one
 * smallkv_step_batch over the live sequences. With drafts (all sessions must draft, or none)
 * each round's verify rows of all sequences, each with its own number of drafts and its own
 * acceptance, go through the LLM in one pass (in several when they would reach the exact
 * path's row limit), so the weights are read once per round for every sequence. Each
 * sequence gets exactly the tokens and final state smallkv_generate gives it alone (with
 * drafts: always; without: while fewer sequences step together than the model's exact-row
 * limit, forward.h). 0, or -1 + error (then the sessions are in an undefined state). */
typedef int (*smallkv_batch_token_cb)(int seq, int id, const char *bytes, size_t len, void *user);
int smallkv_generate_batch(smallkv_session **ss, int n, int max_tokens, smallkv_batch_token_cb cb, void *user,
                           int *produced);
/* smallkv_generate's temperature and seed from now on (a request on a fork of a shared
 * context, for instance); as in smallkv_options. -1 + error (temperature outside [0, 100]). */
int smallkv_set_sampling(smallkv_session *s, float temperature, unsigned long long seed);

typedef struct {
    /* memory, bytes */
    size_t hot_bytes;        /* LLM hot tier in use (the budgeted part, with a policy's selection
                                metadata kept beside it: Quest's page key bounds) */
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
    /* speculative decoding (smallkv_options.draft; 0 without) */
    int spec_passes;         /* LLM verify passes */
    int spec_drafted;        /* tokens the SLM proposed */
    int spec_accepted;       /* of those, tokens the LLM agreed with */
    double spec_draft_seconds;    /* of decode_seconds: the SLM proposing, */
    double spec_fork_seconds;     /* copying the LLM session to verify on (compressing policies), */
    double spec_verify_seconds;   /* the LLM's verify passes, */
    double spec_rollback_seconds; /* accepting and rolling back (truncate or replay) */
    /* a policy's scoring passes over the prompt (KVzip's context reconstruction; 0 without) */
    double score_pass_seconds;    /* of prefill_seconds: their wall time */
    size_t score_pass_peak_bytes; /* the most transient bytes (activations, K/V) one pass held */
} smallkv_stats;

void smallkv_get_stats(const smallkv_session *s, smallkv_stats *st);
/* The device the session decodes on ("cpu", "cuda"). */
const char *smallkv_session_device(const smallkv_session *s);
/* Zero the speed counters and start a new request clock (for TTFT), e.g. when a question
 * arrives as decode steps over an already compressed context. */
void smallkv_stats_reset(smallkv_session *s);

/* ---- process-wide settings ---- */

/* How a prefill's attention runs on the CPU, for every session of the process:
 *   "exact" (default)  fp32 arithmetic on the fp16 cache: each prompt row gets a decode step's bits
 *   "bf16"             opt-in, for long prompts (time to first token): Q K^T and P V as bf16
 *                      tile products with an online softmax (AMX-BF16), 4-6x faster attention;
 *                      prompt rows no longer equal decode steps (perplexity moves by < 0.1 %
 *                      on the models we ship; docs/performance.md). Short blocks (speculative
 *                      verify passes, batched decode), accumulated-score requests (H2O-style
 *                      policies' prefill) and CPUs without AMX-BF16 keep the exact kernel.
 * 0, or -1 + error for another name. Env SKV_PREFILL_ATTN sets the default. */
int smallkv_set_prefill_attention(const char *mode);
/* what a long prefill runs now: "bf16" only when set and the CPU has AMX-BF16, else "exact" */
const char *smallkv_prefill_attention(void);

/* ---- whole-file tools ---- */

/* A model's configuration, weight storage (types, bytes, decode layouts) and KV bytes per
 * token, as `smallkv info` prints it. -1 + error when it does not load. */
int smallkv_print_model_info(const char *path, FILE *out);
/* A profile's models, calibration, mapping metric, depth and curve (`smallkv profile show`). */
int smallkv_print_profile(const char *path, FILE *out);

/* Perplexity of a text file: tokenised as plain text (no BOS, special-token text not
 * parsed), cut to max_tokens, split into non-overlapping windows of ctx tokens (a shorter
 * tail dropped; a file shorter than one window is one window); each window starts with an
 * empty cache and every position after its first is scored. */
typedef struct {
    int ctx;               /* window (default 512) */
    int max_tokens;        /* 0: all */
    int kv_f32;
    const char *device;    /* "cpu" (default) or "cuda" */
    void (*progress)(int windows_done, int windows, double tokens_per_s, double ppl_so_far, void *user);
    void *user;
} smallkv_ppl_options;
typedef struct {
    double ppl;
    int windows, window;
    long scored;
    double seconds;
} smallkv_ppl_result;
void smallkv_ppl_options_default(smallkv_ppl_options *o);
int smallkv_perplexity(const char *model, const char *text_file, const smallkv_ppl_options *o, smallkv_ppl_result *r);

#ifdef __cplusplus
}
#endif
#endif
