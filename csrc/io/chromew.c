/*
 * chromew.c: one Chrome trace event per span (chromew.h).
 *
 * The text is the Python reference writer's (chrome._reference_write), without its spaces:
 * ',\n{"ph":"X","name":..,"cat":..,"pid":..,"tid":..,"ts":..,"dur":..,"args":{..}}'.
 */
#include "chromew.h"

#include <string.h>

static const char *str_of(const xsp_trace *t, uint32_t id, size_t *n)
{
    const char *s = xsp_strtab_get(&t->strings, id, n);
    if (!s) {
        *n = 0;
        return "";
    }
    return s;
}

/* Whether key id key of span s equals "attr." * m + name (name "id" or "parent"). */
static int is_renamed(const xsp_trace *t, uint32_t key, unsigned m, const char *name)
{
    size_t n, nl = strlen(name);
    const char *s = str_of(t, key, &n);
    if (n != 5 * m + nl)
        return 0;
    for (unsigned r = 0; r < m; r++)
        if (memcmp(s + 5 * r, "attr.", 5) != 0)
            return 0;
    return memcmp(s + 5 * m, name, nl) == 0;
}

/* How many "attr." an attribute named name (id, parent) of span s gets: the fewest (>= 1)
 * for which no attribute of s has that name. */
static unsigned rename_depth(const xsp_trace *t, const xsp_span *s, const char *name)
{
    const xsp_attr *at = t->attrs + s->attr_off;
    for (unsigned m = 1;; m++) {
        int taken = 0;
        for (uint32_t j = 0; j < s->attr_n && !taken; j++)
            taken = is_renamed(t, at[j].key, m, name);
        if (!taken)
            return m;
    }
}

static void value(xsp_jsonw *w, const xsp_trace *t, const xsp_attr *a)
{
    if (a->type == XSP_ATTR_INT)
        xsp_jsonw_int(w, a->v.i);
    else if (a->type == XSP_ATTR_FLOAT)
        xsp_jsonw_double(w, a->v.f);
    else {
        size_t n;
        const char *s = str_of(t, a->v.s, &n);
        xsp_jsonw_str(w, s, n);
    }
}

static void args(xsp_jsonw *w, const xsp_trace *t, uint32_t i)
{
    const xsp_span *s = &t->spans[i];
    const xsp_attr *at = t->attrs + s->attr_off;
    for (uint32_t j = 0; j < s->attr_n; j++) {
        int later = 0;                  /* a dict keeps a repeated key's last value */
        for (uint32_t m = j + 1; m < s->attr_n && !later; m++)
            later = at[m].key == at[j].key;
        if (later)
            continue;
        size_t n;
        const char *key = str_of(t, at[j].key, &n);
        if (is_renamed(t, at[j].key, 0, "id") || is_renamed(t, at[j].key, 0, "parent")) {
            xsp_jsonw_raw(w, "\"", 1);
            for (unsigned m = rename_depth(t, s, key); m; m--)
                xsp_jsonw_raw(w, "attr.", 5);
            xsp_jsonw_raw(w, key, n);
            xsp_jsonw_raw(w, "\"", 1);
        } else
            xsp_jsonw_str(w, key, n);
        xsp_jsonw_raw(w, ":", 1);
        value(w, t, &at[j]);
        xsp_jsonw_raw(w, ",", 1);
    }
    xsp_jsonw_lit(w, "\"id\":");
    xsp_jsonw_uint(w, i);
    if (s->parent != XSP_NO_PARENT) {
        xsp_jsonw_lit(w, ",\"parent\":");
        xsp_jsonw_uint(w, s->parent);
    }
}

void xsp_chrome_write_events(xsp_jsonw *w, const xsp_trace *t, const xsp_chrome_cols *c)
{
    for (uint32_t i = 0; i < t->n_spans && !xsp_jsonw_failed(w); i++) {
        const xsp_span *s = &t->spans[i];
        size_t n;
        const char *name = str_of(t, s->name, &n);
        xsp_jsonw_lit(w, ",\n{\"ph\":\"X\",\"name\":");
        xsp_jsonw_str(w, name, n);
        xsp_jsonw_lit(w, ",\"cat\":\"");
        xsp_jsonw_lit(w, xsp_level_name(s->level));
        xsp_jsonw_raw(w, ".", 1);
        xsp_jsonw_lit(w, xsp_kind_name(s->kind));
        xsp_jsonw_lit(w, "\",\"pid\":");
        xsp_jsonw_int(w, c->track_pid[s->thread]);
        xsp_jsonw_lit(w, ",\"tid\":");
        xsp_jsonw_uint(w, t->threads[s->thread].tid);
        xsp_jsonw_lit(w, ",\"ts\":");
        xsp_jsonw_us(w, s->start_ns - c->t0, 0);
        xsp_jsonw_lit(w, ",\"dur\":");
        xsp_jsonw_us(w, s->end_ns - s->start_ns, 0);
        xsp_jsonw_lit(w, ",\"args\":{");
        args(w, t, i);
        xsp_jsonw_lit(w, "}}");
    }
    for (uint32_t k = 0; k < c->n_spawn; k++) {
        int64_t i = c->spawn_i[k], j = c->spawn_j[k];
        if (i < 0 || j < 0 || i >= (int64_t)t->n_spans || j >= (int64_t)t->n_spans)
            continue;
        for (int f = 0; f < 2; f++) {
            uint32_t tr = t->spans[f ? i : j].thread;
            xsp_jsonw_lit(w, f ? ",\n{\"ph\":\"f\",\"id\":" : ",\n{\"ph\":\"s\",\"id\":");
            xsp_jsonw_uint(w, k + 1);
            xsp_jsonw_lit(w, ",\"ts\":");
            xsp_jsonw_us(w, t->spans[i].start_ns - c->t0, 0);
            xsp_jsonw_lit(w, ",\"cat\":\"xsp_intraop\",\"name\":\"xsp_intraop\",\"pid\":");
            xsp_jsonw_int(w, c->track_pid[tr]);
            xsp_jsonw_lit(w, ",\"tid\":");
            xsp_jsonw_uint(w, t->threads[tr].tid);
            xsp_jsonw_lit(w, f ? ",\"bp\":\"e\"}" : "}");
        }
    }
}
