/* calib.c: calibration accumulator (fixed-point pair sums, per-window layer stats),
 * exact merging of shards, and the SKVCALIB file reader/writer (see calib.h). */
#include "calib.h"
#include "common/jsonget.h"
#include "runtime/format/secfile.h"
#include "similarity.h"
#include "common/util.h"
#include <cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "calib.c stores little-endian arrays with memcpy; port for big-endian hosts"
#endif

static const char CALIB_MAGIC[8] = {'S', 'K', 'V', 'C', 'A', 'L', 'I', 'B'};
#define SEC_SUMS SKV_SEC_ID('S', 'U', 'M', 'S')
#define SEC_WSTA SKV_SEC_ID('W', 'S', 'T', 'A')
#define SEC_HALF SKV_SEC_ID('H', 'A', 'L', 'F')
#define MAX_WINDOWS SKV_CALIB_MAX_WINDOWS
#define MAX_HEADS SKV_META_MAX_HEADS

static int fp_valid(const skv_model_fp *fp, const char *which) {
    if (fp->n_layer <= 0 || fp->n_head <= 0 || (long long)fp->n_layer * fp->n_head > MAX_HEADS)
        return skv_error("calibration: %s fingerprint has bad shape (%d layers x %d heads)", which, fp->n_layer, fp->n_head);
    if (!fp->arch[0]) return skv_error("calibration: %s fingerprint has no architecture", which);
    if (!skv_meta_is_hex(fp->tokenizer_hash) || !skv_meta_is_hex(fp->weight_hash))
        return skv_error("calibration: %s fingerprint hashes must be non-empty hex strings", which);
    return 0;
}

static int settings_valid(const skv_calib_settings *s) {
    if (s->window <= 0 || s->windows_planned <= 0 || s->windows_planned > MAX_WINDOWS || s->topk <= 0 ||
        s->sinks < 0 || s->sinks >= s->window || s->last_rows <= 0 || s->shard_count <= 0)
        return skv_error("calibration: bad settings (window %d, windows %d, topk %d, sinks %d, last_rows %d, shards %d)",
                         s->window, s->windows_planned, s->topk, s->sinks, s->last_rows, s->shard_count);
    if (!s->metrics || (s->metrics >> SKV_METRIC_COUNT)) return skv_error("calibration: bad metric set 0x%x", s->metrics);
    if (s->n_corpora < 0 || s->n_corpora > SKV_CALIB_MAX_CORPORA) return skv_error("calibration: bad corpus count %d", s->n_corpora);
    return 0;
}

/* which setting differs (corpus names are labels: only content hashes and sizes count) */
static int settings_diff(const skv_calib_settings *a, const skv_calib_settings *b, char *why, size_t n) {
#define CMPI(f) if (a->f != b->f) { snprintf(why, n, #f " %lld vs %lld", (long long)a->f, (long long)b->f); return -1; }
    CMPI(window) CMPI(windows_planned) CMPI(topk) CMPI(sinks) CMPI(normalized) CMPI(last_rows) CMPI(metrics)
    CMPI(seed) CMPI(shard_count) CMPI(n_corpora)
#undef CMPI
    for (int i = 0; i < a->n_corpora; i++)
        if (strcmp(a->corpora[i].sha256, b->corpora[i].sha256) != 0 || a->corpora[i].bytes != b->corpora[i].bytes) {
            snprintf(why, n, "corpus %d ('%s' vs '%s') has different contents", i, a->corpora[i].name, b->corpora[i].name);
            return -1;
        }
    return 0;
}

/* ---- accumulator ---- */

static void set_dims(skv_calib *c) {
    c->n_llm = c->llm.n_layer * c->llm.n_head;
    c->n_slm = c->slm.n_layer * c->slm.n_head;
    c->n_metrics = 0;
    for (int m = 0; m < SKV_METRIC_COUNT; m++)
        if (c->set.metrics & SKV_METRIC_BIT(m)) c->metric_ids[c->n_metrics++] = m;
}

static int setup_dims(skv_calib *c) {
    set_dims(c);
    size_t n;
    if (!skv_mul_ok((size_t)c->n_llm * c->n_slm, (size_t)c->n_metrics * 2, &n)) return skv_error("calibration: size overflow");
    c->sums = skv_calloc(n, sizeof(int64_t), "calibration sums");
    c->half = skv_calloc(n / 2, sizeof(int64_t), "calibration half sums");
    return c->sums && c->half ? 0 : -1;
}

