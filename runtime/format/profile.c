/* profile.c: write/load the SKVPROF file with full validation, refuse mismatched models,
 * and print it (`smallkv profile show`). Building one from calibration sums is mapgen's
 * (calibrate/mapping.h). */
#include "profile.h"
#include "common/jsonget.h"
#include "secfile.h"
#include "common/util.h"
#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char PROF_MAGIC[8] = {'S', 'K', 'V', 'P', 'R', 'O', 'F', 0};
#define SEC_MAP  SKV_SEC_ID('M', 'A', 'P', ' ')
#define SEC_MAPF SKV_SEC_ID('M', 'A', 'P', 'F')
#define SEC_MSIM SKV_SEC_ID('M', 'S', 'I', 'M')
#define SEC_CURV SKV_SEC_ID('C', 'U', 'R', 'V')
#define SEC_SIMM SKV_SEC_ID('S', 'I', 'M', 'M')
#define SEC_SSTD SKV_SEC_ID('S', 'S', 'T', 'D')

void skv_profile_free(skv_profile *p) {
    if (!p) return;
    free(p->path); free(p->map); free(p->map_full); free(p->map_sim);
    free(p->curve); free(p->sim); free(p->sim_std);
    free(p);
}

int skv_profile_metric_index(const skv_profile *p, int m) {
    for (int i = 0; i < p->n_metrics; i++)
        if (p->metric_ids[i] == m) return i;
    return -1;
}

const float *skv_profile_sim(const skv_profile *p, int m) {
    int mi = skv_profile_metric_index(p, m);
    return mi < 0 ? NULL : p->sim + (size_t)mi * p->n_llm * p->n_slm;
}

double skv_profile_mean_matched(const skv_profile *p, int m) {
    int mi = skv_profile_metric_index(p, m);
    if (mi < 0) return NAN;
    double acc = 0;
    for (int i = 0; i < p->n_llm; i++) acc += p->map_sim[(size_t)mi * p->n_llm + i];
    return acc / p->n_llm;
}

int skv_profile_alloc_arrays(skv_profile *p) {
    size_t mat = (size_t)p->n_metrics * p->n_llm * p->n_slm;
    p->map = skv_malloc((size_t)p->n_llm * sizeof(int32_t), "profile map");
    p->map_full = skv_malloc((size_t)p->n_llm * sizeof(int32_t), "profile map");
    p->map_sim = skv_malloc((size_t)p->n_metrics * p->n_llm * sizeof(float), "profile map similarity");
    p->curve = skv_malloc((size_t)p->slm.n_layer * sizeof(float), "profile curve");
    p->sim = skv_malloc(mat * sizeof(float), "profile similarity");
    p->sim_std = skv_malloc(mat * sizeof(float), "profile similarity std");
    return (p->map && p->map_full && p->map_sim && p->curve && p->sim && p->sim_std) ? 0 : -1;
}

