/* options.c: policy specs from the policies' option tables (policy.h): parsing
 * "name[:opt[=value]]...", setting one option by name, canonical labels, and the --help text.
 * Nothing here knows a particular policy: every rule comes from skv_opt_desc rows. */
#include "policy.h"
#include "common/util.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* name equality with '-' and '_' alike (CLI flags write '-') */
static bool same_name(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '-' || *a == '_') && (*b == '-' || *b == '_'))) return false;
    return *a == *b;
}

static const skv_opt_desc *find_opt(const skv_policy_desc *d, const char *name) {
    for (int i = 0; i < d->n_opts; i++)
        if (same_name(d->opts[i].name, name) || (d->opts[i].alias && same_name(d->opts[i].alias, name)))
            return &d->opts[i];
    return NULL;
}

/* the enum option (marked bare) that has `value` among its names, and the index */
static const skv_opt_desc *find_bare_value(const skv_policy_desc *d, const char *value, int *idx) {
    for (int i = 0; i < d->n_opts; i++) {
        const skv_opt_desc *o = &d->opts[i];
        if (o->type != SKV_OPT_ENUM || !(o->flags & SKV_OPT_BARE)) continue;
        for (int k = 0; o->values[k]; k++)
            if (!strcmp(o->values[k], value)) { *idx = k; return o; }
    }
    return NULL;
}

const skv_opt_desc *skv_policy_any_option(const char *name) {
    for (int i = 0; i < skv_policy_count(); i++) {
        const skv_opt_desc *o = find_opt(skv_policy_at(i), name);
        if (o) return o;
    }
    return NULL;
}

static void list_values(const skv_opt_desc *o, char *buf, size_t n) {
    size_t w = 0;
    buf[0] = 0;
    for (int k = 0; o->values[k] && w < n; k++) w += (size_t)snprintf(buf + w, n - w, "%s%s", k ? ", " : "", o->values[k]);
}

static void list_opts(const skv_policy_desc *d, char *buf, size_t n) {
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < d->n_opts && w < n; i++)
        w += (size_t)snprintf(buf + w, n - w, "%s%s", i ? ", " : "", d->opts[i].name);
    if (!d->n_opts) snprintf(buf, n, "none");
}

/* Parse value for option o into *out (as double; enum index, bool 0/1). -1 + error. */
static int parse_value(const skv_opt_desc *o, const char *value, double *out) {
    char *end = NULL;
    switch (o->type) {
    case SKV_OPT_BOOL:
        if (!value || !strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "on")) {
            *out = 1;
            return 0;
        }
        if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "off")) {
            *out = 0;
            return 0;
        }
        return skv_error("option %s takes no value or one of 1/0, true/false (not '%s')", o->name, value);
    case SKV_OPT_ENUM: {
        char vals[256];
        list_values(o, vals, sizeof vals);
        if (!value) return skv_error("option %s needs a value (%s)", o->name, vals);
        for (int k = 0; o->values[k]; k++)
            if (!strcmp(o->values[k], value)) { *out = k; return 0; }
        return skv_error("unknown %s '%s' (%s)", o->name, value, vals);
    }
    case SKV_OPT_INT: {
        if (!value) return skv_error("option %s needs a value (an integer in [%g, %g])", o->name, o->lo, o->hi);
        errno = 0;
        long x = strtol(value, &end, 10);
        if (errno || end == value || *end || x < o->lo || x > o->hi)
            return skv_error("option %s=%s is not an integer in [%g, %g]", o->name, value, o->lo, o->hi);
        *out = (double)x;
        return 0;
    }
    case SKV_OPT_FLOAT: {
        if (!value) return skv_error("option %s needs a value (a number in [%g, %g])", o->name, o->lo, o->hi);
        errno = 0;
        double x = strtod(value, &end);
        if (errno || end == value || *end || !(x >= o->lo && x <= o->hi))
            return skv_error("option %s=%s is not a number in [%g, %g]", o->name, value, o->lo, o->hi);
        *out = x;
        return 0;
    }
    }
    return skv_error("option %s: bad type", o->name);
}

