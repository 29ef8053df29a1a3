/* args.c: option parsing and error printing shared by the smallkv subcommands. */
#include "cli.h"
#include "include/smallkv.h"
#include <errno.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

bool cli_str(int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) { fprintf(stderr, "smallkv: option %s needs a value\n", argv[*i]); return false; }
    *out = argv[++*i];
    return true;
}

bool cli_int(int argc, char **argv, int *i, long lo, long hi, int *out) {
    const char *opt = argv[*i], *v;
    if (!cli_str(argc, argv, i, &v)) return false;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "smallkv: option %s: '%s' is not an integer in [%ld, %ld]\n", opt, v, lo, hi);
        return false;
    }
    *out = (int)x;
    return true;
}

bool cli_float(int argc, char **argv, int *i, double lo, double hi, float *out) {
    const char *opt = argv[*i], *v;
    if (!cli_str(argc, argv, i, &v)) return false;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "smallkv: option %s: '%s' is not a number in [%g, %g]\n", opt, v, lo, hi);
        return false;
    }
    *out = (float)x;
    return true;
}

int cli_usage_error(const char *usage, const char *fmt, ...) {
    if (fmt && *fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs("smallkv: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    fputs(usage, stderr);
    return CLI_USAGE;
}

int cli_fail(const char *context) {
    if (context) fprintf(stderr, "smallkv: %s: %s\n", context, smallkv_last_error());
    else fprintf(stderr, "smallkv: %s\n", smallkv_last_error());
    return CLI_ERR;
}

bool cli_prefill_attn(int argc, char **argv, int *i) {
    const char *v;
    if (!cli_str(argc, argv, i, &v)) return false;
    if (smallkv_set_prefill_attention(v) != 0) {
        fprintf(stderr, "smallkv: option --prefill-attn: '%s' is not exact or bf16\n", v);
        return false;
    }
    if (!strcmp(v, "bf16") && strcmp(smallkv_prefill_attention(), "bf16"))
        fprintf(stderr, "smallkv: --prefill-attn bf16 needs AMX-BF16, which this CPU lacks: exact attention runs\n");
    return true;
}

bool cli_flag_name(const char *a, char *name, size_t n, const char **value) {
    if (a[0] != '-' || a[1] != '-' || !a[2]) return false;
    const char *eq = strchr(a + 2, '=');
    const size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
    if (len == 0 || len >= n) return false;
    memcpy(name, a + 2, len);
    name[len] = 0;
    *value = eq ? eq + 1 : NULL;
    return true;
}

void cli_set_threads(int n) {
    if (n > 0) omp_set_num_threads(n);
}
