/* report_html.h: one self-contained HTML page describing a profile (mapgen --report):
 * metadata, an SVG heatmap of the mapping metric's similarity matrix, the early-stop
 * curve as an SVG line chart, and the mapping table. No scripts, no external files. */
#ifndef SKV_REPORT_HTML_H
#define SKV_REPORT_HTML_H
#include "runtime/format/profile.h"

int skv_report_html(const skv_profile *p, const char *path);
/* The same with a line of plain text (escaped) shown under the calibration, e.g. how two
 * tokenizers aligned (mapgen --report-only); NULL: none. */
int skv_report_html_note(const skv_profile *p, const char *path, const char *note);

#endif
