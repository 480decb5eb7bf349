/* flags.c — the flag parser shared by every `tower` subcommand (see flags.h). */
#include "base/flags.h"

#include "base/escape.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* x as %.*g (buf, n bytes) with the fewest digits from 6 (%g's) to max_digits that read back as x, as a float
 * (as_float: x is one) or a double; max_digits' where none do (a NaN).  Returns buf. */
static const char *shortest_digits(double x, int as_float, int max_digits, char *buf, int n) {
    for (int digits = 6; digits <= max_digits; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (as_float ? strtof(buf, NULL) == (float)x : strtod(buf, NULL) == x) break;
    }
    return buf;
}

const char *flags_double_str(double x, char *buf, int n) { return shortest_digits(x, 0, 17, buf, n); }

const char *flags_float_str(float x, char *buf, int n) { return shortest_digits(x, 1, 9, buf, n); }

const char *flags_value_str(const Flag *f, char *buf, int n) {
    switch (f->type) {
    case FLAG_INT: snprintf(buf, n, "%d", *(int *)f->target); break;
    case FLAG_LONG: snprintf(buf, n, "%ld", *(long *)f->target); break;
    case FLAG_FLOAT: snprintf(buf, n, "%g", (double)*(float *)f->target); break;
    case FLAG_DOUBLE: flags_double_str(*(double *)f->target, buf, n); break;
    case FLAG_BOOL: snprintf(buf, n, "%s", *(int *)f->target ? "true" : "false"); break;
    case FLAG_STRING: {
        const char *s = *(const char **)f->target;
        snprintf(buf, n, "%s", s ? s : "\"\"");
        break;
    }
    }
    return buf;
}

/* The type's own range, where a flag has none: what every value must fit. */
static const char *type_range(FlagType type) {
    switch (type) {
    case FLAG_INT: return "an integer in [-2147483647, 2147483647]";
    case FLAG_LONG: return "an integer in [-9223372036854775807, 9223372036854775807]";
    case FLAG_FLOAT:
    case FLAG_DOUBLE: return "a finite number";
    default: return "a value";
    }
}

/* The range's upper end, or INFINITY where it has none: an int's ends at INT_MAX (included), a long's at
 * LONG_MAX.  *hi_open: 1 when the end is excluded. */
static double range_hi(const Flag *f, int *hi_open) {
    *hi_open = f->ends[1] == ')';
    if (f->type == FLAG_INT && f->hi >= (double)INT_MAX) {
        *hi_open = 0;
        return (double)INT_MAX;
    }
    if (f->type == FLAG_LONG && f->hi >= (double)LONG_MAX) return INFINITY;
    return f->hi;
}

/* 1 for the types of real numbers (float, double). */
static int is_number(FlagType type) { return type == FLAG_FLOAT || type == FLAG_DOUBLE; }

/* What f accepts, its values called `what` ("an integer", "a number", "a finite number"); the range's note
 * after it in parentheses when with_note. */
static const char *range_str(const Flag *f, const char *what, int with_note, char *buf, int n) {
    if (!f->ends) {
        snprintf(buf, n, "%s", type_range(f->type));
        return buf;
    }
    const int is_int = f->type == FLAG_INT || f->type == FLAG_LONG;
    int hi_open;
    const double hi = range_hi(f, &hi_open);
    const char *fmt = is_int ? "%.0f" : "%g";
    char lo_s[32], hi_s[32];
    snprintf(lo_s, sizeof lo_s, fmt, f->lo);
    snprintf(hi_s, sizeof hi_s, fmt, hi);
    int k;
    if (isinf(hi)) k = snprintf(buf, n, "%s %s %s", what, f->ends[0] == '(' ? ">" : ">=", lo_s);
    else k = snprintf(buf, n, "%s in %c%s, %s%c", what, f->ends[0], lo_s, hi_s, hi_open ? ')' : ']');
    if (with_note && f->range_note && k >= 0 && k < n) snprintf(buf + k, n - k, " (%s)", f->range_note);
    return buf;
}

const char *flags_range_str(const Flag *f, char *buf, int n) {
    return range_str(f, is_number(f->type) ? "a number" : "an integer", 1, buf, n);
}

/* 1 when x lies in f's range (a flag without one: any x the type holds). */
static int in_range(const Flag *f, double x) {
    if (!f->ends) return 1;
    int hi_open;
    const double hi = range_hi(f, &hi_open);
    return (f->ends[0] == '(' ? x > f->lo : x >= f->lo) && (hi_open ? x < hi : x <= hi);
}

void flags_print_usage(const char *program, const char *synopsis, const Flag *flags, int n) {
    printf("usage: %s %s\n\nflags (default in brackets):\n", program, synopsis);
    for (int i = 0; i < n; i++) {
        char buf[256], range[160] = "";
        if (flags[i].ends) {
            char r[150];
            snprintf(range, sizeof range, " (%s)",
                     range_str(&flags[i], is_number(flags[i].type) ? "a number" : "an integer", 0, r, sizeof r));
        }
        printf("  --%-26s %s [%s]%s\n", flags[i].name, flags[i].help, flags_value_str(&flags[i], buf, sizeof buf),
               range);
    }
}

/* Store v into f's target: 0, -1 when v is not a value of f's type (no number, a blank before it, trailing
 * characters, C's hexadecimal for a real number, not finite), -2 when it is a number outside f's range or the
 * type's, -3 when a real flag's value is nonzero and under its type's smallest normal number (the underflow; its
 * subnormals too), -4 when a float flag's decimal value lies in the range but the float32 it rounds to does not
 * (--adam_beta2 0.99999999 is 1). */
