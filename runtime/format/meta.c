/* meta.c: the pair metadata both file formats record (see meta.h): metric names, model
 * fingerprints and calibration settings, with their JSON forms. */
#include "meta.h"
#include "common/jsonget.h"
#include "common/util.h"
#include <cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *METRIC_NAMES[SKV_METRIC_COUNT] = {"jaccard", "cosine", "rowcos"};

const char *skv_metric_name(int m) { return (m >= 0 && m < SKV_METRIC_COUNT) ? METRIC_NAMES[m] : "?"; }

int skv_metric_parse(const char *name) {
    for (int m = 0; m < SKV_METRIC_COUNT; m++)
        if (strcmp(name, METRIC_NAMES[m]) == 0) return m;
    return -1;
}

/* ---- fingerprints ---- */

int skv_fp_diff(const skv_model_fp *a, const skv_model_fp *b, char *why, size_t n) {
#define CMPI(f) if (a->f != b->f) { snprintf(why, n, #f " %d vs %d", a->f, b->f); return -1; }
#define CMPS(f) if (strcmp(a->f, b->f) != 0) { snprintf(why, n, #f " '%s' vs '%s'", a->f, b->f); return -1; }
    CMPS(arch) CMPI(n_layer) CMPI(n_head) CMPI(n_kv_head) CMPI(head_dim) CMPI(dim) CMPI(vocab)
    CMPS(tokenizer_hash) CMPS(weight_hash)
#undef CMPI
#undef CMPS
    if (n) why[0] = 0;
    return 0;
}

void *skv_fp_to_json(const skv_model_fp *fp) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "arch", fp->arch);
    cJSON_AddStringToObject(o, "name", fp->name);
    cJSON_AddNumberToObject(o, "n_layer", fp->n_layer);
    cJSON_AddNumberToObject(o, "n_head", fp->n_head);
    cJSON_AddNumberToObject(o, "n_kv_head", fp->n_kv_head);
    cJSON_AddNumberToObject(o, "head_dim", fp->head_dim);
    cJSON_AddNumberToObject(o, "dim", fp->dim);
    cJSON_AddNumberToObject(o, "vocab", fp->vocab);
    cJSON_AddStringToObject(o, "tokenizer_hash", fp->tokenizer_hash);
    cJSON_AddStringToObject(o, "weight_hash", fp->weight_hash);
    return o;
}

bool skv_corpus_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > SKV_CORPUS_NAME_MAX || !strcmp(name, ".") || !strcmp(name, "..")) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '+' || c == '-'))
            return false;
    }
    return true;
}

int skv_meta_is_hex(const char *s) {
    if (!*s) return 0;
    for (; *s; s++) if (!isxdigit((unsigned char)*s)) return 0;
    return 1;
}

int skv_fp_from_json(const void *obj, skv_model_fp *fp, const char *path, const char *which) {
    const cJSON *o = obj;
    long long v;
    memset(fp, 0, sizeof *fp);
    if (skv_json_str(o, "arch", fp->arch, sizeof fp->arch, path, which) ||
        skv_json_str(o, "name", fp->name, sizeof fp->name, path, which) ||
        skv_json_str(o, "tokenizer_hash", fp->tokenizer_hash, sizeof fp->tokenizer_hash, path, which) ||
        skv_json_str(o, "weight_hash", fp->weight_hash, sizeof fp->weight_hash, path, which))
        return -1;
#define GI(f, hi) if (skv_json_int(o, #f, 1, hi, &v, path, which)) return -1; fp->f = (int)v;
    GI(n_layer, 4096) GI(n_head, 4096) GI(n_kv_head, 4096) GI(head_dim, 65536) GI(dim, 1 << 20)
    GI(vocab, 1 << 24)
#undef GI
    if (!skv_meta_is_hex(fp->tokenizer_hash) || !skv_meta_is_hex(fp->weight_hash))
        return skv_error("%s: header field '%s' has a hash that is not hex", path, which);
    if ((long long)fp->n_layer * fp->n_head > SKV_META_MAX_HEADS)
        return skv_error("%s: header field '%s': too many heads (%d x %d)", path, which, fp->n_layer, fp->n_head);
    return 0;
}

/* ---- settings ---- */

