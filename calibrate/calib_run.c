/* calib_run.c: one calibration run: models, tokenizer check, corpora, window plan, the window
 * loop over both forward passes (one token stream, or with two tokenizers the LLM's window
 * re-tokenised for the SLM and aligned: cross_window), checkpoints and resume (contract in
 * calib_run.h). */
#include "calib_run.h"
#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "runtime/model/fingerprint.h"
#include "runtime/engine/forward.h"
#include "runtime/model/model.h"
#include "similarity.h"
#include "align.h"
#include "xtok.h"
#include "runtime/tokenizer/tokenizer.h"
#include "common/util.h"
#include "calibrate/mapping.h"
#include "calibrate/stability.h"
#include <math.h>

#define CALIB_TOOL "calibrate 0.1"

void skv_calib_run_defaults(skv_calib_run_opts *o) {
    memset(o, 0, sizeof *o);
    o->window = 512;
    o->sinks = -1;
    o->shard_count = 1;
    o->only_corpus = -1;
    o->checkpoint_every = 8;
}

/* ---- window plan ---- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int skv_calib_plan(const int64_t *counts, int n_corpora, int W, int windows, uint64_t seed,
                   int64_t *starts, int *corpus, int cap) {
    if (W <= 0 || n_corpora <= 0 || n_corpora > SKV_CALIB_MAX_CORPORA || windows < 0)
        return skv_error("window plan: bad arguments (W %d, %d corpora, %d windows)", W, n_corpora, windows);
    int64_t slots[SKV_CALIB_MAX_CORPORA], total = 0;
    int quota[SKV_CALIB_MAX_CORPORA] = {0};
    for (int c = 0; c < n_corpora; c++) { slots[c] = counts[c] / W; total += slots[c]; }
    int64_t want = windows ? windows : total;
    if (want > total) want = total;
    if (want > cap) return skv_error("window plan: %lld windows exceed the limit %d", (long long)want, cap);
    /* share `want` out one at a time, in corpus order, skipping corpora without free slots */
    for (int64_t left = want; left > 0;)
        for (int c = 0; c < n_corpora && left > 0; c++)
            if (quota[c] < slots[c]) { quota[c]++; left--; }
    int n = 0;
    int64_t base = 0;
    for (int c = 0; c < n_corpora; c++) {
        int64_t Mc = slots[c];
        int Nc = quota[c];
        if (Nc > 0 && seed == 0) {
            for (int k = 0; k < Nc; k++) {
                starts[n] = base + ((int64_t)k * Mc / Nc) * W;   /* k < 2^22, Mc < 2^31: no overflow */
                corpus[n++] = c;
            }
        } else if (Nc > 0) {
            int64_t *perm = skv_malloc((size_t)Mc * sizeof *perm, "window shuffle");
            if (!perm) return -1;
            for (int64_t s = 0; s < Mc; s++) perm[s] = s;
            uint64_t st = seed ^ (0x5851f42d4c957f2dull * (uint64_t)(c + 1));
            for (int k = 0; k < Nc; k++) {   /* partial Fisher-Yates: perm[0..Nc) is the sample */
                int64_t j = k + (int64_t)(splitmix64(&st) % (uint64_t)(Mc - k));
                int64_t t = perm[k]; perm[k] = perm[j]; perm[j] = t;
            }
            qsort(perm, (size_t)Nc, sizeof *perm, cmp_i64);
            for (int k = 0; k < Nc; k++) { starts[n] = base + perm[k] * W; corpus[n++] = c; }
            free(perm);
        }
        base += counts[c];
    }
    return n;
}

/* ---- one model's side of a window ---- */

typedef struct {
    skv_model *m;
    skv_state *s;
    int L, H;
    float *colsum_buf, *lastrow_buf;   /* (L, H, W) each */
    float **colsum, **lastrow;         /* [L] views */
    float *F, *R;                      /* (L*H, W - sinks) packed */
} side;