void skv_calib_free(skv_calib *c) {
    if (!c) return;
    free(c->sums); free(c->half); free(c->windows); free(c->wstat); free(c->shards);
    free(c);
}

skv_calib *skv_calib_new(const skv_model_fp *slm, const skv_model_fp *llm,
                         const skv_calib_settings *set, int shard_index, const char *tool) {
    if (fp_valid(slm, "SLM") || fp_valid(llm, "LLM") || settings_valid(set)) return NULL;
    if (shard_index < 0 || shard_index >= set->shard_count) {
        skv_error("calibration: shard %d out of range for %d shards", shard_index, set->shard_count);
        return NULL;
    }
    skv_calib *c = skv_calloc(1, sizeof *c, "calibration");
    if (!c) return NULL;
    c->slm = *slm; c->llm = *llm; c->set = *set;
    snprintf(c->tool, sizeof c->tool, "%s", tool ? tool : "");
    c->n_shards = 1;
    c->shards = skv_malloc(sizeof(int32_t), "shards");
    if (!c->shards || setup_dims(c)) { skv_calib_free(c); return NULL; }
    c->shards[0] = shard_index;
    return c;
}

bool skv_calib_has_window(const skv_calib *c, int window) {
    for (int64_t i = 0; i < c->n_windows; i++)
        if (c->windows[i] == window) return true;
    return false;
}

int64_t skv_calib_odd_windows(const skv_calib *c) {
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_windows; i++) n += c->windows[i] & 1;
    return n;
}

int skv_calib_metric_index(const skv_calib *c, int m) {
    for (int i = 0; i < c->n_metrics; i++)
        if (c->metric_ids[i] == m) return i;
    return -1;
}

/* The header array `field` of strictly ascending integer indices below `below` into out
 * (room for all of them), *n of them; -1 with an error naming the file otherwise. */
static int ascending_indices(const cJSON *arr, int below, int32_t *out, int64_t *n, const char *path, const char *field) {
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= below || (*n && e->valuedouble <= out[*n - 1]))
            return skv_error("%s: header field '%s' must be ascending indices below %d", path, field, below);
        out[(*n)++] = (int32_t)e->valuedouble;
    }
    return 0;
}

static int reserve_windows(skv_calib *c, int64_t need) {
    if (need <= c->cap_windows) return 0;
    if (need > MAX_WINDOWS) return skv_error("calibration: more than %d windows", MAX_WINDOWS);
    int64_t cap = c->cap_windows ? c->cap_windows : 16;
    while (cap < need) cap *= 2;
    size_t row = (size_t)c->n_metrics * c->llm.n_layer;
    int32_t *w = realloc(c->windows, (size_t)cap * sizeof *w);
    if (!w) return skv_error("out of memory growing the window list");
    c->windows = w;
    float *s = realloc(c->wstat, (size_t)cap * row * sizeof *s);
    if (!s) return skv_error("out of memory growing the window statistics");
    c->wstat = s;
    c->cap_windows = cap;
    return 0;
}

static inline int64_t fix(double v) { return llrint(ldexp(v, SKV_CALIB_FIX_BITS)); }

int skv_calib_add_values(skv_calib *c, int window, int64_t tokens, const double *S) {
    if (window < 0 || window >= c->set.windows_planned)
        return skv_error("calibration: window %d out of range (%d planned)", window, c->set.windows_planned);
    if (tokens < 0) return skv_error("calibration: negative token count");
    if (skv_calib_has_window(c, window)) return skv_error("calibration: window %d added twice", window);
    size_t pairs = (size_t)c->n_llm * c->n_slm;
    for (size_t i = 0; i < pairs * c->n_metrics; i++)
        if (!(S[i] >= -1.0 && S[i] <= 1.0)) return skv_error("calibration: similarity %g at %zu outside [-1, 1]", S[i], i);
    if (reserve_windows(c, c->n_windows + 1)) return -1;
    int L = c->llm.n_layer, H = c->llm.n_head;
    float *ws = c->wstat + (size_t)c->n_windows * c->n_metrics * L;   /* (n_metrics, L) */
    for (int mi = 0; mi < c->n_metrics; mi++) {
        const double *Sm = S + mi * pairs;                            /* (n_llm, n_slm) */
        int64_t *sum = c->sums + (size_t)mi * 2 * pairs, *sq = sum + pairs;
        for (size_t p = 0; p < pairs; p++) {
            sum[p] += fix(Sm[p]);
            sq[p] += fix(Sm[p] * Sm[p]);
        }
        if (c->half && (window & 1)) {
            int64_t *hs = c->half + (size_t)mi * pairs;
            for (size_t p = 0; p < pairs; p++) hs[p] += fix(Sm[p]);
        }
        for (int l = 0; l < L; l++) {
            double acc = 0;
            for (int h = 0; h < H; h++) {
                const double *row = Sm + ((size_t)l * H + h) * c->n_slm;
                double best = row[0];
                for (int j = 1; j < c->n_slm; j++) if (row[j] > best) best = row[j];
                acc += best;
            }
            ws[(size_t)mi * L + l] = (float)(acc / H);
        }
    }
    c->windows[c->n_windows++] = window;
    c->tokens += tokens;
    return 0;
}