void *skv_settings_to_json(const skv_calib_settings *s) {
    cJSON *o = cJSON_CreateObject();
    char seed[24];
    snprintf(seed, sizeof seed, "%016llx", (unsigned long long)s->seed);
    cJSON_AddNumberToObject(o, "window", s->window);
    cJSON_AddNumberToObject(o, "windows_planned", s->windows_planned);
    cJSON_AddNumberToObject(o, "topk", s->topk);
    cJSON_AddNumberToObject(o, "sinks", s->sinks);
    cJSON_AddBoolToObject(o, "normalized", s->normalized);
    cJSON_AddNumberToObject(o, "last_rows", s->last_rows);
    cJSON *ms = cJSON_AddArrayToObject(o, "metrics");
    for (int m = 0; m < SKV_METRIC_COUNT; m++)
        if (s->metrics & SKV_METRIC_BIT(m)) cJSON_AddItemToArray(ms, cJSON_CreateString(METRIC_NAMES[m]));
    cJSON_AddStringToObject(o, "seed", seed);
    cJSON_AddNumberToObject(o, "shard_count", s->shard_count);
    cJSON *cs = cJSON_AddArrayToObject(o, "corpora");
    for (int i = 0; i < s->n_corpora; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", s->corpora[i].name);
        cJSON_AddStringToObject(c, "sha256", s->corpora[i].sha256);
        cJSON_AddNumberToObject(c, "bytes", (double)s->corpora[i].bytes);
        cJSON_AddItemToArray(cs, c);
    }
    return o;
}

int skv_settings_from_json(const void *obj, skv_calib_settings *s, const char *path) {
    const cJSON *o = obj;
    const char *ctx = "settings";
    long long v;
    bool b;
    memset(s, 0, sizeof *s);
#define GI(f, lo, hi) if (skv_json_int(o, #f, lo, hi, &v, path, ctx)) return -1; s->f = (int)v;
    GI(window, 1, 1 << 24) GI(windows_planned, 1, SKV_CALIB_MAX_WINDOWS) GI(topk, 1, 1 << 24) GI(sinks, 0, 1 << 24)
    GI(last_rows, 1, 1 << 24) GI(shard_count, 1, 1 << 20)
#undef GI
    if (skv_json_bool(o, "normalized", &b, path, ctx)) return -1;
    s->normalized = b;
    char seed[24];
    if (skv_json_str(o, "seed", seed, sizeof seed, path, ctx)) return -1;
    if (!skv_meta_is_hex(seed) || strlen(seed) > 16) return skv_error("%s: header field 'settings.seed' is not 16 hex digits", path);
    s->seed = strtoull(seed, NULL, 16);
    const cJSON *ms = skv_json_child(o, "metrics", cJSON_Array, path, ctx), *e;
    if (!ms) return -1;
    cJSON_ArrayForEach(e, ms) {
        int m = cJSON_IsString(e) ? skv_metric_parse(e->valuestring) : -1;
        if (m < 0 || (s->metrics & SKV_METRIC_BIT(m)))
            return skv_error("%s: header field 'settings.metrics' has an unknown or repeated metric", path);
        s->metrics |= SKV_METRIC_BIT(m);
    }
    if (!s->metrics) return skv_error("%s: header field 'settings.metrics' is empty", path);
    const cJSON *cs = skv_json_child(o, "corpora", cJSON_Array, path, ctx);
    if (!cs) return -1;
    cJSON_ArrayForEach(e, cs) {
        if (s->n_corpora >= SKV_CALIB_MAX_CORPORA)
            return skv_error("%s: header field 'settings.corpora' has more than %d entries", path, SKV_CALIB_MAX_CORPORA);
        skv_corpus_info *ci = &s->corpora[s->n_corpora++];
        if (!cJSON_IsObject(e)) return skv_error("%s: header field 'settings.corpora' entry is not an object", path);
        if (skv_json_str(e, "name", ci->name, sizeof ci->name, path, "settings.corpora[]") ||
            skv_json_str(e, "sha256", ci->sha256, sizeof ci->sha256, path, "settings.corpora[]") ||
            skv_json_int(e, "bytes", 0, 1ll << 52, &v, path, "settings.corpora[]"))
            return -1;
        if (strlen(ci->sha256) != 64 || !skv_meta_is_hex(ci->sha256))
            return skv_error("%s: header field 'settings.corpora[].sha256' is not 64 hex digits", path);
        ci->bytes = v;
    }
    return 0;
}