static void side_free(side *sd) {
    skv_state_free(sd->s);
    free(sd->colsum_buf); free(sd->lastrow_buf); free(sd->colsum); free(sd->lastrow);
    free(sd->F); free(sd->R);
    memset(sd, 0, sizeof *sd);
}

static int side_init(side *sd, skv_model *m, int W, int sinks, bool rows) {
    sd->m = m;
    sd->L = m->cfg.n_layer; sd->H = m->cfg.n_head;
    size_t per = (size_t)sd->H * W, all, packed;
    if (!skv_mul_ok(per, (size_t)sd->L, &all) || !skv_mul_ok((size_t)sd->L * sd->H, (size_t)(W - sinks), &packed))
        return skv_error("calibration: buffer size overflow");
    sd->s = skv_state_new(m, W, W, false);
    sd->colsum_buf = skv_malloc(all * sizeof(float), "column sums");
    sd->colsum = skv_malloc((size_t)sd->L * sizeof(float *), "column sum views");
    sd->F = skv_malloc(packed * sizeof(float), "score vectors");
    if (!sd->s || !sd->colsum_buf || !sd->colsum || !sd->F) return -1;
    for (int l = 0; l < sd->L; l++) sd->colsum[l] = sd->colsum_buf + (size_t)l * per;
    if (rows) {
        sd->lastrow_buf = skv_malloc(all * sizeof(float), "last rows");
        sd->lastrow = skv_malloc((size_t)sd->L * sizeof(float *), "last row views");
        sd->R = skv_malloc(packed * sizeof(float), "last-row vectors");
        if (!sd->lastrow_buf || !sd->lastrow || !sd->R) return -1;
        for (int l = 0; l < sd->L; l++) sd->lastrow[l] = sd->lastrow_buf + (size_t)l * per;
    }
    return 0;
}

/* Forward over one window (T = W tokens from a fresh cache), colsum/lastrow for every layer. */
static int side_forward(side *sd, const int *tokens, int W) {
    size_t all = (size_t)sd->L * sd->H * W;
    memset(sd->colsum_buf, 0, all * sizeof(float));
    if (sd->lastrow_buf) memset(sd->lastrow_buf, 0, all * sizeof(float));
    skv_state_reset(sd->s);
    skv_fwd_opts fo = {.logits = SKV_LOGITS_NONE, .colsum = sd->colsum, .lastrow = sd->lastrow};
    return skv_forward(sd->s, tokens, W, &fo);
}

static int side_pack(side *sd, int W, int sinks, bool normalized) {
    if (skv_sim_pack((const float *const *)sd->colsum, sd->L, sd->H, W, W, sinks, normalized, sd->F)) return -1;
    if (sd->R && skv_sim_pack((const float *const *)sd->lastrow, sd->L, sd->H, W, W, sinks, false, sd->R)) return -1;
    return 0;
}

/* ---- corpora ---- */

/* Tokenise one corpus file: heap ids, *n set. */
static int *tokenize_corpus(const skv_tokenizer *t, const char *path, int64_t *n) {
    size_t len = 0;
    char *text = skv_read_file(path, &len);
    if (!text) return NULL;
    if (len == 0) { free(text); skv_error("%s: corpus is empty", path); return NULL; }
    if (len > (size_t)INT32_MAX - 2) { free(text); skv_error("%s: corpus too large (%zu bytes, at most 2 GiB)", path, len); return NULL; }
    int bos = skv_tok_add_bos(t) ? skv_tok_bos(t) : -1;
    int max = (int)len + 1;
    int *ids = skv_malloc((size_t)(max + 1) * sizeof(int), "corpus tokens");
    if (!ids) { free(text); return NULL; }
    int off = bos >= 0 ? 1 : 0;
    if (bos >= 0) ids[0] = bos;
    int got = skv_tokenize(t, text, len, false, ids + off, max);
    if (got > max) {   /* more tokens than bytes cannot happen for byte-level BPE, but be safe */
        int *bigger = realloc(ids, (size_t)(got + 1) * sizeof(int));
        if (!bigger) { free(ids); free(text); skv_error("%s: out of memory for %d tokens", path, got); return NULL; }
        ids = bigger;
        got = skv_tokenize(t, text, len, false, ids + off, got);
    }
    free(text);
    if (got < 0) { free(ids); skv_error_prefix("%s: tokenizing", path); return NULL; }
    if (got == 0) { free(ids); skv_error("%s: corpus contains no tokens", path); return NULL; }
    *n = got + off;
    return ids;
}

