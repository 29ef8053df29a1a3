/* jsonget.c: checked getters for JSON header fields (type, range, length). */
#include "jsonget.h"
#include "util.h"
#include <math.h>
#include <string.h>

static int missing(const char *path, const char *ctx, const char *key, const char *want) {
    return skv_error("%s: header field '%s%s%s' missing or not %s", path, ctx ? ctx : "", ctx ? "." : "", key, want);
}

int skv_json_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                 const char *path, const char *ctx) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return missing(path, ctx, key, "a number");
    if (v->valuedouble < lo || v->valuedouble > hi)
        return skv_error("%s: header field '%s%s%s' = %g out of range [%g, %g]", path, ctx ? ctx : "",
                         ctx ? "." : "", key, v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return 0;
}

int skv_json_int(const cJSON *o, const char *key, long long lo, long long hi, long long *out,
                 const char *path, const char *ctx) {
    double d;
    if (skv_json_num(o, key, (double)lo, (double)hi, &d, path, ctx)) return -1;
    if (d != floor(d)) return missing(path, ctx, key, "an integer");
    *out = (long long)d;
    return 0;
}

int skv_json_bool(const cJSON *o, const char *key, bool *out, const char *path, const char *ctx) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsBool(v)) return missing(path, ctx, key, "a boolean");
    *out = cJSON_IsTrue(v);
    return 0;
}

int skv_json_str(const cJSON *o, const char *key, char *dst, size_t cap, const char *path, const char *ctx) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v) || !v->valuestring) return missing(path, ctx, key, "a string");
    size_t n = strlen(v->valuestring);
    if (n >= cap)
        return skv_error("%s: header field '%s%s%s' too long (%zu bytes, max %zu)", path, ctx ? ctx : "",
                         ctx ? "." : "", key, n, cap - 1);
    memcpy(dst, v->valuestring, n + 1);
    return 0;
}

const cJSON *skv_json_child(const cJSON *o, const char *key, int kind, const char *path, const char *ctx) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || (v->type & 0xff) != kind) {
        missing(path, ctx, key, kind == cJSON_Array ? "an array" : "an object");
        return NULL;
    }
    return v;
}
