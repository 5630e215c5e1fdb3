/* report_page.h — report.html's style sheet and script (report_page.c), inlined into every
 * page: the script reads the JSON in <script id="dp-data"> and draws the curves and the heat
 * map as SVG, each plotted series' values kept in data-x/data-y attributes (what the tests
 * read back from the rendered page). */
#ifndef DPTRAIN_REPORT_PAGE_H
#define DPTRAIN_REPORT_PAGE_H

extern const char report_page_css[];
extern const char report_page_js[];

#endif
