/* report_html.h: one self-contained HTML page describing a profile (mapgen --report):
 * metadata, an SVG heatmap of the mapping metric's similarity matrix, the early-stop
 * curve as an SVG line chart, and the mapping table. No scripts, no external files. */
#ifndef SKV_REPORT_HTML_H
#define SKV_REPORT_HTML_H
#include "profiles/profile.h"

int skv_report_html(const skv_profile *p, const char *path);

#endif
