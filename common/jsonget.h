/* jsonget.h: validated field access on cJSON objects for the file-format readers.
 * Each getter records "<path>: header field '<ctx>.<key>' <problem>" and returns -1. */
#ifndef SKV_JSONGET_H
#define SKV_JSONGET_H
#include <stdbool.h>
#include <stddef.h>
#include <cJSON.h>

int skv_json_int(const cJSON *o, const char *key, long long lo, long long hi, long long *out,
                 const char *path, const char *ctx);
int skv_json_num(const cJSON *o, const char *key, double lo, double hi, double *out,
                 const char *path, const char *ctx);
int skv_json_bool(const cJSON *o, const char *key, bool *out, const char *path, const char *ctx);
/* Copies into dst (cap bytes incl. NUL); refuses longer strings. */
int skv_json_str(const cJSON *o, const char *key, char *dst, size_t cap, const char *path, const char *ctx);
/* Object or array member of the given kind (cJSON_Object / cJSON_Array), NULL + error. */
const cJSON *skv_json_child(const cJSON *o, const char *key, int kind, const char *path, const char *ctx);

#endif