int skv_profile_write(skv_profile *p, const char *path) {
    cJSON *h = cJSON_CreateObject();
    cJSON_AddStringToObject(h, "format", "smallkv-profile");
    cJSON_AddNumberToObject(h, "version", SKV_PROFILE_VERSION);
    cJSON_AddStringToObject(h, "tool", p->tool);
    cJSON_AddItemToObject(h, "llm", skv_fp_to_json(&p->llm));
    cJSON_AddItemToObject(h, "slm", skv_fp_to_json(&p->slm));
    cJSON *cal = cJSON_AddObjectToObject(h, "calibration");
    cJSON_AddItemToObject(cal, "settings", skv_settings_to_json(&p->calib));
    cJSON_AddNumberToObject(cal, "windows", (double)p->windows);
    cJSON_AddNumberToObject(cal, "tokens", (double)p->tokens);
    cJSON_AddStringToObject(h, "metric", skv_metric_name(p->metric));
    cJSON_AddNumberToObject(h, "eps", p->eps);
    cJSON_AddNumberToObject(h, "depth", p->depth);
    cJSON_AddNumberToObject(h, "depth_eps", p->depth_eps);
    cJSON_AddNumberToObject(h, "max_depth", p->max_depth);
    cJSON_AddNumberToObject(h, "n_llm_heads", p->n_llm);
    cJSON_AddNumberToObject(h, "n_slm_heads", p->n_slm);
    if (p->stability.present) {
        const skv_profile_stability *st = &p->stability;
        cJSON *so = cJSON_AddObjectToObject(h, "stability");
        cJSON_AddStringToObject(so, "metric", skv_metric_name(st->metric));
        cJSON_AddNumberToObject(so, "depth", st->depth);
        cJSON_AddNumberToObject(so, "windows_even", (double)st->windows_even);
        cJSON_AddNumberToObject(so, "windows_odd", (double)st->windows_odd);
        cJSON_AddNumberToObject(so, "agree", st->agree);
        cJSON_AddNumberToObject(so, "loss", st->loss);
    }
    if (p->depth_ev.n > 0) {
        const skv_profile_depth_evidence *e = &p->depth_ev;
        cJSON *eo = cJSON_AddObjectToObject(h, "depth_evidence");
        cJSON_AddNumberToObject(eo, "budget", e->budget);
        cJSON_AddNumberToObject(eo, "max_kl_rise", e->max_kl_rise);
        cJSON_AddNumberToObject(eo, "units", e->units);
        cJSON_AddNumberToObject(eo, "tokens", e->tokens);
        cJSON_AddNumberToObject(eo, "prefill", e->prefill);
        cJSON_AddNumberToObject(eo, "chosen", e->chosen);
        cJSON *rows = cJSON_AddArrayToObject(eo, "rows");
        for (int i = 0; i < e->n; i++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddNumberToObject(r, "depth", e->rows[i].depth);
            cJSON_AddNumberToObject(r, "kl_mean", e->rows[i].kl_mean);
            cJSON_AddNumberToObject(r, "top1", e->rows[i].top1);
            cJSON_AddNumberToObject(r, "slm_ms", e->rows[i].slm_ms);
            cJSON_AddItemToArray(rows, r);
        }
    }
    cJSON *mm = cJSON_AddObjectToObject(h, "mean_matched");
    for (int mi = 0; mi < p->n_metrics; mi++)
        cJSON_AddNumberToObject(mm, skv_metric_name(p->metric_ids[mi]), skv_profile_mean_matched(p, p->metric_ids[mi]));
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) return skv_error("%s: cannot format JSON header", path);
    size_t mat = (size_t)p->n_metrics * p->n_llm * p->n_slm * sizeof(float);
    skv_section secs[6] = {
        {SEC_MAP, p->map, (size_t)p->n_llm * sizeof(int32_t)},
        {SEC_MAPF, p->map_full, (size_t)p->n_llm * sizeof(int32_t)},
        {SEC_MSIM, p->map_sim, (size_t)p->n_metrics * p->n_llm * sizeof(float)},
        {SEC_CURV, p->curve, (size_t)p->slm.n_layer * sizeof(float)},
        {SEC_SIMM, p->sim, mat},
        {SEC_SSTD, p->sim_std, mat},
    };
    int rc = skv_secfile_write(path, PROF_MAGIC, SKV_PROFILE_VERSION, json, secs, 6, 3);
    free(json);
    if (rc == 0 && (!p->path || strcmp(p->path, path) != 0)) { free(p->path); p->path = skv_strdup(path); }
    return rc;
}

/* copy a section of exactly `want` bytes */
static int take(const skv_secfile *f, uint32_t id, void *dst, size_t want, const char *path) {
    const skv_section *s = skv_secfile_get(f, id, path);
    if (!s) return -1;
    if (s->size != want) {
        char ids[5];
        skv_sec_id_str(id, ids);
        return skv_error("%s: section '%s' has %zu bytes, the header implies %zu", path, ids, s->size, want);
    }
    memcpy(dst, s->data, want);
    return 0;
}

