/* calib_run.h: one calibration run (method.md section 3), the engine behind the calibrate tool.
 *
 * Loads the SLM and the LLM, tokenises the corpora, cuts the window plan, runs both models
 * over each window of this shard (colsum and lastrow for every layer, no LM head), adds every
 * window to a calibration accumulator (calib.h) and writes it atomically every
 * `checkpoint_every` windows and at the end.
 * When the two tokenizers differ, the corpora are tokenised by the LLM (the plan below is over
 * its tokens), the SLM tokenises each window's text itself, and the heads are compared over
 * the positions both tokenizations split alike (align.h, xtok.h; the file's "alignment").
 *
 * Window plan (deterministic; see docs/calibration.md):
 *   - each corpus is tokenised on its own (BOS first when the tokenizer adds one) and the
 *     token streams are concatenated in the given order;
 *   - a window never straddles two corpora: corpus c offers M_c = floor(n_c / W) slots, slot s
 *     being its tokens [s*W, (s+1)*W);
 *   - `windows` N (0 = every slot) is shared out as evenly as possible across the corpora,
 *     in corpus order, one at a time, skipping a corpus whose slots are used up, so N_c <= M_c;
 *   - within corpus c, window k of N_c takes slot floor(k * M_c / N_c) (evenly spaced; with
 *     N_c = M_c that is slot k) or, when `seed` != 0, the k-th smallest of N_c slots drawn
 *     without replacement by a splitmix64-seeded partial Fisher-Yates shuffle;
 *   - windows are numbered corpus by corpus: 0 .. N_0-1 for corpus 0, then corpus 1, ...
 *   - shard i of n does the windows w with w % n == i; `only_corpus` c >= 0 restricts the run
 *     to corpus c's windows (files of different corpora of one plan merge exactly);
 *   - a run takes its windows in ascending order, or with `until_stable` in a spread order:
 *     windows pair up within their corpus (k = 2p, 2p + 1, one of each half), and pairs go
 *     by the bit-reversed p, corpora taking turns, so any prefix samples every corpus
 *     evenly across its length. The sums do not depend on the order.
 * The result of a resumed run equals an uninterrupted one bit for bit (fixed-point sums). */
#ifndef SKV_CALIB_RUN_H
#define SKV_CALIB_RUN_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include "calib.h"

typedef struct {
    const char *slm_path, *llm_path;
    const char *corpora[SKV_CALIB_MAX_CORPORA];       /* files */
    const char *corpus_names[SKV_CALIB_MAX_CORPORA];  /* recorded names (NULL: file name) */
    int n_corpora;
    const char *out;           /* calibration file written (and read back with resume) */
    int window;                /* W (default 512 when 0) */
    int windows;               /* N planned over all shards (0 = every slot) */
    int topk;                  /* K (0 = 10% of W, at least 1) */
    int sinks;                 /* keys dropped (-1 = default 4) */
    bool normalized;
    unsigned metrics;          /* SKV_METRIC_BIT mask (0 = jaccard, cosine, rowcos) */
    uint64_t seed;             /* 0 = evenly spaced windows */
    int shard_index, shard_count;   /* shard i of n (n = 0 means 1) */
    int only_corpus;           /* -1 = all corpora */
    bool resume;               /* continue `out` if it exists */
    bool overwrite;            /* replace an existing `out` when not resuming */
    int checkpoint_every;      /* windows between checkpoints (0 = default 8) */
    int threads;               /* OpenMP threads (0 = leave as is) */
    bool progress;             /* progress line on stderr */
    int max_new_windows;       /* stop (after a checkpoint) once this many windows were added (0 = no limit) */
    int kill_after;            /* test hook: raise SIGKILL after this many windows' forward passes (0 = off) */
    FILE *stability_log;       /* with until_stable and no progress line: a line per check here */
    double until_stable;       /* > 0: stop at a checkpoint once the mapping is stable, i.e.
                                  the split-half loss (calibrate/stability.h; jaccard, else the
                                  first metric; depth by eps 0.01) is <= this and each half
                                  has SKV_STABLE_MIN_HALF windows. The windows then run in a
                                  spread order (below) so that every prefix covers the plan */
} skv_calib_run_opts;

#define SKV_STABLE_MIN_HALF 4

typedef struct {
    int planned;               /* windows in the whole plan */
    int mine;                  /* windows of this shard / corpus */
    int skipped;               /* already present (resume) */
    int done;                  /* added by this run */
    int64_t tokens;            /* tokens processed by this run (per model; two tokenizers: the LLM's) */
    int64_t corpus_tokens[SKV_CALIB_MAX_CORPORA];
    int corpus_windows[SKV_CALIB_MAX_CORPORA];  /* windows of the plan per corpus */
    double t_total;            /* seconds of the window loop (both models, similarities, checkpoints) */
    double t_fwd_slm, t_fwd_llm;  /* seconds inside skv_forward */
    double t_sim;              /* seconds in packing + similarities + accumulation */
    double t_ckpt;             /* seconds writing checkpoints */
    double t_setup;            /* loading, fingerprints, tokenising */
    int stable_checks;         /* stability measured at checkpoints (until_stable) */
    bool stable;               /* stopped because the mapping was stable */
    double stable_loss, stable_agree;   /* the last measurement (NaN: none) */
} skv_calib_run_stats;

void skv_calib_run_defaults(skv_calib_run_opts *o);
/* 0 on success, -1 + skv_last_error(). stats may be NULL. */
int skv_calib_run(const skv_calib_run_opts *o, skv_calib_run_stats *stats);

/* The window plan alone (for tests and docs): slot start offsets into the concatenated
 * token stream. counts (n_corpora) tokens per corpus; writes starts (N) and corpus (N);
 * returns N (windows planned, <= requested when the corpora are short) or -1. */
int skv_calib_plan(const int64_t *counts, int n_corpora, int W, int windows, uint64_t seed,
                   int64_t *starts, int *corpus, int cap);

#endif