static void put(skv_policy_spec *s, const skv_opt_desc *o, double v) {
    unsigned char *p = s->opts + o->off;
    switch (o->type) {
    case SKV_OPT_INT: case SKV_OPT_ENUM: { int x = (int)v; memcpy(p, &x, sizeof x); break; }
    case SKV_OPT_FLOAT: { float x = (float)v; memcpy(p, &x, sizeof x); break; }
    case SKV_OPT_BOOL: { bool x = v != 0; memcpy(p, &x, sizeof x); break; }
    }
}

double skv_opt_get(const skv_policy_spec *s, const skv_opt_desc *o) {
    const unsigned char *p = s->opts + o->off;
    switch (o->type) {
    case SKV_OPT_INT: case SKV_OPT_ENUM: { int x; memcpy(&x, p, sizeof x); return x; }
    case SKV_OPT_FLOAT: { float x; memcpy(&x, p, sizeof x); return x; }
    case SKV_OPT_BOOL: { bool x; memcpy(&x, p, sizeof x); return x; }
    }
    return 0;
}

int skv_policy_option_check(const char *name, const char *value) {
    const skv_opt_desc *o = skv_policy_any_option(name);
    double v;
    if (!o) return skv_error("no policy has an option '%s'", name);
    return parse_value(o, value, &v);
}

int skv_policy_spec_default(const char *name, skv_policy_spec *out) {
    const skv_policy_desc *d = name ? skv_policy_find(name) : NULL;
    if (!d) return skv_error("unknown KV policy '%s' (known: %s)", name ? name : "", skv_policy_names());
    if (d->opts_size > SKV_POLICY_OPTS_MAX)
        return skv_error("policy %s: options struct of %zu bytes > %d", d->name, d->opts_size, SKV_POLICY_OPTS_MAX);
    memset(out, 0, sizeof *out);
    out->desc = d;
    for (int i = 0; i < d->n_opts; i++) put(out, &d->opts[i], d->opts[i].def);
    return 0;
}

int skv_policy_spec_set(skv_policy_spec *s, const char *name, const char *value) {
    const skv_policy_desc *d = s->desc;
    const skv_opt_desc *o = find_opt(d, name);
    double v;
    if (!o && !value) {
        int idx;
        if ((o = find_bare_value(d, name, &idx))) { put(s, o, idx); return 0; }
    }
    if (!o) {
        char opts[512];
        list_opts(d, opts, sizeof opts);
        const skv_opt_desc *other = skv_policy_any_option(name);
        /* an option of another policy: a bad value is reported as such first */
        if (other && value && parse_value(other, value, &v)) return -1;
        return skv_error("policy %s has no option '%s' (its options: %s)", d->name, name, opts);
    }
    if (parse_value(o, value, &v)) return -1;
    put(s, o, v);
    return 0;
}

bool skv_policy_spec_needs_map(const skv_policy_spec *s) {
    if (s->desc->needs_map) return s->desc->needs_map(s->opts);
    return (s->desc->caps & SKV_POLICY_NEEDS_SLM) != 0;
}