static int finite_in(const float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) if (!(x[i] >= lo && x[i] <= hi)) return 0;
    return 1;
}

skv_profile *skv_profile_load(const char *path) {
    skv_secfile *f = skv_secfile_read(path, PROF_MAGIC, SKV_PROFILE_VERSION, "profile");
    if (!f) return NULL;
    skv_profile *p = skv_calloc(1, sizeof *p, "profile");
    cJSON *h = cJSON_Parse(f->header);
    long long v;
    double d;
    char s[64];
    const cJSON *o;
    if (!p) goto fail;
    p->path = skv_strdup(path);
    if (!h || !cJSON_IsObject(h)) { skv_error("%s: JSON header does not parse", path); goto fail; }
    if (skv_json_str(h, "format", s, sizeof s, path, NULL)) goto fail;
    if (strcmp(s, "smallkv-profile") != 0) { skv_error("%s: header 'format' is '%s', not a profile", path, s); goto fail; }
    if (skv_json_int(h, "version", SKV_PROFILE_VERSION, SKV_PROFILE_VERSION, &v, path, NULL) ||
        skv_json_str(h, "tool", p->tool, sizeof p->tool, path, NULL))
        goto fail;
    if (!(o = skv_json_child(h, "llm", cJSON_Object, path, NULL)) || skv_fp_from_json(o, &p->llm, path, "llm")) goto fail;
    if (!(o = skv_json_child(h, "slm", cJSON_Object, path, NULL)) || skv_fp_from_json(o, &p->slm, path, "slm")) goto fail;
    if (!(o = skv_json_child(h, "calibration", cJSON_Object, path, NULL))) goto fail;
    const cJSON *so = skv_json_child(o, "settings", cJSON_Object, path, "calibration");
    if (!so || skv_settings_from_json(so, &p->calib, path)) goto fail;
    if (skv_json_int(o, "windows", 1, 1ll << 40, &v, path, "calibration")) goto fail;
    p->windows = v;
    if (skv_json_int(o, "tokens", 0, 1ll << 52, &v, path, "calibration")) goto fail;
    p->tokens = v;
    if (skv_json_str(h, "metric", s, sizeof s, path, NULL)) goto fail;
    p->metric = skv_metric_parse(s);
    if (p->metric < 0 || !(p->calib.metrics & SKV_METRIC_BIT(p->metric))) {
        skv_error("%s: header field 'metric' ('%s') is not one of the recorded metrics", path, s);
        goto fail;
    }
    int l = p->slm.n_layer;
    if (skv_json_num(h, "eps", 0, 1, &d, path, NULL)) goto fail;
    p->eps = d;
    if (skv_json_int(h, "depth", 1, l, &v, path, NULL)) goto fail;
    p->depth = (int)v;
    if (skv_json_int(h, "depth_eps", 1, l, &v, path, NULL)) goto fail;
    p->depth_eps = (int)v;
    if (skv_json_int(h, "max_depth", 0, 1 << 20, &v, path, NULL)) goto fail;
    p->max_depth = (int)v;
    p->n_llm = p->llm.n_layer * p->llm.n_head;
    p->n_slm = p->slm.n_layer * p->slm.n_head;
    if (cJSON_GetObjectItemCaseSensitive(h, "stability")) {   /* optional: older profiles lack it */
        const cJSON *so = skv_json_child(h, "stability", cJSON_Object, path, NULL);
        skv_profile_stability *st = &p->stability;
        if (!so || skv_json_str(so, "metric", s, sizeof s, path, "stability")) goto fail;
        if ((st->metric = skv_metric_parse(s)) < 0) { skv_error("%s: header field 'stability.metric' is unknown ('%s')", path, s); goto fail; }
        if (skv_json_int(so, "depth", 1, l, &v, path, "stability")) goto fail;
        st->depth = (int)v;
        if (skv_json_int(so, "windows_even", 0, 1ll << 40, &v, path, "stability")) goto fail;
        st->windows_even = v;
        if (skv_json_int(so, "windows_odd", 0, 1ll << 40, &v, path, "stability")) goto fail;
        st->windows_odd = v;
        if (skv_json_num(so, "agree", 0, 1, &st->agree, path, "stability") ||
            skv_json_num(so, "loss", -1, 2, &st->loss, path, "stability"))
            goto fail;
        st->present = 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(h, "depth_evidence")) {   /* optional */
        const cJSON *eo = skv_json_child(h, "depth_evidence", cJSON_Object, path, NULL), *r;
        skv_profile_depth_evidence *e = &p->depth_ev;
        const char *ctx = "depth_evidence";
        if (!eo || skv_json_num(eo, "budget", 0, 1, &e->budget, path, ctx) ||
            skv_json_num(eo, "max_kl_rise", 0, 1e6, &e->max_kl_rise, path, ctx))
            goto fail;
        if (skv_json_int(eo, "units", 1, 1 << 30, &v, path, ctx)) goto fail;
        e->units = (int)v;
        if (skv_json_int(eo, "tokens", 1, 1 << 30, &v, path, ctx)) goto fail;
        e->tokens = (int)v;
        if (skv_json_int(eo, "prefill", 1, 1 << 30, &v, path, ctx)) goto fail;
        e->prefill = (int)v;
        if (skv_json_int(eo, "chosen", 1, l, &v, path, ctx)) goto fail;
        e->chosen = (int)v;
        const cJSON *rows = skv_json_child(eo, "rows", cJSON_Array, path, ctx);
        if (!rows) goto fail;
        cJSON_ArrayForEach(r, rows) {
            if (e->n >= SKV_DEPTH_ROWS_MAX) { skv_error("%s: header field 'depth_evidence.rows' has more than %d rows", path, SKV_DEPTH_ROWS_MAX); goto fail; }
            skv_depth_row *row = &e->rows[e->n];
            if (!cJSON_IsObject(r)) { skv_error("%s: header field 'depth_evidence.rows' entry is not an object", path); goto fail; }
            if (skv_json_int(r, "depth", 1, l, &v, path, "depth_evidence.rows[]")) goto fail;
            row->depth = (int)v;
            if (skv_json_num(r, "kl_mean", 0, 1e9, &row->kl_mean, path, "depth_evidence.rows[]") ||
                skv_json_num(r, "top1", 0, 1, &row->top1, path, "depth_evidence.rows[]") ||
                skv_json_num(r, "slm_ms", -1, 1e9, &row->slm_ms, path, "depth_evidence.rows[]"))
                goto fail;
            e->n++;
        }
        if (e->n == 0) { skv_error("%s: header field 'depth_evidence.rows' is empty", path); goto fail; }
    }
    if (skv_json_int(h, "n_llm_heads", p->n_llm, p->n_llm, &v, path, NULL) ||
        skv_json_int(h, "n_slm_heads", p->n_slm, p->n_slm, &v, path, NULL))
        goto fail;
    for (int m = 0; m < SKV_METRIC_COUNT; m++)
        if (p->calib.metrics & SKV_METRIC_BIT(m)) p->metric_ids[p->n_metrics++] = m;
    size_t mat = (size_t)p->n_metrics * p->n_llm * p->n_slm;
    {   /* the similarity sections must be as large as the header says before we allocate for
         * them: a tampered header (up to 2^16 heads a side) must not cost gigabytes */
        const skv_section *sm = skv_secfile_get(f, SEC_SIMM, path), *sd = skv_secfile_get(f, SEC_SSTD, path);
        if (!sm || !sd) goto fail;
        if (sm->size != mat * 4 || sd->size != mat * 4) {
            skv_error("%s: section '%s' has %zu bytes, the header implies %zu", path, sm->size != mat * 4 ? "SIMM" : "SSTD",
                      sm->size != mat * 4 ? sm->size : sd->size, mat * 4);
            goto fail;
        }
    }
    if (skv_profile_alloc_arrays(p)) goto fail;
    if (take(f, SEC_MAP, p->map, (size_t)p->n_llm * 4, path) ||
        take(f, SEC_MAPF, p->map_full, (size_t)p->n_llm * 4, path) ||
        take(f, SEC_MSIM, p->map_sim, (size_t)p->n_metrics * p->n_llm * 4, path) ||
        take(f, SEC_CURV, p->curve, (size_t)l * 4, path) ||
        take(f, SEC_SIMM, p->sim, mat * 4, path) ||
        take(f, SEC_SSTD, p->sim_std, mat * 4, path))
        goto fail;
    for (int i = 0; i < p->n_llm; i++) {
        if (p->map[i] < 0 || p->map[i] >= p->depth * p->slm.n_head) {
            skv_error("%s: section 'MAP ': LLM head %d maps to SLM head %d, beyond depth %d", path, i, p->map[i], p->depth);
            goto fail;
        }
        if (p->map_full[i] < 0 || p->map_full[i] >= p->n_slm) {
            skv_error("%s: section 'MAPF': LLM head %d maps to SLM head %d of %d", path, i, p->map_full[i], p->n_slm);
            goto fail;
        }
    }
    if (!finite_in(p->map_sim, (size_t)p->n_metrics * p->n_llm, -1, 1)) { skv_error("%s: section 'MSIM' has values outside [-1, 1]", path); goto fail; }
    if (!finite_in(p->curve, (size_t)l, -1, 1)) { skv_error("%s: section 'CURV' has values outside [-1, 1]", path); goto fail; }
    if (!finite_in(p->sim, mat, -1, 1)) { skv_error("%s: section 'SIMM' has values outside [-1, 1]", path); goto fail; }
    if (!finite_in(p->sim_std, mat, 0, 1)) { skv_error("%s: section 'SSTD' has values outside [0, 1]", path); goto fail; }
    cJSON_Delete(h);
    skv_secfile_free(f);
    return p;
fail:
    cJSON_Delete(h);
    skv_secfile_free(f);
    skv_profile_free(p);
    return NULL;
}