int skv_calib_add_window(skv_calib *c, int window, int64_t tokens, int n_keys,
                         const float *F_llm, const float *F_slm,
                         const float *row_llm, const float *row_slm) {
    if (n_keys <= 0) return skv_error("calibration: window %d has no keys after dropping sinks", window);
    if ((c->set.metrics & SKV_METRIC_BIT(SKV_METRIC_ROWCOS)) && (!row_llm || !row_slm))
        return skv_error("calibration: metric rowcos needs last-query attention rows");
    size_t pairs = (size_t)c->n_llm * c->n_slm;
    double *S = skv_malloc(pairs * c->n_metrics * sizeof(double), "window similarities");
    if (!S) return -1;
    int rc = 0;
    for (int mi = 0; mi < c->n_metrics && rc == 0; mi++) {
        double *Sm = S + mi * pairs;
        switch (c->metric_ids[mi]) {
        case SKV_METRIC_JACCARD: rc = skv_sim_jaccard(F_llm, c->n_llm, F_slm, c->n_slm, n_keys, c->set.topk, Sm); break;
        case SKV_METRIC_COSINE: rc = skv_sim_cosine(F_llm, c->n_llm, F_slm, c->n_slm, n_keys, Sm); break;
        default: rc = skv_sim_cosine(row_llm, c->n_llm, row_slm, c->n_slm, n_keys, Sm); break;
        }
    }
    if (rc == 0) rc = skv_calib_add_values(c, window, tokens, S);
    if (rc) skv_error_prefix("window %d", window);
    free(S);
    return rc;
}

/* ---- merging ---- */