int skv_policy_spec_parse(const char *spec, skv_policy_spec *out) {
    char buf[512];
    if (!spec || !*spec || strlen(spec) >= sizeof buf) return skv_error("policy spec '%s': empty or too long", spec ? spec : "");
    strcpy(buf, spec);
    char *save = NULL, *tok = strtok_r(buf, ":,", &save);
    if (!tok) return skv_error("policy spec '%s': no policy name", spec);
    if (skv_policy_spec_default(tok, out)) return -1;
    while ((tok = strtok_r(NULL, ":,", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq) *eq = 0;
        if (skv_policy_spec_set(out, tok, eq ? eq + 1 : NULL)) return skv_error_prefix("policy spec '%s'", spec);
    }
    return 0;
}

void skv_policy_spec_label(const skv_policy_spec *s, char *buf, size_t n) {
    const skv_policy_desc *d = s->desc;
    size_t w = (size_t)snprintf(buf, n, "%s", d->name);
    bool prev_named = false;
    for (int i = 0; i < d->n_opts && w < n; i++) {
        const skv_opt_desc *o = &d->opts[i];
        const double v = skv_opt_get(s, o);
        const bool at_ref = o->type == SKV_OPT_FLOAT ? (float)v == (float)o->label_ref : v == o->label_ref;
        const bool named = ((o->flags & SKV_OPT_LABEL_ALWAYS) || !at_ref) && (!(o->flags & SKV_OPT_LABEL_WITH_PREV) || prev_named);
        prev_named = named;
        if (!named) continue;
        const char *key = o->alias ? o->alias : o->name;
        switch (o->type) {
        case SKV_OPT_ENUM:
            if (o->flags & SKV_OPT_BARE) w += (size_t)snprintf(buf + w, n - w, ":%s", o->values[(int)v]);
            else w += (size_t)snprintf(buf + w, n - w, ":%s=%s", key, o->values[(int)v]);
            break;
        case SKV_OPT_BOOL:
            if (v != 0) w += (size_t)snprintf(buf + w, n - w, ":%s", key);
            else w += (size_t)snprintf(buf + w, n - w, ":%s=false", key);
            break;
        case SKV_OPT_INT: w += (size_t)snprintf(buf + w, n - w, ":%s=%d", key, (int)v); break;
        case SKV_OPT_FLOAT: w += (size_t)snprintf(buf + w, n - w, ":%s=%g", key, v); break;
        }
    }
}

static size_t help_caps(char *b, size_t n, unsigned caps) {
    static const struct { unsigned bit; const char *what; } names[] = {
        {SKV_POLICY_KEEPS_ALL, "no budget"}, {SKV_POLICY_NEEDS_SLM, "runs the small model"},
        {SKV_POLICY_COLD_TIER, "cold tier"}, {SKV_POLICY_QUERY, "query-aware"},
        {SKV_POLICY_MARGINAL, "V-only tokens"}, {SKV_POLICY_GPU, "GPU decode"},
    };
    size_t w = 0;
    int k = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names && w < n; i++)
        if (caps & names[i].bit) w += (size_t)snprintf(b + w, n - w, "%s%s", k++ ? ", " : " [", names[i].what);
    if (k && w < n) w += (size_t)snprintf(b + w, n - w, "]");
    return w;
}

const char *skv_policy_help(void) {
    static char text[16384];   /* every policy and option (8 KiB overflowed at 12 policies) */
    if (text[0]) return text;
    size_t w = 0, n = sizeof text;
    for (int i = 0; i < skv_policy_count() && w < n; i++) {
        const skv_policy_desc *d = skv_policy_at(i);
        w += (size_t)snprintf(text + w, n - w, "  %-13s %s", d->name, d->summary);
        if (w < n) w += help_caps(text + w, n - w, d->caps);
        if (w < n) w += (size_t)snprintf(text + w, n - w, "\n");
        for (int j = 0; j < d->n_opts && w < n; j++) {
            const skv_opt_desc *o = &d->opts[j];
            if (o->flags & SKV_OPT_HIDDEN) continue;
            char arg[192], def[64];
            switch (o->type) {
            case SKV_OPT_ENUM: {
                char vals[128];
                list_values(o, vals, sizeof vals);
                for (char *c = vals; *c; c++) if (*c == ',') *c = '|';
                snprintf(arg, sizeof arg, "%s=%s", o->name, vals);
                for (char *c = arg; *c; c++) if (*c == ' ') memmove(c, c + 1, strlen(c));
                snprintf(def, sizeof def, "%s", o->values[(int)o->def]);
                break;
            }
            case SKV_OPT_BOOL: snprintf(arg, sizeof arg, "%s", o->name); snprintf(def, sizeof def, "%s", o->def ? "on" : "off"); break;
            case SKV_OPT_INT: snprintf(arg, sizeof arg, "%s=N", o->name); snprintf(def, sizeof def, "%g", o->def); break;
            case SKV_OPT_FLOAT: snprintf(arg, sizeof arg, "%s=F", o->name); snprintf(def, sizeof def, "%g", o->def); break;
            }
            w += (size_t)snprintf(text + w, n - w, "      %-24s %s (default %s%s%s)\n", arg, o->help, def,
                                  o->alias ? "; short: " : "", o->alias ? o->alias : "");
        }
    }
    return text;
}