int skv_profile_check_models(const skv_profile *p, const skv_model_fp *slm, const skv_model_fp *llm) {
    char why[512];
    const char *name = p->path ? p->path : "profile";
    if (skv_fp_diff(&p->llm, llm, why, sizeof why))
        return skv_error("%s: made for a different LLM (%s): %s (profile vs given model)", name, p->llm.name, why);
    if (skv_fp_diff(&p->slm, slm, why, sizeof why))
        return skv_error("%s: made for a different SLM (%s): %s (profile vs given model)", name, p->slm.name, why);
    return 0;
}

static void print_fp(FILE *out, const char *role, const skv_model_fp *fp) {
    fprintf(out, "%s: %s (%s) layers %d, heads %d/%d kv, head_dim %d, dim %d, vocab %d\n"
                 "     tokenizer %s, weights %s\n",
            role, fp->name[0] ? fp->name : "?", fp->arch, fp->n_layer, fp->n_head, fp->n_kv_head, fp->head_dim,
            fp->dim, fp->vocab, fp->tokenizer_hash, fp->weight_hash);
}

void skv_profile_print_loaded(const skv_profile *p, FILE *out) {
    fprintf(out, "profile %s (format %d, written by %s)\n", p->path ? p->path : "", SKV_PROFILE_VERSION, p->tool);
    print_fp(out, "LLM", &p->llm);
    print_fp(out, "SLM", &p->slm);
    const skv_calib_settings *c = &p->calib;
    fprintf(out, "calibration: %lld windows of %d tokens, %lld tokens, K=%d, sinks=%d, %s scores, seed %016llx\n",
            (long long)p->windows, c->window, (long long)p->tokens, c->topk, c->sinks,
            c->normalized ? "normalised" : "raw", (unsigned long long)c->seed);
    for (int i = 0; i < c->n_corpora; i++)
        fprintf(out, "  corpus %s (%lld bytes, sha256 %s)\n", c->corpora[i].name, (long long)c->corpora[i].bytes, c->corpora[i].sha256);
    fprintf(out, "mapping metric %s, eps %g: depth %d of %d SLM layers (eps alone: %d%s)\n", skv_metric_name(p->metric),
            p->eps, p->depth, p->slm.n_layer, p->depth_eps, p->max_depth ? ", capped by --max-depth" : "");
    fprintf(out, "mean matched similarity:");
    for (int mi = 0; mi < p->n_metrics; mi++)
        fprintf(out, " %s %.4f", skv_metric_name(p->metric_ids[mi]), skv_profile_mean_matched(p, p->metric_ids[mi]));
    fprintf(out, "\n");
    if (p->stability.present) {
        const skv_profile_stability *st = &p->stability;
        fprintf(out, "stability (even vs odd windows, %lld + %lld; %s at depth %d): %.1f%% of LLM heads map alike; "
                     "one half's mapping loses %.2f%% of the other half's matched similarity\n",
                (long long)st->windows_even, (long long)st->windows_odd, skv_metric_name(st->metric), st->depth,
                100.0 * st->agree, 100.0 * st->loss);
    } else {
        fprintf(out, "stability: not measured (calibration files without split halves)\n");
    }
    if (p->depth_ev.n > 0) {
        const skv_profile_depth_evidence *e = &p->depth_ev;
        fprintf(out, "depth chosen by fidelity: %d (smallest depth whose KL is within %.0f%% of the deepest's; SmallKV at "
                     "budget %g, %d document%s of %d tokens, %d prefilled)\n",
                e->chosen, 100.0 * e->max_kl_rise, e->budget, e->units, e->units > 1 ? "s" : "", e->tokens, e->prefill);
        fprintf(out, "  depth   KL mean   top-1   SLM ms/step\n");
        for (int i = 0; i < e->n; i++) {
            const skv_depth_row *r = &e->rows[i];
            fprintf(out, "  %5d  %8.4f  %6.3f  ", r->depth, r->kl_mean, r->top1);
            if (r->slm_ms >= 0) fprintf(out, "%11.2f", r->slm_ms); else fprintf(out, "%11s", "-");
            fprintf(out, "%s\n", r->depth == e->chosen ? "  <- chosen" : "");
        }
    }
    fprintf(out, "early-stop curve R(s):\n");
    double full = p->curve[p->slm.n_layer - 1];
    for (int s = 1; s <= p->slm.n_layer; s++)
        fprintf(out, "  s=%3d  R=%.4f  (%.1f%% of R(l))%s\n", s, p->curve[s - 1], full != 0 ? 100.0 * p->curve[s - 1] / full : 0.0,
                s == p->depth ? "  <- chosen" : "");
    fprintf(out, "mapping (LLM layer.head -> SLM layer.head, %s):\n", skv_metric_name(p->metric));
    int H = p->llm.n_head, h = p->slm.n_head, mi = skv_profile_metric_index(p, p->metric);
    for (int L = 0; L < p->llm.n_layer; L++) {
        fprintf(out, "  L%-3d", L);
        for (int k = 0; k < H; k++) {
            int i = L * H + k, j = p->map[i];
            fprintf(out, " %d.%d(%.2f)", j / h, j % h, p->map_sim[(size_t)mi * p->n_llm + i]);
        }
        fprintf(out, "\n");
    }
}

int skv_profile_print(const char *path, FILE *out) {
    double t0 = skv_now();
    skv_profile *p = skv_profile_load(path);
    if (!p) return -1;
    double t1 = skv_now();
    skv_profile_print_loaded(p, out);
    fprintf(out, "(loaded in %.1f ms)\n", 1e3 * (t1 - t0));
    skv_profile_free(p);
    return 0;
}
