/* mapgen.c: merge calibration files, map every LLM head to its best SLM head, choose the
 * SLM early-stop depth, and write the profile (method.md section 4).
 *   mapgen CALIB [CALIB ...] -o PROFILE [--metric jaccard|cosine|rowcos] [--eps E]
 *          [--max-depth S] [--report FILE.html]
 *   mapgen CALIB [CALIB ...] --report-only [--report FILE.html] [...]
 * A cross-tokenizer calibration (two tokenizers, header "alignment") gets the report only:
 * the runtime feeds one token stream to both models, so its profile could not be used. */
#include "calibrate/calib.h"
#include "runtime/format/profile.h"
#include "calibrate/mapping.h"
#include "report_html.h"
#include "common/util.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAPGEN_TOOL "mapgen 0.1"

static void usage(FILE *f) {
    fprintf(f,
        "usage: mapgen CALIB [CALIB ...] -o PROFILE [options]\n"
        "       mapgen CALIB [CALIB ...] --report-only [--report FILE.html] [options]\n"
        "Merge calibration files (shards of one run), map each LLM head to its most similar\n"
        "SLM head, choose the SLM early-stop depth and write a SmallKV profile.\n"
        "  -o, --output PROFILE   profile to write (required unless --report-only)\n"
        "  --report-only          write no profile: print the pair's similarity table (and the\n"
        "                         HTML report with --report). The only choice for a calibration\n"
        "                         of two models with different tokenizers: the runtime feeds one\n"
        "                         token stream to both, so such a pair has no deployable profile\n"
        "  --metric NAME          mapping metric: jaccard (default), cosine, rowcos\n"
        "  --eps E                depth = smallest s with R(s) >= (1-E) R(l) (default 0.01)\n"
        "  --max-depth S          cap the depth at S SLM layers (default: no cap)\n"
        "  --report FILE.html     also write a self-contained HTML report\n"
        "  -q, --quiet            print only errors\n"
        "  -h, --help             this text\n");
}

/* The pair at a glance (--report-only): per metric, the mean over LLM heads of the best SLM
 * head's mean similarity, over all SLM layers (the paper's cross-model number) and within
 * the chosen depth, and the share of LLM heads whose best head scores at least 0.5. */
static void print_pair_table(const skv_profile *p, const skv_calib_align *al) {
    printf("pair: LLM %s (%d x %d heads), SLM %s (%d x %d heads), %lld windows, %lld tokens\n",
           p->llm.name, p->llm.n_layer, p->llm.n_head, p->slm.name, p->slm.n_layer, p->slm.n_head,
           (long long)p->windows, (long long)p->tokens);
    if (al->present)
        printf("alignment: %s, %lld of %lld LLM tokens matched (%.1f%%), of %lld SLM tokens (%.1f%%)\n",
               SKV_CALIB_ALIGN_METHOD, (long long)al->matched, (long long)al->llm_tokens,
               al->llm_tokens ? 100.0 * al->matched / al->llm_tokens : 0.0, (long long)al->slm_tokens,
               al->slm_tokens ? 100.0 * al->matched / al->slm_tokens : 0.0);
    else
        printf("alignment: one tokenizer (every token shared)\n");
    printf("%-8s %12s %12s %10s\n", "metric", "best(all)", "best(depth)", ">=0.5");
    for (int mi = 0; mi < p->n_metrics; mi++) {
        const float *S = p->sim + (size_t)mi * p->n_llm * p->n_slm;
        double best_all = 0, best_depth = 0;
        int high = 0, cand = p->depth * p->slm.n_head;
        for (int i = 0; i < p->n_llm; i++) {
            const float *row = S + (size_t)i * p->n_slm;
            float b = row[0], bd = row[0];
            for (int j = 1; j < p->n_slm; j++) {
                if (row[j] > b) b = row[j];
                if (j < cand && row[j] > bd) bd = row[j];
            }
            best_all += b; best_depth += bd; high += b >= 0.5f;
        }
        printf("%-8s %12.4f %12.4f %9.1f%%\n", skv_metric_name(p->metric_ids[mi]), best_all / p->n_llm,
               best_depth / p->n_llm, 100.0 * high / p->n_llm);
    }
    printf("depth %d of %d SLM layers (by %s)\n", p->depth, p->slm.n_layer, skv_metric_name(p->metric));
}

static const char **inputs;   /* (argc) calibration paths; freed on every exit path */

static int bad_arg(const char *fmt, const char *a) {
    free(inputs);
    inputs = NULL;
    fprintf(stderr, "mapgen: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(run 'mapgen --help' for usage)\n");
    return 2;
}

