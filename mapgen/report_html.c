/* report_html.c: write the profile report page (see report_html.h). The heatmap is
 * block-averaged to at most MAX_CELLS per axis so the page stays a few hundred KB. */
#include "report_html.h"
#include "common/util.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_CELLS 168

static void esc(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* value in [0,1] -> a dark-blue .. teal .. yellow ramp */
static void ramp(double t, int rgb[3]) {
    static const int stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (!(t >= 0)) t = 0;
    if (t > 1) t = 1;
    double x = t * 4;
    int k = (int)x;
    if (k > 3) k = 3;
    double u = x - k;
    for (int c = 0; c < 3; c++) rgb[c] = (int)lround(stops[k][c] + u * (stops[k + 1][c] - stops[k][c]));
}

static void fp_rows(FILE *f, const char *role, const skv_model_fp *fp) {
    fprintf(f, "<tr><th>%s</th><td>", role);
    esc(f, fp->name[0] ? fp->name : "?");
    fprintf(f, " (");
    esc(f, fp->arch);
    fprintf(f, "), %d layers, %d heads (%d KV), head dim %d, dim %d, vocab %d<br>tokenizer ", fp->n_layer, fp->n_head,
            fp->n_kv_head, fp->head_dim, fp->dim, fp->vocab);
    esc(f, fp->tokenizer_hash);
    fprintf(f, ", weights ");
    esc(f, fp->weight_hash);
    fprintf(f, "</td></tr>\n");
}

static void heatmap(FILE *f, const skv_profile *p, const float *S) {
    int rows = p->n_llm, cols = p->n_slm;
    int big = rows > cols ? rows : cols;
    int b = (big + MAX_CELLS - 1) / MAX_CELLS;
    int R = (rows + b - 1) / b, C = (cols + b - 1) / b;
    float *cell = calloc((size_t)R * C, sizeof *cell);
    if (!cell) { fprintf(f, "<p>(heatmap omitted: out of memory)</p>\n"); return; }
    double lo = INFINITY, hi = -INFINITY;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            double acc = 0;
            int n = 0;
            for (int i = r * b; i < rows && i < (r + 1) * b; i++)
                for (int j = c * b; j < cols && j < (c + 1) * b; j++) { acc += S[(size_t)i * cols + j]; n++; }
            cell[(size_t)r * C + c] = (float)(acc / n);
            if (acc / n < lo) lo = acc / n;
            if (acc / n > hi) hi = acc / n;
        }
    if (!(hi > lo)) hi = lo + 1;
    int px = 4 * C > 900 ? 900 : 4 * C;
    fprintf(f, "<p>Rows: %d LLM heads (layer-major, top = layer 0); columns: %d SLM heads. ", rows, cols);
    if (b > 1) fprintf(f, "Each cell averages a %dx%d block. ", b, b);
    fprintf(f, "Colour from %.4f (dark) to %.4f (yellow); white dots mark the chosen mapping; "
               "the red line is the early-stop depth.</p>\n", lo, hi);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" "
               "preserveAspectRatio=\"none\" shape-rendering=\"crispEdges\">\n", C, R, px, (int)((double)px * R / C));
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            int rgb[3];
            ramp((cell[(size_t)r * C + c] - lo) / (hi - lo), rgb);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"1\" height=\"1\" fill=\"#%02x%02x%02x\"/>\n", c, r, rgb[0], rgb[1], rgb[2]);
        }
    for (int i = 0; i < rows; i++)
        fprintf(f, "<circle cx=\"%.3f\" cy=\"%.3f\" r=\"%.3f\" fill=\"white\"/>\n", (p->map[i] + 0.5) / b, (i + 0.5) / b, 0.35);
    double xd = (double)p->depth * p->slm.n_head / b;
    fprintf(f, "<line x1=\"%.3f\" y1=\"0\" x2=\"%.3f\" y2=\"%d\" stroke=\"red\" stroke-width=\"0.4\"/>\n", xd, xd, R);
    fprintf(f, "</svg>\n");
    free(cell);
}

