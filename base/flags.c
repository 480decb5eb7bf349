/* flags.c — the flag parser shared by every `tower` subcommand (see flags.h). */
#include "base/flags.h"

#include "base/escape.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *flags_value_str(const Flag *f, char *buf, int n) {
    switch (f->type) {
    case FLAG_INT: snprintf(buf, n, "%d", *(int *)f->target); break;
    case FLAG_LONG: snprintf(buf, n, "%ld", *(long *)f->target); break;
    case FLAG_FLOAT: snprintf(buf, n, "%g", (double)*(float *)f->target); break;
    case FLAG_BOOL: snprintf(buf, n, "%s", *(int *)f->target ? "true" : "false"); break;
    case FLAG_STRING: {
        const char *s = *(const char **)f->target;
        snprintf(buf, n, "%s", s ? s : "\"\"");
        break;
    }
    }
    return buf;
}

void flags_print_usage(const char *command, const char *synopsis, const Flag *flags, int n) {
    printf("usage: tower %s %s\n\nflags (default in brackets):\n", command, synopsis);
    for (int i = 0; i < n; i++) {
        char buf[256];
        printf("  --%-26s %s [%s]\n", flags[i].name, flags[i].help, flags_value_str(&flags[i], buf, sizeof buf));
    }
}

/* Store v into f's target: 0, or -1 with *expected saying what the value must look like. */
static int set_value(const Flag *f, const char *v, const char **expected) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case FLAG_INT: {
        long x = strtol(v, &end, 10);
        *expected = end == v || *end ? "an integer" : "an integer in [-2147483647, 2147483647]";
        if (errno || end == v || *end || x < -2147483647L || x > 2147483647L) return -1;
        *(int *)f->target = (int)x;
        return 0;
    }
    case FLAG_LONG: {
        long x = strtol(v, &end, 10);
        *expected = end == v || *end ? "an integer" : "an integer in [-9223372036854775807, 9223372036854775807]";
        if (errno || end == v || *end || x == LONG_MIN) return -1;
        *(long *)f->target = x;
        return 0;
    }
    case FLAG_FLOAT: {
        /* No flag of Tower means anything with nan or inf: they are refused here, for every command. */
        *expected = "a finite number";
        float x = strtof(v, &end);
        if (errno || end == v || *end || !isfinite(x)) return -1;
        *(float *)f->target = x;
        return 0;
    }
    case FLAG_BOOL:
        *expected = "true or false (also 1, yes, 0, no)";
        if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes")) *(int *)f->target = 1;
        else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no")) *(int *)f->target = 0;
        else return -1;
        return 0;
    case FLAG_STRING: *(const char **)f->target = v; return 0;
    }
    *expected = "a value";
    return -1;
}

int flags_parse(const Flag *flags, int n, int argc, char **argv, char **positional, int *n_positional) {
    *n_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h")) return 1;
        if (a[0] == '-' && a[1] != '-' && a[1] != '\0') {
            char a_esc[256];
            fprintf(stderr, "tower %s: unknown flag %s (flags take two dashes, --name; see --help)\n", argv[0],
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
            fprintf(stderr, "tower %s: unknown flag --%s (see --help)\n", argv[0],
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
            fprintf(stderr, "tower %s: flag --%s needs a value\n", argv[0], f->name);
            return -1;
        }
        const char *expected;
        if (set_value(f, v, &expected) != 0) {
            char v_esc[256];
            fprintf(stderr, "tower %s: bad value '%s' for --%s: expected %s\n", argv[0],
                    escape_str(v_esc, sizeof v_esc, v), f->name, expected);
            return -1;
        }
    }
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