int main(int argc, char **argv) {
    const char *out = NULL, *report = NULL;
    int metric = SKV_METRIC_JACCARD, max_depth = 0, quiet = 0, n_in = 0, report_only = 0;
    double eps = 0.01;
    inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) { fprintf(stderr, "mapgen: out of memory\n"); return 1; }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); free(inputs); return 0; }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "--report-only")) report_only = 1;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) { if (!has_val) return bad_arg("%s needs a file name", a); out = argv[++i]; }
        else if (!strcmp(a, "--report")) { if (!has_val) return bad_arg("%s needs a file name", a); report = argv[++i]; }
        else if (!strcmp(a, "--metric")) {
            if (!has_val) return bad_arg("%s needs a value", a);
            metric = skv_metric_parse(argv[++i]);
            if (metric < 0) return bad_arg("unknown metric '%s' (jaccard, cosine, rowcos)", argv[i]);
        } else if (!strcmp(a, "--eps")) {
            if (!has_val) return bad_arg("%s needs a value", a);
            char *end;
            errno = 0;
            eps = strtod(argv[++i], &end);
            if (errno || *end || end == argv[i] || !(eps >= 0 && eps < 1)) return bad_arg("--eps '%s' must be a number in [0, 1)", argv[i]);
        } else if (!strcmp(a, "--max-depth")) {
            if (!has_val) return bad_arg("%s needs a value", a);
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || end == argv[i] || v < 1 || v > 100000) return bad_arg("--max-depth '%s' must be a positive integer", argv[i]);
            max_depth = (int)v;
        } else if (a[0] == '-' && a[1]) return bad_arg("unknown option '%s'", a);
        else inputs[n_in++] = a;
    }
    if (n_in == 0) return bad_arg("%s", "no calibration files given");
    if (report_only && out) return bad_arg("%s", "--report-only writes no profile: drop -o");
    if (!out && !report_only) return bad_arg("%s", "no output profile given (-o PROFILE, or --report-only)");

    skv_calib *acc = NULL;
    for (int i = 0; i < n_in; i++) {
        skv_calib *c = skv_calib_read(inputs[i]);
        if (!c) { fprintf(stderr, "mapgen: %s\n", skv_last_error()); skv_calib_free(acc); free(inputs); return 1; }
        if (!quiet) skv_calib_print_summary(c, inputs[i], stdout);
        if (!acc) { acc = c; continue; }
        int rc = skv_calib_merge(acc, c, inputs[0], inputs[i]);
        skv_calib_free(c);
        if (rc) { fprintf(stderr, "mapgen: %s\n", skv_last_error()); skv_calib_free(acc); free(inputs); return 1; }
    }
    if (acc->align.present && !report_only) {
        fprintf(stderr, "mapgen: %s: the SLM and the LLM have different tokenizers (a cross-tokenizer calibration, "
                        "%.1f%% of the LLM's tokens aligned); refusing to write a profile: the SmallKV runtime feeds one "
                        "token stream to both models, so it cannot run this pair. Use --report-only (with --report FILE.html) "
                        "to see the pair's similarities\n", inputs[0],
                acc->align.llm_tokens ? 100.0 * acc->align.matched / acc->align.llm_tokens : 0.0);
        skv_calib_free(acc);
        free(inputs);
        return 1;
    }
    if (acc->n_windows < acc->set.windows_planned && !quiet)
        printf("note: %lld of %d planned windows present\n", (long long)acc->n_windows, acc->set.windows_planned);
    skv_calib_align align = acc->align;
    skv_profile *p = skv_profile_build(acc, metric, eps, max_depth, MAPGEN_TOOL);
    skv_calib_free(acc);
    if (!p) { fprintf(stderr, "mapgen: %s\n", skv_last_error()); free(inputs); return 1; }
    if (report_only) {
        char note[256];
        if (align.present)
            snprintf(note, sizeof note, "two tokenizers, similarities over the tokens both split alike (%s): %lld of %lld LLM "
                     "tokens (%.1f%%), %lld SLM tokens; report only, no deployable profile", SKV_CALIB_ALIGN_METHOD,
                     (long long)align.matched, (long long)align.llm_tokens,
                     align.llm_tokens ? 100.0 * align.matched / align.llm_tokens : 0.0, (long long)align.slm_tokens);
        int rc = report && skv_report_html_note(p, report, align.present ? note : NULL) ? 1 : 0;
        if (rc) fprintf(stderr, "mapgen: %s\n", skv_last_error());
        else if (!quiet) {
            print_pair_table(p, &align);
            if (report) printf("wrote %s\n", report);
        }
        skv_profile_free(p);
        free(inputs);
        return rc;
    }
    if (max_depth > p->slm.n_layer && !quiet)
        printf("note: --max-depth %d exceeds the SLM's %d layers\n", max_depth, p->slm.n_layer);
    int rc = 0;
    if (skv_profile_write(p, out)) { fprintf(stderr, "mapgen: %s\n", skv_last_error()); rc = 1; }
    if (!rc && report && skv_report_html(p, report)) { fprintf(stderr, "mapgen: %s\n", skv_last_error()); rc = 1; }
    if (!rc && !quiet) {
        printf("merged %d file%s: %lld windows, %lld tokens\n", n_in, n_in > 1 ? "s" : "", (long long)p->windows, (long long)p->tokens);
        printf("mean matched similarity (map by %s):", skv_metric_name(metric));
        for (int mi = 0; mi < p->n_metrics; mi++)
            printf(" %s %.4f", skv_metric_name(p->metric_ids[mi]), skv_profile_mean_matched(p, p->metric_ids[mi]));
        int l = p->slm.n_layer;
        printf("\nearly stop: depth %d of %d SLM layers (eps %g%s)\n", p->depth, l, eps,
               p->depth != p->depth_eps ? ", capped by --max-depth" : "");
        int rows[6] = {1, p->depth - 1, p->depth, p->depth + 1, l, 0}, last = 0;
        for (int k = 0; k < 5; k++) {
            int s = rows[k];
            if (s < 1 || s > l || s <= last) continue;
            printf("  R(%d) = %.4f (%.1f%%)\n", s, p->curve[s - 1],
                   p->curve[l - 1] != 0 ? 100.0 * p->curve[s - 1] / p->curve[l - 1] : 0.0);
            last = s;
        }
        if (p->stability.present)
            printf("stability (even vs odd windows, %lld + %lld): %.1f%% of LLM heads map alike, "
                   "one half's mapping loses %.2f%% of the other's matched %s\n",
                   (long long)p->stability.windows_even, (long long)p->stability.windows_odd,
                   100.0 * p->stability.agree, 100.0 * p->stability.loss, skv_metric_name(metric));
        else
            printf("stability: not measured (the calibration has no split halves)\n");
        printf("wrote %s%s%s\n", out, report ? " and " : "", report ? report : "");
    }
    skv_profile_free(p);
    free(inputs);
    return rc;
}