static int set_value(const Flag *f, const char *v) {
    char *end = NULL;
    errno = 0;
    if (f->type != FLAG_BOOL && f->type != FLAG_STRING && isspace((unsigned char)v[0])) return -1;
    if (is_number(f->type) && strpbrk(v, "xX")) return -1; /* strtod's "0x10" is 16: no flag reader takes it */
    switch (f->type) {
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        if (end == v || *end) return -1;
        if (errno || x < -2147483647L || x > 2147483647L || !in_range(f, (double)x)) return -2;
        *(int *)f->target = (int)x;
        return 0;
    }
    case FLAG_LONG: {
        long x = strtol(v, &end, 10);
        if (end == v || *end) return -1;
        if (errno || x == LONG_MIN || !in_range(f, (double)x)) return -2;
        *(long *)f->target = x;
        return 0;
    }
    case FLAG_FLOAT: {
        /* No flag of Tower means anything with nan or inf: they are refused here, for every command. */
        float x = strtof(v, &end);
        if (end == v || *end) return -1;
        if ((errno == ERANGE && fabsf(x) < FLT_MIN) || (x != 0.0f && fabsf(x) < FLT_MIN)) return -3;
        if (errno || !isfinite(x)) return -1;
        if (!in_range(f, x)) return in_range(f, strtod(v, NULL)) ? -4 : -2;
        *(float *)f->target = x;
        return 0;
    }
    case FLAG_DOUBLE: {
        double x = strtod(v, &end);
        if (end == v || *end) return -1;
        if ((errno == ERANGE && fabs(x) < DBL_MIN) || (x != 0.0 && fabs(x) < DBL_MIN)) return -3;
        if (errno || !isfinite(x)) return -1;
        if (!in_range(f, x)) return -2;
        *(double *)f->target = x;
        return 0;
    }
    case FLAG_BOOL:
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(int *)f->target = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(int *)f->target = 0;
        else return -1;
        return 0;
    case FLAG_STRING: *(const char **)f->target = v; return 0;
    }
    return -1;
}

static int quiet_ = 0;

void flags_quiet(int quiet) { quiet_ = quiet; }

/* One line on stderr: what f accepts, for a value v it refused (rc: set_value's). */
static void refuse_value(const char *program, const Flag *f, const char *v, int rc) {
    char v_esc[256], expected[192];
    escape_str(v_esc, sizeof v_esc, v);
    if (f->type == FLAG_BOOL) snprintf(expected, sizeof expected, "true or false (also 1, yes, 0, no)");
    else range_str(f, !is_number(f->type) ? "an integer" : rc == -1 ? "a finite number" : "a number", 1, expected,
                   sizeof expected);
    if (quiet_) return;
    if (rc == -3 && f->type == FLAG_DOUBLE)
        fprintf(stderr, "%s: --%s %s: under a double's smallest normal number, %.17g (expected %s)\n", program, f->name,
                v_esc, DBL_MIN, expected);
    else if (rc == -3)
        fprintf(stderr, "%s: --%s %s: under float32's smallest normal number, %.9g (expected %s)\n", program, f->name,
                v_esc, FLT_MIN, expected);
    else if (rc == -4)
        fprintf(stderr, "%s: --%s %s: rounds to %.9g in float32 (expected %s)\n", program, f->name, v_esc,
                (double)strtof(v, NULL), expected);
    else if (rc == -2) fprintf(stderr, "%s: --%s %s: expected %s\n", program, f->name, v_esc, expected);
    else fprintf(stderr, "%s: --%s '%s': expected %s\n", program, f->name, v_esc, expected);
}

int flags_parse(const Flag *flags, int n, int argc, char **argv, char **positional, int *n_positional) {
    return flags_parse_given(flags, n, argc, argv, positional, n_positional, NULL);
}

int flags_parse_given(const Flag *flags, int n, int argc, char **argv, char **positional, int *n_positional,
                      unsigned char *given) {
    *n_positional = 0;
    if (given) memset(given, 0, (size_t)n);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h")) return 1;
        if (a[0] == '-' && a[1] != '-' && a[1] != '\0') {
            char a_esc[256];
            if (!quiet_)
                fprintf(stderr, "%s: unknown flag %s (flags take two dashes, --name; see --help)\n", argv[0],
                    escape_str(a_esc, sizeof a_esc, a));
            return -1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == '\0') {
            positional[(*n_positional)++] = argv[i];
            continue;
        }
        const char *name = a + 2;
        if (!strcmp(name, "help")) return 1;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const Flag *f = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(flags[k].name) == len && !strncmp(flags[k].name, name, len)) { f = &flags[k]; break; }
        if (!f) {
            char name_esc[256];
            if (!quiet_)
                fprintf(stderr, "%s: unknown flag --%s (see --help)\n", argv[0],
                    escape_bytes(name_esc, sizeof name_esc, name, len));
            return -1;
        }
        const char *v;
        if (eq) v = eq + 1;
        else if (f->type == FLAG_BOOL && i + 1 < argc && (!strcmp(argv[i + 1], "true") || !strcmp(argv[i + 1], "false")))
            v = argv[++i]; /* TensorFlow's spelling: --sync_replicas false */
        else if (f->type == FLAG_BOOL) v = "true";
        else if (i + 1 < argc) v = argv[++i];
        else {
            if (!quiet_) fprintf(stderr, "%s: flag --%s needs a value\n", argv[0], f->name);
            return -1;
        }
        const int rc = set_value(f, v);
        if (rc != 0) {
            refuse_value(argv[0], f, v, rc);
            return -1;
        }
        if (given) given[f - flags] = 1;
    }
    return 0;
}

int flags_was_given(const Flag *flags, int n, const unsigned char *given, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(flags[k].name, name)) return given[k];
    return 0;
}

int flags_env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

int flags_env_default_on(const char *name) {
    const char *v = getenv(name);
    return !v || strcmp(v, "0") != 0;
}