static void curve_chart(FILE *f, const skv_profile *p) {
    int l = p->slm.n_layer;
    double W = 640, H = 320, ml = 60, mr = 20, mt = 20, mb = 40;
    double lo = p->curve[0], hi = p->curve[l - 1];
    for (int s = 0; s < l; s++) { if (p->curve[s] < lo) lo = p->curve[s]; if (p->curve[s] > hi) hi = p->curve[s]; }
    if (!(hi > lo)) { hi = lo + 0.01; lo -= 0.01; }
    double pad = 0.05 * (hi - lo);
    lo -= pad; hi += pad;
#define X(s) (ml + (l > 1 ? ((double)(s) - 1) / (l - 1) : 0.5) * (W - ml - mr))
#define Y(v) (mt + (hi - (v)) / (hi - lo) * (H - mt - mb))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-size=\"11\" font-family=\"sans-serif\">\n", W, H);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n", ml, mt, W - ml - mr, H - mt - mb);
    for (int k = 0; k <= 4; k++) {
        double v = lo + (hi - lo) * k / 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3f</text>\n", ml - 4, Y(v) + 4, v);
    }
    int step = l > 16 ? (l + 11) / 12 : 1;
    for (int s = 1; s <= l; s += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%d</text>\n", X(s), H - mb + 14, s);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">SLM depth s (layers run)</text>\n", (W + ml) / 2, H - 6);
    double target = (1 - p->eps) * p->curve[l - 1];
    if (target >= lo && target <= hi)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#c60\" stroke-dasharray=\"4 3\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\">(1-eps) R(l)</text>\n", ml, Y(target), W - mr, Y(target), ml + 4, Y(target) - 4);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"red\"/>\n", X(p->depth), mt, X(p->depth), H - mb);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#235\" stroke-width=\"2\" points=\"");
    for (int s = 1; s <= l; s++) fprintf(f, "%.1f,%.1f ", X(s), Y(p->curve[s - 1]));
    fprintf(f, "\"/>\n");
    for (int s = 1; s <= l; s++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#235\"><title>s=%d R=%.4f</title></circle>\n",
                X(s), Y(p->curve[s - 1]), s, p->curve[s - 1]);
    fprintf(f, "</svg>\n");
#undef X
#undef Y
}

int skv_report_html(const skv_profile *p, const char *path) { return skv_report_html_note(p, path, NULL); }

int skv_report_html_note(const skv_profile *p, const char *path, const char *note) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return skv_error("%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return skv_error("%s: cannot create: %s", tmp, strerror(errno));
    const skv_calib_settings *c = &p->calib;
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>smallkv profile report</title>\n"
               "<style>body{font-family:sans-serif;margin:1.5em;max-width:1100px}table{border-collapse:collapse;font-size:12px}"
               "td,th{border:1px solid #ccc;padding:2px 5px;text-align:left}th{background:#f2f2f2}"
               ".map td{font-family:monospace}</style>\n</head>\n<body>\n");
    fprintf(f, "<h1>smallkv profile</h1>\n<h2>Models and calibration</h2>\n<table>\n");
    fp_rows(f, "LLM", &p->llm);
    fp_rows(f, "SLM", &p->slm);
    fprintf(f, "<tr><th>calibration</th><td>%lld windows of %d tokens (%d planned), %lld tokens, K = %d, sinks dropped %d, "
               "%s scores, seed %016llx</td></tr>\n", (long long)p->windows, c->window, c->windows_planned,
            (long long)p->tokens, c->topk, c->sinks, c->normalized ? "normalised" : "raw", (unsigned long long)c->seed);
    for (int i = 0; i < c->n_corpora; i++) {
        fprintf(f, "<tr><th>corpus</th><td>");
        esc(f, c->corpora[i].name);
        fprintf(f, " (%lld bytes), sha256 %s</td></tr>\n", (long long)c->corpora[i].bytes, c->corpora[i].sha256);
    }
    if (note) {
        fprintf(f, "<tr><th>note</th><td>");
        esc(f, note);
        fprintf(f, "</td></tr>\n");
    }
    fprintf(f, "<tr><th>mapping</th><td>metric %s, eps %g, depth %d of %d (eps alone: %d%s)</td></tr>\n",
            skv_metric_name(p->metric), p->eps, p->depth, p->slm.n_layer, p->depth_eps, p->max_depth ? ", capped" : "");
    fprintf(f, "<tr><th>mean matched similarity</th><td>");
    for (int mi = 0; mi < p->n_metrics; mi++)
        fprintf(f, "%s %s %.4f", mi ? "," : "", skv_metric_name(p->metric_ids[mi]), skv_profile_mean_matched(p, p->metric_ids[mi]));
    fprintf(f, "</td></tr>\n<tr><th>tool</th><td>");
    esc(f, p->tool);
    fprintf(f, "</td></tr>\n</table>\n");

    fprintf(f, "<h2>Early-stop curve</h2>\n<p>R(s) = mean over LLM heads of the best %s similarity among SLM layers &lt; s.</p>\n",
            skv_metric_name(p->metric));
    curve_chart(f, p);
    fprintf(f, "<h2>Similarity matrix (%s)</h2>\n", skv_metric_name(p->metric));
    heatmap(f, p, skv_profile_sim(p, p->metric));

    fprintf(f, "<h2>Mapping</h2>\n<p>Each cell: SLM layer.head f(i) (restricted to depth %d) and S(i, f(i)).</p>\n"
               "<table class=\"map\">\n<tr><th>LLM layer</th>", p->depth);
    int H = p->llm.n_head, h = p->slm.n_head, mi = skv_profile_metric_index(p, p->metric);
    for (int k = 0; k < H; k++) fprintf(f, "<th>head %d</th>", k);
    fprintf(f, "</tr>\n");
    for (int L = 0; L < p->llm.n_layer; L++) {
        fprintf(f, "<tr><th>%d</th>", L);
        for (int k = 0; k < H; k++) {
            int i = L * H + k;
            fprintf(f, "<td>%d.%d (%.3f)</td>", p->map[i] / h, p->map[i] % h, p->map_sim[(size_t)mi * p->n_llm + i]);
        }
        fprintf(f, "</tr>\n");
    }
    fprintf(f, "</table>\n</body>\n</html>\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) { unlink(tmp); return skv_error("%s: write failed", path); }
    if (rename(tmp, path) != 0) { int e = errno; unlink(tmp); return skv_error("%s: rename failed: %s", path, strerror(e)); }
    return 0;
}