int skv_calib_compatible(const skv_calib *a, const skv_calib *b, const char *an, const char *bn) {
    char why[512];
    if (skv_fp_diff(&a->llm, &b->llm, why, sizeof why))
        return skv_error("%s and %s: LLM differs: %s", an, bn, why);
    if (skv_fp_diff(&a->slm, &b->slm, why, sizeof why))
        return skv_error("%s and %s: SLM differs: %s", an, bn, why);
    if (settings_diff(&a->set, &b->set, why, sizeof why))
        return skv_error("%s and %s: settings differ: %s", an, bn, why);
    if (a->align.present != b->align.present)
        return skv_error("%s and %s: one is a cross-tokenizer calibration, the other not", an, bn);
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int skv_calib_merge(skv_calib *dst, const skv_calib *src, const char *dn, const char *sn) {
    if (skv_calib_compatible(dst, src, dn, sn)) return -1;
    for (int64_t i = 0; i < src->n_windows; i++)
        if (skv_calib_has_window(dst, src->windows[i]))
            return skv_error("%s and %s: window %d is in both (overlapping shards)", dn, sn, src->windows[i]);
    size_t pairs = (size_t)dst->n_llm * dst->n_slm, total = pairs * 2 * dst->n_metrics;
    for (size_t p = 0; p < total; p++) {
        int64_t r;
        if (__builtin_add_overflow(dst->sums[p], src->sums[p], &r))
            return skv_error("%s and %s: fixed-point sum overflow", dn, sn);
    }
    int32_t *sh = skv_malloc((size_t)(dst->n_shards + src->n_shards) * sizeof *sh, "shards");
    if (!sh || reserve_windows(dst, dst->n_windows + src->n_windows)) { free(sh); return -1; }
    for (size_t p = 0; p < total; p++) dst->sums[p] += src->sums[p];
    if (dst->half && src->half) {   /* halves survive only when both sides have them */
        for (size_t p = 0; p < total / 2; p++) dst->half[p] += src->half[p];
    } else {
        free(dst->half);
        dst->half = NULL;
    }
    size_t row = (size_t)dst->n_metrics * dst->llm.n_layer;
    memcpy(dst->windows + dst->n_windows, src->windows, (size_t)src->n_windows * sizeof(int32_t));
    memcpy(dst->wstat + (size_t)dst->n_windows * row, src->wstat, (size_t)src->n_windows * row * sizeof(float));
    dst->n_windows += src->n_windows;
    dst->tokens += src->tokens;
    dst->align.llm_tokens += src->align.llm_tokens;
    dst->align.slm_tokens += src->align.slm_tokens;
    dst->align.matched += src->align.matched;
    /* shard list: sorted union */
    int n = 0;
    for (int i = 0; i < dst->n_shards; i++) sh[n++] = dst->shards[i];
    for (int i = 0; i < src->n_shards; i++) sh[n++] = src->shards[i];
    qsort(sh, (size_t)n, sizeof *sh, cmp_i32);
    int u = 0;
    for (int i = 0; i < n; i++) if (u == 0 || sh[u - 1] != sh[i]) sh[u++] = sh[i];
    free(dst->shards);
    dst->shards = sh;
    dst->n_shards = u;
    return 0;
}

/* ---- statistics ---- */

int skv_calib_half_mean(const skv_calib *c, int m, bool odd, float *mean) {
    int mi = skv_calib_metric_index(c, m);
    if (mi < 0) return skv_error("calibration has no '%s' similarities", skv_metric_name(m));
    if (!c->half) return skv_error("calibration has no split halves (written before they were recorded, or merged with such a file)");
    int64_t n_odd = skv_calib_odd_windows(c), n = odd ? n_odd : c->n_windows - n_odd;
    if (n <= 0) return skv_error("calibration has no %s windows", odd ? "odd" : "even");
    size_t pairs = (size_t)c->n_llm * c->n_slm;
    const int64_t *sum = c->sums + (size_t)mi * 2 * pairs, *hs = c->half + (size_t)mi * pairs;
    for (size_t p = 0; p < pairs; p++) {
        int64_t s = odd ? hs[p] : sum[p] - hs[p];
        mean[p] = (float)(ldexp((double)s, -SKV_CALIB_FIX_BITS) / (double)n);
    }
    return 0;
}

int skv_calib_mean(const skv_calib *c, int m, float *mean, float *std) {
    int mi = skv_calib_metric_index(c, m);
    if (mi < 0) return skv_error("calibration has no '%s' similarities", skv_metric_name(m));
    if (c->n_windows <= 0) return skv_error("calibration has no windows");
    size_t pairs = (size_t)c->n_llm * c->n_slm;
    const int64_t *sum = c->sums + (size_t)mi * 2 * pairs, *sq = sum + pairs;
    double n = (double)c->n_windows;
    for (size_t p = 0; p < pairs; p++) {
        double mu = ldexp((double)sum[p], -SKV_CALIB_FIX_BITS) / n;
        if (mean) mean[p] = (float)mu;
        if (std) {
            double var = ldexp((double)sq[p], -SKV_CALIB_FIX_BITS) / n - mu * mu;
            std[p] = (float)sqrt(var > 0 ? var : 0);
        }
    }
    return 0;
}

void skv_calib_print_summary(const skv_calib *c, const char *path, FILE *out) {
    fprintf(out, "%s: LLM %s (%s, %dx%d heads), SLM %s (%s, %dx%d heads)\n", path, c->llm.name, c->llm.arch,
            c->llm.n_layer, c->llm.n_head, c->slm.name, c->slm.arch, c->slm.n_layer, c->slm.n_head);
    fprintf(out, "  %lld windows of %d tokens (%d planned), %lld tokens, K=%d, sinks=%d, shards",
            (long long)c->n_windows, c->set.window, c->set.windows_planned, (long long)c->tokens,
            c->set.topk, c->set.sinks);
    for (int i = 0; i < c->n_shards; i++) fprintf(out, "%s%d", i ? "," : " ", c->shards[i]);
    fprintf(out, " of %d\n", c->set.shard_count);
    if (c->align.present)
        fprintf(out, "  two tokenizers, aligned by %s: %lld of %lld LLM tokens (%.1f%%) and of %lld SLM tokens (%.1f%%) matched\n",
                SKV_CALIB_ALIGN_METHOD, (long long)c->align.matched, (long long)c->align.llm_tokens,
                c->align.llm_tokens ? 100.0 * c->align.matched / c->align.llm_tokens : 0.0,
                (long long)c->align.slm_tokens, c->align.slm_tokens ? 100.0 * c->align.matched / c->align.slm_tokens : 0.0);
}

/* ---- file I/O ---- */

int skv_calib_write(const skv_calib *c, const char *path) {
    int64_t nw = c->n_windows;
    size_t row = (size_t)c->n_metrics * c->llm.n_layer;
    int32_t *order = skv_malloc((size_t)(nw ? nw : 1) * sizeof *order, "window order");
    float *ws = skv_malloc((size_t)(nw ? nw : 1) * row * sizeof *ws, "window statistics");
    char *json = NULL;
    int rc = -1;
    if (!order || !ws) goto done;
    /* ascending window order: rows follow their windows, so any merge order writes the same bytes */
    int32_t *idx = (int32_t *)order;
    for (int64_t i = 0; i < nw; i++) idx[i] = (int32_t)i;
    for (int64_t i = 1; i < nw; i++) {            /* insertion sort by window (n is small) */
        int32_t k = idx[i];
        int64_t j = i - 1;
        while (j >= 0 && c->windows[idx[j]] > c->windows[k]) { idx[j + 1] = idx[j]; j--; }
        idx[j + 1] = k;
    }
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "format", "smallkv-calibration");
    cJSON_AddNumberToObject(h, "version", SKV_CALIB_VERSION);
    cJSON_AddStringToObject(h, "tool", c->tool);
    cJSON_AddItemToObject(h, "llm", skv_fp_to_json(&c->llm));
    cJSON_AddItemToObject(h, "slm", skv_fp_to_json(&c->slm));
    cJSON_AddItemToObject(h, "settings", skv_settings_to_json(&c->set));
    cJSON_AddNumberToObject(h, "fixed_point_bits", SKV_CALIB_FIX_BITS);
    cJSON_AddNumberToObject(h, "tokens", (double)c->tokens);
    if (c->align.present) {   /* only cross-tokenizer files carry it: shared-tokenizer files keep their bytes */
        cJSON *al = cJSON_AddObjectToObject(h, "alignment");
        cJSON_AddStringToObject(al, "method", SKV_CALIB_ALIGN_METHOD);
        cJSON_AddNumberToObject(al, "llm_tokens", (double)c->align.llm_tokens);
        cJSON_AddNumberToObject(al, "slm_tokens", (double)c->align.slm_tokens);
        cJSON_AddNumberToObject(al, "matched", (double)c->align.matched);
        cJSON_AddNumberToObject(al, "matched_share_llm", c->align.llm_tokens ? (double)c->align.matched / c->align.llm_tokens : 0.0);
        cJSON_AddNumberToObject(al, "matched_share_slm", c->align.slm_tokens ? (double)c->align.matched / c->align.slm_tokens : 0.0);
    }
    cJSON *sh = cJSON_AddArrayToObject(h, "shards");
    for (int i = 0; i < c->n_shards; i++) cJSON_AddItemToArray(sh, cJSON_CreateNumber(c->shards[i]));
    cJSON *wl = cJSON_AddArrayToObject(h, "windows");
    for (int64_t i = 0; i < nw; i++) {
        cJSON_AddItemToArray(wl, cJSON_CreateNumber(c->windows[idx[i]]));
        memcpy(ws + (size_t)i * row, c->wstat + (size_t)idx[i] * row, row * sizeof(float));
    }
    json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) { skv_error("%s: cannot format JSON header", path); goto done; }
    size_t pairs = (size_t)c->n_llm * c->n_slm;
    skv_section secs[3] = {
        {SEC_SUMS, c->sums, pairs * 2 * c->n_metrics * sizeof(int64_t)},
        {SEC_WSTA, ws, (size_t)nw * row * sizeof(float)},
        {SEC_HALF, c->half, pairs * c->n_metrics * sizeof(int64_t)},
    };
    rc = skv_secfile_write(path, CALIB_MAGIC, SKV_CALIB_VERSION, json, secs, c->half ? 3 : 2, 3);