/* ---- progress ---- */

static void fmt_dur(double s, char *buf, size_t n) {
    if (s < 0 || s > 1e7) { snprintf(buf, n, "?"); return; }
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(buf, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else if (t >= 60) snprintf(buf, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, n, "%lds", t);
}

static void show_progress(int done, int todo, int64_t tokens, double elapsed, bool final) {
    char eta[32];
    double tps = elapsed > 0 ? tokens / elapsed : 0;
    fmt_dur(done > 0 ? elapsed / done * (todo - done) : -1, eta, sizeof eta);
    fprintf(stderr, "\rcalibrate: window %d/%d (%3.0f%%), %.0f tokens/s, ETA %s   %s", done, todo,
            todo ? 100.0 * done / todo : 100.0, tps, eta, final ? "\n" : "");
    fflush(stderr);
}

/* ---- window order and the stability stop ---- */

static unsigned bit_reverse(unsigned x, int bits) {
    unsigned r = 0;
    for (int b = 0; b < bits; b++) r |= ((x >> b) & 1u) << (bits - 1 - b);
    return r;
}

/* order (N): ascending, or spread (calib_run.h): sort by (bit-reversed pair index within
 * the corpus, corpus, parity). Windows of a corpus are consecutive in the plan. */
static void window_order(const int *wcorpus, int N, bool spread, int *order) {
    for (int w = 0; w < N; w++) order[w] = w;
    if (!spread) return;
    int64_t *key = malloc((size_t)N * sizeof *key);
    if (!key) return;   /* ascending order is correct too, only less spread */
    int first = 0;
    while (first < N) {
        int c = wcorpus[first], n = 0;
        while (first + n < N && wcorpus[first + n] == c) n++;
        int pairs = (n + 1) / 2, bits = 0;
        while ((1 << bits) < pairs) bits++;
        for (int k = 0; k < n; k++)
            /* the pair's bit-reversed index as a 31-bit fraction, then corpus (< 16), then parity */
            key[first + k] = (((int64_t)bit_reverse((unsigned)(k / 2), bits) << (31 - bits)) << 6) |
                             ((int64_t)c << 1) | (k & 1);
        first += n;
    }
    for (int i = 1; i < N; i++) {   /* insertion sort: N is at most a few thousand */
        int w = order[i];
        int j = i - 1;
        while (j >= 0 && key[order[j]] > key[w]) { order[j + 1] = order[j]; j--; }
        order[j + 1] = w;
    }
    free(key);
}

/* Measure the mapping's split-half stability; true when it meets the stop criterion. */
static bool stable_now(const skv_calib *cal, double max_loss, skv_calib_run_stats *st) {
    int64_t odd = skv_calib_odd_windows(cal), even = cal->n_windows - odd;
    if (!cal->half || odd < SKV_STABLE_MIN_HALF || even < SKV_STABLE_MIN_HALF) return false;
    int m = skv_calib_metric_index(cal, SKV_METRIC_JACCARD) >= 0 ? SKV_METRIC_JACCARD : cal->metric_ids[0];
    skv_profile *p = skv_profile_build(cal, m, 0.01, 0, NULL);
    if (!p) return false;
    st->stable_checks++;
    st->stable_agree = p->stability.agree;
    st->stable_loss = p->stability.loss;
    st->stable = p->stability.present && p->stability.loss <= max_loss;
    skv_profile_free(p);
    return st->stable;
}

/* ---- two tokenizers: one window ---- */

/* Token i of ids as the aligner sees it; BOS counts as special only where it was inserted
 * (the first token of a corpus whose tokenizer adds one). */
static skv_align_tok align_tok(const skv_tokenizer *t, int id, bool bos_here) {
    skv_align_tok a = {0};
    a.bytes = skv_token_bytes(t, id, &a.len);
    if (!a.bytes) { a.bytes = ""; a.len = 0; }
    a.special = bos_here && id == skv_tok_bos(t);
    return a;
}

/* The LLM's window tw (W tokens, at_start: first of its corpus) re-tokenised for the SLM,
 * both aligned by text, both models run, scores over matched keys added as window w
 * (xtok.h; docs/calibration.md "Cross-family pairs"). */
static int cross_window(skv_calib *cal, int w, const int *tw, int W, bool at_start, int sinks, bool normalized,
                        const skv_model *slm, const skv_model *llm, skv_xtok_side *xs, skv_xtok_side *xl,
                        skv_calib_run_stats *st) {
    int rc = -1, cap = xs->cap;
    skv_align_tok *al = skv_malloc((size_t)W * sizeof *al, "alignment"), *as = skv_malloc((size_t)cap * sizeof *as, "alignment");
    int *ids = skv_malloc((size_t)cap * sizeof *ids, "SLM window tokens");
    int *pl = skv_malloc((size_t)W * sizeof *pl, "alignment"), *ps = skv_malloc((size_t)W * sizeof *ps, "alignment");
    char *text = NULL;
    if (!al || !as || !ids || !pl || !ps) goto out;
    size_t len = 0;
    bool lbos = at_start && skv_tok_add_bos(llm->tok);
    for (int t = 0; t < W; t++) {
        al[t] = align_tok(llm->tok, tw[t], lbos && t == 0);
        if (!al[t].special) len += al[t].len;
    }
    if (!(text = skv_malloc(len + 1, "window text"))) goto out;
    size_t off = 0;
    for (int t = 0; t < W; t++)
        if (!al[t].special) { memcpy(text + off, al[t].bytes, al[t].len); off += al[t].len; }
    bool sbos = at_start && skv_tok_add_bos(slm->tok);
    int first = sbos ? 1 : 0;
    if (sbos) ids[0] = skv_tok_bos(slm->tok);
    int got = skv_tokenize(slm->tok, text, len, false, ids + first, cap - first);
    if (got < 0) { skv_error_prefix("SLM tokenizing window %d", w); goto out; }
    int Ts = first + (got < cap - first ? got : cap - first);   /* beyond cap: the tail stays unmatched */
    if (Ts < 1) { skv_error("window %d: the SLM tokenizes its text to nothing", w); goto out; }
    for (int t = 0; t < Ts; t++) as[t] = align_tok(slm->tok, ids[t], sbos && t == 0);
    int M = skv_align(al, W, as, Ts, pl, ps);
    if (M < 0) goto out;
    int drop = 0;   /* sinks: the matched keys among the LLM's first `sinks` positions */
    while (drop < M && pl[drop] < sinks) drop++;
    if (M - drop < 1) { skv_error("window %d: no aligned tokens beyond the %d sinks (%d matched)", w, sinks, M); goto out; }
    double t0 = skv_now();
    if (skv_xtok_forward(xs, ids, Ts, ps, M)) { skv_error_prefix("SLM window %d", w); goto out; }
    double t1 = skv_now();
    if (skv_xtok_forward(xl, tw, W, pl, M)) { skv_error_prefix("LLM window %d", w); goto out; }
    double t2 = skv_now();
    st->t_fwd_slm += t1 - t0;
    st->t_fwd_llm += t2 - t1;
    if (skv_xtok_pack(xs, drop, normalized) || skv_xtok_pack(xl, drop, normalized)) goto out;
    if (skv_calib_add_window(cal, w, W, M - drop, xl->F, xs->F, xl->R, xs->R)) goto out;
    st->t_sim += skv_now() - t2;
    cal->align.llm_tokens += W;
    cal->align.slm_tokens += Ts;
    cal->align.matched += M;
    rc = 0;
out:
    free(al); free(as); free(ids); free(pl); free(ps); free(text);
    return rc;
}

/* ---- the run ---- */

int skv_calib_run(const skv_calib_run_opts *o, skv_calib_run_stats *st_out) {
    skv_calib_run_stats st;
    memset(&st, 0, sizeof st);
    double t_start = skv_now();
    const int W = o->window > 0 ? o->window : 512;
    const int sinks = o->sinks >= 0 ? o->sinks : 4;
    const int topk = o->topk > 0 ? o->topk : (W / 10 > 0 ? W / 10 : 1);
    const unsigned metrics = o->metrics ? o->metrics
        : SKV_METRIC_BIT(SKV_METRIC_JACCARD) | SKV_METRIC_BIT(SKV_METRIC_COSINE) | SKV_METRIC_BIT(SKV_METRIC_ROWCOS);
    const int nsh = o->shard_count > 0 ? o->shard_count : 1;
    const int every = o->checkpoint_every > 0 ? o->checkpoint_every : 8;
    const bool rows = (metrics & SKV_METRIC_BIT(SKV_METRIC_ROWCOS)) != 0;

    if (!o->slm_path || !o->llm_path) return skv_error("both --slm and --llm are required");
    if (!o->out) return skv_error("no output file given (-o OUT)");
    if (o->n_corpora <= 0) return skv_error("no corpus given (--corpus FILE)");
    if (o->n_corpora > SKV_CALIB_MAX_CORPORA) return skv_error("%d corpora, at most %d", o->n_corpora, SKV_CALIB_MAX_CORPORA);
    if (sinks >= W - 1) return skv_error("%d sinks leave too few keys in a window of %d", sinks, W);
    if (topk > W - sinks) return skv_error("top-K %d exceeds the %d keys per window", topk, W - sinks);
    if (o->shard_index < 0 || o->shard_index >= nsh) return skv_error("shard %d/%d out of range", o->shard_index, nsh);
    if (o->only_corpus >= o->n_corpora) return skv_error("--only-corpus %d but only %d corpora", o->only_corpus, o->n_corpora);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    if (!(o->until_stable >= 0 && o->until_stable < 1)) return skv_error("until-stable loss %g must be in [0, 1)", o->until_stable);

    int rc = -1;
    skv_model *slm = NULL, *llm = NULL;
    int *tokens = NULL;
    int64_t *starts = NULL;
    int *wcorpus = NULL, *order = NULL;
    skv_calib *cal = NULL, *fresh = NULL;
    side a = {0}, b = {0};   /* a: SLM, b: LLM */
    skv_xtok_side xs = {0}, xl = {0};   /* the same with two tokenizers */
    int64_t cstart[SKV_CALIB_MAX_CORPORA] = {0};   /* each corpus's first token in the stream */
    skv_calib_settings set;
    memset(&set, 0, sizeof set);

    /* corpora readable (stat + content hash) before anything expensive */
    for (int c = 0; c < o->n_corpora; c++) {
        if (skv_corpus_info_from_file(o->corpora[c], o->corpus_names[c], &set.corpora[c])) { skv_error_prefix("corpus unreadable"); goto done; }
        if (set.corpora[c].bytes == 0) { skv_error("%s: corpus is empty", o->corpora[c]); goto done; }
    }
    set.n_corpora = o->n_corpora;

    slm = skv_model_load(o->slm_path);
    if (!slm) { skv_error_prefix("SLM %s", o->slm_path); goto done; }
    llm = skv_model_load(o->llm_path);
    if (!llm) { skv_error_prefix("LLM %s", o->llm_path); goto done; }
    if (!slm->tok || !llm->tok) {
        skv_error("%s: model has no tokenizer (calibration tokenizes text)", !slm->tok ? o->slm_path : o->llm_path);
        goto done;
    }
    /* two tokenizers: windows of the LLM's tokens, re-tokenised for the SLM and aligned */
    const bool cross = skv_tokenizer_hash(slm->tok) != skv_tokenizer_hash(llm->tok);
    skv_model_fp fps, fpl;
    if (skv_fp_from_model(slm, false, &fps) || skv_fp_from_model(llm, false, &fpl)) goto done;
    char why[256];
    const bool same = skv_fp_diff(&fps, &fpl, why, sizeof why) == 0;   /* self pair: one forward serves both */

    /* tokens: each corpus on its own, concatenated in order */
    int64_t counts[SKV_CALIB_MAX_CORPORA], total = 0;
    int *parts[SKV_CALIB_MAX_CORPORA] = {0};
    for (int c = 0; c < o->n_corpora; c++) {
        parts[c] = tokenize_corpus(cross ? llm->tok : slm->tok, o->corpora[c], &counts[c]);
        if (!parts[c]) { for (int k = 0; k < c; k++) free(parts[k]); goto done; }
        if (counts[c] < W) {
            skv_error("%s: %lld tokens, fewer than one window of %d", o->corpora[c], (long long)counts[c], W);
            for (int k = 0; k <= c; k++) free(parts[k]);
            goto done;
        }
        total += counts[c];
        st.corpus_tokens[c] = counts[c];
    }
    tokens = skv_malloc((size_t)total * sizeof(int), "token stream");
    if (tokens) {
        int64_t off = 0;
        for (int c = 0; c < o->n_corpora; c++) { cstart[c] = off; memcpy(tokens + off, parts[c], (size_t)counts[c] * sizeof(int)); off += counts[c]; }
    }
    for (int c = 0; c < o->n_corpora; c++) free(parts[c]);
    if (!tokens) goto done;

    /* plan */
    int64_t slots = total / W + o->n_corpora;
    int cap = slots < (1 << 22) ? (int)slots : (1 << 22);
    starts = skv_malloc((size_t)cap * sizeof *starts, "window plan");
    wcorpus = skv_malloc((size_t)cap * sizeof *wcorpus, "window plan");
    if (!starts || !wcorpus) goto done;
    int N = skv_calib_plan(counts, o->n_corpora, W, o->windows, o->seed, starts, wcorpus, cap);
    if (N < 0) goto done;
    if (N == 0) { skv_error("the corpora hold no whole window of %d tokens", W); goto done; }
    st.planned = N;
    for (int w = 0; w < N; w++) st.corpus_windows[wcorpus[w]]++;

    set.window = W; set.windows_planned = N; set.topk = topk; set.sinks = sinks;
    set.normalized = o->normalized; set.last_rows = 1; set.metrics = metrics; set.seed = o->seed;
    set.shard_count = nsh;
    fresh = skv_calib_new(&fps, &fpl, &set, o->shard_index, CALIB_TOOL);
    if (!fresh) goto done;
    fresh->align.present = cross;

    /* resume or start */
    if (access(o->out, F_OK) == 0) {
        if (o->resume) {
            cal = skv_calib_read(o->out);
            if (!cal) { skv_error_prefix("cannot resume"); goto done; }
            if (skv_calib_compatible(cal, fresh, o->out, "this run")) { skv_error_prefix("cannot resume"); goto done; }
            if (cal->n_shards != 1 || cal->shards[0] != o->shard_index) {
                skv_error("cannot resume %s: it holds shard%s %d..., this run is shard %d",
                          o->out, cal->n_shards > 1 ? "s" : "", cal->shards[0], o->shard_index);
                goto done;
            }
            skv_calib_free(fresh);
            fresh = NULL;
        } else if (!o->overwrite) {
            skv_error("%s: already exists (use --resume to continue it, or remove it)", o->out);
            goto done;
        }
    }
    if (!cal) { cal = fresh; fresh = NULL; }

    if (cross) {   /* the SLM may need more tokens than the LLM for the same text: room for twice */
        if (skv_xtok_init(&xs, slm, 2 * W + 1, rows) || skv_xtok_init(&xl, llm, W, rows)) goto done;
    } else {
        if (side_init(&a, slm, W, sinks, rows)) goto done;
        if (!same && side_init(&b, llm, W, sinks, rows)) goto done;
    }
    const side *bl = same ? &a : &b;
    st.t_setup = skv_now() - t_start;

    /* windows of this run */
    int todo = 0;
    for (int w = 0; w < N; w++) {
        if (w % nsh != o->shard_index || (o->only_corpus >= 0 && wcorpus[w] != o->only_corpus)) continue;
        st.mine++;
        if (skv_calib_has_window(cal, w)) st.skipped++; else todo++;
    }
    if (o->max_new_windows > 0 && todo > o->max_new_windows) todo = o->max_new_windows;

    order = skv_malloc((size_t)N * sizeof *order, "window order");
    if (!order) goto done;
    window_order(wcorpus, N, o->until_stable > 0, order);
    st.stable_loss = st.stable_agree = NAN;

    double t_loop = skv_now();
    int since_ckpt = 0;
    for (int oi = 0; oi < N && st.done < todo; oi++) {
        int w = order[oi];
        if (w % nsh != o->shard_index || (o->only_corpus >= 0 && wcorpus[w] != o->only_corpus)) continue;
        if (skv_calib_has_window(cal, w)) continue;
        const int *tw = tokens + starts[w];
        if (cross) {
            if (o->kill_after > 0 && st.done + 1 >= o->kill_after) raise(SIGKILL);   /* test hook */
            if (cross_window(cal, w, tw, W, starts[w] == cstart[wcorpus[w]], sinks, o->normalized, slm, llm, &xs, &xl, &st)) goto done;
            st.done++;
            st.tokens += W;
        } else {
            double t0 = skv_now();
            if (side_forward(&a, tw, W)) { skv_error_prefix("SLM window %d", w); goto done; }
            double t1 = skv_now();
            if (!same && side_forward(&b, tw, W)) { skv_error_prefix("LLM window %d", w); goto done; }
            double t2 = skv_now();
            st.t_fwd_slm += t1 - t0;
            st.t_fwd_llm += t2 - t1;
            if (o->kill_after > 0 && st.done + 1 >= o->kill_after) raise(SIGKILL);   /* test hook */
            if (side_pack(&a, W, sinks, o->normalized) || (!same && side_pack(&b, W, sinks, o->normalized))) goto done;
            if (skv_calib_add_window(cal, w, W, W - sinks, bl->F, a.F, bl->R, a.R)) goto done;
            st.t_sim += skv_now() - t2;
            st.done++;
            st.tokens += W;
        }
        if (++since_ckpt >= every && st.done < todo) {
            double t3 = skv_now();
            if (skv_calib_write(cal, o->out)) goto done;
            since_ckpt = 0;
            st.t_ckpt += skv_now() - t3;
            if (o->until_stable > 0) {
                int checks = st.stable_checks;
                bool done_now = stable_now(cal, o->until_stable, &st);
                if (st.stable_checks > checks && (o->progress || o->stability_log))   /* the trajectory: how the mapping settles */
                    fprintf(o->progress ? stderr : o->stability_log, "%scalibrate: %lld windows: split-half loss %.2f%%, %.1f%% of heads map alike\n",
                            o->progress ? "\r" : "", (long long)cal->n_windows, 100.0 * st.stable_loss, 100.0 * st.stable_agree);
                if (done_now) break;
            }
        }
        if (o->progress) show_progress(st.done, todo, st.tokens, skv_now() - t_loop, false);
    }
    if (o->until_stable > 0 && !st.stable) stable_now(cal, o->until_stable, &st);
    double t4 = skv_now();
    if (skv_calib_write(cal, o->out)) goto done;
    st.t_ckpt += skv_now() - t4;
    st.t_total = skv_now() - t_loop;
    if (o->progress) show_progress(st.done, todo, st.tokens, st.t_total, true);
    rc = 0;
done:
    if (st_out) *st_out = st;
    side_free(&a); side_free(&b);
    skv_xtok_free(&xs); skv_xtok_free(&xl);
    skv_calib_free(cal); skv_calib_free(fresh);
    free(tokens); free(starts); free(wcorpus); free(order);
    skv_model_free(slm); skv_model_free(llm);
    return rc;
}
