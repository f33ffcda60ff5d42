/* `rlhf plot` drawn with cairo: small multiples on a white page, PNG (image surface) or SVG. */
#include "common/error.h"
#include "report/plot.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

enum { MAX_PANELS = 24, CELL_W = 360, CELL_H = 230, HEADER_H = 44 };

typedef struct {
    double x0, x1, y0, y1; /* data ranges */
} Range;

static void widen(Range *r, const MetricSeries *m) {
    for (int i = 0; m && i < m->n; i++) {
        r->x0 = fmin(r->x0, m->step[i]), r->x1 = fmax(r->x1, m->step[i]);
        r->y0 = fmin(r->y0, m->value[i]), r->y1 = fmax(r->y1, m->value[i]);
    }
}

static void label(cairo_t *cr, double x, double y, double size, const char *text, double align) {
    cairo_set_font_size(cr, size);
    cairo_text_extents_t e;
    cairo_text_extents(cr, text, &e);
    cairo_move_to(cr, x - align * e.x_advance, y);
    cairo_show_text(cr, text);
}

/* One series as a line (train) or a line with dots (eval), mapped into the plot box. */
static void draw_series(cairo_t *cr, const MetricSeries *m, const Range *r, double bx, double by,
                        double bw, double bh, bool dots) {
    double sx = r->x1 > r->x0 ? bw / (r->x1 - r->x0) : 0,
           sy = r->y1 > r->y0 ? bh / (r->y1 - r->y0) : 0;
    for (int i = 0; i < m->n; i++) {
        double x = bx + (r->x1 > r->x0 ? (m->step[i] - r->x0) * sx : bw / 2);
        double y = by + bh - (r->y1 > r->y0 ? (m->value[i] - r->y0) * sy : bh / 2);
        if (i == 0)
            cairo_move_to(cr, x, y);
        else
            cairo_line_to(cr, x, y);
    }
    cairo_set_line_width(cr, 1.6);
    cairo_stroke(cr);
    for (int i = 0; dots && i < m->n; i++) {
        double x = bx + (r->x1 > r->x0 ? (m->step[i] - r->x0) * sx : bw / 2);
        double y = by + bh - (r->y1 > r->y0 ? (m->value[i] - r->y0) * sy : bh / 2);
        cairo_arc(cr, x, y, 2.6, 0, 2 * M_PI);
        cairo_fill(cr);
    }
}

static void draw_panel(cairo_t *cr, const MetricSet *set, const char *key, double px, double py) {
    char eval_key[300];
    snprintf(eval_key, sizeof eval_key, "eval_%s", key);
    const MetricSeries *train = metrics_series_find(set, key);
    const MetricSeries *eval = metrics_series_find(set, eval_key);
    Range r = {INFINITY, -INFINITY, INFINITY, -INFINITY};
    widen(&r, train);
    widen(&r, eval);
    bool flat = !(r.y1 > r.y0);
    double pad = flat ? 0 : 0.05 * (r.y1 - r.y0);
    r.y0 -= pad, r.y1 += pad;
    double bx = px + 62, by = py + 28, bw = CELL_W - 80, bh = CELL_H - 62;
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    label(cr, px + CELL_W / 2.0, py + 18, 13, key, 0.5);
    cairo_set_source_rgb(cr, 0.97, 0.97, 0.98);
    cairo_rectangle(cr, bx, by, bw, bh);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.6, 0.6, 0.65);
    cairo_set_line_width(cr, 1);
    cairo_stroke(cr);
    char text[64];
    cairo_set_source_rgb(cr, 0.3, 0.3, 0.3);
    if (flat) { /* one value throughout: say it once, at the line */
        snprintf(text, sizeof text, "%.4g", r.y0);
        label(cr, bx - 4, by + bh / 2 + 4, 10, text, 1);
    } else { /* the data's own extremes (not the padded range), level with them */
        double inset = bh * pad / (r.y1 - r.y0);
        snprintf(text, sizeof text, "%.4g", r.y1 - pad);
        label(cr, bx - 4, by + inset + 4, 10, text, 1);
        snprintf(text, sizeof text, "%.4g", r.y0 + pad);
        label(cr, bx - 4, by + bh - inset + 4, 10, text, 1);
    }
    snprintf(text, sizeof text, "%g", r.x0);
    label(cr, bx, by + bh + 14, 10, text, 0);
    snprintf(text, sizeof text, "step %g", r.x1);
    label(cr, bx + bw, by + bh + 14, 10, text, 1);
    if (train) {
        cairo_set_source_rgb(cr, 0.12, 0.40, 0.75); /* train: blue */
        draw_series(cr, train, &r, bx, by, bw, bh, train->n == 1);
    }
    if (eval) {
        cairo_set_source_rgb(cr, 0.90, 0.45, 0.08); /* eval: orange, with dots */
        draw_series(cr, eval, &r, bx, by, bw, bh, true);
    }
}

static bool ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

int plot_check_available(const char *out_path) {
    return 0;
}

int plot_write(const MetricSet *set, const char *title, const char *out_path) {
    bool svg = ends_with(out_path, ".svg");
    if (!svg && !ends_with(out_path, ".png"))
        return err_set("%s: expected a .png or .svg file name", out_path);
    const char *keys[MAX_PANELS];
    int n = plot_panels(set, keys, MAX_PANELS);
    if (n == 0) return err_set("%s: no logged values to plot", out_path);
    int cols = n <= 4 ? 2 : 3, rows = (n + cols - 1) / cols;
    int width = cols * CELL_W, height = HEADER_H + rows * CELL_H;
    cairo_surface_t *surface = svg ? cairo_svg_surface_create(out_path, width, height)
                                   : cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
    if (cairo_surface_status(surface) != CAIRO_STATUS_SUCCESS) {
        int rc = err_set("%s: cannot create: %s", out_path,
                         cairo_status_to_string(cairo_surface_status(surface)));
        cairo_surface_destroy(surface);
        return rc;
    }
    cairo_t *cr = cairo_create(surface);
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    label(cr, 14, 28, 16, title, 0);
    cairo_set_source_rgb(cr, 0.12, 0.40, 0.75);
    label(cr, width - 110, 28, 12, "train", 0);
    cairo_set_source_rgb(cr, 0.90, 0.45, 0.08);
    label(cr, width - 60, 28, 12, "eval", 0);
    for (int i = 0; i < n; i++)
        draw_panel(cr, set, keys[i], (i % cols) * CELL_W, HEADER_H + (i / cols) * CELL_H);
    cairo_destroy(cr);
    cairo_surface_flush(surface);
    cairo_status_t st =
        svg ? cairo_surface_status(surface) : cairo_surface_write_to_png(surface, out_path);
    cairo_surface_finish(surface);
    if (st == CAIRO_STATUS_SUCCESS) st = cairo_surface_status(surface);
    cairo_surface_destroy(surface);
    if (st != CAIRO_STATUS_SUCCESS)
        return err_set("%s: cannot write: %s", out_path, cairo_status_to_string(st));
    return 0;
}