done:
    free(order); free(ws); free(json);
    return rc;
}

skv_calib *skv_calib_read(const char *path) {
    skv_secfile *f = skv_secfile_read(path, CALIB_MAGIC, SKV_CALIB_VERSION, "calibration file");
    if (!f) return NULL;
    skv_calib *c = skv_calloc(1, sizeof *c, "calibration");
    cJSON *h = cJSON_Parse(f->header);
    long long v;
    char fmt[64];
    if (!c) goto fail;
    if (!h || !cJSON_IsObject(h)) { skv_error("%s: JSON header does not parse", path); goto fail; }
    if (skv_json_str(h, "format", fmt, sizeof fmt, path, NULL)) goto fail;
    if (strcmp(fmt, "smallkv-calibration") != 0) { skv_error("%s: header 'format' is '%s', not a calibration", path, fmt); goto fail; }
    if (skv_json_int(h, "version", SKV_CALIB_VERSION, SKV_CALIB_VERSION, &v, path, NULL) ||
        skv_json_int(h, "fixed_point_bits", SKV_CALIB_FIX_BITS, SKV_CALIB_FIX_BITS, &v, path, NULL) ||
        skv_json_str(h, "tool", c->tool, sizeof c->tool, path, NULL))
        goto fail;
    const cJSON *o;
    if (!(o = skv_json_child(h, "llm", cJSON_Object, path, NULL)) || skv_fp_from_json(o, &c->llm, path, "llm")) goto fail;
    if (!(o = skv_json_child(h, "slm", cJSON_Object, path, NULL)) || skv_fp_from_json(o, &c->slm, path, "slm")) goto fail;
    if (!(o = skv_json_child(h, "settings", cJSON_Object, path, NULL)) || skv_settings_from_json(o, &c->set, path)) goto fail;
    if (settings_valid(&c->set)) { skv_error_prefix("%s", path); goto fail; }
    if (skv_json_int(h, "tokens", 0, 1ll << 52, &v, path, NULL)) goto fail;
    c->tokens = v;
    if (cJSON_HasObjectItem(h, "alignment")) {
        const cJSON *al = skv_json_child(h, "alignment", cJSON_Object, path, NULL);
        char meth[32];
        long long lt, stok, mt;
        if (!al || skv_json_str(al, "method", meth, sizeof meth, path, "alignment") ||
            skv_json_int(al, "llm_tokens", 0, 1ll << 52, &lt, path, "alignment") ||
            skv_json_int(al, "slm_tokens", 0, 1ll << 52, &stok, path, "alignment") ||
            skv_json_int(al, "matched", 0, 1ll << 52, &mt, path, "alignment"))
            goto fail;
        if (strcmp(meth, SKV_CALIB_ALIGN_METHOD) != 0) { skv_error("%s: unknown alignment method '%s'", path, meth); goto fail; }
        if (mt > lt || mt > stok) { skv_error("%s: alignment matches %lld tokens of %lld (LLM) and %lld (SLM)", path, mt, lt, stok); goto fail; }
        c->align = (skv_calib_align){.present = true, .llm_tokens = lt, .slm_tokens = stok, .matched = mt};
    }
    const cJSON *sh = skv_json_child(h, "shards", cJSON_Array, path, NULL);
    const cJSON *wl = skv_json_child(h, "windows", cJSON_Array, path, NULL);
    if (!sh || !wl) goto fail;
    int nsh = cJSON_GetArraySize(sh), nw = cJSON_GetArraySize(wl);
    {   /* Section sizes against the header before allocating anything the header sizes: a
         * tampered header (up to 2^16 heads a side) must not make us allocate gigabytes. */
        set_dims(c);
        const skv_section *ss = skv_secfile_get(f, SEC_SUMS, path), *sw = skv_secfile_get(f, SEC_WSTA, path);
        if (!ss || !sw) goto fail;
        size_t want_s = 0, want_w = 0;
        if (!skv_mul_ok((size_t)c->n_llm * c->n_slm, (size_t)c->n_metrics * 2 * sizeof(int64_t), &want_s) ||
            ss->size != want_s) {
            skv_error("%s: section 'SUMS' has %zu bytes, the header implies %zu", path, ss->size, want_s);
            goto fail;
        }
        if (!skv_mul_ok((size_t)(nw > 0 ? nw : 0), (size_t)c->n_metrics * c->llm.n_layer * sizeof(float), &want_w) ||
            sw->size != want_w) {
            skv_error("%s: section 'WSTA' has %zu bytes, the header implies %zu", path, sw->size, want_w);
            goto fail;
        }
    }
    if (setup_dims(c)) goto fail;
    if (nsh < 1 || nsh > c->set.shard_count) { skv_error("%s: header field 'shards' has %d entries", path, nsh); goto fail; }
    if (nw > c->set.windows_planned) { skv_error("%s: header field 'windows' has more entries than planned", path); goto fail; }
    c->shards = skv_malloc((size_t)nsh * sizeof(int32_t), "shards");
    if (!c->shards || reserve_windows(c, nw ? nw : 1)) goto fail;
    int64_t ns = 0;
    if (ascending_indices(sh, c->set.shard_count, c->shards, &ns, path, "shards") ||
        ascending_indices(wl, c->set.windows_planned, c->windows, &c->n_windows, path, "windows"))
        goto fail;
    c->n_shards = (int)ns;
    size_t pairs = (size_t)c->n_llm * c->n_slm, row = (size_t)c->n_metrics * c->llm.n_layer;
    const skv_section *s1 = skv_secfile_get(f, SEC_SUMS, path), *s2 = skv_secfile_get(f, SEC_WSTA, path);
    if (!s1 || !s2) goto fail;
    if (s1->size != pairs * 2 * c->n_metrics * sizeof(int64_t)) {
        skv_error("%s: section 'SUMS' has %zu bytes, the header implies %zu", path, s1->size, pairs * 2 * c->n_metrics * sizeof(int64_t));
        goto fail;
    }
    if (s2->size != (size_t)c->n_windows * row * sizeof(float)) {
        skv_error("%s: section 'WSTA' has %zu bytes, the header implies %zu", path, s2->size, (size_t)c->n_windows * row * sizeof(float));
        goto fail;
    }
    memcpy(c->sums, s1->data, s1->size);
    memcpy(c->wstat, s2->data, s2->size);
    int64_t lim = (int64_t)c->n_windows << SKV_CALIB_FIX_BITS;
    for (int mi = 0; mi < c->n_metrics; mi++)
        for (size_t p = 0; p < pairs; p++) {
            int64_t s = c->sums[(size_t)mi * 2 * pairs + p], q = c->sums[(size_t)mi * 2 * pairs + pairs + p];
            if (s < -lim || s > lim || q < 0 || q > lim) {
                skv_error("%s: section 'SUMS': %s sums out of range for %lld windows", path,
                          skv_metric_name(c->metric_ids[mi]), (long long)c->n_windows);
                goto fail;
            }
        }
    {   /* optional halves: absent in older files */
        const skv_section *s3 = NULL;
        for (int i = 0; i < f->n; i++)
            if (f->secs[i].id == SEC_HALF) s3 = &f->secs[i];
        if (!s3) {
            free(c->half);
            c->half = NULL;
        } else {
            if (s3->size != pairs * c->n_metrics * sizeof(int64_t)) {
                skv_error("%s: section 'HALF' has %zu bytes, the header implies %zu", path, s3->size, pairs * c->n_metrics * sizeof(int64_t));
                goto fail;
            }
            memcpy(c->half, s3->data, s3->size);
            int64_t hl = skv_calib_odd_windows(c) << SKV_CALIB_FIX_BITS;
            for (size_t p = 0; p < pairs * c->n_metrics; p++)
                if (c->half[p] < -hl || c->half[p] > hl) {
                    skv_error("%s: section 'HALF': sums out of range for %lld odd windows", path, (long long)skv_calib_odd_windows(c));
                    goto fail;
                }
        }
    }
    for (size_t i = 0; i < (size_t)c->n_windows * row; i++)
        if (!(c->wstat[i] >= -1.0f && c->wstat[i] <= 1.0f)) { skv_error("%s: section 'WSTA' has values outside [-1, 1]", path); goto fail; }
    cJSON_Delete(h);
    skv_secfile_free(f);
    return c;
fail:
    cJSON_Delete(h);
    skv_secfile_free(f);
    skv_calib_free(c);
    return NULL;
}
